"""What a stage and a whole run report: the stage results and the `--json` document."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from . import __version__
from .events import EXIT_OK, Failure, Tally, exit_code

SCHEMA_PATH = Path(__file__).resolve().parent / "schema" / "run.schema.json"
SCHEMA_ID = "https://sparkctl.invalid/schema/run.schema.json"


@dataclass
class StageResult:
    name: str
    playbook: str
    # successful | failed | timeout | canceled (ansible-runner's) | not_run (an earlier stage failed)
    status: str
    rc: int | None = None
    exit_code: int | None = EXIT_OK  # None: not run
    duration_s: float = 0.0
    stats: dict[str, dict[str, int]] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)
    artifact_dir: str | None = None
    # Files the stage's tasks wrote (not in the JSON document: the reports among them are).
    files: list[str] = field(default_factory=list)
    output: list[dict] = field(default_factory=list)

    @property
    def log(self) -> str | None:
        """The stage's full ansible output (ansible-runner's stdout artifact)."""
        return str(Path(self.artifact_dir) / "stdout") if self.artifact_dir else None

    @classmethod
    def from_run(cls, name: str, playbook: str, status: str, rc: int | None, tally: Tally,
                 duration_s: float, artifact_dir: str | None) -> StageResult:
        stats = tally.host_stats()
        failures = tally.final_failures()
        return cls(name=name, playbook=playbook, status=status, rc=rc,
                   exit_code=exit_code(status, rc, stats, failures), duration_s=round(duration_s, 3),
                   stats=stats, failures=failures, artifact_dir=artifact_dir, files=list(tally.files),
                   output=list(tally.output))

    @classmethod
    def not_run(cls, name: str, playbook: str) -> StageResult:
        return cls(name=name, playbook=playbook, status="not_run", exit_code=None)

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "playbook": self.playbook,
            "status": self.status,
            "rc": self.rc,
            "exit_code": self.exit_code,
            "duration_s": self.duration_s,
            "stats": self.stats,
            "failures": [f.as_dict() for f in self.failures],
            "artifact_dir": self.artifact_dir,
            "log": self.log,
            "output": self.output,
        }


def run_exit_code(results: list[StageResult]) -> int:
    """The first failing stage's exit code (the sequence stops there)."""
    return next((r.exit_code for r in results if r.exit_code not in (EXIT_OK, None)), EXIT_OK)


def document(command: str, inventory: str | None, results: list[StageResult], exit_code: int, *,
             reports: dict | None = None, error: str | None = None,
             check: bool = False, profile: str | None = None) -> dict:
    """The one `--json` document of a run (schema: sparkctl/schema/run.schema.json)."""
    return {
        "$schema": SCHEMA_ID,
        "sparkctl_version": __version__,
        "command": command,
        "inventory": inventory,
        "check": check,
        "profile": profile,
        "stages": [r.as_dict() for r in results],
        "reports": reports or {},
        "error": error,
        "exit_code": exit_code,
    }

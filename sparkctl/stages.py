"""Which playbooks a command runs, in which order. `up` runs the stages playbooks/site.yml
imports (the collection's site playbook, which the checkout's site.yml imports), read from
it, so `ansible-playbook site.yml`, `ansible-playbook sparkctl.spark.site` and `sparkctl up`
cannot drift apart."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import yaml

# The single-stage commands and their playbook (bench's is benchmark.yml).
COMMAND_STAGES = {
    "doctor": "preflight",
    "provision": "provision",
    "serve": "serve",
    "verify": "verify",
    "bench": "benchmark",
    "fabric-test": "fabric_test",
    "stop": "stop",
    "teardown": "teardown",
    "status": "status",
    "logs": "logs",
    "api-key": "api_key",
    "rollback": "rollback",
}

SITE = "playbooks/site.yml"
IMPORT_KEYS = ("ansible.builtin.import_playbook", "import_playbook")


class StageError(Exception):
    """The project's stages cannot be read: site.yml or a stage's playbook is missing or not a
    chain of stages the wrapper can run one by one."""


@dataclass(frozen=True)
class Stage:
    name: str
    playbook: Path


@dataclass(frozen=True)
class Plan:
    stages: tuple[Stage, ...]


def playbook_path(root: Path, stage: str) -> Path:
    return root / "playbooks" / f"{stage}.yml"


def up_stages(root: Path) -> tuple[str, ...]:
    """The stages playbooks/site.yml imports, in its order. The wrapper runs each as a run of
    its own (its own table, log and exit code), so every entry must be an import of a
    <stage>.yml beside it; anything else is refused rather than silently left out of `up`."""
    site = root / SITE
    try:
        plays = yaml.safe_load(site.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise StageError(f"no {SITE} in {root}: `up` runs the stages it imports; "
                         "set SPARKCTL_PROJECT to the sparkctl checkout.") from None
    except yaml.YAMLError as exc:
        raise StageError(f"{site} is not YAML: {exc}") from None
    if not isinstance(plays, list) or not plays:
        raise StageError(f"{site} imports no stage (expected a list of import_playbook entries).")
    names = []
    for index, play in enumerate(plays):
        target = next((play[key] for key in IMPORT_KEYS if isinstance(play, dict) and key in play), None)
        path = PurePosixPath(str(target)) if isinstance(target, str) else None
        if path is None or path.parent != PurePosixPath(".") or path.suffix != ".yml":
            raise StageError(f"{site} entry {index + 1} is not an import_playbook of <stage>.yml beside it, "
                             "which is all `sparkctl up` can run stage by stage.")
        names.append(path.stem)
    return tuple(names)


def plan(command: str, root: Path) -> Plan:
    """The stages a command runs, each with its playbook. Raises StageError when the project
    lacks site.yml (for `up`) or a stage's playbook."""
    names = up_stages(root) if command == "up" else (COMMAND_STAGES[command],)
    stages = []
    for name in names:
        path = playbook_path(root, name)
        if not path.is_file():
            raise StageError(f"{path} is missing: {root} is not a complete sparkctl project; "
                             "set SPARKCTL_PROJECT to the sparkctl checkout.")
        stages.append(Stage(name, path))
    return Plan(tuple(stages))

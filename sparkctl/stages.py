"""Which playbooks a command runs, in which order. Pure apart from asking whether a
playbook exists, so a version of the project without a stage says so instead of failing."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# `up` runs these in order and stops at the first failure. Each is playbooks/<name>.yml.
UP_STAGES = ("preflight", "provision", "checkpoint", "runtime", "serve", "verify")

# The single-stage commands and their playbook (bench's is benchmark.yml).
COMMAND_STAGES = {
    "doctor": "preflight",
    "provision": "provision",
    "serve": "serve",
    "verify": "verify",
    "bench": "benchmark",
    "stop": "stop",
    "status": "status",
    "logs": "logs",
    "api-key": "api_key",
}


@dataclass(frozen=True)
class Stage:
    name: str
    playbook: Path


@dataclass(frozen=True)
class Plan:
    stages: tuple[Stage, ...]
    # Stages this command would run whose playbook this version of the project lacks.
    unavailable: tuple[str, ...]


def playbook_path(root: Path, stage: str) -> Path:
    return root / "playbooks" / f"{stage}.yml"


def plan(command: str, root: Path) -> Plan:
    """The stages a command runs. `up` runs those that exist and lists the others; a
    single-stage command whose playbook is missing gets an empty plan (the caller exits 2)."""
    names = UP_STAGES if command == "up" else (COMMAND_STAGES[command],)
    stages, unavailable = [], []
    for name in names:
        path = playbook_path(root, name)
        if path.is_file():
            stages.append(Stage(name, path))
        else:
            unavailable.append(name)
    return Plan(tuple(stages), tuple(unavailable))

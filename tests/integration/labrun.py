"""Run the real playbooks and the lab tool, as a user does, and read what they left."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


REPO = Path(__file__).resolve().parents[2]
SPARKLAB = REPO / "tests" / "lab" / "sparklab"
LAB_INVENTORY = REPO / "inventories" / "lab" / "hosts.yml"


@dataclass
class PlaybookRun:
    rc: int
    output: str
    recap: dict[str, dict[str, int]]

    def changed(self, host: str) -> int:
        return self.recap[host]["changed"]

    def changed_tasks(self, host: str) -> list[str]:
        """Names of the tasks that reported a change on host, in order."""
        return changed_tasks(self.output).get(host, [])


def parse_recap(output: str) -> dict[str, dict[str, int]]:
    """Per-host counters of the PLAY RECAP block."""
    recap: dict[str, dict[str, int]] = {}
    tail = output.rsplit("PLAY RECAP", 1)[-1] if "PLAY RECAP" in output else ""
    for line in tail.splitlines():
        match = re.match(r"^(\S+)\s+:\s+(.*)$", line.strip())
        if match:
            recap[match.group(1)] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", match.group(2))}
    return recap


def changed_tasks(output: str) -> dict[str, list[str]]:
    """Per host, the TASK/RUNNING HANDLER names whose result line says changed."""
    per_host: dict[str, list[str]] = {}
    task = None
    for line in output.splitlines():
        header = re.match(r"^(?:TASK|RUNNING HANDLER) \[(.*)\] \**$", line.strip())
        if header:
            task = header.group(1)
            continue
        result = re.match(r"^changed: \[([^\]\s]+)(?: -> [^\]]+)?\]", line.strip())
        if result and task is not None:
            per_host.setdefault(result.group(1), []).append(task)
    return per_host


def lab(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SPARKLAB), *args], capture_output=True, text=True, check=check, timeout=600)


def node_exec(node: str, *cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return lab("exec", node, "--", *cmd, check=check)



def read_report(report_dir: Path) -> dict:
    return json.loads((report_dir / "preflight.json").read_text())

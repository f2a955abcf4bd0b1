"""A throwaway sparkctl project for running the wrapper end to end through the real ansible-runner
on the control node: site.yml importing the given stages' playbooks, an ansible.cfg, a local
inventory, and the environment that points the wrapper at it."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

LOCAL_INVENTORY = Path("inventories") / "local"


def make_project(root: Path, monkeypatch, playbooks: dict[str, str], stages: list[str]) -> Path:
    """root as a project whose playbooks/<name>.yml hold playbooks' texts (dedented) and whose
    site.yml runs stages in order; the working directory and SPARKCTL_PROJECT/REPORT_DIR point at it."""
    (root / "playbooks").mkdir(parents=True)
    (root / "site.yml").write_text("---\n- ansible.builtin.import_playbook: playbooks/site.yml\n")
    (root / "playbooks" / "site.yml").write_text("---\n" + "".join(
        f"- ansible.builtin.import_playbook: {name}.yml\n" for name in stages))
    (root / "ansible.cfg").write_text("[defaults]\nretry_files_enabled = False\ninterpreter_python = auto_silent\n")
    for name, text in playbooks.items():
        (root / "playbooks" / f"{name}.yml").write_text("---\n" + textwrap.dedent(text))
    inventory = root / LOCAL_INVENTORY
    inventory.mkdir(parents=True)
    (inventory / "hosts.yml").write_text(
        f"all:\n  hosts:\n    node1:\n      ansible_connection: local\n      ansible_python_interpreter: {sys.executable}\n")
    monkeypatch.setenv("SPARKCTL_PROJECT", str(root))
    monkeypatch.setenv("SPARKCTL_REPORT_DIR", str(root / ".sparkctl" / "reports"))
    (root / ".sparkctl" / "reports").mkdir(parents=True)
    monkeypatch.chdir(root)
    return root

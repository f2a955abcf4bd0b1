"""Where the reports go when SPARKCTL_REPORT_DIR is relative: under the directory the run was
started from, for the playbooks (spark_report_dir) and the wrapper (sparkctl.project.report_dir)
alike, so the wrapper reads the reports where the playbooks wrote them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from sparkctl import history, project

REPO = Path(__file__).resolve().parents[2]


def _playbook_report_dir(cwd: Path, value: str | None, variable: str = "spark_report_dir",
                         environment: dict | None = None) -> str:
    """spark_report_dir (or another of the spark role's defaults) as they render for a run started in cwd."""
    playbook = cwd / "playbooks" / "show.yml"
    playbook.parent.mkdir(parents=True, exist_ok=True)
    playbook.write_text(
        "- hosts: localhost\n  gather_facts: false\n"
        f"  vars_files: ['{REPO / 'roles' / 'spark' / 'defaults' / 'main.yml'}']\n"
        "  tasks:\n    - ansible.builtin.debug: {msg: \"REPORT_DIR={{ %s }}\"}\n" % variable)
    env = {key: val for key, val in os.environ.items() if not key.startswith(("ANSIBLE_", "SPARKCTL_"))}
    env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="false",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="false", PWD=str(cwd))
    if value is not None:
        env["SPARKCTL_REPORT_DIR"] = value
    env.update(environment or {})
    # An inventory directory of its own: the deployment history is kept per inventory.
    inventory = cwd / "inventories" / "here"
    inventory.mkdir(parents=True, exist_ok=True)
    (inventory / "hosts.yml").write_text("all:\n  hosts:\n    localhost: {ansible_connection: local}\n")
    proc = subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(inventory),
                           str(playbook)], cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return re.search(r"REPORT_DIR=(\S+)", proc.stdout).group(1).strip("'\"")


@pytest.mark.parametrize("value, expected", [
    ("reports/here", "reports/here"),
    ("/srv/sparkctl-reports", "/srv/sparkctl-reports"),
])
def test_the_playbooks_resolve_a_relative_report_dir_against_where_the_run_started(tmp_path, value, expected):
    assert _playbook_report_dir(tmp_path, value) == str(tmp_path / expected)


def test_the_playbooks_default_is_the_projects_own_directory(tmp_path):
    assert _playbook_report_dir(tmp_path, None) == str(tmp_path / ".sparkctl" / "reports")


def test_the_wrapper_resolves_a_relative_report_dir_the_same_way(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SPARKCTL_REPORT_DIR", "reports/here")
    assert project.report_dir(REPO) == tmp_path / "reports" / "here"
    monkeypatch.delenv("SPARKCTL_REPORT_DIR")
    assert project.report_dir(REPO) == REPO / ".sparkctl" / "reports"


@pytest.mark.parametrize("report, deployments, expected", [
    (None, None, ".sparkctl/deployments"),
    ("lab/reports", None, "lab/deployments"),
    ("lab/reports", "history", "history"),
])
def test_the_deployment_history_sits_where_the_playbooks_and_the_wrapper_both_look(tmp_path, monkeypatch, report,
                                                                                   deployments, expected):
    extra = {"SPARKCTL_DEPLOYMENT_DIR": deployments} if deployments else {}
    inventory = tmp_path / "inventories" / "here"
    rendered = _playbook_report_dir(tmp_path, report, "spark_deployment_dir", extra)
    own = history.inventory_history(Path(), inventory).name
    assert rendered == str(tmp_path / expected / own)
    monkeypatch.chdir(tmp_path)
    for name, value in (("SPARKCTL_REPORT_DIR", report), ("SPARKCTL_DEPLOYMENT_DIR", deployments)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    root = tmp_path if report is None else REPO
    assert project.deployment_dir(root) == tmp_path / expected
    assert history.inventory_history(project.deployment_dir(root), inventory / "hosts.yml") == tmp_path / expected / own

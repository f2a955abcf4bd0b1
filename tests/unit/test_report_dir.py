"""Where the reports and the deployment history go on the control node. The rule has one owner,
the collection's plugin_utils/report_dirs.py: the spark role's spark_report_dir and
spark_deployment_dir call it through the report_dir and deployment_base_dir filters, the wrapper
(sparkctl.project.report_dir, deployment_dir) imports it. Held here: the rule itself, that each
reader takes it from the owner, and that a run the wrapper starts writes where the wrapper reads."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.sparkctl.spark.plugins.filter import deployment as deployment_filter
from ansible_collections.sparkctl.spark.plugins.module_utils.deployment import inventory_key
from ansible_collections.sparkctl.spark.plugins.plugin_utils import report_dirs
from sparkctl import history, project

REPO = Path(__file__).resolve().parents[2]
SPARK_DEFAULTS = REPO / "roles" / "spark" / "defaults" / "main.yml"
ENV_NAMES = (report_dirs.REPORT_DIR_ENV, report_dirs.DEPLOYMENT_DIR_ENV)


# --- The rule ------------------------------------------------------------------------------------

@pytest.mark.parametrize("environ, expected", [
    ({}, "/proj/.sparkctl/reports"),
    ({"SPARKCTL_REPORT_DIR": "reports/here"}, "/start/reports/here"),
    ({"SPARKCTL_REPORT_DIR": "/srv/sparkctl-reports"}, "/srv/sparkctl-reports"),
    # Set but empty is set, as the ansible.builtin.env lookup the role read it with had it.
    ({"SPARKCTL_REPORT_DIR": ""}, "/start/"),
])
def test_the_report_dir_is_the_variable_from_where_the_run_started_else_the_projects(environ, expected):
    assert report_dirs.report_dir("/proj", "/start", environ) == expected


@pytest.mark.parametrize("environ, expected", [
    ({}, "/proj/.sparkctl/deployments"),
    ({"SPARKCTL_DEPLOYMENT_DIR": "history"}, "/start/history"),
    ({"SPARKCTL_DEPLOYMENT_DIR": "/srv/history"}, "/srv/history"),
])
def test_the_history_base_is_the_variable_from_where_the_run_started_else_beside_the_reports(environ, expected):
    assert report_dirs.deployment_base("/proj/.sparkctl/reports", "/start", environ) == expected


def test_the_filters_take_the_start_directory_from_pwd_and_the_environment_by_default(monkeypatch):
    environ = {"PWD": "/start", "SPARKCTL_REPORT_DIR": "lab/reports"}
    assert deployment_filter.report_dir("/proj", environ) == "/start/lab/reports"
    assert deployment_filter.deployment_base_dir("/start/lab/reports", environ) == "/start/lab/deployments"
    for name in ENV_NAMES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PWD", "/start")
    monkeypatch.setenv("SPARKCTL_DEPLOYMENT_DIR", "history")
    assert deployment_filter.report_dir("/proj") == "/proj/.sparkctl/reports"
    assert deployment_filter.deployment_base_dir("/proj/.sparkctl/reports") == "/start/history"


# --- The role's defaults --------------------------------------------------------------------------

def test_the_roles_defaults_take_the_rule_from_its_owner():
    """Neither default reads an environment variable or spells a directory itself: both call the owner."""
    defaults = yaml.safe_load(SPARK_DEFAULTS.read_text(encoding="utf-8"))
    report, deployments = defaults["spark_report_dir"], defaults["spark_deployment_dir"]
    assert "sparkctl.spark.report_dir" in report
    assert "sparkctl.spark.deployment_base_dir" in deployments and "spark_report_dir" in deployments
    for text in (report, deployments):
        assert "lookup(" not in text and ".sparkctl" not in text and "SPARKCTL_" not in text


def _rendered(cwd: Path, variable: str, environment: dict) -> str:
    """One of the spark role's defaults as it renders for a run started in cwd with environment."""
    playbook = cwd / "playbooks" / "show.yml"
    playbook.parent.mkdir(parents=True, exist_ok=True)
    playbook.write_text(
        "- hosts: localhost\n  gather_facts: false\n"
        f"  vars_files: ['{SPARK_DEFAULTS}']\n"
        "  tasks:\n    - ansible.builtin.debug: {msg: \"RENDERED={{ %s }}\"}\n" % variable)
    env = {key: val for key, val in os.environ.items() if not key.startswith(("ANSIBLE_", "SPARKCTL_"))}
    env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="false",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="false", PWD=str(cwd), **environment)
    # An inventory directory of its own: the deployment history is kept per inventory.
    inventory = cwd / "inventories" / "here"
    inventory.mkdir(parents=True, exist_ok=True)
    (inventory / "hosts.yml").write_text("all:\n  hosts:\n    localhost: {ansible_connection: local}\n")
    proc = subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(inventory),
                           str(playbook)], cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return re.search(r"RENDERED=(\S+)", proc.stdout).group(1).strip("'\"")


@pytest.mark.parametrize("environment", [
    {},
    {"SPARKCTL_REPORT_DIR": "lab/reports"},
    {"SPARKCTL_REPORT_DIR": "/srv/sparkctl-reports", "SPARKCTL_DEPLOYMENT_DIR": "history"},
])
def test_the_roles_defaults_render_what_the_owner_says(tmp_path, environment):
    """The playbooks' project is playbooks/' parent; a relative directory is taken from $PWD."""
    reports = report_dirs.report_dir(str(tmp_path), str(tmp_path), environment)
    base = report_dirs.deployment_base(reports, str(tmp_path), environment)
    assert _rendered(tmp_path, "spark_report_dir", environment) == reports
    assert _rendered(tmp_path, "spark_deployment_dir", environment) == os.path.join(
        base, inventory_key(tmp_path / "inventories" / "here"))


# --- The wrapper ----------------------------------------------------------------------------------

@pytest.mark.parametrize("environment", [
    {},
    {"SPARKCTL_REPORT_DIR": "lab/reports"},
    {"SPARKCTL_REPORT_DIR": "/srv/sparkctl-reports"},
    {"SPARKCTL_REPORT_DIR": "lab/reports", "SPARKCTL_DEPLOYMENT_DIR": "history"},
])
def test_the_wrapper_takes_the_rule_from_its_owner(tmp_path, monkeypatch, environment):
    """For the project's state directory (a checkout's own), from the current directory; absolute."""
    monkeypatch.chdir(tmp_path)
    for name in ENV_NAMES:
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    reports = report_dirs.report_dir(str(REPO), str(tmp_path), environment)
    assert project.report_dir(REPO) == Path(reports) and project.report_dir(REPO).is_absolute()
    assert project.deployment_dir(REPO) == Path(report_dirs.deployment_base(reports, str(tmp_path), environment))


@pytest.mark.parametrize("report, deployments", [(None, None), ("lab/reports", None), ("lab/reports", "history")])
def test_a_run_the_wrapper_starts_keeps_the_history_where_the_wrapper_reads_it(tmp_path, monkeypatch, report,
                                                                               deployments):
    """The wrapper gives the playbooks its report directory (sparkctl/runner.py) and the environment
    it was started with: the history they keep is the one `sparkctl history` and `rollback` read."""
    # A checkout started from its own directory.
    (tmp_path / "playbooks").mkdir()
    for name in ("site.yml", "playbooks/site.yml"):
        (tmp_path / name).write_text("---\n")
    (tmp_path / "ansible.cfg").write_text("")
    assert project.is_checkout(tmp_path)
    monkeypatch.chdir(tmp_path)
    for name, value in zip(ENV_NAMES, (report, deployments), strict=True):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    given = {report_dirs.REPORT_DIR_ENV: str(project.report_dir(tmp_path))}
    if deployments is not None:
        given[report_dirs.DEPLOYMENT_DIR_ENV] = deployments
    inventory = tmp_path / "inventories" / "here"
    rendered = _rendered(tmp_path, "spark_deployment_dir", given)
    assert rendered == str(history.inventory_history(project.deployment_dir(tmp_path), inventory / "hosts.yml"))
    assert rendered.startswith(str(tmp_path / (deployments or (".sparkctl/deployments" if report is None
                                                               else "lab/deployments"))))

"""The wrapper: argument mapping to ansible-runner and the report rendering."""

import json

import pytest
from rich.console import Console
from sparkctl import cli, report


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / "site.yml").write_text("---\n")
    (tmp_path / "inventories" / "spark").mkdir(parents=True)
    monkeypatch.setenv("SPARKCTL_PROJECT", str(tmp_path))
    monkeypatch.delenv("SPARKCTL_REPORT_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_doctor_runs_only_the_preflight_stage(project):
    args = cli.build_parser().parse_args(["doctor", "-i", "inventories/spark", "--", "-vv"])
    kwargs = cli.runner_kwargs(args, project)
    assert kwargs["tags"] == "preflight"
    assert kwargs["playbook"] == "site.yml"
    assert kwargs["inventory"] == str(project / "inventories" / "spark")
    assert kwargs["cmdline"] == "-vv"
    assert kwargs["envvars"]["ANSIBLE_CONFIG"] == str(project / "ansible.cfg")


def test_up_runs_every_stage_and_passes_check_and_limit(project):
    args = cli.build_parser().parse_args(["up", "--check", "-l", "spark2"])
    kwargs = cli.runner_kwargs(args, project)
    assert "tags" not in kwargs
    assert kwargs["limit"] == "spark2"
    assert kwargs["cmdline"] == "--check"


def _report(ok_second=True):
    check = {"id": "gpu.driver", "title": "", "status": "pass", "detail": "580.95.05", "fix": ""}
    bad = {"id": "gpu.driver", "title": "", "status": "fail", "detail": "driver 550.54.15 is older than 580.", "fix": "Update the driver."}
    return {
        "ok": ok_second,
        "hosts": {
            "spark1": {"ok": True, "judged": True, "checks": [check]},
            "spark2": {"ok": ok_second, "judged": True, "checks": [check if ok_second else bad]},
        },
    }


def test_report_lists_failures_with_host_and_fix(project, tmp_path):
    path = tmp_path / "preflight.json"
    path.write_text(json.dumps(_report(ok_second=False)))
    console = Console(record=True, width=200)
    assert report.show_preflight(path, console) is False
    text = console.export_text()
    assert "Preflight: FAILED" in text
    assert "spark2: gpu.driver: driver 550.54.15 is older than 580. Fix: Update the driver." in text


def test_report_command_exit_code_follows_the_verdict(project):
    reports = project / ".sparkctl" / "reports"
    reports.mkdir(parents=True)
    (reports / "preflight.json").write_text(json.dumps(_report(ok_second=True)))
    assert cli.main(["report"]) == 0
    (reports / "preflight.json").write_text(json.dumps(_report(ok_second=False)))
    assert cli.main(["report"]) == 1


def test_missing_report_says_what_to_run(project):
    with pytest.raises(SystemExit, match="run `sparkctl doctor`"):
        cli.main(["report"])

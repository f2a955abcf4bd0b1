"""The wrapper's command line: parsing, mapping to the runner's options, the lab
delegation and the report rendering. Nothing here runs a playbook."""

import json
import re
import sys
from pathlib import Path

import pytest
from rich.console import Console
from sparkctl import cli, report, runner
from sparkctl.stages import Stage


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / "site.yml").write_text("---\n")
    (tmp_path / "ansible.cfg").write_text("")
    (tmp_path / "inventories" / "spark").mkdir(parents=True)
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "playbooks" / "preflight.yml").write_text("---\n")
    (tmp_path / "playbooks" / "site.yml").write_text("---\n")
    monkeypatch.setenv("SPARKCTL_PROJECT", str(tmp_path))
    monkeypatch.delenv("SPARKCTL_REPORT_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def parse(*argv):
    return cli.build_parser().parse_args(list(argv))


def test_defaults():
    args = parse("up")
    assert (args.command, args.inventory, args.check, args.json, args.verbose) == ("up", "inventories/spark", False, False, 0)
    assert (args.tags, args.skip_tags, args.limit, args.extra_vars, args.profile) == ("", "", "", [], None)


def test_options_work_before_and_after_the_command():
    before = parse("--json", "-v", "-i", "inventories/lab", "doctor")
    after = parse("doctor", "--json", "-v", "-i", "inventories/lab")
    for args in (before, after):
        assert (args.json, args.verbose, args.inventory) == (True, 1, "inventories/lab")


def test_verbosity_counts():
    assert parse("provision", "-vvv").verbose == 3


@pytest.mark.parametrize("argv", [["frobnicate"], ["logs", "-n", "0"], ["lab", "sideways"], ["up", "--bogus"], []])
def test_bad_usage_exits_2(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.build_parser().parse_args(argv)
    assert exc.value.code == 2


def test_run_options_map_the_command_line(project):
    args = parse("up", "-i", "inventories/spark", "--profile", "solar-open2-nvfp4-vllm-venv-256k", "--check",
                 "--tags", "link,fabric", "--skip-tags", "ssh", "-l", "spark2", "-vv", "-e", "a=1 b=two",
                 "-e", '{"c": [1, 2]}')
    options = cli.run_options(args, project)
    assert options.inventory == project / "inventories" / "spark"
    assert options.extravars == {"a": "1", "b": "two", "c": [1, 2], "spark_model_profile": "solar-open2-nvfp4-vllm-venv-256k"}
    assert (options.check, options.tags, options.skip_tags, options.verbosity) == (True, "link,fabric", "ssh", 2)
    # The inventory validation runs on the control node and cannot be limited away.
    assert options.limit == "spark2,localhost"


@pytest.mark.parametrize("limit, expected", [("", ""), ("spark2", "spark2,localhost"), ("localhost", "localhost"),
                                             ("spark_workers:localhost", "spark_workers:localhost")])
def test_limit_keeps_the_control_node(limit, expected):
    assert cli.with_control_node(limit) == expected


def test_logs_options_become_variables_and_a_limit(project):
    options = cli.run_options(parse("logs", "-n", "200", "--node", "spark2"), project)
    assert options.extravars == {"logs_lines": 200}
    assert options.limit == "spark2,localhost"
    assert cli.run_options(parse("logs"), project).extravars == {"logs_lines": 50}
    with pytest.raises(cli.UsageError, match="--node or --limit"):
        cli.run_options(parse("logs", "--node", "spark2", "-l", "spark1"), project)


def test_teardown_runs_its_playbook_and_purges_checkpoints_only_when_asked(project):
    REPO = Path(__file__).resolve().parents[2]
    assert cli.plan("teardown", REPO).stages[0].playbook == REPO / "playbooks" / "teardown.yml"
    options = cli.run_options(parse("teardown", "--check"), project)
    assert (options.check, options.extravars) == (True, {})
    options = cli.run_options(parse("teardown", "--purge-checkpoints"), project)
    assert options.extravars == {"teardown_purge_checkpoints": True}
    with pytest.raises(SystemExit):
        parse("stop", "--purge-checkpoints")


@pytest.mark.parametrize("values, extravars", [
    (["x=1"], {"x": "1"}),
    (["x=1 y='two words'"], {"x": "1", "y": "two words"}),
    (['{"x": {"y": true}}'], {"x": {"y": True}}),
    (["x: 3"], {"x": 3}),
    (["x=1", "x=2"], {"x": "2"}),
])
def test_extra_vars(values, extravars):
    assert cli.parse_extra_vars(values) == (extravars, [])


def test_extra_vars_files_pass_through(tmp_path):
    path = tmp_path / "vars.yml"
    path.write_text("x: 1\n")
    assert cli.parse_extra_vars([f"@{path}"]) == ({}, [str(path)])
    with pytest.raises(cli.UsageError, match="no such file"):
        cli.parse_extra_vars([f"@{tmp_path / 'missing.yml'}"])


@pytest.mark.parametrize("value", ["novalue", "[1, 2]", "{broken"])
def test_bad_extra_vars(value):
    with pytest.raises(cli.UsageError):
        cli.parse_extra_vars([value])


def test_inventory_resolves_from_cwd_then_project(project, tmp_path_factory, monkeypatch):
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    (elsewhere / "mine").mkdir()
    monkeypatch.chdir(elsewhere)
    assert cli.resolve_inventory("mine", project) == elsewhere / "mine"
    assert cli.resolve_inventory("inventories/spark", project) == project / "inventories" / "spark"
    with pytest.raises(cli.UsageError, match="no inventory at nowhere"):
        cli.resolve_inventory("nowhere", project)


def test_runner_kwargs(project):
    options = runner.RunOptions(inventory=project / "inventories" / "spark", extravar_files=["/v.yml"], check=True,
                                tags="preflight", skip_tags="ports", limit="spark1,localhost", verbosity=2)
    stage = Stage("preflight", project / "playbooks" / "preflight.yml")
    kwargs = runner.runner_kwargs(stage, options, project, "preflight-x", project / "ev.json")
    assert kwargs["private_data_dir"] == str(project / ".sparkctl" / "runner")
    assert kwargs["project_dir"] == str(project)
    assert kwargs["playbook"] == str(project / "playbooks" / "preflight.yml")
    assert kwargs["ident"] == "preflight-x"
    assert (kwargs["quiet"], kwargs["suppress_env_files"]) == (True, True)
    # The wrapper rotates the artifacts itself (runner.rotate_artifacts): ansible-runner's
    # rotation fails when another run removes the same old directory first.
    assert kwargs.get("rotate_artifacts", 0) == 0
    assert kwargs["cmdline"] == f"-e @{project / 'ev.json'} -e @/v.yml --check --diff"
    assert (kwargs["tags"], kwargs["skip_tags"], kwargs["limit"], kwargs["verbosity"]) == ("preflight", "ports", "spark1,localhost", 2)
    env = kwargs["envvars"]
    assert env["ANSIBLE_CONFIG"] == str(project / "ansible.cfg")
    assert env["SPARKCTL_REPORT_DIR"] == str(project / ".sparkctl" / "reports")
    assert env["PATH"].split(":")[0] == str(Path(sys.executable).parent)
    # Extra variables never travel as runner's `extravars` (they would be on the recorded command line).
    assert "extravars" not in kwargs


def test_runner_kwargs_leave_out_what_was_not_asked(project):
    options = runner.RunOptions(inventory=project / "inventories" / "spark")
    kwargs = runner.runner_kwargs(Stage("preflight", project / "playbooks" / "preflight.yml"), options, project, "i", None)
    assert not {"cmdline", "tags", "skip_tags", "limit", "verbosity"} & set(kwargs)


def test_idents_are_unique_and_name_the_stage():
    idents = {runner.new_ident("checkpoint", now=86400 * 365) for _ in range(20)}
    assert len(idents) > 1
    assert all(re.fullmatch(r"checkpoint-1971010\dT\d{6}-[0-9a-f]{4}", i) for i in idents)


@pytest.mark.parametrize("name", ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "SPARKCTL_API_KEY", "AWS_SECRET_ACCESS_KEY",
                                  "ANSIBLE_BECOME_PASSWORD", "GITHUB_AUTH"])
def test_secret_named_variables_are_redacted(name):
    assert runner.redact_env({name: "s3cret", "PATH": "/bin"}) == {name: runner.REDACTED, "PATH": "/bin"}


def test_redact_command_file(tmp_path):
    (tmp_path / "command").write_text(json.dumps({"command": ["ansible-playbook"], "env": {"HF_TOKEN": "hf_x", "HOME": "/root"}}))
    runner.redact_command_file(tmp_path)
    record = json.loads((tmp_path / "command").read_text())
    assert record == {"command": ["ansible-playbook"], "env": {"HF_TOKEN": runner.REDACTED, "HOME": "/root"}}
    assert (tmp_path / "command").stat().st_mode & 0o077 == 0
    runner.redact_command_file(tmp_path / "missing")  # no artifact dir: nothing to do


@pytest.mark.parametrize("command, playbook", [("serve", "serve"), ("verify", "verify"), ("bench", "benchmark"),
                                               ("stop", "stop"), ("status", "status"), ("logs", "logs"),
                                               ("teardown", "teardown")])
def test_a_project_without_a_commands_playbook_exits_2(project, command, playbook, capsys):
    assert cli.main([command]) == 2
    assert f"playbooks/{playbook}.yml is missing" in capsys.readouterr().err


def test_up_with_a_site_yml_importing_no_stage_exits_2(project, capsys):
    assert cli.main(["up"]) == 2
    assert "site.yml imports no stage" in capsys.readouterr().err


# --- lab -------------------------------------------------------------------------


def test_the_lab_is_not_a_product_command(project, capsys):
    """The two-node lab is a development tool of the repository (tests/lab/sparklab)."""
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["lab", "up"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'lab'" in capsys.readouterr().err


# --- report --------------------------------------------------------------------------


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


def test_report_json_prints_the_raw_report(project, capsys):
    reports = project / ".sparkctl" / "reports"
    reports.mkdir(parents=True)
    (reports / "preflight.json").write_text(json.dumps(_report()))
    assert cli.main(["report", "preflight", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == _report()
    # Without a name: every report present, by name.
    assert cli.main(["report", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"preflight": _report()}


def test_missing_report_says_what_to_run(project, capsys):
    assert cli.main(["report"]) == 1
    assert "run `sparkctl doctor`" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="run `sparkctl doctor`"):
        cli.main(["report", "verify"])


VERIFY_DOC = {
    "schema_version": 2, "status": "failed", "ok": False,
    "failures": ["generation: /health answers but no token arrived within 5 s: the engine is wedged"],
    "warnings": [],
    "checks": [{"name": "health", "ok": True, "skipped": False, "message": "health: 200"},
               {"name": "generation", "ok": False, "skipped": False, "message": "generation: wedged"}],
    "startup": [{"name": "kv_cache_tokens", "ok": True, "on_mismatch": "fail", "message": "kv_cache_tokens: 65536 >= 4096"}],
    "memory": {"rows": [{"host": "spark1", "status": "warn", "message": "spark1: 9.00 GiB, 1.00 GiB above the guard"}]},
    "parity": {"rows": [{"item": "driver"}], "mismatches": ["driver"]},
    "firewall": {"rows": [{"host": "spark2", "status": "fail", "message": "table inet sparkctl is not loaded"}]},
    "fabric": {},
    "context": {},
    # What the verify stage renders from the evidence above (the verify_report filter): the wrapper prints these.
    "rows": [{"mark": "PASS", "what": "health", "detail": "health: 200"},
             {"mark": "FAIL", "what": "generation", "detail": "generation: wedged"},
             {"mark": "PASS", "what": "startup kv_cache_tokens", "detail": "kv_cache_tokens: 65536 >= 4096"},
             {"mark": "warn", "what": "memory spark1", "detail": "spark1: 9.00 GiB, 1.00 GiB above the guard"},
             {"mark": "FAIL", "what": "version parity", "detail": "differ: driver"},
             {"mark": "FAIL", "what": "firewall spark2", "detail": "table inet sparkctl is not loaded"}],
}


def test_report_shows_verify_and_benchmark_and_fails_on_a_failed_verify(project, capsys):
    reports = project / ".sparkctl" / "reports"
    (reports / "benchmark").mkdir(parents=True)
    (reports / "verify.json").write_text(json.dumps(VERIFY_DOC))
    (reports / "benchmark" / "benchmark.json").write_text(json.dumps({"schema_version": 1, "ok": True}))
    (reports / "benchmark" / "benchmark.md").write_text("# Benchmark lab-standin\n| streams | tok/s |\n")
    assert cli.main(["report"]) == 1
    out = capsys.readouterr().out
    assert "Verify: FAILED" in out and "generation" in out and "startup kv_cache_tokens" in out
    assert "memory spark1" in out and "version parity" in out and "differ: driver" in out
    assert "firewall spark2" in out and "table inet sparkctl is not loaded" in out
    assert "# Benchmark lab-standin" in out
    assert cli.main(["report", "benchmark"]) == 0
    (reports / "verify.json").write_text(json.dumps(dict(VERIFY_DOC, status="passed", ok=True, failures=[])))
    assert cli.main(["report", "verify"]) == 0
    capsys.readouterr()
    # A report from before the rows were rendered into it: said so, not rendered a second way.
    older = {key: value for key, value in VERIFY_DOC.items() if key != "rows"}
    (reports / "verify.json").write_text(json.dumps(dict(older, schema_version=1)))
    assert cli.main(["report", "verify"]) == 1
    assert "written by an older sparkctl" in capsys.readouterr().out


def test_api_key_without_its_playbook_exits_2(project, capsys):
    assert cli.main(["api-key"]) == 2
    assert "playbooks/api_key.yml is missing" in capsys.readouterr().err


# --- credentials inside URLs ----------------------------------------------------------


@pytest.mark.parametrize("name, value, expected", [
    ("PIP_INDEX_URL", "https://bob:hunter2@pypi.example.com/simple", "https://<redacted by sparkctl>@pypi.example.com/simple"),
    ("HTTPS_PROXY", "http://proxyuser:pr0xy%40pass@10.0.0.1:3128", "http://<redacted by sparkctl>@10.0.0.1:3128"),
    ("HF_ENDPOINT", "https://hf_abcdef@hub.example.com", "https://<redacted by sparkctl>@hub.example.com"),
    ("PIP_EXTRA_INDEX_URL", "https://a:b@one.example/simple https://c:d@two.example/simple",
     "https://<redacted by sparkctl>@one.example/simple https://<redacted by sparkctl>@two.example/simple"),
    ("NO_PROXY", "localhost,127.0.0.1", "localhost,127.0.0.1"),
    ("PIP_INDEX_URL", "https://pypi.org/simple?a=b@c", "https://pypi.org/simple?a=b@c"),
])
def test_credentials_inside_urls_are_redacted_whatever_the_variable(name, value, expected):
    assert runner.redact_env({name: value}) == {name: expected}


def test_redact_command_file_scrubs_urls_in_the_command_too(tmp_path):
    (tmp_path / "command").write_text(json.dumps({"command": ["ansible-playbook", "-e", "x=https://u:p4ss@h/"],
                                                  "env": {"HTTPS_PROXY": "http://u:p4ss@proxy:3128"}}))
    runner.redact_command_file(tmp_path)
    assert "p4ss" not in (tmp_path / "command").read_text()


def test_the_stage_log_loses_url_credentials(tmp_path):
    (tmp_path / "stdout").write_text("ok: [spark1] => {\"url\": \"https://bob:hunter2@pypi.example.com/simple\"}\nplain\n")
    events_dir = tmp_path / "job_events"
    events_dir.mkdir()
    (events_dir / "1-x.json").write_text(json.dumps({"stdout": "fatal: https://bob:hunter2@h/x"}))
    (events_dir / "2-y.json").write_text(json.dumps({"stdout": "clean"}))
    runner.redact_artifacts(tmp_path)
    assert "hunter2" not in (tmp_path / "stdout").read_text()
    assert "plain" in (tmp_path / "stdout").read_text()
    assert "hunter2" not in (events_dir / "1-x.json").read_text()
    assert json.loads((events_dir / "2-y.json").read_text()) == {"stdout": "clean"}
    runner.redact_artifacts(tmp_path / "missing")


def test_the_playbooks_are_given_the_history_directory_the_wrapper_reads(project, tmp_path, monkeypatch):
    # A relative SPARKCTL_DEPLOYMENT_DIR and a $PWD that is not the wrapper's directory (a shell that changed
    # directory without updating it): the playbooks, which take a relative one from $PWD, are given it absolute.
    monkeypatch.chdir(project)
    monkeypatch.setenv("SPARKCTL_DEPLOYMENT_DIR", "history")
    monkeypatch.setenv("PWD", str(tmp_path))
    options = runner.RunOptions(inventory=project / "inventories" / "spark")
    env = runner.runner_kwargs(Stage("verify", project / "playbooks" / "verify.yml"), options, project, "i", None)["envvars"]
    from sparkctl import project as project_paths
    assert env["SPARKCTL_DEPLOYMENT_DIR"] == str(project_paths.deployment_dir(project)) == str(project / "history")

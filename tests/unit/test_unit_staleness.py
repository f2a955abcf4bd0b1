"""unit_staleness: a running unit whose inputs changed after its start must restart, whatever
the run that changed them did (the module_utils logic and the module around it)."""

from __future__ import annotations

import os

from module_runner import captured_argument_spec, documentation, documented_like_spec, run_module

from ansible_collections.sparkctl.spark.plugins.module_utils import unit_staleness as us
from ansible_collections.sparkctl.spark.plugins.modules import unit_staleness as module

SHOW = """Id=sparkctl-engine.service
LoadState=loaded
ActiveState=active
SubState=running
NeedDaemonReload=no
FragmentPath=/etc/systemd/system/sparkctl-engine.service
DropInPaths=/etc/systemd/system/sparkctl-.service.d/10-fabric-env.conf /run/systemd/system/x.d/a.conf
EnvironmentFiles=/etc/sparkctl/fabric.env (ignore_errors=no)
EnvironmentFiles=/etc/sparkctl/engine.env (ignore_errors=yes)
ExecMainStartTimestampMonotonic=1000000000
ActiveEnterTimestampMonotonic=999000000
"""
# now: wall clock 10_000 s at monotonic 2_000 s, so the main process started at wall clock 9_000.
NOW = (10_000.0, 2_000.0)


def test_parse_show_keeps_repeated_properties():
    props = us.parse_show(SHOW)
    assert props["EnvironmentFiles"] == ["/etc/sparkctl/fabric.env (ignore_errors=no)",
                                         "/etc/sparkctl/engine.env (ignore_errors=yes)"]
    assert us.declared_inputs(props) == [
        "/etc/systemd/system/sparkctl-engine.service", "/etc/systemd/system/sparkctl-.service.d/10-fabric-env.conf",
        "/run/systemd/system/x.d/a.conf", "/etc/sparkctl/fabric.env", "/etc/sparkctl/engine.env"]
    assert us.started_monotonic_s(props) == 1000.0


def test_an_input_written_after_the_start_makes_a_running_unit_stale():
    props = us.parse_show(SHOW)
    verdict = us.judge("e", props, {"/key": 9_000.5, "/env": 8_999.0, "/gone": None}, *NOW)
    assert verdict["stale"] and verdict["newer"] == ["/key"]
    assert verdict["started"] == 9_000.0


def test_inputs_older_than_the_start_leave_it_alone():
    verdict = us.judge("e", us.parse_show(SHOW), {"/key": 8_000.0, "/env": 8_999.999}, *NOW)
    assert not verdict["stale"] and verdict["newer"] == []


def test_a_unit_that_does_not_run_is_never_stale():
    for state in ("inactive", "failed"):
        props = us.parse_show(SHOW.replace("ActiveState=active", f"ActiveState={state}"))
        assert not us.judge("e", props, {"/key": 9_999.0}, *NOW)["stale"]
    missing = {"Id": "x.service", "LoadState": "not-found", "ActiveState": "inactive"}
    assert not us.judge("x", missing, {"/key": 9_999.0}, *NOW)["stale"]


def test_restart_by_systemd_counts_from_the_new_main_process():
    # ExecMainStart moved on with Restart=on-failure: a file written before it is in effect.
    props = us.parse_show(SHOW.replace("ExecMainStartTimestampMonotonic=1000000000",
                                       "ExecMainStartTimestampMonotonic=1500000000"))
    assert not us.judge("e", props, {"/key": 9_200.0}, *NOW)["stale"]
    # Without a main process timestamp, the time it became active.
    props = us.parse_show(SHOW.replace("ExecMainStartTimestampMonotonic=1000000000", "ExecMainStartTimestampMonotonic=0"))
    assert us.started_monotonic_s(props) == 999.0


def test_need_daemon_reload_is_reported():
    props = us.parse_show(SHOW.replace("NeedDaemonReload=no", "NeedDaemonReload=yes"))
    assert us.judge("e", props, {}, *NOW)["daemon_reload"]


def test_assess_reads_the_real_files(tmp_path):
    key = tmp_path / "api-key.env"
    key.write_text("VLLM_API_KEY=x\n")
    os.utime(key, (9_100.0, 9_100.0))
    unit = tmp_path / "u.service"
    unit.write_text("[Service]\n")
    os.utime(unit, (8_000.0, 8_000.0))
    show = SHOW.replace("/etc/systemd/system/sparkctl-engine.service", str(unit))
    show = "\n".join(line for line in show.splitlines() if not line.startswith(("EnvironmentFiles", "DropInPaths")))
    calls = []

    def run(argv):
        calls.append(argv)
        return 0, show, ""

    result = us.assess(["sparkctl-engine.service"], {"sparkctl-engine.service": [str(key), str(tmp_path / "none")]},
                       run=run, now=NOW)
    assert calls[0][:3] == ["systemctl", "show", "--no-pager"]
    assert result["sparkctl-engine.service"]["newer"] == [str(key)]
    os.utime(key, (8_500.0, 8_500.0))
    assert not us.assess(["sparkctl-engine.service"], {"sparkctl-engine.service": [str(key)]}, run=run,
                         now=NOW)["sparkctl-engine.service"]["stale"]


def test_module_reports_stale_units(monkeypatch, capsys, tmp_path):
    key = tmp_path / "key"
    key.write_text("k")
    monkeypatch.setattr(us.time, "time", lambda: 10_000.0)
    monkeypatch.setattr(us.time, "monotonic", lambda: 2_000.0)
    os.utime(key, (9_500.0, 9_500.0))
    show = SHOW.replace("/etc/systemd/system/sparkctl-engine.service", str(tmp_path / "absent.service"))
    from ansible.module_utils import basic
    monkeypatch.setattr(basic.AnsibleModule, "run_command", lambda self, argv, **kw: (0, show, ""))
    rc, result = run_module(module.main, {"units": ["sparkctl-engine.service"],
                                          "inputs": {"sparkctl-engine.service": [str(key)]}}, capsys)
    assert rc == 0 and not result["changed"]
    assert result["stale"] == ["sparkctl-engine.service"]
    assert result["units"]["sparkctl-engine.service"]["newer"] == [str(key)]


def test_module_documentation_matches_its_spec(monkeypatch):
    spec = captured_argument_spec(module.main, monkeypatch)["argument_spec"]
    assert documented_like_spec(documentation(module)["options"], spec) == []

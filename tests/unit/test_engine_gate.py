"""The engine's memory gate (module_utils/engine_gate.py): the program the engine units run before
every start, the engine_baseline module that records its baseline, the filters that show its
verdict (status) and fail verify with its numbers, and the rendered units that run it."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys

import module_runner
import pytest
from ansible.module_utils import basic
from ansible_collections.sparkctl.spark.plugins.filter import engine_gate as gate_filters
from ansible_collections.sparkctl.spark.plugins.filter.verify_checks import memory_headroom
from ansible_collections.sparkctl.spark.plugins.module_utils import engine_gate as G
from ansible_collections.sparkctl.spark.plugins.modules import engine_baseline

GIB = 1024 ** 3
UNIT = "sparkctl-engine.service"


def meminfo(tmp_path, available_bytes, name="meminfo"):
    path = tmp_path / name
    path.write_text("MemTotal:       128000000 kB\nMemFree:         1000000 kB\n"
                    f"MemAvailable:   {available_bytes // 1024} kB\n")
    return path


def baseline(tmp_path, available_bytes, margin_bytes=4 * GIB, settle_seconds=0):
    path = tmp_path / "engine-baseline.json"
    path.write_text(json.dumps({"mem_available_bytes": available_bytes, "margin_bytes": margin_bytes,
                                "settle_seconds": settle_seconds, "recorded_at": "2026-12-03T14:00:00Z"}))
    return path


# --- the verdict ----------------------------------------------------------------------------


def test_parse_mem_available_reads_kib_and_nothing_else():
    assert G.parse_mem_available("MemTotal: 10 kB\nMemAvailable:    2048 kB\n") == 2 * 1024 * 1024
    assert G.parse_mem_available("MemTotal: 10 kB\n") is None
    assert G.parse_mem_available("MemAvailable: lots kB\n") is None


@pytest.mark.parametrize("available_gib, held", [(120, False), (116, False), (115.9, True), (80, True)])
def test_held_exactly_below_baseline_minus_margin(available_gib, held):
    verdict = G.judge(int(available_gib * GIB), {"mem_available_bytes": 120 * GIB, "margin_bytes": 4 * GIB}, UNIT)
    assert verdict["held"] is held
    assert verdict["floor_bytes"] == 116 * GIB
    assert "MemAvailable %.1f GiB, baseline 120.0 GiB, margin 4.0 GiB" % available_gib in verdict["message"]
    assert verdict["message"].startswith("engine held back: ") is held


def test_no_baseline_never_holds_a_first_start():
    verdict = G.judge(100 * GIB, None, UNIT)
    assert verdict["held"] is False and "no pre-engine baseline" in verdict["message"]


def test_unreadable_meminfo_holds():
    assert G.judge(None, {"mem_available_bytes": 1, "margin_bytes": 0}, UNIT)["held"] is True


@pytest.mark.parametrize("doc, word", [([], "not a JSON object"), ({"margin_bytes": 1}, "mem_available_bytes"),
                                       ({"mem_available_bytes": True, "margin_bytes": 1}, "mem_available_bytes"),
                                       ({"mem_available_bytes": 1, "margin_bytes": -1}, "margin_bytes")])
def test_a_bad_baseline_names_the_field(doc, word):
    with pytest.raises(G.GateError, match=word):
        G.validate_baseline(doc, "/b.json")


# --- the program the units run ------------------------------------------------------------


def test_check_refuses_with_the_numbers_and_writes_the_state(tmp_path):
    state = tmp_path / "run" / "engine-gate.json"
    status, verdict = G.check(UNIT, str(baseline(tmp_path, 20 * GIB)), str(state), str(meminfo(tmp_path, 10 * GIB)))
    assert status == 1 and verdict["held"]
    written = json.loads(state.read_text())
    assert written["held"] is True and written["unit"] == UNIT
    assert "MemAvailable 10.0 GiB, baseline 20.0 GiB, margin 4.0 GiB" in written["message"]
    assert oct(state.stat().st_mode & 0o777) == "0o644"
    assert oct(state.parent.stat().st_mode & 0o777) == "0o700"  # created root-only, as the firewall's


def test_a_pass_replaces_an_earlier_refusal(tmp_path):
    state = tmp_path / "engine-gate.json"
    base = str(baseline(tmp_path, 20 * GIB))
    assert G.check(UNIT, base, str(state), str(meminfo(tmp_path, 10 * GIB)))[0] == 1
    assert G.check(UNIT, base, str(state), str(meminfo(tmp_path, 19 * GIB)))[0] == 0
    assert json.loads(state.read_text())["held"] is False


def test_check_waits_up_to_settle_seconds_for_memory_coming_back(tmp_path):
    state = tmp_path / "engine-gate.json"
    low, high = meminfo(tmp_path, 10 * GIB, "low"), meminfo(tmp_path, 20 * GIB, "high")
    current = tmp_path / "meminfo"
    os.symlink(low, current)
    clock = {"now": 1000.0}

    def sleep(seconds):
        clock["now"] += seconds
        if clock["now"] >= 1006:  # the memory is back after 6 s
            current.unlink()
            os.symlink(high, current)

    status, _ = G.check(UNIT, str(baseline(tmp_path, 20 * GIB, settle_seconds=30)), str(state), str(current),
                        clock=lambda: clock["now"], sleep=sleep)
    assert status == 0 and clock["now"] == 1006


def test_check_gives_up_after_settle_seconds(tmp_path):
    clock = {"now": 0.0}
    status, _ = G.check(UNIT, str(baseline(tmp_path, 20 * GIB, settle_seconds=10)), str(tmp_path / "s.json"),
                        str(meminfo(tmp_path, 1 * GIB)), clock=lambda: clock["now"],
                        sleep=lambda s: clock.__setitem__("now", clock["now"] + s))
    assert status == 1 and clock["now"] == 10


def test_a_broken_baseline_holds_and_says_which_file(tmp_path):
    bad = tmp_path / "engine-baseline.json"
    bad.write_text("{not json")
    status, verdict = G.check(UNIT, str(bad), str(tmp_path / "s.json"), str(meminfo(tmp_path, 10 * GIB)))
    assert status == 1 and str(bad) in verdict["message"]


def test_the_program_runs_alone_with_the_nodes_python(tmp_path):
    """As ExecStartPre runs it: a file of its own, standard library only, exit 1 and the numbers on stderr."""
    script = tmp_path / "engine_gate.py"
    script.write_text(gate_filters.engine_gate_files()["script_text"])
    base = baseline(tmp_path, 30 * GIB)
    out = subprocess.run([sys.executable, "-I", str(script), "check", UNIT, "--baseline", str(base),
                          "--state", str(tmp_path / "state.json"), "--meminfo", str(meminfo(tmp_path, 2 * GIB))],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 1, out
    assert "sparkctl: engine held back: MemAvailable 2.0 GiB, baseline 30.0 GiB, margin 4.0 GiB" in out.stderr
    usage = subprocess.run([sys.executable, "-I", str(script)], capture_output=True, text=True, timeout=30)
    assert usage.returncode == 2 and "usage" in usage.stderr


def test_the_unit_line_runs_it_as_root():
    assert G.exec_start_pre(UNIT) == "+/usr/bin/python3 /usr/local/lib/sparkctl/engine_gate.py check sparkctl-engine.service"


# --- the module that records the baseline --------------------------------------------------


@pytest.fixture
def active_units(monkeypatch):
    active = set()

    def run_command(self, argv, check_rc=False, **kwargs):
        assert argv[:2] == ["/usr/bin/systemctl", "is-active"]
        return (0, "active\n", "") if argv[2] in active else (3, "failed\n", "")

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda self, name, required=False, opt_dirs=None: "/usr/bin/" + name)
    return active


def record(capsys, tmp_path, available, **args):
    return module_runner.run_module(engine_baseline.main, dict(
        {"path": str(tmp_path / "lib" / "engine-baseline.json"), "margin_bytes": 4 * GIB, "settle_seconds": 5,
         "units": [UNIT], "meminfo_path": str(meminfo(tmp_path, available))}, **args), capsys)


def test_a_first_start_records_the_baseline(tmp_path, capsys, active_units):
    code, out = record(capsys, tmp_path, 100 * GIB)
    assert code == 0 and out["changed"] and out["recorded"] and not out["held"]
    doc = json.loads((tmp_path / "lib" / "engine-baseline.json").read_text())
    assert doc["mem_available_bytes"] == 100 * GIB and doc["margin_bytes"] == 4 * GIB and doc["settle_seconds"] == 5
    assert G.read_baseline(str(tmp_path / "lib" / "engine-baseline.json"))["mem_available_bytes"] == 100 * GIB


def test_memory_not_back_fails_with_the_numbers_and_keeps_the_baseline(tmp_path, capsys, active_units):
    record(capsys, tmp_path, 100 * GIB)
    code, out = record(capsys, tmp_path, 90 * GIB)
    assert code == 1 and out["held"]
    assert "MemAvailable 90.0 GiB, baseline 100.0 GiB, margin 4.0 GiB" in out["msg"]
    assert "engine_service_gate_rebaseline=true" in out["msg"]
    assert json.loads((tmp_path / "lib" / "engine-baseline.json").read_text())["mem_available_bytes"] == 100 * GIB


def test_settle_waits_for_memory_an_engine_just_stopped_gives_back(tmp_path, capsys, active_units, monkeypatch):
    """After sparkctl stopped the engine of another profile: MemAvailable coming back within
    the baseline's settle_seconds passes and is recorded (the same wait as the gate's)."""
    record(capsys, tmp_path, 100 * GIB, settle_seconds=1)
    readings, real_read = iter([90 * GIB, 99 * GIB]), G.read_mem_available
    monkeypatch.setattr(G, "read_mem_available", lambda path=None: next(readings, 99 * GIB))
    code, out = record(capsys, tmp_path, 90 * GIB, settle=True)
    assert code == 0 and out["recorded"] and out["available_bytes"] == 99 * GIB
    # Without the wait the same first reading is refused.
    monkeypatch.setattr(G, "read_mem_available", real_read)
    record(capsys, tmp_path, 100 * GIB, settle_seconds=1)
    code, out = record(capsys, tmp_path, 90 * GIB)
    assert code == 1 and out["held"]


def test_settle_gives_up_with_the_numbers(tmp_path, capsys, active_units):
    record(capsys, tmp_path, 100 * GIB, settle_seconds=1)
    code, out = record(capsys, tmp_path, 80 * GIB, settle=True)
    assert code == 1 and out["held"]
    assert "MemAvailable 80.0 GiB, baseline 100.0 GiB, margin 4.0 GiB (16.0 GiB short of the 96.0 GiB" in out["msg"]


def test_settle_is_shared_by_the_gate_and_the_module():
    clock = {"now": 0.0}
    readings = iter([1 * GIB, 1 * GIB, 50 * GIB])
    verdict = G.settle(lambda: next(readings), {"mem_available_bytes": 50 * GIB, "margin_bytes": GIB, "settle_seconds": 10},
                       UNIT, clock=lambda: clock["now"], sleep=lambda s: clock.__setitem__("now", clock["now"] + s))
    assert not verdict["held"] and clock["now"] == 4


def test_rebaseline_records_the_lower_value(tmp_path, capsys, active_units):
    record(capsys, tmp_path, 100 * GIB)
    code, out = record(capsys, tmp_path, 90 * GIB, rebaseline=True)
    assert code == 0 and out["recorded"]
    assert json.loads((tmp_path / "lib" / "engine-baseline.json").read_text())["mem_available_bytes"] == 90 * GIB


def test_nothing_is_recorded_while_an_engine_unit_is_active(tmp_path, capsys, active_units):
    record(capsys, tmp_path, 100 * GIB)
    active_units.add(UNIT)
    code, out = record(capsys, tmp_path, 60 * GIB)
    assert code == 0 and not out["changed"] and not out["recorded"] and out["active_units"] == [UNIT]
    assert json.loads((tmp_path / "lib" / "engine-baseline.json").read_text())["mem_available_bytes"] == 100 * GIB


def test_check_mode_writes_nothing_and_shows_the_diff(tmp_path, capsys, active_units):
    code, out = record(capsys, tmp_path, 100 * GIB, _ansible_check_mode=True, _ansible_diff=True)
    assert code == 0 and out["changed"] and not (tmp_path / "lib").exists()
    assert '"mem_available_bytes": %d' % (100 * GIB) in out["diff"]["after"]


def test_a_broken_baseline_is_replaced_and_said(tmp_path, capsys, active_units):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "engine-baseline.json").write_text("[]")
    code, out = record(capsys, tmp_path, 100 * GIB)
    assert code == 0 and out["recorded"] and "not a JSON object" in out["problem"]


# --- status and verify ----------------------------------------------------------------------


def slurped(doc):
    return {"content": base64.b64encode(json.dumps(doc).encode()).decode()}


def test_status_says_why_the_engine_is_held_back_and_how_often_it_restarted():
    held = G.judge(10 * GIB, {"mem_available_bytes": 20 * GIB, "margin_bytes": 4 * GIB}, UNIT)
    held["checked_at"] = "2026-12-03T15:00:00Z"
    units = [{"item": UNIT, "status": {"Id": UNIT, "LoadState": "loaded", "ActiveState": "failed", "Restart": "on-failure",
                                       "Result": "exit-code", "NRestarts": "3", "StartLimitBurst": "3",
                                       "StartLimitIntervalUSec": "10min"}},
             {"item": "sparkctl-ray-head.service", "status": {"Id": "sparkctl-ray-head.service", "LoadState": "loaded",
                                                              "ActiveState": "active", "Result": "success", "NRestarts": "4"}}]
    lines = gate_filters.engine_gate_lines(slurped(held), units, [UNIT])
    assert lines[0].startswith("engine held back: MemAvailable 10.0 GiB, baseline 20.0 GiB, margin 4.0 GiB")
    assert lines[1] == ("sparkctl-engine.service: failed, result exit-code, restart counter 3 (start limit: at most 3 "
                        "starts in 10min, systemd tries no more; a run of the serve stage clears it)")
    assert len(lines) == 2


def test_status_is_quiet_for_a_healthy_engine_and_no_state():
    units = [{"item": UNIT, "status": {"Id": UNIT, "ActiveState": "active", "Result": "success", "NRestarts": "0"}},
             {"item": "sparkctl-ray-head.service", "status": {"Id": "sparkctl-ray-head.service", "ActiveState": "failed",
                                                              "Result": "exit-code", "NRestarts": "1"}}]
    passed = G.judge(20 * GIB, {"mem_available_bytes": 20 * GIB, "margin_bytes": 4 * GIB}, UNIT)
    assert gate_filters.engine_gate_lines(slurped(passed), units, [UNIT]) == []
    assert gate_filters.engine_gate_lines({"failed": True, "msg": "file not found"}, units, [UNIT]) == []


def test_verify_fails_a_held_back_node_with_the_numbers():
    held = G.judge(10 * GIB, {"mem_available_bytes": 20 * GIB, "margin_bytes": 4 * GIB}, UNIT)
    per_host = {"spark1": {"mem_available_bytes": 10 * GIB, "mem_total_bytes": 24 * GIB},
                "spark2": {"mem_available_bytes": 20 * GIB, "mem_total_bytes": 24 * GIB}}
    out = memory_headroom(per_host, 1 * GIB, 1 * GIB, gates={"spark1": held, "spark2": None})
    assert out["failed"] == ["spark1"] and not out["ok"]
    row = [r for r in out["rows"] if r["status"] == "fail"][0]
    assert row["baseline_bytes"] == 20 * GIB and row["gate_margin_bytes"] == 4 * GIB
    assert "spark1: engine held back: MemAvailable 10.0 GiB, baseline 20.0 GiB, margin 4.0 GiB" in row["message"]
    assert memory_headroom(per_host, 1 * GIB, 1 * GIB, gates={"spark1": dict(held, held=False)})["ok"]


# --- the units that run it ----------------------------------------------------------------


def test_the_engine_units_run_the_gate_and_rays_and_the_router_do_not():
    from ansible_collections.sparkctl.spark.plugins.plugin_utils import profile as P
    from test_profile import SHIPPED, cluster, load

    for name in SHIPPED:
        profile = load(name)
        units = P.render(profile, cluster(profile))["units"]
        for host, per_host in units.items():
            for unit, text in per_host.items():
                lines = text.splitlines()
                # The engine's ranks (vLLM's own on a worker too) allocate GPU memory: those are held back.
                gated = unit in ("sparkctl-engine.service", "sparkctl-vllm-rank.service", "sparkctl-sglang-rank.service")
                assert ("ExecStartPre=" + G.exec_start_pre(unit) in lines) is gated, (name, host, unit)
                if gated:
                    # After a leftover container is removed (it holds memory), before the engine starts.
                    pre = [line for line in lines if line.startswith("ExecStartPre=")]
                    assert pre[-1] == "ExecStartPre=" + G.exec_start_pre(unit)
                    # A vLLM worker rank restarts with every restart of its head: more starts leave it room to follow.
                    burst = 10 if unit == "sparkctl-vllm-rank.service" else 3
                    assert f"StartLimitBurst={burst}" in lines and "Restart=on-failure" in lines

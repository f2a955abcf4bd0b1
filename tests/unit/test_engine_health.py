"""sparkctl.spark.engine_health: the boot verdict from /health, the unit and the log."""

from __future__ import annotations

import http.server
import threading
from pathlib import Path

import module_runner
import pytest
from ansible.module_utils import basic
from ansible_collections.sparkctl.spark.plugins.module_utils import engine_health as eh
from ansible_collections.sparkctl.spark.plugins.modules import engine_health as engine_health_module

LOGS = Path(__file__).parent / "fixtures" / "engine_logs"


def lines(name):
    return (LOGS / name).read_text().splitlines()


RUNNING = {"ActiveState": "active", "SubState": "running", "Result": "success", "NRestarts": "0"}


# --- the log ---------------------------------------------------------------------------------


def test_a_good_boot_has_no_fatal_line():
    assert eh.fatal_lines(lines("vllm_boot_ok.log")) == []
    assert eh.last_meaningful_line(lines("vllm_boot_ok.log")) == "INFO:     Application startup complete."


def test_out_of_memory_is_named_before_the_generic_engine_failure():
    fatal = eh.fatal_lines(lines("vllm_oom.log"))
    assert [f["kind"] for f in fatal] == ["engine_failed", "oom"]
    assert "CUDA out of memory. Tried to allocate 2.00 GiB" in fatal[1]["line"]


def test_unknown_weights_and_nccl_errors_are_recognised():
    assert [f["kind"] for f in eh.fatal_lines(lines("vllm_unknown_weights.log"))] == ["unknown_weights", "engine_failed"]
    nccl = eh.fatal_lines(lines("nccl_error.log"))
    assert [f["kind"] for f in nccl] == ["nccl"]
    assert "socketStartConnect" in nccl[0]["line"]


@pytest.mark.parametrize(
    "line, kind",
    [
        ("TRIP: MemAvailable 7912 MiB < 8192 MiB, killing the server", "oom"),
        ("sparkctl-engine.service: A process of this unit has been killed by the OOM killer.", "oom"),
        ("ValueError: Model architectures ['SolarOpen2ForCausalLM'] are not supported for now.", "unknown_architecture"),
        ("ValueError: Ray cluster has 1 GPUs, 2 needed", "placement"),
    ],
)
def test_each_kind_of_fatal_line(line, kind):
    assert eh.fatal_lines(["INFO booting", line]) == [{"kind": kind, "line": line}]


def test_context_shows_the_lines_around_the_cause():
    log = lines("vllm_oom.log")
    context = eh._context(log, eh.fatal_lines(log))
    assert any("Traceback" in line for line in context)


# --- the unit --------------------------------------------------------------------------------


def test_systemctl_show_is_parsed():
    props = eh.parse_systemctl_show("ActiveState=failed\nSubState=failed\nResult=start-limit-hit\nNRestarts=3\nInvocationID=\n")
    assert props == {"ActiveState": "failed", "SubState": "failed", "Result": "start-limit-hit", "NRestarts": "3", "InvocationID": ""}
    state, detail = eh.unit_verdict(props)
    assert state == "dead" and "start-limit-hit" in detail and "3 restarts" in detail


@pytest.mark.parametrize(
    "props, state",
    [
        (RUNNING, "running"),
        ({"ActiveState": "activating", "SubState": "auto-restart", "Result": "exit-code", "NRestarts": "1"}, "starting"),
        ({"ActiveState": "inactive", "SubState": "dead", "Result": "success"}, "stopped"),
        ({"ActiveState": "inactive", "SubState": "dead", "Result": "oom-kill"}, "dead"),
        # A killed main process: systemd ends the unit's other processes, then restarts it after
        # RestartSec. The Result names the kill all along; the unit is not dead until it is failed.
        ({"ActiveState": "deactivating", "SubState": "final-sigterm", "Result": "signal", "NRestarts": "0"}, "starting"),
        ({"ActiveState": "deactivating", "SubState": "stop-sigterm", "Result": "success"}, "starting"),
        ({"ActiveState": "failed", "SubState": "failed-before-auto-restart", "Result": "signal"}, "starting"),
        ({"ActiveState": "inactive", "SubState": "dead-before-auto-restart", "Result": "exit-code"}, "starting"),
        ({"ActiveState": "activating", "SubState": "auto-restart-queued", "Result": "signal"}, "starting"),
        ({"ActiveState": "failed", "SubState": "failed", "Result": "signal", "NRestarts": "2"}, "dead"),
    ],
)
def test_unit_states(props, state):
    assert eh.unit_verdict(props)[0] == state


@pytest.mark.parametrize(
    "status, unit, fatal, outcome",
    [
        (200, "running", [], "healthy"),
        (503, "running", [], "booting"),
        (None, "starting", [], "booting"),
        (200, "starting", [], "booting"),
        (None, "running", [{"kind": "oom", "line": "x"}], "failed"),
        (None, "dead", [], "failed"),
        (None, "stopped", [], "failed"),
    ],
)
def test_decision(status, unit, fatal, outcome):
    assert eh.decide(status, unit, fatal) == outcome


# --- a round ---------------------------------------------------------------------------------


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def test_round_returns_booting_when_time_is_up_and_healthy_as_soon_as_it_is():
    clock = FakeClock()
    answers = iter([(None, "refused")] * 3 + [(503, None)] * 2 + [(200, None)])
    result = eh.wait_round("http://x/health", lambda: RUNNING, lambda: ["loading"], 100, clock=clock, sleep=clock.sleep,
                           probe=lambda url: next(answers))
    assert result["outcome"] == "healthy" and result["waited_s"] == 10.0

    clock = FakeClock()
    result = eh.wait_round("http://x/health", lambda: RUNNING, lambda: ["Loading weights 10%"], 5, clock=clock,
                           sleep=clock.sleep, probe=lambda url: (503, None))
    assert result["outcome"] == "booting" and result["last_log_line"] == "Loading weights 10%" and result["waited_s"] >= 5


def test_round_fails_fast_on_a_fatal_line():
    clock = FakeClock()
    result = eh.wait_round("http://x/health", lambda: RUNNING, lambda: lines("vllm_oom.log"), 3600, clock=clock,
                           sleep=clock.sleep, probe=lambda url: (None, "refused"))
    assert result["outcome"] == "failed" and result["waited_s"] == 0.0
    assert {f["kind"] for f in result["fatal"]} == {"oom", "engine_failed"}


# --- a real HTTP probe on loopback, and the module -------------------------------------------


@pytest.fixture
def health_server(loopback_only):
    state = {"status": 503}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(state["status"])
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/health", state
    server.shutdown()
    server.server_close()


def test_probe_health_on_loopback(health_server):
    url, state = health_server
    assert eh.probe_health(url) == (503, None)
    state["status"] = 200
    assert eh.probe_health(url) == (200, None)
    status, error = eh.probe_health("http://127.0.0.1:1/health", timeout=1)
    assert status is None and error


def test_module_reads_unit_and_journal(health_server, monkeypatch, capsys):
    url, state = health_server
    state["status"] = 200
    calls = []

    def run_command(self, argv, check_rc=False, **kwargs):
        calls.append(argv)
        if "show" in argv:
            return 0, "ActiveState=active\nSubState=running\nResult=success\nNRestarts=0\nInvocationID=abc123\n", ""
        return 0, (LOGS / "vllm_boot_ok.log").read_text(), ""

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda self, name, required=False, opt_dirs=None: f"/usr/bin/{name}")

    rc, result = module_runner.run_module(engine_health_module.main, {"url": url, "unit": "sparkctl-engine.service"}, capsys)

    assert rc == 0 and result["outcome"] == "healthy" and result["changed"] is False
    journal = [argv for argv in calls if argv[0].endswith("journalctl")][0]
    assert "_SYSTEMD_INVOCATION_ID=abc123" in journal


# --- no API key in a printed log line ----------------------------------------------------------

KEY = "sk-SGLkey9f8e7d6c5b4a3210fedcba98765"
SGLANG_ARGS = ("[2026-12-01 10:00:00] server_args=ServerArgs(model_path='/srv/m', host='127.0.0.1', port=30000, "
               f"api_key='{KEY}', admin_api_key=None, served_model_name='qwen', tp_size=2)")


@pytest.mark.parametrize("line", [
    SGLANG_ARGS,
    f'server_args=ServerArgs(api_key="{KEY}")',
    # Later 0.5 releases log a dict of the resolved arguments.
    f"server_args={{'model_path': '/srv/m', 'api_key': '{KEY}', 'admin_api_key': None, 'tp_size': 2}}",
    f"args: --api-key {KEY} --port 8001",
    f"args: --api-key={KEY}",
    f"VLLM_API_KEY={KEY}",
    f"api-key: {KEY}",
    f"GET /v1/models headers={{'authorization': 'Bearer {KEY}'}}",
    f"a plain mention of {KEY} by the engine",
])
def test_the_key_is_scrubbed_from_log_lines(line):
    from ansible_collections.sparkctl.spark.plugins.module_utils.log_scrub import scrub_lines

    scrubbed = scrub_lines([line], secrets=[KEY])
    assert KEY not in scrubbed[0] and "<redacted by sparkctl>" in scrubbed[0]
    # The known spellings go even when the key itself is not known.
    if "plain mention" not in line:
        assert KEY not in scrub_lines([line])[0]


def test_a_hugging_face_token_is_scrubbed_from_log_lines():
    from ansible_collections.sparkctl.spark.plugins.module_utils.log_scrub import scrub_lines

    token = "hf_" + "Q7x" * 12
    assert scrub_lines([f"downloading with token {token}", "hf_transfer enabled"]) == [
        "downloading with token <redacted by sparkctl>", "hf_transfer enabled"]


def test_scrubbing_keeps_the_rest_of_the_line():
    from ansible_collections.sparkctl.spark.plugins.module_utils.log_scrub import scrub_lines

    out = scrub_lines([SGLANG_ARGS, "INFO: Application startup complete.", "proxy http://u:pw@p:3128"], secrets=[KEY])
    assert "admin_api_key=None" in out[0] and "served_model_name='qwen'" in out[0] and "tp_size=2" in out[0]
    assert out[1] == "INFO: Application startup complete."
    assert "u:pw" not in out[2]


def test_a_failed_boot_prints_no_key():
    clock = FakeClock()
    log = [SGLANG_ARGS, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB " + KEY]
    result = eh.wait_round("http://x/health", lambda: RUNNING, lambda: log, 3600, clock=clock, sleep=clock.sleep,
                           probe=lambda url: (None, "refused"), secrets=[KEY])
    assert result["outcome"] == "failed"
    assert KEY not in repr(result)


def test_the_module_scrubs_with_the_key_file(health_server, monkeypatch, capsys, tmp_path):
    url, state = health_server
    key_file = tmp_path / "sglang-api.yaml"
    key_file.write_text(f"api-key: {KEY}\n")

    def run_command(self, argv, check_rc=False, **kwargs):
        if "show" in argv:
            return 0, "ActiveState=active\nSubState=running\nResult=success\nNRestarts=0\n", ""
        return 0, f"loading\nkey is {KEY}\n", ""

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda self, name, required=False, opt_dirs=None: f"/usr/bin/{name}")
    rc, text = module_runner.run_module(engine_health_module.main, {"url": url, "unit": "u", "round_seconds": 0,
                                                                    "api_key_file": str(key_file)}, capsys, raw=True)
    assert rc == 0 and KEY not in text and "key is <redacted by sparkctl>" in text


def test_the_log_scrub_filter_and_the_logs_play_use_it():
    import yaml
    from ansible_collections.sparkctl.spark.plugins.filter.log_scrub import FilterModule

    scrub = FilterModule().filters()["log_scrub"]
    assert scrub([SGLANG_ARGS, f"x {KEY}"], [KEY]) == scrub([SGLANG_ARGS, f"x {KEY}"], KEY)
    assert all(KEY not in line for line in scrub([SGLANG_ARGS, f"x {KEY}"], [KEY]))
    play = yaml.safe_load((Path(__file__).resolve().parents[2] / "playbooks" / "logs.yml").read_text())[0]
    printed = [t for t in play["tasks"] if "ansible.builtin.debug" in t]
    assert printed and all("sparkctl.spark.log_scrub" in t["ansible.builtin.debug"]["msg"] for t in printed)


def test_the_log_scrub_filter_takes_the_key_file_text():
    from ansible_collections.sparkctl.spark.plugins.filter.log_scrub import log_scrub

    assert log_scrub([f"x {KEY}"], key_file_text=f"VLLM_API_KEY={KEY}\n") == ["x <redacted by sparkctl>"]
    assert log_scrub([f"x {KEY}"], key_file_text=f"api-key: {KEY}\n") == ["x <redacted by sparkctl>"]
    assert log_scrub(["x plain"], key_file_text="no key here") == ["x plain"]


def test_a_round_waits_through_systemds_restart_of_a_killed_engine():
    # The serve run can meet the unit anywhere between the kill and the restarted engine's health.
    clock = FakeClock()
    units = iter([
        {"ActiveState": "deactivating", "SubState": "final-sigterm", "Result": "signal", "NRestarts": "0"},
        {"ActiveState": "activating", "SubState": "auto-restart", "Result": "signal", "NRestarts": "0"},
        {"ActiveState": "activating", "SubState": "auto-restart", "Result": "signal", "NRestarts": "0"},
        {"ActiveState": "activating", "SubState": "start-pre", "Result": "success", "NRestarts": "1"},
        {**RUNNING, "NRestarts": "1"},
        {**RUNNING, "NRestarts": "1"},
    ])
    answers = iter([(None, "refused")] * 5 + [(200, None)])
    result = eh.wait_round("http://x/health", lambda: next(units), lambda: ["Main process exited, code=killed, status=9/KILL"],
                           100, clock=clock, sleep=clock.sleep, probe=lambda url: next(answers))
    assert result["outcome"] == "healthy" and result["waited_s"] == 10.0

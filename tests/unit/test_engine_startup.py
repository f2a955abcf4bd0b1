"""sparkctl.spark.engine_startup_facts: the profile's startup_log rules against the engine's
log of its current start (recorded vLLM / SGLang logs, and the lab stand-in's own output)."""

from __future__ import annotations

import stat
import sys
import threading
import time
from pathlib import Path

import module_runner
import pytest
import yaml
from make_checkpoint import header_only_checkpoint  # tests/lab/hub, on sys.path through conftest.py
from ansible.module_utils import basic
from ansible_collections.sparkctl.spark.plugins.module_utils import engine_startup as es
from ansible_collections.sparkctl.spark.plugins.plugin_utils import profile as P
from ansible_collections.sparkctl.spark.plugins.modules import engine_startup_facts

LOGS = Path(__file__).parent / "fixtures" / "engine_startup"
REPO = Path(__file__).resolve().parents[2]
LAB_PROFILES = REPO / "tests" / "lab" / "profiles"
ENGINE = REPO / "tests" / "lab" / "engine"


# What the module returns besides changed; RETURN documents exactly these.
RETURNED = {"startup", "failed_rules", "warned_rules", "invocation_id", "lines_read"}


def log(name):
    return (LOGS / name).read_text().splitlines()


def rules_of(profile_name):
    return P.load_profile(profile_name, [str(LAB_PROFILES)])["startup_log"]


def by_name(result):
    return {item["name"]: item for item in result["startup"]}


LAB_RULES = rules_of("lab-standin")
SOLAR_RULES = rules_of("solar-open2-nvfp4-vllm-venv")

# What the stand-in prints with TP=2 over Ray (tests/lab/engine/README.md, "Startup").
STANDIN_LINES = [
    "INFO 11-29 10:00:01 [sparklab_engine] Loading weights (4 shards) on 2 rank(s)",
    "INFO 11-29 10:00:03 [sparklab_engine] Using 'SPARKLAB_STANDIN' NvFp4 MoE backend",
    "(RayWorkerWrapper pid=123, ip=192.168.100.11) INFO 11-29 10:00:03 [sparklab_engine] Using 'SPARKLAB_STANDIN' NvFp4 MoE backend",
    "INFO 11-29 10:00:03 [sparklab_engine] Model loading took 0.50 GiB and 2.00 seconds",
    "(RayWorkerWrapper pid=123, ip=192.168.100.11) INFO 11-29 10:00:03 [sparklab_engine] Model loading took 0.50 GiB and 2.00 seconds",
    "INFO 11-29 10:00:03 [sparklab_engine] Available KV cache memory: 1.00 GiB",
    "INFO 11-29 10:00:03 [sparklab_engine] GPU KV cache size: 52,416 tokens",
    "INFO 11-29 10:00:03 [sparklab_engine] Maximum concurrency for 40,960 tokens per request: 1.28x",
    "INFO 11-29 10:00:03 [sparklab_engine] Application startup complete.",
]


def replace(lines, old, new, occurrence=1):
    """lines with the occurrence-th line holding old rewritten (1 = first)."""
    out, seen = [], 0
    for line in lines:
        if old in line:
            seen += 1
            if seen == occurrence:
                line = line.replace(old, new)
        out.append(line)
    assert seen >= occurrence, f"{old!r} is not in the log {occurrence} times"
    return out


# --- recorded logs against the shipped profiles --------------------------------------------


def test_vllm_ray_log_meets_the_solar_open2_profile():
    result = es.evaluate(log("vllm_ray_tp2.log"), SOLAR_RULES)
    items = by_name(result)

    assert result["failed"] == [] and result["warnings"] == []
    assert [item["name"] for item in result["startup"]] == ["moe_backend", "model_loading_gib", "kv_cache_tokens", "max_concurrency"]
    assert all(item["ok"] for item in result["startup"])
    assert items["kv_cache_tokens"]["matched_values"] == [1089536.0] and items["kv_cache_tokens"]["value"] == 1089536.0
    assert items["kv_cache_tokens"]["message"] == "kv_cache_tokens: 1089536 tokens >= min 1048576"
    assert items["max_concurrency"]["value"] == 1.04
    # One line per tensor-parallel rank, the second one behind Ray's worker prefix.
    assert items["model_loading_gib"]["found"] == 2 and items["model_loading_gib"]["matched_values"] == [71.48, 71.48]
    assert items["model_loading_gib"]["message"] == "model_loading_gib: rank values 71.48, 71.48 GiB within 71.48 +/- 0.5"
    assert "ip=192.168.100.11" in items["model_loading_gib"]["lines"][1]
    assert items["moe_backend"]["found"] == 2
    assert items["moe_backend"]["message"] == "moe_backend: found 2 times: Using 'FLASHINFER_CUTLASS' NvFp4 MoE backend"
    assert items["kv_cache_tokens"]["min"] == 1048576 and items["kv_cache_tokens"]["on_mismatch"] == "fail"


def test_one_rank_that_loaded_other_weights_is_a_warning_naming_both_values():
    lines = replace(log("vllm_ray_tp2.log"), "Model loading took 71.48 GiB", "Model loading took 65.10 GiB", occurrence=2)

    result = es.evaluate(lines, SOLAR_RULES)
    item = by_name(result)["model_loading_gib"]

    assert item["ok"] is False and item["matched_values"] == [71.48, 65.1]
    assert item["message"] == "model_loading_gib: rank values 71.48, 65.10 GiB; expected 71.48 +/- 0.5"
    assert result["warnings"] == ["model_loading_gib"] and result["failed"] == []


def test_a_kv_cache_below_the_profiles_minimum_fails():
    lines = replace(log("vllm_ray_tp2.log"), "GPU KV cache size: 1,089,536 tokens", "GPU KV cache size: 262,144 tokens")
    lines = replace(lines, "per request: 1.04x", "per request: 0.25x")

    result = es.evaluate(lines, SOLAR_RULES)
    items = by_name(result)

    assert result["failed"] == ["kv_cache_tokens", "max_concurrency"]
    assert items["kv_cache_tokens"]["message"] == "kv_cache_tokens: 262144 tokens; expected >= min 1048576"
    assert items["max_concurrency"]["message"] == "max_concurrency: 0.25; expected >= min 1.0"


def test_another_moe_backend_is_only_missing_the_expected_one():
    lines = [line.replace("Using 'FLASHINFER_CUTLASS'", "Using 'MARLIN'") for line in log("vllm_ray_tp2.log")]

    item = by_name(es.evaluate(lines, SOLAR_RULES))["moe_backend"]

    assert item["ok"] is False and item["found"] == 0 and item["value"] is None
    assert item["message"] == "moe_backend: not found in the engine log since its last start"


def test_sglang_log_meets_the_qwen_profile():
    result = es.evaluate(log("sglang_tp0.log"), rules_of("qwen38-flash-next-nvfp4-sglang"))
    items = by_name(result)

    assert result["failed"] == [] and result["warnings"] == []
    assert items["kv_cache_tokens"]["value"] == 912384.0
    assert items["available_gpu_mem_gb"]["message"] == "available_gpu_mem_gb: 5.12 GB >= min 4"


def test_an_empty_log_fails_and_warns_by_the_profiles_choice():
    result = es.evaluate([], LAB_RULES)

    assert result["failed"] == ["kv_cache_tokens", "max_concurrency"]
    assert result["warnings"] == ["moe_backend", "model_loading_gib"]
    assert all(item["found"] == 0 and item["matched_values"] == [] and item["value"] is None for item in result["startup"])


# --- the stand-in's lines and the lab profile ----------------------------------------------


def test_standin_lines_meet_the_lab_profile():
    result = es.evaluate(STANDIN_LINES, LAB_RULES)
    items = by_name(result)

    assert [item["ok"] for item in result["startup"]] == [True, True, True, True]
    assert items["kv_cache_tokens"]["message"] == "kv_cache_tokens: 52416 tokens >= min 4096"
    assert items["model_loading_gib"]["matched_values"] == [0.5, 0.5]


def test_a_rank_off_by_more_than_the_tolerance_is_reported_per_rank():
    lines = replace(STANDIN_LINES, "took 0.50 GiB", "took 0.62 GiB", occurrence=2)

    item = by_name(es.evaluate(lines, LAB_RULES))["model_loading_gib"]

    assert item["ok"] is False
    assert item["message"] == "model_loading_gib: rank values 0.50, 0.62 GiB; expected 0.5 +/- 0.05"


def test_the_standin_engine_itself_prints_what_the_lab_profile_expects(tmp_path, loopback_only):
    """The real stand-in (in-process, mp backend, TP=2) with the lab hub's checkpoint cut after its
    shards' headers (what the stand-in reads): 0.50 GiB per rank; 40 layers x 2 x 2 KV heads per rank x
    64 x 2 B = 20,480 B per token, so 256 MiB buys 268,435,456 // (16 x 512 B x 40) = 819 blocks = 13,104 tokens."""
    if str(ENGINE) not in sys.path:
        sys.path.insert(0, str(ENGINE))
    import io

    from sparklab_engine import cli
    from sparklab_engine.app import EngineServer
    from sparklab_engine.log import Log

    model, _names = header_only_checkpoint(tmp_path / "lab-standin")
    argv = [str(model), "--served-model-name", "lab-standin", "--host", "127.0.0.1", "--port", "0",
            "--distributed-executor-backend", "mp", "--tensor-parallel-size", "2", "--max-model-len", "4096",
            "--kv-cache-memory-bytes", "268435456", "--enforce-eager"]
    engine = EngineServer(cli.parse_serve(argv, {"SPARKLAB_ENGINE_LOAD_S": "0"}), Log(io.StringIO()))
    codes = []
    thread = threading.Thread(target=lambda: codes.append(engine.run()), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not engine.ready:
            assert thread.is_alive() and time.monotonic() < deadline, "\n".join(engine.log.lines)
            time.sleep(0.01)
        lines = list(engine.log.lines)
    finally:
        engine.shutdown(0)
        thread.join(5)

    result = es.evaluate(lines, LAB_RULES)
    items = by_name(result)

    assert result["failed"] == [] and result["warnings"] == [], [item["message"] for item in result["startup"]]
    assert items["model_loading_gib"]["matched_values"] == [0.5, 0.5]
    assert items["model_loading_gib"]["lines"][1].startswith("(VllmWorker rank=1 pid=")
    assert items["kv_cache_tokens"]["matched_values"] == [13104.0]
    assert items["max_concurrency"]["matched_values"] == [3.2]


# --- rule semantics ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, number",
    [("16,384", 16384.0), ("1,089,536", 1089536.0), ("1.04", 1.04), ("71.48", 71.48), (" 7 ", 7.0), ("abc", None), ("", None)],
)
def test_numbers_may_carry_thousands_separators(text, number):
    assert es.parse_number(text) == number


@pytest.mark.parametrize(
    "value, ok",
    [("0.45", True), ("0.55", True), ("0.50", True), ("0.56", False), ("0.44", False)],
)
def test_tolerance_is_inclusive_despite_float_rounding(value, ok):
    rule = {"name": "model_loading_gib", "regex": r"took ([0-9.]+) GiB", "expect": 0.5, "tolerance": 0.05, "on_mismatch": "warn"}

    assert es.evaluate_rule([f"Model loading took {value} GiB"], rule)["ok"] is ok


@pytest.mark.parametrize(
    "value, bounds, ok",
    [
        ("4096", {"min": 4096}, True),
        ("4095", {"min": 4096}, False),
        ("80", {"max": 80}, True),
        ("80.01", {"max": 80}, False),
        ("50", {"min": 10, "max": 100}, True),
        ("5", {"min": 10, "max": 100}, False),
        ("7", {"expect": 7}, True),
        ("7.5", {"expect": 7}, False),
    ],
)
def test_min_max_and_exact_expectations(value, bounds, ok):
    rule = dict({"name": "n", "regex": r"n=([0-9.,]+)", "on_mismatch": "fail"}, **bounds)

    assert es.evaluate_rule([f"n={value}"], rule)["ok"] is ok


def test_min_and_max_together_name_every_broken_bound():
    rule = {"name": "window_gib", "regex": r"w=([0-9.]+)", "min": 10, "max": 20, "on_mismatch": "fail"}

    item = es.evaluate_rule(["w=15", "w=25", "w=5"], rule)

    assert item["ok"] is False
    assert item["message"] == "window_gib: rank values 15, 25, 5 GiB; expected >= min 10 and <= max 20"


def test_a_string_expectation_compares_the_first_group_on_every_rank():
    rule = {"name": "moe_backend", "regex": r"Using '(\w+)' NvFp4 MoE backend", "expect": "FLASHINFER_CUTLASS", "on_mismatch": "fail"}
    good = ["Using 'FLASHINFER_CUTLASS' NvFp4 MoE backend",
            "(RayWorkerWrapper pid=1, ip=10.0.0.2) Using 'FLASHINFER_CUTLASS' NvFp4 MoE backend"]
    mixed = [good[0], "(RayWorkerWrapper pid=1, ip=10.0.0.2) Using 'MARLIN' NvFp4 MoE backend"]

    ok = es.evaluate_rule(good, rule)
    bad = es.evaluate_rule(mixed, rule)

    assert ok["ok"] is True and ok["matched_values"] == ["FLASHINFER_CUTLASS", "FLASHINFER_CUTLASS"]
    assert ok["message"] == "moe_backend: FLASHINFER_CUTLASS as expected"
    assert bad["ok"] is False and bad["message"] == "moe_backend: MARLIN; expected FLASHINFER_CUTLASS"


def test_a_group_that_is_not_a_number_fails_the_rule_instead_of_raising():
    rule = {"name": "kv_cache_tokens", "regex": r"GPU KV cache size: (\S+) tokens", "min": 1, "on_mismatch": "fail"}

    item = es.evaluate_rule(["GPU KV cache size: lots tokens"], rule)

    assert item["ok"] is False and item["matched_values"] == ["lots"]
    assert item["message"].startswith("kv_cache_tokens: 'lots' is not a number")


def test_a_numeric_rule_without_group_and_a_broken_regex_are_reported():
    no_group = es.evaluate_rule(["GPU KV cache size: 5 tokens"],
                                {"name": "kv", "regex": "GPU KV cache size", "min": 1, "on_mismatch": "fail"})
    broken = es.evaluate_rule(["x"], {"name": "kv", "regex": "(", "min": 1, "on_mismatch": "warn"})

    assert no_group["ok"] is False and "has no group" in no_group["message"]
    assert broken["ok"] is False and "is not valid" in broken["message"] and broken["on_mismatch"] == "warn"


def test_rays_folded_lines_are_counted_and_do_not_break_anchored_regexes():
    rule = {"name": "max_concurrency", "regex": r"request: ([0-9.]+)x$", "min": 1.0, "on_mismatch": "fail"}
    line = ("(RayWorkerWrapper pid=9, ip=192.168.100.11) Maximum concurrency for 4,096 tokens per request: 4.00x"
            " [repeated 2x across cluster]")

    item = es.evaluate_rule([line], rule)

    assert item["ok"] is True and item["matched_values"] == [4.0] and item["folded"] == 2
    assert item["message"] == "max_concurrency: 4 >= min 1.0 (Ray folded 2 more similar lines)"


def test_a_rule_without_on_mismatch_fails_rather_than_being_ignored():
    result = es.evaluate([], [{"name": "kv", "regex": "kv=([0-9]+)", "min": 1}])

    assert result["failed"] == ["kv"] and result["startup"][0]["on_mismatch"] == "fail"


@pytest.mark.parametrize("value, text", [(16384.0, "16384"), (0.5, "0.50"), (71.4766, "71.48"), (1.04, "1.04"), ("x", "x")])
def test_values_are_shown_like_the_engine_prints_them(value, text):
    assert es.format_value(value) == text


# --- the bounded journal reader ------------------------------------------------------------


def test_read_first_lines_stops_a_long_writer_early():
    argv = [sys.executable, "-c", "import sys\nfor i in range(10**7): sys.stdout.write('line %d\\n' % i)"]
    started = time.monotonic()

    rc, lines, _err = es.read_first_lines(argv, 5)

    assert lines == ["line 0", "line 1", "line 2", "line 3", "line 4"]
    assert rc is None
    assert time.monotonic() - started < 20


def test_read_first_lines_returns_everything_and_the_exit_code_of_a_short_command():
    rc, lines, err = es.read_first_lines([sys.executable, "-c", "print('a'); print('b')"], 100)
    assert (rc, lines, err) == (0, ["a", "b"], "")

    rc, lines, err = es.read_first_lines([sys.executable, "-c", "import sys; sys.stderr.write('no journal'); sys.exit(1)"], 100)
    assert (rc, lines, err) == (1, [], "no journal")


def test_journal_argv_reads_one_invocation_as_plain_messages():
    assert es.journal_argv("/usr/bin/journalctl", "abc") == [
        "/usr/bin/journalctl", "--no-pager", "--quiet", "-o", "cat", "_SYSTEMD_INVOCATION_ID=abc"]


# --- the module ----------------------------------------------------------------------------


@pytest.fixture
def fake_host(monkeypatch, tmp_path):
    """systemctl answers from the test; journalctl is a script that records its arguments and
    prints the recorded log, so the module's real reader runs."""
    state = {"invocation": "8c1f3a0e5b2d4c6f9a7e1d3b5c7f9a1e\n", "show_rc": 0, "calls": []}
    journal_args = tmp_path / "journalctl.args"
    journalctl = tmp_path / "journalctl"
    journalctl.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        f"open({str(journal_args)!r}, 'w').write('\\n'.join(sys.argv[1:]))\n"
        f"sys.stdout.write(open({str(LOGS / 'vllm_ray_tp2.log')!r}).read())\n"
    )
    journalctl.chmod(journalctl.stat().st_mode | stat.S_IXUSR)

    def run_command(self, argv, check_rc=False, **kwargs):
        state["calls"].append(list(argv))
        assert argv[0] == "/usr/bin/systemctl", argv
        return state["show_rc"], state["invocation"], "" if state["show_rc"] == 0 else "Failed to connect to bus"

    def get_bin_path(self, name, required=False, opt_dirs=None):
        return str(journalctl) if name == "journalctl" else f"/usr/bin/{name}"

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", get_bin_path)
    state["journal_args"] = journal_args
    return state


def run(args, capsys):
    return module_runner.run_module(engine_startup_facts.main, args, capsys)


def test_module_reads_the_current_invocations_log(fake_host, capsys):
    rc, result = run({"unit": "sparkctl-engine.service", "rules": SOLAR_RULES}, capsys)

    assert rc == 0 and result["changed"] is False and not result.get("failed")
    assert set(result) - {"changed", "invocation"} == RETURNED
    assert fake_host["calls"] == [["/usr/bin/systemctl", "show", "-p", "InvocationID", "--value", "sparkctl-engine.service"]]
    assert fake_host["journal_args"].read_text().split("\n") == [
        "--no-pager", "--quiet", "-o", "cat", "_SYSTEMD_INVOCATION_ID=8c1f3a0e5b2d4c6f9a7e1d3b5c7f9a1e"]
    assert result["invocation_id"] == "8c1f3a0e5b2d4c6f9a7e1d3b5c7f9a1e"
    assert result["lines_read"] == len(log("vllm_ray_tp2.log"))
    assert result["failed_rules"] == [] and result["warned_rules"] == []
    assert [item["value"] for item in result["startup"]] == [
        "Using 'FLASHINFER_CUTLASS' NvFp4 MoE backend", 71.48, 1089536.0, 1.04]


def test_module_reads_only_the_first_log_lines(fake_host, capsys):
    # The KV cache lines come late in the recorded log: cut before them, they are not found.
    cut = next(i for i, line in enumerate(log("vllm_ray_tp2.log")) if "GPU KV cache size" in line)

    rc, result = run({"unit": "sparkctl-engine.service", "rules": SOLAR_RULES, "log_lines": cut}, capsys)

    assert rc == 0 and result["lines_read"] == cut
    assert result["failed_rules"] == ["kv_cache_tokens", "max_concurrency"]


def test_module_reports_a_mismatch_without_failing_the_task(fake_host, capsys):
    rules = [dict(rule, min=2000000) if rule["name"] == "kv_cache_tokens" else rule for rule in SOLAR_RULES]

    rc, result = run({"unit": "sparkctl-engine.service", "rules": rules, "_ansible_check_mode": True}, capsys)

    assert rc == 0 and not result.get("failed")
    assert result["failed_rules"] == ["kv_cache_tokens"]
    assert by_name(result)["kv_cache_tokens"]["message"] == "kv_cache_tokens: 1089536 tokens; expected >= min 2000000"


def test_module_fails_clearly_when_the_unit_is_not_running(fake_host, capsys):
    fake_host["invocation"] = "\n"

    rc, result = run({"unit": "sparkctl-engine.service", "rules": LAB_RULES}, capsys)

    assert rc == 1 and result["failed"] is True
    assert "sparkctl-engine.service is not running" in result["msg"]
    assert not fake_host["journal_args"].exists()


def test_module_fails_when_systemctl_cannot_answer(fake_host, capsys):
    fake_host["show_rc"], fake_host["invocation"] = 1, ""

    rc, result = run({"unit": "sparkctl-engine.service", "rules": LAB_RULES}, capsys)

    assert rc == 1 and "Failed to connect to bus" in result["msg"]


def test_module_evaluates_given_lines_without_touching_the_unit(fake_host, capsys):
    rc, result = run({"unit": "sparkctl-engine.service", "rules": LAB_RULES, "lines": STANDIN_LINES}, capsys)

    assert rc == 0 and fake_host["calls"] == [] and result["invocation_id"] is None
    assert result["lines_read"] == len(STANDIN_LINES)
    assert result["failed_rules"] == [] and result["warned_rules"] == []
    assert all(item["ok"] for item in result["startup"])


def test_documentation_names_what_the_module_returns():
    # Options against the argument spec, and EXAMPLES: test_module_documentation.py, for every module.
    assert module_runner.documentation(engine_startup_facts)["attributes"]["check_mode"]["support"] == "full"
    assert set(yaml.safe_load(engine_startup_facts.RETURN)) == RETURNED

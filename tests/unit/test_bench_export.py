"""sparkctl.bench.export: sparkctl's results under `vllm bench serve --save-result`'s field names.
The names are held to a literal list here (so CI checks them without vLLM) and, where vLLM's
benchmark source is installed (/work/scratch/vt), to the names its serve.py writes; the values
to hand-computed figures of a few records; the file `run --export-vllm` writes to its points."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from sparkctl.bench import export
from test_bench_workloads import Engine, run

VLLM_SOURCE_GLOB = "lib/python*/site-packages/vllm/benchmarks/serve.py"
VLLM_VENV = Path("/work/scratch/vt")

STATS = ("mean", "median", "std", "p99")
LATENCY = [f"{stat}_{metric}_ms" for metric in ("ttft", "tpot", "itl", "e2el") for stat in STATS]
QUEUE = [f"{stat}_{metric}_ms" for metric in ("client_queue_time", "e2el_including_client_queue") for stat in STATS]
# What vLLM writes (vllm/benchmarks/serve.py, vLLM 0.32) that the export writes too, in vLLM's order.
EXPECTED_FIELDS = [
    "date", "endpoint_type", "backend", "label", "model_id", "num_prompts",
    "request_rate", "burstiness", "max_concurrency", "ramp_up_strategy", "ramp_up_start_rps", "ramp_up_end_rps",
    "duration", "completed", "failed", "total_input_tokens", "total_output_tokens", "request_throughput",
    "request_goodput", "output_throughput", "total_token_throughput", *LATENCY, *QUEUE,
]
CLOSED_LOOP_FIELDS = [name for name in EXPECTED_FIELDS
                      if name != "burstiness" and not name.startswith("ramp_up") and name not in QUEUE]
# The fields the issue names, each of which must be among them.
ISSUE_FIELDS = ["request_throughput", "output_throughput", "total_token_throughput", "mean_ttft_ms", "median_ttft_ms",
                "p99_ttft_ms", "std_ttft_ms", "mean_tpot_ms", "mean_itl_ms", "completed", "total_input_tokens",
                "total_output_tokens", "duration", "max_concurrency", "request_rate", "burstiness"]


def vllm_serve_source() -> str | None:
    found = sorted(VLLM_VENV.glob(VLLM_SOURCE_GLOB)) if VLLM_VENV.is_dir() else []
    return found[0].read_text(encoding="utf-8") if found else None


def vllm_written_names(source: str) -> set[str]:
    """The result-JSON keys serve.py writes: result_json["..."] assignments, the generation
    branch's `result = {...}` keys, and for each process_one_metric(...) metric the mean_, median_,
    std_ and p{percentile}_ names at the default --metric-percentiles."""
    names = set(re.findall(r'result_json\["(\w+)"\]\s*=', source))
    branch = source.split("if isinstance(metrics, BenchmarkMetrics):", 1)[1].split("else:", 1)[0]
    names |= set(re.findall(r'"(\w+)":', branch))
    for template in ('f"mean_{metric_attribute_name}_ms"', 'f"median_{metric_attribute_name}_ms"',
                     'f"std_{metric_attribute_name}_ms"', 'f"p{p_word}_{metric_attribute_name}_ms"'):
        assert template in source, template
    default = re.search(r'"--metric-percentiles",\s*type=str,\s*default="([\d.,]+)"', source)
    assert default, "--metric-percentiles' default not found"
    percentiles = default.group(1).split(",")
    for metric in re.findall(r'process_one_metric\(\s*"(\w+)"', source):
        names |= {f"mean_{metric}_ms", f"median_{metric}_ms", f"std_{metric}_ms"}
        names |= {f"p{p}_{metric}_ms" for p in percentiles}
    return names


def test_the_export_writes_the_expected_vllm_names():
    assert list(export.VLLM_FIELDS) == EXPECTED_FIELDS
    assert set(ISSUE_FIELDS) <= set(EXPECTED_FIELDS)


def test_every_exported_name_is_one_vllm_s_serve_py_writes():
    source = vllm_serve_source()
    if source is None:
        pytest.skip(f"vLLM's benchmark source is not installed under {VLLM_VENV} ({VLLM_SOURCE_GLOB}); "
                    "test_the_export_writes_the_expected_vllm_names holds the names to the literal list")
    written = vllm_written_names(source)
    assert set(EXPECTED_FIELDS) <= written, sorted(set(EXPECTED_FIELDS) - written)
    # vLLM's default output has these too; sparkctl has no equivalent (README.md lists why).
    assert {"tokenizer_id", "max_output_tokens_per_s", "max_concurrent_requests", "rtfx"} <= written


def rec(point, *, ok=True, t_send=0.0, ttft=None, e2e=None, tpot=None, itl=(), tokens=10, prompt=100, repetition=0, **extra):
    """A runner-shaped record of `point`: sent at t_send, first token after ttft, ended e2e after the send."""
    if not ok:
        return {"point": point, "ok": False, "t_send": t_send, "t_first": None, "t_last": None, "t_end": None,
                "ttft_s": None, "e2e_s": None, "tpot_s": None, "itl_s": [], "decode_tok_s": None, "completion_tokens": None,
                "prompt_tokens": None, "length_rejected": False, "repetition": repetition, "stream": 0} | extra
    return {"point": point, "ok": True, "t_send": t_send, "t_first": t_send + ttft, "t_last": t_send + e2e,
            "t_end": t_send + e2e, "ttft_s": ttft, "e2e_s": e2e, "tpot_s": tpot, "itl_s": list(itl), "decode_tok_s": 9.0,
            "completion_tokens": tokens, "prompt_tokens": prompt, "length_rejected": False, "burst": False,
            "repetition": repetition, "stream": 0} | extra


def document(points, requests, **settings):
    return {"started_at": "2026-07-11T08:09:10+00:00", "label": "lab", "points": points, "requests": requests,
            "settings": {"endpoint": "chat", "model": "m", "slo": None, "max_concurrency": None} | settings}


def closed_point(number=1, streams=2):
    return {"point": number, "prompt_tokens_target": 2048, "streams": streams, "load": f"concurrency:{streams}",
            "summary": {"ok_requests": 1}}


def test_the_figures_are_hand_computed_from_the_records():
    # Two answers and a failure: TTFT 0.1 and 0.3 s, E2E 1 and 2 s, TPOT 0.1 and 0.2 s, gaps
    # 0.05, 0.15, 0.2, 0.2 s; 100 prompt and 10 completion tokens each; the point spans 0..2 s.
    records = [rec(1, ttft=0.1, e2e=1.0, tpot=0.1, itl=(0.05, 0.15)), rec(1, ttft=0.3, e2e=2.0, tpot=0.2, itl=(0.2, 0.2)),
               rec(1, ok=False, t_send=0.5, error="HTTP 500")]
    (result,) = export.vllm_results(document([closed_point()], records, slo={"ttft": 0.5}))
    assert [name for name in result if not name.startswith("sparkctl_")] == CLOSED_LOOP_FIELDS
    assert {k: result[k] for k in export.SPARKCTL_FIELDS} == {
        "sparkctl_workload": "points", "sparkctl_point": 1, "sparkctl_prompt_tokens_target": 2048,
        "sparkctl_load": "concurrency:2", "sparkctl_repetition": 0}
    assert result["date"] == "20260711-080910" and result["backend"] == result["endpoint_type"] == "openai-chat"
    assert result["label"] == "lab" and result["model_id"] == "m" and result["num_prompts"] == 3
    # A closed loop of 2 streams is vLLM's --request-rate inf --max-concurrency 2.
    assert result["request_rate"] == "inf" and result["max_concurrency"] == 2
    assert (result["completed"], result["failed"]) == (2, 1)
    assert (result["total_input_tokens"], result["total_output_tokens"]) == (200, 20)
    assert result["duration"] == 2.0
    assert result["request_throughput"] == 1.0 and result["output_throughput"] == 10.0
    assert result["total_token_throughput"] == 110.0
    assert result["request_goodput"] == 1.0  # both answers within ttft <= 0.5 s, over 2 s
    expected_ms = {
        # mean, median, std (population: numpy's default, as vLLM calls it), p99 (linear interpolation)
        "ttft": (200.0, 200.0, 100.0, 298.0),
        "tpot": (150.0, 150.0, 50.0, 199.0),
        # gaps 50, 150, 200, 200: mean 150, median 175, std sqrt((100^2 + 0 + 50^2 + 50^2) / 4) = 61.237
        "itl": (150.0, 175.0, 61.2372, 200.0),
        "e2el": (1500.0, 1500.0, 500.0, 1990.0),
    }
    for metric, values in expected_ms.items():
        got = [result[f"{stat}_{metric}_ms"] for stat in ("mean", "median", "std", "p99")]
        assert got == pytest.approx(values, abs=1e-3), metric


def test_without_an_slo_goodput_is_null_and_without_answers_the_latencies_are_null():
    records = [rec(1, ok=False, t_send=0.0), rec(1, ok=False, t_send=0.1)]
    (result,) = export.vllm_results(document([closed_point()], records))
    assert result["request_goodput"] is None and result["completed"] == 0 and result["failed"] == 2
    assert all(result[name] is None for name in LATENCY)  # vLLM would write 0 for none: null says there were none


def test_each_repetition_is_one_vllm_run():
    records = [rec(1, ttft=0.1, e2e=1.0, tpot=0.1, repetition=0), rec(1, ttft=0.2, e2e=1.0, tpot=0.1, repetition=0),
               rec(1, ttft=0.3, e2e=1.0, tpot=0.1, t_send=2.0, repetition=1)]
    results = export.vllm_results(document([closed_point()], records))
    assert [(r["sparkctl_repetition"], r["num_prompts"], r["mean_ttft_ms"]) for r in results] == [
        (0, 2, pytest.approx(150.0)), (1, 1, pytest.approx(300.0))]


@pytest.mark.parametrize("load, point_extra, expected", [
    ("poisson:rate=4,burstiness=0.5,seed=0", {}, {"request_rate": 4.0, "burstiness": 0.5, "max_concurrency": 8}),
    ("constant:rate=inf", {}, {"request_rate": "inf", "max_concurrency": 8}),
    ("poisson:rate=2,burstiness=inf,seed=0", {}, {"request_rate": 2.0, "burstiness": "inf", "max_concurrency": 8}),
    ("ramp:start=1,end=8,shape=linear,seed=0", {"offered_rate": 3.5},
     {"request_rate": 3.5, "max_concurrency": 8, "ramp_up_strategy": "linear", "ramp_up_start_rps": 1.0,
      "ramp_up_end_rps": 8.0}),
])
def test_a_rate_point_s_traffic_fields_are_what_vllm_would_be_asked(load, point_extra, expected):
    point = {"point": 1, "prompt_tokens_target": 64, "streams": None, "load": load, "summary": {"ok_requests": 1}} | point_extra
    (result,) = export.vllm_results(document([point], [rec(1, ttft=0.1, e2e=1.0, tpot=0.1)], max_concurrency=8))
    traffic = {k: result[k] for k in ("request_rate", "burstiness", "max_concurrency", "ramp_up_strategy",
                                      "ramp_up_start_rps", "ramp_up_end_rps") if k in result}
    assert traffic == expected


def test_under_max_concurrency_a_rate_point_has_vllm_s_client_queue_figures():
    # Due at 0 and 0.1 s, sent at 0 and 0.5 s (a wait of 0 and 0.4 s for a slot); E2E 1 s each.
    records = [rec(1, ttft=0.1, e2e=1.0, tpot=0.1, t_scheduled=0.0), rec(1, ttft=0.1, e2e=1.0, tpot=0.1, t_send=0.5,
                                                                         t_scheduled=0.1)]
    point = {"point": 1, "prompt_tokens_target": 64, "streams": None, "load": "poisson:rate=4,burstiness=1,seed=0",
             "summary": {"ok_requests": 2}}
    (result,) = export.vllm_results(document([point], records, max_concurrency=1))
    assert [result[f"{stat}_client_queue_time_ms"] for stat in STATS] == pytest.approx([200.0, 200.0, 200.0, 396.0])
    assert [result[f"{stat}_e2el_including_client_queue_ms"] for stat in STATS] == pytest.approx(
        [1200.0, 1200.0, 200.0, 1396.0])
    assert list(result)[-8:] == QUEUE
    # At an infinite rate vLLM leaves E2E with the queue out; without --max-concurrency both.
    point["load"] = "constant:rate=inf"
    (result,) = export.vllm_results(document([point], records, max_concurrency=1))
    assert "mean_client_queue_time_ms" in result and "mean_e2el_including_client_queue_ms" not in result
    (result,) = export.vllm_results(document([point], records))
    assert not any(name in result for name in QUEUE)


def test_dataset_points_follow_the_run_s_points_and_unmeasured_points_are_left_out():
    unmeasured = {"point": 2, "prompt_tokens_target": 8192, "streams": 1, "load": "concurrency:1", "summary": None}
    doc = document([closed_point(), unmeasured], [rec(1, ttft=0.1, e2e=1.0, tpot=0.1)])
    doc["dataset"] = {"points": [{"point": 1, "prompt_tokens_target": None, "streams": 1, "load": "concurrency:1",
                                  "summary": {"ok_requests": 1}}],
                      "requests": [rec(1, ttft=0.2, e2e=1.0, tpot=0.1, dataset_line=4)]}
    results = export.vllm_results(doc)
    assert [(r["sparkctl_workload"], r["sparkctl_point"], r["sparkctl_prompt_tokens_target"]) for r in results] == [
        ("points", 1, 2048), ("dataset", 1, None)]
    assert results[1]["mean_ttft_ms"] == pytest.approx(200.0)


def test_run_export_vllm_writes_one_json_object_a_line(tmp_path, capsys):
    target = tmp_path / "vllm.json"
    code, doc, _, _ = run(tmp_path, Engine(), "--prompt-tokens", "64", "--concurrency", "1,2", "--export-vllm", str(target))
    assert code == 0, capsys.readouterr().err
    lines = target.read_text().splitlines()
    results = [json.loads(line) for line in lines]
    assert [r["max_concurrency"] for r in results] == [1, 2]
    for result, point in zip(results, doc["points"], strict=True):
        summary = point["summary"]
        assert result["completed"] == summary["ok_requests"] and result["duration"] == pytest.approx(summary["duration_s"])
        assert result["median_ttft_ms"] == pytest.approx(summary["ttft_s"]["median"] * 1000)
        assert result["p99_itl_ms"] == pytest.approx(summary["itl_s"]["p99"] * 1000)
        assert result["output_throughput"] == pytest.approx(summary["output_throughput"])
        assert result["model_id"] == "m" and result["backend"] == "openai"
    assert "vLLM-named results: 2 measurement(s)" in capsys.readouterr().err

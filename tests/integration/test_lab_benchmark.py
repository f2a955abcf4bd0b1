"""The benchmark stage on the two-node lab, through `sparkctl bench`: the stand-in engine
is told its TTFT and token rate (loopback control route on the head) and the client on
the control node must measure them back within a few percent at 1, 2 and 4 streams.
This tests the client and the stage's plumbing, not hardware."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from labrun import LAB_INVENTORY_DIR, REPO, standin

# Rates within a few percent of the stand-in's model: the machine to itself (conftest.py).
pytestmark = [pytest.mark.lab, pytest.mark.timing]

TIMING = {"ttft_s": 0.3, "ttft_per_token_s": 0.0002, "token_rate": 40.0, "max_total_token_rate": 100.0}
# The stand-in's defaults (tests/lab/engine/README.md), put back afterwards.
DEFAULT_TIMING = {"ttft_s": 0.1, "ttft_per_token_s": 0.00005, "token_rate": 50.0, "max_total_token_rate": 150.0}
MAX_TOKENS = 41
SETTINGS = {"benchmark_prompt_tokens": [256, 1024], "benchmark_concurrency": [1, 2, 4],
            "benchmark_max_tokens": MAX_TOKENS, "benchmark_requests_per_stream": 1, "benchmark_warmup": 1,
            "benchmark_progress_interval": 4}


@pytest.fixture(scope="module")
def served(site_converged):
    # site.yml once for the session (conftest.py); this module leaves the cluster as it found it.
    return site_converged


@pytest.fixture(scope="module")
def benchmark(served, report_dir):
    standin("timing", TIMING)
    env = dict(os.environ, SPARKCTL_REPORT_DIR=str(report_dir), ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
    try:
        proc = subprocess.run([sys.executable, "-m", "sparkctl", "bench", "-i", str(LAB_INVENTORY_DIR), "--json",
                               "-e", json.dumps(SETTINGS)], cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=900)
    finally:
        standin("timing", DEFAULT_TIMING)
    doc = json.loads(proc.stdout)
    assert proc.returncode == 0 and doc["exit_code"] == 0, (proc.stderr[-3000:], doc["stages"])
    return doc, report_dir / "benchmark"


def _points(report):
    return {(p["prompt_tokens_target"], p["streams"]): p["summary"] for p in report["points"] if p["summary"]}


def test_the_run_reports_every_point_and_the_plots(benchmark):
    doc, out = benchmark
    report = doc["reports"]["benchmark"]
    assert report["ok"] is True and not report["errors"]
    assert set(_points(report)) == {(n, s) for n in (256, 1024) for s in (1, 2, 4)}
    for name in ("benchmark.md", "decode_vs_context.png", "ttft_vs_context.png", "throughput_vs_streams.png"):
        assert (out / name).stat().st_size > 0, name
    assert (out / "decode_vs_context.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "the stand-in's configured timing model" in (out / "benchmark.md").read_text()


@pytest.mark.parametrize("streams", [1, 2, 4])
def test_decode_rate_is_measured_back_within_a_few_percent(benchmark, streams):
    expected = min(TIMING["token_rate"], TIMING["max_total_token_rate"] / streams)
    for prompt in (256, 1024):
        summary = _points(benchmark[0]["reports"]["benchmark"])[(prompt, streams)]
        assert summary["decode_tok_s"]["median"] == pytest.approx(expected, rel=0.05), (prompt, streams, summary)


def test_ttft_is_measured_back_within_a_few_percent(benchmark):
    for prompt in (256, 1024):
        summary = _points(benchmark[0]["reports"]["benchmark"])[(prompt, 1)]
        sent = summary["prompt_tokens"]["median"]
        assert abs(sent - prompt) / prompt < 0.05, summary["prompt_tokens"]
        expected = TIMING["ttft_s"] + sent * TIMING["ttft_per_token_s"]
        assert summary["ttft_s"]["median"] == pytest.approx(expected, rel=0.05, abs=0.02), summary["ttft_s"]


@pytest.mark.parametrize("streams", [1, 2, 4])
def test_aggregate_follows_the_cap(benchmark, streams):
    # One request per stream, all started together: N*T tokens over the (T-1) token gaps of
    # the slowest stream at min(rate, cap/N) (stats.aggregate_throughput's definition).
    rate = min(TIMING["token_rate"], TIMING["max_total_token_rate"] / streams)
    expected = streams * MAX_TOKENS / ((MAX_TOKENS - 1) / rate)
    summary = _points(benchmark[0]["reports"]["benchmark"])[(1024, streams)]
    assert summary["aggregate"]["tok_s"] == pytest.approx(expected, rel=0.05), summary["aggregate"]


def test_the_client_is_not_the_bottleneck(benchmark):
    overhead = benchmark[0]["reports"]["benchmark"]["overhead"]
    assert overhead["selftest"]["tokens_per_s"] > 20 * overhead["peak_aggregate_tok_s"], overhead
    assert overhead["peak_fraction_of_capacity"] < 0.1

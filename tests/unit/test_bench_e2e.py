"""sparkctl.bench end to end against the lab's stand-in engine, in-process on 127.0.0.1:
the stand-in is told its TTFT and token rate, the benchmark must measure them back (this
tests the client, not hardware). Expected per stream: TTFT = ttft_s + prompt_tokens *
ttft_per_token_s, decode = min(token_rate, max_total_token_rate / streams). Tolerance 15 %:
shared CI machines are noisy; on an idle machine the error is ~1 %."""

import json

import pytest
from test_sparklab_engine import BASE_ENV, KEY, Running, make_checkpoint, serve_argv

from sparkctl.bench import cli, prompts

TOLERANCE = 0.15
TIMING = {"ttft_s": 0.2, "ttft_per_token_s": 0.0005, "token_rate": 40.0, "max_total_token_rate": 100.0}
MAX_TOKENS = 24


@pytest.fixture(scope="module")
def standin(tmp_path_factory, loopback_only):
    model = make_checkpoint(tmp_path_factory.mktemp("bench-ckpt") / "lab-standin")
    argv = serve_argv(model, "--reasoning-parser", "sparklab")
    argv[argv.index("--max-num-seqs") + 1] = "8"  # 4 streams must not queue
    running = Running(argv, BASE_ENV)
    running.wait_ready()
    status, body = running.request("POST", "/_standin/timing", TIMING)
    assert status == 200, body
    yield running
    running.stop()
    assert running.code == 0


def bench(standin, tmp_path, *extra, key=KEY, monkeypatch):
    if key is None:
        monkeypatch.delenv("SPARKCTL_API_KEY", raising=False)
    else:
        monkeypatch.setenv("SPARKCTL_API_KEY", key)
    out = tmp_path / "out"
    argv = ["run", "--url", f"http://127.0.0.1:{standin.port}", "--model", "lab-standin", "--max-tokens", str(MAX_TOKENS),
            "--out", str(out), *extra]
    code = cli.main(argv)
    return code, json.loads((out / "benchmark.json").read_text()), out


def close(measured, expected, tolerance=TOLERANCE):
    return measured is not None and abs(measured - expected) <= tolerance * expected


@pytest.mark.timing
def test_measured_ttft_and_decode_match_the_standin_at_1_2_and_4_streams(standin, tmp_path, monkeypatch, capsys):
    reference = tmp_path / "reference.json"
    reference.write_text(json.dumps({"source": "lab timing model", "decode_tok_s": [{"prompt_tokens": 0, "value": 40}],
                                     "throughput_tok_s": [{"streams": 1, "value": 40}, {"streams": 4, "value": 100}]}))
    progress = tmp_path / "progress.jsonl"
    sent_texts = []
    real_body = prompts.request_body

    def recording_body(endpoint, model, text, max_tokens, **kwargs):
        sent_texts.append(text)
        return real_body(endpoint, model, text, max_tokens, **kwargs)

    monkeypatch.setattr(prompts, "request_body", recording_body)
    code, doc, out = bench(standin, tmp_path, "--prompt-tokens", "64,256", "--concurrency", "1,2,4",
                           "--requests-per-stream", "1", "--warmup", "1", "--reference", str(reference),
                           "--progress-file", str(progress), "--label", "stand-in", "--selftest-seconds", "0.5",
                           monkeypatch=monkeypatch)
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert doc["ok"] and doc["errors"] == []
    assert len(doc["warmup"]) == 1 and all(r["phase"] == "measure" for r in doc["requests"])

    problems = []
    for point in doc["points"]:
        streams, summary = point["streams"], point["summary"]
        assert point["status"] == "ok", point
        sent = summary["prompt_tokens"]["median"]
        assert abs(sent - point["prompt_tokens_target"]) <= 0.02 * point["prompt_tokens_target"]
        expected_ttft = TIMING["ttft_s"] + sent * TIMING["ttft_per_token_s"]
        expected_decode = min(TIMING["token_rate"], TIMING["max_total_token_rate"] / streams)
        # rps 1: every stream decodes over the same window, so aggregate = streams * T / ((T - 1) / decode)
        expected_aggregate = streams * MAX_TOKENS / ((MAX_TOKENS - 1) / expected_decode)
        # vLLM's figures: a token every 1 / decode s, so TPOT and ITL are that step; a request
        # lasts its TTFT and 23 steps, and the streams, started together, end together.
        expected_e2e = expected_ttft + (MAX_TOKENS - 1) / expected_decode
        for name, measured, expected in (("TTFT", summary["ttft_s"]["median"], expected_ttft),
                                         ("decode", summary["decode_tok_s"]["median"], expected_decode),
                                         ("aggregate", summary["aggregate"]["tok_s"], expected_aggregate),
                                         ("TPOT", summary["tpot_s"]["median"], 1 / expected_decode),
                                         ("ITL", summary["itl_s"]["median"], 1 / expected_decode),
                                         ("E2E", summary["e2e_s"]["median"], expected_e2e),
                                         ("output throughput", summary["output_throughput"],
                                          streams * MAX_TOKENS / expected_e2e)):
            if not close(measured, expected):
                problems.append(f"{point['prompt_tokens_target']} x {streams}: {name} {measured} vs {expected:.3f}")
        assert summary["requests"] == streams and len(summary["per_stream"]) == streams
        assert point["burst_requests"] == 0 and summary["itl_s"]["n"] == streams * (MAX_TOKENS - 1)
        assert all(r["token_count_source"] == "usage" and r["completion_tokens"] == MAX_TOKENS
                   for r in doc["requests"] if r["point"] == point["point"])
    assert not problems, problems

    # Every request (warm-up, sizing probes, measured) began with its own nonce.
    assert len(sent_texts) == 1 + 4 + len(doc["requests"])  # warm-up, 2 fit + 2 sizing probes, measured
    assert all(text.startswith("[bench ") for text in sent_texts)
    assert len({text.split("]", 1)[0] for text in sent_texts}) == len(sent_texts)
    lines = [json.loads(line) for line in progress.read_text().splitlines()]
    assert [(e["point"], e["points"], e["prompt_tokens"], e["streams"]) for e in lines] == [
        (1, 6, 64, 1), (2, 6, 64, 2), (3, 6, 64, 4), (4, 6, 256, 1), (5, 6, 256, 2), (6, 6, 256, 4)]
    assert all(e["elapsed_s"] > 0 and e["message"] for e in lines)
    # Reference: decode at a "short prompt" compared with the 64-token point; aggregate at 4 streams vs 100.
    ratios = {(c["metric"], c["streams"]): c["ratio"] for c in doc["comparisons"]}
    assert close(ratios[("decode_tok_s", 1)], 1.0) and close(ratios[("throughput_tok_s", 4)], 1.0)
    overhead = doc["overhead"]
    assert overhead["selftest"]["tokens_per_s"] > 1000 and overhead["tokens_received"] == (1 + 7 * 2) * MAX_TOKENS
    assert 0 < overhead["peak_fraction_of_capacity"] < 0.1 and overhead["cpu_us_per_token"] > 0
    # The Markdown summary went to stdout, progress to stderr, the key nowhere.
    assert printed.out.startswith("# Benchmark: stand-in - OK") and "| 64 | 4 |" in printed.out
    assert "[6/6] prompt 256 x 4 stream(s)" in printed.err
    everything = printed.out + printed.err + "".join(p.read_text() for p in out.glob("*.md")) + json.dumps(doc)
    assert KEY not in everything
    assert sorted(p.name for p in out.iterdir()) == ["benchmark.json", "benchmark.md", "decode_vs_context.png",
                                                     "throughput_vs_streams.png", "ttft_vs_context.png"]


def test_chat_reasoning_tokens_count_and_an_oversized_length_is_skipped(standin, tmp_path, monkeypatch, capsys):
    # The stand-in serves max_model_len 4096: the 8192 prompt is refused with a 400 and skipped.
    code, doc, _ = bench(standin, tmp_path, "--endpoint", "chat", "--prompt-tokens", "64,8192", "--concurrency", "1",
                         "--requests-per-stream", "2", "--warmup", "0", "--selftest-seconds", "0.2", monkeypatch=monkeypatch)
    assert code == 0, capsys.readouterr().err
    measured, skipped = doc["points"]
    # Bounds a loaded machine cannot break (it only makes the stand-in slower): the stand-in
    # waits its TTFT and paces its tokens. How close the measurement comes is the timing
    # test's (marked `timing`, run on a quiet machine).
    decode, ttft = measured["summary"]["decode_tok_s"]["median"], measured["summary"]["ttft_s"]["median"]
    assert measured["status"] == "ok" and 0 < decode <= TIMING["token_rate"] * (1 + TOLERANCE), decode
    assert ttft >= (TIMING["ttft_s"] + 64 * TIMING["ttft_per_token_s"]) * (1 - TOLERANCE), ttft
    # The reasoning parser makes the first tokens reasoning deltas: they are tokens too.
    for record in doc["requests"]:
        assert record["content_chunks"] == record["completion_tokens"] == MAX_TOKENS
        assert len(record["itl_s"]) == MAX_TOKENS - 1 and record["e2e_s"] >= record["ttft_s"] > 0
        assert record["tpot_s"] == pytest.approx((record["e2e_s"] - record["ttft_s"]) / (MAX_TOKENS - 1), abs=1e-5)
    assert skipped["status"] == "skipped" and "maximum context length is 4096" in skipped["reason"]


def test_without_the_key_the_run_fails_and_says_why(standin, tmp_path, monkeypatch, capsys):
    code, doc, out = bench(standin, tmp_path, "--prompt-tokens", "64", "--concurrency", "1", "--selftest-seconds", "0.1",
                           key=None, monkeypatch=monkeypatch)
    assert code == 1 and not doc["ok"]
    assert "warm-up request failed: HTTP 401" in doc["errors"][0]
    assert (out / "benchmark.md").read_text().startswith("# Benchmark: lab-standin - FAILED")

"""sparkctl.bench's stream reader and runner against scripted servers (httpx.MockTransport,
no socket): token timing, usage vs chunk counting, reasoning deltas, errors, length
rejections, skips, failures and the exit status; the per-request latencies (E2E, TPOT, ITL) and
bursts: token chunks that arrive together, as from a buffer, whatever HTTP chunks carry them."""

import asyncio
import itertools
import json

import httpx
import pytest

from sparkctl.bench import cli
from sparkctl.bench.client import BURST_MIN_CHUNKS, StreamOutcome, is_length_rejection, probe_prompt_tokens, stream_request
from sparkctl.bench.prompts import Prompt
from sparkctl.bench.runner import Runner
from sparkctl.bench.settings import Settings

URL = "http://bench.invalid/v1/chat/completions"


def sse(*events):
    return [f"data: {json.dumps(e) if not isinstance(e, str) else e}\n\n".encode() for e in events]


def chat_chunk(content=None, reasoning=None, role=False, finish=None):
    delta = {"role": "assistant", "content": ""} if role else {}
    if content is not None:
        delta["content"] = content
    if reasoning is not None:
        delta["reasoning_content"] = reasoning
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def streaming_transport(reads, status=200, delay=0.0):
    """Each item of `reads` is what one network read returns."""

    async def body():
        for data in reads:
            if delay:
                await asyncio.sleep(delay)
            yield data

    def handler(request):
        return httpx.Response(status, headers={"Content-Type": "text/event-stream"}, content=body())

    return httpx.MockTransport(handler)


def run_stream(transport, chat=True, timeout_s=5.0, clock=None):
    async def go():
        async with httpx.AsyncClient(transport=transport) as client:
            return await stream_request(client, URL, b"{}", {}, chat=chat, timeout_s=timeout_s,
                                        **({"clock": clock} if clock else {}))

    return asyncio.run(go())


def ticking_clock(step=0.1):
    """t_send = 0, then every read +step (one call per read), then t_end."""
    counter = itertools.count()
    return lambda: next(counter) * step


def test_reasoning_and_content_deltas_are_tokens_and_usage_wins():
    reads = sse(chat_chunk(role=True), chat_chunk(reasoning="Let"), chat_chunk(reasoning=" me"), chat_chunk(content=" Tokyo"),
                chat_chunk(content="."), chat_chunk(content="", finish="stop"),
                {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 6, "total_tokens": 15}}, "[DONE]")
    outcome = run_stream(streaming_transport(reads), clock=ticking_clock())
    assert outcome.ok and outcome.error is None
    assert outcome.t_send == 0 and outcome.t_first == pytest.approx(0.2)  # the role chunk carries no token
    # The finish chunk's empty content is a token too (an end-of-sequence token decodes to nothing), as
    # vLLM's own client counts every chunk with a choice.
    assert outcome.t_last == pytest.approx(0.6)
    assert outcome.content_chunks == 4 and outcome.choice_chunks == 1
    assert outcome.completion_tokens == (6, "usage")  # e.g. a chunk that carried two tokens
    assert outcome.usage_prompt_tokens == 9 and outcome.finish_reason == "stop"


def test_without_usage_the_content_chunks_are_counted():
    reads = sse({"choices": [{"index": 0, "text": " a"}]}, {"choices": [{"index": 0, "text": " b", "finish_reason": "length"}]},
                "[DONE]")
    outcome = run_stream(streaming_transport(reads), chat=False)
    assert outcome.ok and outcome.completion_tokens == (2, "chunks")


def test_events_split_across_reads_and_packed_into_one_read():
    events = b"".join(sse({"choices": [{"text": " a"}]}, {"choices": [{"text": " b"}]}, {"choices": [{"text": " c"}]}))
    reads = [events[:7], events[7:40], events[40:], b": keep-alive comment\n\n", *sse("[DONE]")]
    outcome = run_stream(streaming_transport(reads), chat=False, clock=ticking_clock())
    assert outcome.ok and outcome.content_chunks == 3
    # " a" completes in read 2 (t=0.2); " b" and " c" complete together in read 3 (t=0.3).
    assert outcome.t_first == pytest.approx(0.2) and outcome.t_last == pytest.approx(0.3)


def test_a_token_held_back_by_the_detokenizer_times_the_stream_where_it_arrived():
    """vLLM's real stream from a byte-level vocabulary: a token ending mid-character comes as a chunk of
    empty text, its characters with the next. It is the first token's arrival (TTFT) and a gap of its own,
    as vLLM's client counts them; before, TTFT waited a decode step for the first visible text."""
    reads = sse({"choices": [{"index": 0, "text": ""}]}, {"choices": [{"index": 0, "text": "\u00e9t"}]},
                {"choices": [{"index": 0, "text": ""}]}, {"choices": [{"index": 0, "text": "\u00e9", "finish_reason": "length"}]},
                {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9}}, "[DONE]")
    outcome = run_stream(streaming_transport(reads), chat=False, clock=ticking_clock())
    assert outcome.ok and not outcome.empty_text
    assert outcome.t_first == pytest.approx(0.1) and outcome.t_last == pytest.approx(0.4)
    assert outcome.arrivals == pytest.approx([0.1, 0.2, 0.3, 0.4])
    assert (outcome.content_chunks, outcome.choice_chunks) == (2, 2) and outcome.completion_tokens == (4, "usage")


def test_a_stream_without_done_or_tokens_is_an_error():
    truncated = run_stream(streaming_transport(sse({"choices": [{"text": " a"}]})), chat=False)
    assert not truncated.ok and "[DONE]" in truncated.error
    empty = run_stream(streaming_transport(sse({"choices": [{"text": ""}]}, "[DONE]")), chat=False)
    assert not empty.ok and "no token" in empty.error


def test_an_error_event_in_the_stream_is_an_error():
    outcome = run_stream(streaming_transport(sse({"choices": [{"text": " a"}]}, {"error": {"message": "engine died"}})),
                         chat=False)
    assert not outcome.ok and "engine died" in outcome.error


def test_http_errors_and_length_rejections():
    vllm = b'{"error": {"message": "This model\'s maximum context length is 4096 tokens. However, you requested 8193 tokens"}}'
    rejected = run_stream(streaming_transport([vllm], status=400))
    assert rejected.status == 400 and rejected.length_rejected and "maximum context length" in rejected.error
    other = run_stream(streaming_transport([b'{"error": {"message": "temperature must be >= 0"}}'], status=400))
    assert other.status == 400 and not other.length_rejected
    server = run_stream(streaming_transport([b"Internal Server Error"], status=500))
    assert not server.ok and not server.length_rejected and server.error.startswith("HTTP 500")


@pytest.mark.parametrize("message", [
    "Input length (40000 tokens) exceeds the maximum allowed length (32768 tokens).",  # SGLang
    "The decoder prompt (length 9000) is longer than the maximum model length of 8192.",  # vLLM
])
def test_length_rejection_messages_of_both_engines(message):
    assert is_length_rejection(400, f"HTTP 400: {message}")
    assert not is_length_rejection(500, message)


def test_a_request_that_never_finishes_times_out():
    outcome = run_stream(streaming_transport(sse({"choices": [{"text": " a"}]}) * 50, delay=0.05), chat=False, timeout_s=0.2)
    assert not outcome.ok and "--timeout" in outcome.error and outcome.t_first is not None


def test_probe_reads_usage_prompt_tokens():
    def handler(request):
        return httpx.Response(200, json={"choices": [{"text": "x"}], "usage": {"prompt_tokens": 321, "completion_tokens": 1}})

    async def go(transport):
        async with httpx.AsyncClient(transport=transport) as client:
            return await probe_prompt_tokens(client, URL, b"{}", {}, timeout_s=5)

    assert asyncio.run(go(httpx.MockTransport(handler))).prompt_tokens == 321
    no_usage = asyncio.run(go(httpx.MockTransport(lambda r: httpx.Response(200, json={"choices": []}))))
    assert no_usage.prompt_tokens is None and "usage.prompt_tokens" in no_usage.error


# ------------------------------------------------------------------------------ whole runs, scripted server


class FakeServer:
    """A completions server in a MockTransport: a token is a word, answers are max_tokens words.
    `fail_stream_words` (a range) makes streaming requests of those prompt words answer 500,
    `fail_stream_calls` the n-th streaming requests (1-based);
    `usage` False drops the usage chunk; `status` answers every request with it; `pause` None sends
    the whole stream as one piece of body, a number of seconds sends every event as its own piece
    that long after the previous one (0: all at once, as in one socket read)."""

    def __init__(self, fail_stream_words=(), fail_stream_calls=(), usage=True, status=None, limit=100000, pause=None):
        self.fail_stream_words, self.usage, self.status, self.limit = fail_stream_words, usage, status, limit
        self.pause = pause
        self.fail_stream_calls = set(fail_stream_calls)
        self.stream_calls = 0
        self.seen = []  # (prompt words, max_tokens, stream, authorization)

    def __call__(self, request):
        if request.method == "GET" and request.url.path == "/v1/models":
            return httpx.Response(200, json={"object": "list", "data": [{"id": "m", "object": "model"}]})
        body = json.loads(request.content)
        words = len(body["prompt"].split())
        self.seen.append((words, body["max_tokens"], body["stream"], request.headers.get("authorization")))
        if self.status:
            return httpx.Response(self.status, json={"error": {"message": "Unauthorized"}})
        if words + body["max_tokens"] > self.limit:
            return httpx.Response(400, json={"error": {"message": f"This model's maximum context length is {self.limit} tokens."}})
        usage = {"prompt_tokens": words, "completion_tokens": body["max_tokens"], "total_tokens": words + body["max_tokens"]}
        if not body["stream"]:
            return httpx.Response(200, json={"choices": [{"text": " x"}], "usage": usage})
        self.stream_calls += 1
        if words in self.fail_stream_words or self.stream_calls in self.fail_stream_calls:
            return httpx.Response(500, text="Internal Server Error")
        events = [{"choices": [{"index": 0, "text": " w"}]} for _ in range(body["max_tokens"])]
        if self.usage and body.get("stream_options", {}).get("include_usage"):
            events.append({"choices": [], "usage": usage})
        pieces = sse(*events, "[DONE]")
        if self.pause is None:
            return httpx.Response(200, headers={"Content-Type": "text/event-stream"}, content=b"".join(pieces))

        async def paced():
            for piece in pieces:
                if self.pause:
                    await asyncio.sleep(self.pause)
                yield piece

        return httpx.Response(200, headers={"Content-Type": "text/event-stream"}, content=paced())


def run_cli(tmp_path, server, *extra):
    out = tmp_path / "out"
    argv = ["run", "--url", "http://bench.invalid:8000", "--model", "m", "--prompt-tokens", "64,256", "--concurrency", "1,2",
            "--max-tokens", "8", "--requests-per-stream", "2", "--selftest-seconds", "0.05", "--out", str(out), *extra]
    code = cli.main(argv, transport=httpx.MockTransport(server))
    return code, json.loads((out / "benchmark.json").read_text()), (out / "benchmark.md").read_text()


def test_a_length_above_max_model_len_is_skipped_without_a_request(tmp_path, capsys):
    server = FakeServer()
    code, doc, markdown = run_cli(tmp_path, server, "--prompt-tokens", "64,4090", "--max-model-len", "4096")
    assert code == 0 and doc["ok"]
    skipped = [p for p in doc["points"] if p["prompt_tokens_target"] == 4090]
    assert [p["status"] for p in skipped] == ["skipped", "skipped"]
    assert "exceeds --max-model-len 4096" in skipped[0]["reason"]
    assert max(words for words, *_ in server.seen) < 1000
    assert "skipped: 4090 prompt + 8 max_tokens exceeds --max-model-len 4096" in markdown


def test_a_length_the_server_refuses_is_skipped_not_failed(tmp_path, capsys):
    code, doc, _ = run_cli(tmp_path, FakeServer(limit=300), "--prompt-tokens", "64,1000")
    assert code == 0
    statuses = {(p["prompt_tokens_target"], p["streams"]): p["status"] for p in doc["points"]}
    assert statuses == {(64, 1): "ok", (64, 2): "ok", (1000, 1): "skipped", (1000, 2): "skipped"}
    assert "maximum context length is 300" in doc["points"][-1]["reason"]


def test_failed_measured_requests_exit_1_and_the_report_marks_them(tmp_path, capsys):
    # Streaming calls: 1 warm-up, 2-3 (64 x 1), 4-7 (64 x 2), 8-9 (256 x 1), 10-13 (256 x 2).
    code, doc, markdown = run_cli(tmp_path, FakeServer(fail_stream_calls={9}))
    assert code == 1 and not doc["ok"]
    statuses = [p["status"] for p in doc["points"]]
    assert statuses == ["ok", "ok", "failed", "ok"]
    failed = doc["points"][2]
    assert failed["summary"]["failed_requests"] == 1 and failed["summary"]["ok_requests"] == 1
    assert "1 of 2 requests failed; first: HTTP 500" in failed["reason"]
    bad = [r for r in doc["requests"] if not r["ok"]]
    assert len(bad) == 1 and bad[0]["status"] == 500 and bad[0]["point"] == 3 and bad[0]["index"] == 1
    assert "FAILED" in markdown and "Failed requests (1)" in markdown and "| 256 | 1 |" in markdown
    assert doc["errors"] == ["1 measured request(s) failed"]


def test_a_point_where_nothing_gets_through_ends_the_measuring(tmp_path, capsys):
    # The 256-token prompt (2 nonce words + 254 filler) fails; the warm-up (258 words) does not.
    server = FakeServer(fail_stream_words=range(200, 257))
    code, doc, _ = run_cli(tmp_path, server)
    assert code == 1
    assert [p["status"] for p in doc["points"]] == ["ok", "ok", "failed", "failed"]
    assert doc["points"][2]["summary"]["failed_requests"] == 2
    assert doc["points"][3]["summary"] is None and doc["points"][3]["reason"] == "not measured: every request of point 3 failed"
    assert not any(r["point"] == 4 for r in doc["requests"])
    assert doc["errors"] == ["2 measured request(s) failed",
                             "1 point(s) could not be measured; first: not measured: every request of point 3 failed"]


def test_usage_fallback_is_recorded(tmp_path, capsys):
    code, doc, _ = run_cli(tmp_path, FakeServer(usage=False), "--concurrency", "1")
    assert code == 0
    assert {r["token_count_source"] for r in doc["requests"]} == {"chunks"}
    assert all(r["completion_tokens"] == 8 for r in doc["requests"])


def test_the_key_comes_from_the_environment_only(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("BENCH_TEST_KEY", "s3cr3t-key-value")
    server = FakeServer()
    code, doc, markdown = run_cli(tmp_path, server, "--concurrency", "1", "--api-key-env", "BENCH_TEST_KEY")
    assert code == 0 and {auth for *_, auth in server.seen} == {"Bearer s3cr3t-key-value"}
    printed = capsys.readouterr()
    everything = json.dumps(doc) + markdown + printed.out + printed.err
    assert "s3cr3t-key-value" not in everything
    assert doc["settings"]["api_key_env"] == "BENCH_TEST_KEY" and doc["settings"]["api_key_set"] is True


def test_a_failing_warmup_stops_the_run_but_still_reports(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("SPARKCTL_API_KEY", raising=False)
    server = FakeServer(status=401)
    code, doc, markdown = run_cli(tmp_path, server)
    assert code == 1 and len(server.seen) == 1  # one warm-up, nothing after it
    assert "warm-up request failed: HTTP 401: Unauthorized" in doc["errors"][0]
    assert all(p["status"] == "failed" and p["summary"] is None for p in doc["points"])
    assert "SPARKCTL_API_KEY is not set" in capsys.readouterr().err
    assert "FAILED" in markdown


# ------------------------------------------------------------------------------ bursts


def completion_events(tokens):
    events = [{"choices": [{"index": 0, "text": " w", "finish_reason": "length" if i == tokens - 1 else None}]}
              for i in range(tokens)]
    return [*events, {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": tokens}}, "[DONE]"]


def test_64_events_sent_as_separate_http_chunks_without_a_pause_are_a_burst():
    # As a real vLLM was seen to send a whole answer: 64 SSE events, each its own HTTP chunk,
    # all in one socket read. httpx yields every decoded HTTP chunk on its own, so counting
    # chunks per yield saw one per "read"; their arrival times, microseconds apart, give it away.
    outcome = run_stream(streaming_transport(sse(*completion_events(64))), chat=False)
    assert outcome.ok and outcome.completion_tokens == (64, "usage")
    assert outcome.buffered, f"{outcome.token_reads} reads, up to {outcome.max_chunks_per_read} token chunks in one"
    assert outcome.burst and len(outcome.arrivals) == 64
    assert outcome.burst_chunks >= 32  # one group, unless the machine preempted the reader mid-burst


def test_events_a_decode_step_apart_are_not_a_burst():
    outcome = run_stream(streaming_transport(sse(*completion_events(16)), delay=0.005), chat=False)
    assert outcome.ok and len(outcome.arrivals) == 16
    assert not outcome.burst and not outcome.buffered and outcome.burst_chunks == 1


def test_a_burst_is_marked_and_left_out_of_decode_tpot_and_itl(tmp_path, capsys):
    code, doc, markdown = run_cli(tmp_path, FakeServer(pause=0), "--prompt-tokens", "64", "--concurrency", "1",
                                  "--max-tokens", "64")
    assert code == 0 and doc["ok"]
    for record in doc["requests"]:
        # Far more chunks in one group than the rule needs, however the machine's load split the reads.
        assert record["burst"] and record["buffered"] and record["burst_chunks"] >= 4 * BURST_MIN_CHUNKS
        assert len(record["itl_s"]) == 63 and record["decode_tok_s"] > 1000  # the buffer's rate, kept for the record
    point = doc["points"][0]
    assert point["burst_requests"] == point["buffered_requests"] == point["summary"]["burst_requests"] == 2
    summary = point["summary"]
    assert summary["decode_tok_s"]["n"] == summary["tpot_s"]["n"] == summary["itl_s"]["n"] == 0
    assert summary["ttft_s"]["n"] == summary["e2e_s"]["n"] == 2 and summary["output_throughput"] > 0
    assert any("arrived in bursts" in w and "left out" in w for w in doc["warnings"])
    assert "| 64 | 1 | " in markdown and "**2 of 2**" in markdown and "arrived in BURSTS" in capsys.readouterr().err


def test_a_burst_fails_with_strict(tmp_path, capsys):
    code, doc, _ = run_cli(tmp_path, FakeServer(pause=0), "--prompt-tokens", "64", "--concurrency", "1", "--strict")
    assert code == 1 and doc["points"][0]["status"] == "failed" and "arrived in bursts" in doc["points"][0]["reason"]
    assert all(not r["ok"] and r["burst"] and r["tpot_s"] is None and r["itl_s"] == [] for r in doc["requests"])


def test_a_paced_stream_is_measured_with_its_latencies(tmp_path, capsys):
    code, doc, markdown = run_cli(tmp_path, FakeServer(pause=0.004), "--prompt-tokens", "64", "--concurrency", "1,2",
                                  "--strict")
    assert code == 0, capsys.readouterr().err
    for record in doc["requests"]:
        assert record["ok"] and not record["burst"] and record["burst_chunks"] == 1
        assert len(record["itl_s"]) == 7 and min(record["itl_s"]) >= 0.004  # 8 tokens, each after a 4 ms pause
        # TPOT runs to the end of the stream (the usage chunk and [DONE] came 4 ms apart after the last token).
        assert record["e2e_s"] == pytest.approx(record["t_end"] - record["t_send"], abs=2e-6)
        assert record["tpot_s"] == pytest.approx((record["e2e_s"] - record["ttft_s"]) / 7, abs=2e-6)
    for point in doc["points"]:
        summary = point["summary"]
        assert point["burst_requests"] == 0 and summary["itl_s"]["n"] == 7 * summary["ok_requests"]
        assert summary["tpot_s"]["n"] == summary["decode_tok_s"]["n"] == summary["ok_requests"]
        assert summary["request_throughput"] == pytest.approx(summary["ok_requests"] / summary["duration_s"])
    assert "## Latency and throughput per point" in markdown and "## Answers that stopped early or arrived" not in markdown


def recorded(outcome, strict=False):
    runner = Runner(Settings(url="http://bench.invalid:8000", model="m", max_tokens=5, strict=strict), None)
    runner.t0 = 10.0
    return runner._record(outcome, Prompt(words=60), phase="measure", point=1, stream=0, index=0, target=64)


def test_a_record_carries_e2e_tpot_and_itl():
    # Sent at 10.0; tokens at 10.5, 10.75, 11.0, 11.25, 11.5 (one chunk each); the body ended at 11.6.
    outcome = StreamOutcome(t_send=10.0, t_first=10.5, t_last=11.5, t_end=11.6, status=200, content_chunks=5,
                            usage_completion_tokens=5, finish_reason="length", done=True, done_marker=True,
                            arrivals=[10.5, 10.75, 11.0, 11.25, 11.5])
    record = recorded(outcome)
    assert record["ok"] and record["ttft_s"] == 0.5
    assert record["e2e_s"] == 1.6  # 11.6 - 10.0, rounded to 6 digits
    assert record["tpot_s"] == 0.275  # (1.6 - 0.5) / (5 - 1)
    assert record["itl_s"] == [0.25, 0.25, 0.25, 0.25]
    assert record["decode_tok_s"] == 4.0  # (5 - 1) / (11.5 - 10.5), as before
    assert not record["burst"] and record["burst_chunks"] == 1 and not record["buffered"]
    assert list(record)[-1] == "itl_s"
    # Without an end of the body the last token ends the request: (11.5 - 10.0 - 0.5) / 4.
    outcome.t_end = None
    assert recorded(outcome)["e2e_s"] == 1.5 and recorded(outcome)["tpot_s"] == 0.25


def test_a_burst_record_and_strict():
    # The first token alone at 10.5, then four within 30 us at 11.0: a group of four.
    arrivals = [10.5, 11.0, 11.00001, 11.00002, 11.00003]
    outcome = StreamOutcome(t_send=10.0, t_first=10.5, t_last=11.00003, t_end=11.1, status=200, content_chunks=5,
                            usage_completion_tokens=5, finish_reason="length", done=True, done_marker=True,
                            arrivals=arrivals)
    record = recorded(outcome)
    assert record["ok"] and record["burst"] and record["buffered"] and record["burst_chunks"] == 4
    assert record["itl_s"] == [0.5, 1e-05, 1e-05, 1e-05]  # kept on the record; the statistics leave them out
    strict = recorded(outcome, strict=True)
    assert not strict["ok"] and "4 token chunks within 200 us" in strict["error"] and "--strict" in strict["error"]
    assert strict["e2e_s"] is None and strict["tpot_s"] is None and strict["itl_s"] == [] and strict["decode_tok_s"] is None

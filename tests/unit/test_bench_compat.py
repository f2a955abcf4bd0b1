"""sparkctl.bench against OpenAI-compatible servers it was not written for: a small fake server
on 127.0.0.1 (standard library http.server in a thread) that can leave out `data: [DONE]`,
refuse `ignore_eos` with a 422, list several models, omit usage.prompt_tokens, offer or lack a
tokenizer endpoint, send tokens that decode to empty text, stall, buffer the whole stream into
one write (as one HTTP chunk, or as one HTTP chunk per event), or cut a stream off. Each
behaviour is one a real server was seen to have."""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from json_stub import QuietJSONHandler

from sparkctl.bench import cli
from sparkctl.bench.client import stream_request

REPO = Path(__file__).resolve().parents[2]


class Behaviour:
    """What the fake server does; every field can be changed by a test before the run."""

    def __init__(self, **changes):
        self.models = ["tiny"]
        self.models_route = True  # GET /v1/models answers
        self.done = True  # send data: [DONE]
        self.refuse_fields = ()  # body fields answered with a FastAPI-style 422
        self.prompt_usage = True  # usage.prompt_tokens in non-streamed answers
        self.stream_usage = True  # a usage chunk when stream_options.include_usage
        self.tokenize_path = None  # "/tokenize" (vLLM) or "/v1/tokenize" (SGLang)
        self.empty_text = False  # tokens decode to ""
        self.eos_after = None  # without ignore_eos, stop after this many tokens
        self.stall_after = None  # send this many tokens, then nothing until the server stops
        self.stall_on_request = 1  # ...on the n-th streamed request (1-based) and after
        self.buffered = False  # the whole stream in one write, as one HTTP chunk
        self.burst = False  # the whole stream in one write, one HTTP chunk per event (as a real vLLM was seen to)
        self.cut_after = None  # close the stream after this many tokens, no finish_reason
        self.token_delay = 0.003
        for key, value in changes.items():
            setattr(self, key, value)


class Handler(QuietJSONHandler):
    # TCP_NODELAY, as engines' servers set it (uvicorn through asyncio): with Nagle's algorithm a
    # token written while the previous one waits for its ACK is held back, and tokens a few
    # milliseconds apart reach the client together, a burst the test did not ask for.
    disable_nagle_algorithm = True

    def do_GET(self):  # noqa: N802
        if self.path == "/v1/models" and self.server.b.models_route:
            return self.send_json(200, {"object": "list", "data": [{"id": m, "object": "model"} for m in self.server.b.models]})
        return self.send_json(404, {"detail": "Not Found"})

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        b = self.server.b
        self.server.seen.append((self.path, body))
        text = body.get("prompt") or " ".join(m["content"] for m in body.get("messages", []))
        prompt_tokens = len(text.split())
        if self.path == b.tokenize_path:
            return self.send_json(200, {"count": prompt_tokens, "max_model_len": 4096, "tokens": list(range(prompt_tokens))})
        if self.path not in ("/v1/completions", "/v1/chat/completions"):
            return self.send_json(404, {"detail": "Not Found"})
        refused = [f for f in b.refuse_fields if f in body]
        if refused:
            return self.send_json(422, {"detail": [{"type": "extra_forbidden", "loc": ["body", f], "msg": "Extra inputs are not "
                                                "permitted", "input": body[f]} for f in refused]})
        if body.get("model") not in b.models:
            return self.send_json(404, {"error": {"message": f"model {body.get('model')!r} not found"}})
        n = body["max_tokens"]
        if b.eos_after is not None and not body.get("ignore_eos"):
            n = min(n, b.eos_after)
        finish = "length" if n == body["max_tokens"] else "stop"
        usage = {"completion_tokens": n, "total_tokens": prompt_tokens + n}
        if not body.get("stream"):
            if b.prompt_usage:
                usage["prompt_tokens"] = prompt_tokens
            return self.send_json(200, {"choices": [{"index": 0, "text": " w", "finish_reason": finish}], "usage": usage})
        self.server.stream_count += 1
        number = self.server.stream_count
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        chat = "messages" in body
        events = []
        for i in range(n):
            piece = "" if b.empty_text else " w"
            last = finish if i == n - 1 else None
            if chat:
                events.append({"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": last}]})
            else:
                events.append({"choices": [{"index": 0, "text": piece, "finish_reason": last}]})
        if b.stream_usage and (body.get("stream_options") or {}).get("include_usage"):
            events.append({"choices": [], "usage": dict(usage, prompt_tokens=prompt_tokens)})
        frames = [f"data: {json.dumps(e)}\n\n".encode() for e in events] + ([b"data: [DONE]\n\n"] if b.done else [])
        try:
            if b.buffered:
                self._chunk(b"".join(frames))
            elif b.burst:
                self.wfile.write(b"".join(b"%x\r\n%s\r\n" % (len(frame), frame) for frame in frames))
            else:
                for i, frame in enumerate(frames):
                    if b.cut_after is not None and i == b.cut_after:
                        break  # the body ends cleanly, but before any finish_reason
                    if b.stall_after is not None and i == b.stall_after and number >= b.stall_on_request:
                        self.server.stopping.wait(60)
                        return
                    self._chunk(frame)
                    time.sleep(b.token_delay)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            pass

    def _chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()


class FakeServer:
    def __init__(self, behaviour):
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.b = behaviour
        self.httpd.seen = []
        self.httpd.stream_count = 0
        self.httpd.stopping = threading.Event()
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]

    @property
    def seen(self):
        return self.httpd.seen

    def stop(self):
        self.httpd.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server(loopback_only):
    started = []

    def start(**changes):
        fake = FakeServer(Behaviour(**changes))
        started.append(fake)
        return fake

    yield start
    for fake in started:
        fake.stop()


def run(tmp_path, fake, *extra, model="tiny"):
    out = tmp_path / "out"
    argv = ["run", "--url", fake.url, "--prompt-tokens", "64", "--concurrency", "1,2", "--max-tokens", "8",
            "--requests-per-stream", "2", "--selftest-seconds", "0.05", "--out", str(out), *extra]
    if model:
        argv += ["--model", model]
    code = cli.main(argv)
    path = out / "benchmark.json"
    doc = json.loads(path.read_text()) if path.exists() else None
    markdown = (out / "benchmark.md").read_text() if path.exists() else ""
    return code, doc, markdown


def one_stream(fake, body=None, **kwargs):
    body = body or {"model": "tiny", "prompt": "a b c", "max_tokens": 8, "stream": True,
                    "stream_options": {"include_usage": True}}

    async def go():
        async with httpx.AsyncClient(trust_env=False) as client:
            return await stream_request(client, fake.url + "/v1/completions", json.dumps(body).encode(),
                                        {"Content-Type": "application/json"}, chat=False, **kwargs)

    return asyncio.run(go())


# ---- 1. a clean end without data: [DONE] ----------------------------------------------------------


def test_a_stream_that_ends_after_its_finish_reason_without_done_is_accepted(server, tmp_path, capsys):
    fake = server(done=False)
    outcome = one_stream(fake, timeout_s=10)
    assert outcome.ok and outcome.error is None and outcome.finish_reason == "length"
    assert outcome.completion_tokens == (8, "usage") and not outcome.done_marker
    code, doc, markdown = run(tmp_path, fake)
    assert code == 0, capsys.readouterr().err
    assert doc["ok"] and all(r["ok"] for r in doc["requests"])
    assert sum("data: [DONE]" in w for w in doc["warnings"]) == 1


def test_a_chat_stream_without_done_is_accepted_too(server, tmp_path, capsys):
    code, doc, _ = run(tmp_path, server(done=False), "--endpoint", "chat", "--concurrency", "1")
    assert code == 0, capsys.readouterr().err
    assert all(r["ok"] and not r["done_marker"] and r["completion_tokens"] == 8 for r in doc["requests"])


def test_a_stream_cut_off_without_finish_reason_is_still_an_error(server):
    outcome = one_stream(server(done=False, cut_after=3), timeout_s=10)
    assert not outcome.ok and "ended before" in outcome.error and "finish_reason" in outcome.error


# ---- 2. a refused ignore_eos ----------------------------------------------------------------------


def test_a_refused_ignore_eos_is_dropped_once_and_early_stops_are_counted(server, tmp_path, capsys):
    fake = server(refuse_fields=("ignore_eos",), eos_after=5)
    code, doc, markdown = run(tmp_path, fake)
    err = capsys.readouterr().err
    assert code == 0, err
    refusals = [body for path, body in fake.seen if "ignore_eos" in body]
    assert len(refusals) == 1  # detected once, never sent again
    notes = [w for w in doc["warnings"] if "ignore_eos" in w]
    assert len(notes) == 1 and "HTTP 422" in notes[0] and "server's own stopping" in notes[0]
    assert sum("refuses ignore_eos" in line for line in err.splitlines()) == 1
    assert doc["settings"]["ignore_eos"] is False
    for point in doc["points"]:
        assert point["status"] == "ok"
        assert point["early_stops"] == point["summary"]["requests"]  # every answer stopped at 5 of 8
    assert all(r["stopped_early"] and r["completion_tokens"] == 5 for r in doc["requests"])
    assert "stopped early" in markdown


def test_a_refused_stream_options_is_dropped_and_tokens_are_counted_from_the_chunks(server, tmp_path, capsys):
    fake = server(refuse_fields=("stream_options",))
    code, doc, _ = run(tmp_path, fake, "--concurrency", "1")
    assert code == 0, capsys.readouterr().err
    assert len([body for _, body in fake.seen if "stream_options" in body]) == 1
    assert any("refuses stream_options" in w for w in doc["warnings"])
    assert {r["token_count_source"] for r in doc["requests"]} == {"chunks"}
    assert all(r["completion_tokens"] == 8 and not r["stopped_early"] for r in doc["requests"])


# ---- 3. the model from /v1/models ------------------------------------------------------------------


def test_without_model_the_only_listed_model_is_taken(server, tmp_path, capsys):
    fake = server(models=["HuggingFaceTB/tiny-random"])
    code, doc, _ = run(tmp_path, fake, "--concurrency", "1", model=None)
    assert code == 0, capsys.readouterr().err
    assert doc["settings"]["model"] == "HuggingFaceTB/tiny-random" and doc["settings"]["model_source"] == "GET /v1/models"
    assert {body.get("model") for _, body in fake.seen} == {"HuggingFaceTB/tiny-random"}


def test_without_model_several_listed_models_are_named(server, tmp_path, capsys):
    fake = server(models=["alpha", "beta"])
    code, doc, _ = run(tmp_path, fake, model=None)
    err = capsys.readouterr().err
    assert code == 2 and doc is None
    assert "--model" in err and "'alpha'" in err and "'beta'" in err
    assert fake.seen == []  # nothing generated


def test_a_model_the_server_does_not_list_is_refused_naming_the_listed_ones(server, tmp_path, capsys):
    fake = server(models=["tiny-served"])
    code, doc, _ = run(tmp_path, fake, model="tiny")
    err = capsys.readouterr().err
    assert code == 2 and "--model: 'tiny' is not served" in err and "'tiny-served'" in err
    assert fake.seen == []


def test_without_a_models_route_model_is_used_unchecked_or_asked_for(server, tmp_path, capsys):
    fake = server(models_route=False)
    code, doc, _ = run(tmp_path, fake, "--concurrency", "1")
    assert code == 0, capsys.readouterr().err
    assert any("could not be checked" in w for w in doc["warnings"])
    code, _, _ = run(tmp_path, fake, model=None)
    err = capsys.readouterr().err
    assert code == 2 and "--model: not given, and GET" in err and "404" in err and "--model NAME" in err


# ---- 4. prompt sizing without usage.prompt_tokens ----------------------------------------------------


@pytest.mark.parametrize("path", ["/tokenize", "/v1/tokenize"])
def test_without_prompt_usage_the_tokenizer_endpoint_sizes_the_prompts(server, tmp_path, capsys, path):
    fake = server(prompt_usage=False, tokenize_path=path)
    code, doc, markdown = run(tmp_path, fake, "--concurrency", "1")
    assert code == 0, capsys.readouterr().err
    calibration = doc["calibration"]
    assert calibration["method"] == f"tokenizer POST {path}" and calibration["estimated"] is False
    assert abs(doc["points"][0]["summary"]["prompt_tokens"]["median"] - 64) <= 2
    assert "estimated" not in markdown.lower()


def test_without_prompt_usage_or_tokenizer_the_lengths_are_estimated_and_marked(server, tmp_path, capsys):
    fake = server(prompt_usage=False, stream_usage=False)
    code, doc, markdown = run(tmp_path, fake, "--concurrency", "1")
    assert code == 0, capsys.readouterr().err
    calibration = doc["calibration"]
    assert calibration["method"] == "estimate" and calibration["estimated"] is True
    assert calibration["chars_per_token"] == 4.0 and "default" in calibration["chars_per_token_source"]
    assert {r["prompt_tokens_source"] for r in doc["requests"]} == {"estimate"}
    assert "ESTIMATED" in markdown and any("estimated" in w for w in doc["warnings"])


def test_the_estimate_is_calibrated_from_the_streamed_usage_when_there_is_one(server, tmp_path, capsys):
    fake = server(prompt_usage=False)
    code, doc, _ = run(tmp_path, fake, "--concurrency", "1")
    assert code == 0, capsys.readouterr().err
    calibration = doc["calibration"]
    assert calibration["method"] == "estimate" and "warm-up" in calibration["chars_per_token_source"]
    assert calibration["chars_per_token"] > 4.5  # the fake server counts a word as a token
    # The streamed usage then gives the prompt tokens actually sent.
    assert {r["prompt_tokens_source"] for r in doc["requests"]} == {"usage"}
    assert abs(doc["points"][0]["summary"]["prompt_tokens"]["median"] - 64) <= 64 * 0.15


# ---- 5. tokens that decode to empty text -----------------------------------------------------------


def test_empty_text_with_usage_is_counted_by_usage_with_a_note(server, tmp_path, capsys):
    fake = server(empty_text=True)
    outcome = one_stream(fake, timeout_s=10)
    assert outcome.ok and outcome.completion_tokens == (8, "usage") and outcome.empty_text
    assert outcome.t_first is not None and outcome.t_last > outcome.t_first
    code, doc, markdown = run(tmp_path, fake, "--concurrency", "1")
    assert code == 0, capsys.readouterr().err
    assert all(r["completion_tokens"] == 8 and r["empty_text"] for r in doc["requests"])
    assert any("decoded to empty text" in w for w in doc["warnings"])


def test_empty_text_without_usage_is_still_no_token(server):
    outcome = one_stream(server(empty_text=True, stream_usage=False), timeout_s=10)
    assert not outcome.ok and "no token" in outcome.error


# ---- 6. stalls and interrupts ----------------------------------------------------------------------


def test_a_stall_between_tokens_fails_the_point_naming_the_stall(server, tmp_path, capsys):
    fake = server(stall_after=3, stall_on_request=2)  # the warm-up passes, the first measured request stalls
    started = time.monotonic()
    code, doc, _ = run(tmp_path, fake, "--stall-timeout", "0.4", "--concurrency", "1", "--requests-per-stream", "1")
    assert code == 1 and time.monotonic() - started < 20
    point = doc["points"][0]
    assert point["status"] == "failed" and "no token for 0.4 s after token 3" in point["reason"]
    assert "--stall-timeout" in point["reason"]


def test_stall_timeout_is_in_the_help(capsys):
    with pytest.raises(SystemExit):
        cli._parser().parse_args(["run", "--help"])
    assert "--stall-timeout" in capsys.readouterr().out


def _signals_as_at_a_terminal():
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_an_interrupt_writes_the_partial_report(server, tmp_path, signum, code):
    # Point 1 (2 requests after the warm-up) completes, point 2 stalls until the signal.
    fake = server(stall_after=2, stall_on_request=4)
    out, progress = tmp_path / "out", tmp_path / "progress.jsonl"
    argv = [sys.executable, "-m", "sparkctl.bench", "run", "--url", fake.url, "--model", "tiny", "--prompt-tokens", "64",
            "--concurrency", "1,2", "--max-tokens", "8", "--requests-per-stream", "2", "--selftest-seconds", "0.05",
            "--out", str(out), "--progress-file", str(progress)]
    # The signal as a user's Ctrl-C or `kill` delivers it: a shell's background job (a suite started
    # with `&`) hands its children SIGINT ignored, and Python then leaves it ignored.
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=str(REPO)), preexec_fn=_signals_as_at_a_terminal)
    try:
        deadline = time.monotonic() + 30
        while not (progress.exists() and progress.read_text().strip()):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() else "slow"
            time.sleep(0.05)
        time.sleep(0.2)
        proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == code, stderr
    doc = json.loads((out / "benchmark.json").read_text())
    assert not doc["ok"] and doc["interrupted"]
    assert doc["points"][0]["status"] == "ok" and doc["points"][0]["summary"]["ok_requests"] == 2
    assert doc["points"][1]["status"] == "failed" and "interrupted" in doc["points"][1]["reason"]
    assert any("interrupted" in e for e in doc["errors"])
    assert stdout.startswith("# Benchmark: tiny - FAILED") and "partial report" in stderr


# ---- 7. a buffered stream, bursts ------------------------------------------------------------------


def test_a_buffered_stream_is_detected_and_warned(server, tmp_path, capsys):
    fake = server(buffered=True)
    outcome = one_stream(fake, timeout_s=10)
    assert outcome.ok and outcome.burst and outcome.buffered and outcome.max_chunks_per_read == 8
    assert outcome.burst_chunks == 8
    code, doc, markdown = run(tmp_path, fake, "--concurrency", "1")
    assert code == 0, capsys.readouterr().err
    assert all(r["burst"] and r["buffered"] for r in doc["requests"])
    assert doc["points"][0]["burst_requests"] == doc["points"][0]["buffered_requests"] == 2
    assert any("buffered" in w and "TTFT" in w for w in doc["warnings"]) and "arrived in bursts" in markdown


@pytest.mark.parametrize("shape", ["buffered", "burst"])
def test_a_buffered_stream_fails_the_point_with_strict(server, tmp_path, capsys, shape):
    code, doc, _ = run(tmp_path, server(**{shape: True}), "--concurrency", "1", "--strict")
    assert code == 1
    assert doc["points"][0]["status"] == "failed" and "arrived in bursts" in doc["points"][0]["reason"]


def test_one_http_chunk_per_event_all_in_one_write_is_a_burst(server, tmp_path, capsys):
    # httpx hands the client each HTTP chunk on its own, so the chunks of this one write no
    # longer look like one read: their arrival times, microseconds apart, still give them away.
    fake = server(burst=True)
    outcome = one_stream(fake, body={"model": "tiny", "prompt": "a b c", "max_tokens": 64, "stream": True,
                                     "stream_options": {"include_usage": True}}, timeout_s=10)
    assert outcome.ok and outcome.completion_tokens == (64, "usage") and outcome.max_chunks_per_read == 1
    assert outcome.burst and outcome.burst_chunks >= 16
    code, doc, markdown = run(tmp_path, fake, "--concurrency", "1", "--max-tokens", "64")
    assert code == 0, capsys.readouterr().err
    summary = doc["points"][0]["summary"]
    assert summary["burst_requests"] == 2 and summary["decode_tok_s"]["n"] == summary["itl_s"]["n"] == 0
    assert "**2 of 2**" in markdown


def test_a_token_by_token_stream_is_not_called_buffered(server):
    outcome = one_stream(server(token_delay=0.005), timeout_s=10)
    assert outcome.ok and not outcome.burst and not outcome.buffered

"""The client's own ceiling: how many streamed tokens per second it can parse.

A loopback-only SSE server in a thread of this process answers every request with a
prebuilt response of TOKENS_PER_RESPONSE vLLM-shaped chunks (one HTTP chunk per token, as
vLLM and SGLang send them), written as fast as the socket takes it. The client reads it
through the same code path as a real run (client.stream_request), so tokens/s here is the
most it could ever measure. The server only copies a prebuilt buffer (sendall releases the
GIL), so nearly all the CPU of the test is the client's."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import httpx

from .client import stream_request

TOKENS_PER_RESPONSE = 5000
DEFAULT_SECONDS = 1.5


def _sse_response(endpoint: str, tokens: int) -> bytes:
    chunks = []
    for i in range(tokens):
        last = i == tokens - 1
        if endpoint == "chat":
            choice = {"index": 0, "delta": {"content": " word"}, "logprobs": None, "finish_reason": "length" if last else None}
            event = {"id": "chatcmpl-selftest", "object": "chat.completion.chunk", "created": 0, "model": "selftest",
                     "choices": [choice]}
        else:
            choice = {"index": 0, "text": " word", "logprobs": None, "finish_reason": "length" if last else None,
                      "stop_reason": None}
            event = {"id": "cmpl-selftest", "object": "text_completion", "created": 0, "model": "selftest", "choices": [choice]}
        chunks.append(f"data: {json.dumps(event)}\n\n".encode())
    usage = {"id": "cmpl-selftest", "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": tokens,
                                                            "total_tokens": tokens + 1}}
    chunks.append(f"data: {json.dumps(usage)}\n\n".encode())
    chunks.append(b"data: [DONE]\n\n")
    body = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"
    head = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\n"
            b"Transfer-Encoding: chunked\r\nCache-Control: no-cache\r\n\r\n")
    return head + body


class LoopbackSseServer:
    """Listens on 127.0.0.1 only (an ephemeral port); each request gets the prebuilt stream."""

    def __init__(self, endpoint: str = "completions", tokens: int = TOKENS_PER_RESPONSE):
        self.response = _sse_response(endpoint, tokens)
        self.tokens = tokens
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._connections: list[socket.socket] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}/v1"

    def __enter__(self):
        thread = threading.Thread(target=self._accept, name="selftest-accept", daemon=True)
        thread.start()
        self._threads.append(thread)
        return self

    def __exit__(self, *exc):
        self._stop.set()
        for conn in list(self._connections):
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for thread in self._threads:
            thread.join(2)
        self._listener.close()

    def _accept(self):
        # A short accept timeout: closing a listener does not wake a blocked accept() everywhere.
        self._listener.settimeout(0.05)
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(None)
            self._connections.append(conn)
            thread = threading.Thread(target=self._serve, args=(conn,), name="selftest-conn", daemon=True)
            thread.start()
            self._threads.append(thread)

    def _serve(self, conn: socket.socket):
        pending = b""
        with conn:
            try:
                while not self._stop.is_set():
                    while b"\r\n\r\n" not in pending:
                        data = conn.recv(65536)
                        if not data:
                            return
                        pending += data
                    head, pending = pending.split(b"\r\n\r\n", 1)
                    length = 0
                    for line in head.split(b"\r\n")[1:]:
                        name, _, value = line.partition(b":")
                        if name.strip().lower() == b"content-length":
                            length = int(value.strip())
                    while len(pending) < length:
                        data = conn.recv(65536)
                        if not data:
                            return
                        pending += data
                    pending = pending[length:]
                    conn.sendall(self.response)
            except OSError:
                return


async def measure_capacity(endpoint: str = "completions", seconds: float = DEFAULT_SECONDS) -> dict:
    """Stream from the loopback server for about `seconds` -> {tokens_per_s, tokens, seconds, ...}."""
    chat = endpoint == "chat"
    path = "/chat/completions" if chat else "/completions"
    body = json.dumps({"model": "selftest", "max_tokens": TOKENS_PER_RESPONSE, "stream": True}).encode()
    headers = {"Content-Type": "application/json"}
    with LoopbackSseServer(endpoint) as server:
        async with httpx.AsyncClient(trust_env=False, timeout=30) as client:
            tokens = requests = 0
            errors = []
            started = time.perf_counter()
            cpu_started = time.process_time()
            while True:
                outcome = await stream_request(client, server.url + path, body, headers, chat=chat, timeout_s=30)
                requests += 1
                if not outcome.ok:
                    errors.append(outcome.error)
                    break
                tokens += outcome.completion_tokens[0] or 0
                if time.perf_counter() - started >= seconds:
                    break
            elapsed = time.perf_counter() - started
            cpu = time.process_time() - cpu_started
    return {
        "tokens_per_s": tokens / elapsed if elapsed > 0 and tokens else None,
        "tokens": tokens,
        "requests": requests,
        "seconds": elapsed,
        "cpu_s": cpu,
        "endpoint": endpoint,
        "error": errors[0] if errors else None,
        "method": f"loopback SSE server in this process, {TOKENS_PER_RESPONSE} one-token chunks per response, "
                  "parsed by the benchmark's own stream reader",
    }


def run_selftest(endpoint: str = "completions", seconds: float = DEFAULT_SECONDS) -> dict:
    return asyncio.run(measure_capacity(endpoint, seconds))

"""One streaming request and one sizing probe against an OpenAI-compatible server (httpx).

Timestamps are time.perf_counter() taken when a network read returns, before any parsing,
so the parser's own cost never shifts a token's arrival time. A token is counted from the
chunk's content: `text` (completions) or `delta.content`, `delta.reasoning_content`,
`delta.reasoning`, `delta.tool_calls` (chat; reasoning tokens are generated tokens too)."""

from __future__ import annotations

import asyncio
import json
import re
import time
from dataclasses import dataclass

import httpx

# vLLM: "This model's maximum context length is ...", "... is longer than the maximum model
# length of ..."; SGLang: "Input length (...) exceeds the maximum allowed length",
# "... is longer than the model's context length".
_LENGTH_REJECTION = re.compile(r"context length|maximum model length|max_model_len|model length|"
                               r"exceeds the maximum|too long|longer than", re.I)


@dataclass
class StreamOutcome:
    """What one streaming request produced (times are perf_counter seconds)."""

    t_send: float
    t_first: float | None = None
    t_last: float | None = None
    t_end: float | None = None
    status: int | None = None
    content_chunks: int = 0
    usage_completion_tokens: int | None = None
    usage_prompt_tokens: int | None = None
    finish_reason: str | None = None
    done: bool = False
    error: str | None = None
    length_rejected: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None and self.done and self.t_first is not None

    @property
    def completion_tokens(self) -> tuple[int | None, str | None]:
        """(tokens, source): the server's usage when it sent one, else the content chunks
        (an undercount when a chunk carries several tokens, e.g. speculative decoding)."""
        if self.usage_completion_tokens is not None:
            return self.usage_completion_tokens, "usage"
        if self.content_chunks:
            return self.content_chunks, "chunks"
        return None, None


def error_message(status: int, raw: bytes) -> str:
    """A short message from an error body: OpenAI's {"error": {"message"}}, FastAPI's
    {"detail"}, else the text."""
    text = raw[:4000].decode(errors="replace")
    try:
        body = json.loads(text)
    except ValueError:
        return f"HTTP {status}: {text.strip()[:300]}"
    message = body
    if isinstance(body, dict):
        message = body.get("error", body.get("detail", body.get("message", body)))
        if isinstance(message, dict):
            message = message.get("message", message)
    return f"HTTP {status}: {str(message)[:300]}"


def is_length_rejection(status: int | None, message: str | None) -> bool:
    return status == 400 and bool(message) and bool(_LENGTH_REJECTION.search(message))


def _chunk_has_token(event: dict, chat: bool) -> bool:
    for choice in event.get("choices") or ():
        if chat:
            delta = choice.get("delta") or {}
            if delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning") or delta.get("tool_calls"):
                return True
        elif choice.get("text"):
            return True
    return False


def _finish_reason(event: dict) -> str | None:
    for choice in event.get("choices") or ():
        if choice.get("finish_reason"):
            return choice["finish_reason"]
    return None


async def stream_request(client: httpx.AsyncClient, url: str, payload: bytes, headers: dict, *, chat: bool,
                         timeout_s: float, clock=time.perf_counter) -> StreamOutcome:
    """POST a streaming request (payload: the JSON body, already encoded so encoding a long
    prompt is not timed as TTFT) and read it to [DONE] within timeout_s."""
    outcome = StreamOutcome(t_send=clock())
    try:
        async with asyncio.timeout(timeout_s):
            async with client.stream("POST", url, content=payload, headers=headers) as response:
                outcome.status = response.status_code
                if response.status_code != 200:
                    outcome.error = error_message(response.status_code, await response.aread())
                    outcome.length_rejected = is_length_rejection(response.status_code, outcome.error)
                    return outcome
                pending = b""
                async for data in response.aiter_bytes():
                    now = clock()
                    pending += data
                    if b"\n" not in data:
                        continue
                    lines = pending.split(b"\n")
                    pending = lines.pop()
                    for line in lines:
                        _read_line(line, now, outcome, chat)
                    if outcome.error:
                        return outcome
                if pending.strip():
                    _read_line(pending, clock(), outcome, chat)
                if not outcome.done and outcome.error is None:
                    outcome.error = "the stream ended before data: [DONE]"
                elif outcome.t_first is None and outcome.error is None:
                    outcome.error = "the stream carried no token"
    except TimeoutError:
        outcome.error = f"no complete answer within {timeout_s:g} s (--timeout)"
    except httpx.HTTPError as exc:
        outcome.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    finally:
        outcome.t_end = clock()
    return outcome


def _read_line(line: bytes, now: float, outcome: StreamOutcome, chat: bool) -> None:
    line = line.strip()
    if not line.startswith(b"data:"):
        return  # blank separators, comments (": ping"), event:/id: fields
    data = line[5:].strip()
    if data == b"[DONE]":
        outcome.done = True
        return
    try:
        event = json.loads(data)
    except ValueError:
        outcome.error = f"unparsable stream chunk: {data[:200].decode(errors='replace')}"
        return
    if not isinstance(event, dict):
        return
    if event.get("error"):
        message = event["error"].get("message") if isinstance(event["error"], dict) else event["error"]
        outcome.error = f"error in stream: {str(message)[:300]}"
        return
    if _chunk_has_token(event, chat):
        if outcome.t_first is None:
            outcome.t_first = now
        outcome.t_last = now
        outcome.content_chunks += 1
    reason = _finish_reason(event)
    if reason:
        outcome.finish_reason = reason
    usage = event.get("usage")
    if isinstance(usage, dict):
        if usage.get("completion_tokens") is not None:
            outcome.usage_completion_tokens = int(usage["completion_tokens"])
        if usage.get("prompt_tokens") is not None:
            outcome.usage_prompt_tokens = int(usage["prompt_tokens"])


@dataclass
class ProbeOutcome:
    prompt_tokens: int | None = None
    status: int | None = None
    error: str | None = None
    length_rejected: bool = False


async def probe_prompt_tokens(client: httpx.AsyncClient, url: str, payload: bytes, headers: dict, *,
                              timeout_s: float) -> ProbeOutcome:
    """A non-streaming request (max_tokens=1 in the payload) -> usage.prompt_tokens."""
    outcome = ProbeOutcome()
    try:
        async with asyncio.timeout(timeout_s):
            response = await client.post(url, content=payload, headers=headers)
    except TimeoutError:
        outcome.error = f"no answer within {timeout_s:g} s (--timeout)"
        return outcome
    except httpx.HTTPError as exc:
        outcome.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return outcome
    outcome.status = response.status_code
    if response.status_code != 200:
        outcome.error = error_message(response.status_code, response.content)
        outcome.length_rejected = is_length_rejection(response.status_code, outcome.error)
        return outcome
    try:
        usage = response.json().get("usage") or {}
        outcome.prompt_tokens = int(usage["prompt_tokens"])
    except (ValueError, KeyError, TypeError, AttributeError):
        outcome.error = "the answer has no usage.prompt_tokens, so prompts cannot be sized to a token count"
    return outcome

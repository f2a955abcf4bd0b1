"""One streaming request and one sizing probe against an OpenAI-compatible server (httpx).

Timestamps are time.perf_counter() taken when httpx hands over a piece of the body, before
any parsing, so the parser's own cost never shifts a token's arrival time. httpx hands over one
decoded HTTP chunk at a time (aiter_bytes and aiter_raw alike), never a whole socket read, so
chunks that came in one read are told apart by their arrival times instead (see BURST_GAP_S).
A token is counted from the chunk's content: `text` (completions) or `delta.content`,
`delta.reasoning_content`, `delta.reasoning`, `delta.tool_calls` (chat; reasoning tokens are
generated tokens too)."""

from __future__ import annotations

import asyncio
import json
import re
import time
from dataclasses import dataclass, field

import httpx

# vLLM: "This model's maximum context length is ...", "... is longer than the maximum model
# length of ..."; SGLang: "Input length (...) exceeds the maximum allowed length",
# "... is longer than the model's context length".
_LENGTH_REJECTION = re.compile(r"context length|maximum model length|max_model_len|model length|"
                               r"exceeds the maximum|too long|longer than", re.I)


# A "burst": token chunks that arrived together although the engine made them one decode step
# apart, because something between the engine and this client (a buffering proxy, a server
# flushing late) held them back. Their arrival times then describe the buffer, not the engine:
# a whole answer in one burst reads as tens of thousands of tokens per second.
#
# Two token chunks arrived together when their arrival times are less than BURST_GAP_S apart.
# A decode step, even of a tiny model on a GPU, takes more than a millisecond (the engine's
# own scheduling alone costs hundreds of microseconds), and one step gives a stream at most one
# chunk; the chunks of one socket read are handed over and parsed tens of microseconds apart.
# 200 us sits five times below the fastest step and ten times above the parse.
BURST_GAP_S = 0.0002
# A request is a burst when one group holds at least BURST_MIN_CHUNKS token chunks, or when more
# than half of its token chunks arrived grouped (in groups of two or more). A busy client can
# find two chunks of one stream waiting now and then; four take a stall of three decode steps.
BURST_MIN_CHUNKS = 4


def arrival_groups(arrivals: list[float], gap_s: float = BURST_GAP_S) -> list[int]:
    """The sizes of the runs of arrival times whose successive gaps are below gap_s, in order:
    [1, 1, 3] for two chunks alone, then three that arrived together."""
    if not arrivals:
        return []
    sizes = [1]
    previous = arrivals[0]
    for arrival in arrivals[1:]:
        if arrival - previous < gap_s:
            sizes[-1] += 1
        else:
            sizes.append(1)
        previous = arrival
    return sizes


def is_burst(groups: list[int]) -> bool:
    """The rule above: a group of BURST_MIN_CHUNKS or more, or more than half the chunks grouped."""
    grouped = sum(size for size in groups if size > 1)
    return max(groups, default=0) >= BURST_MIN_CHUNKS or 2 * grouped > sum(groups)


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
    done: bool = False  # the stream ended cleanly: data: [DONE], or finish_reason/usage then EOF
    done_marker: bool = False  # data: [DONE] itself was sent
    error: str | None = None
    length_rejected: bool = False
    empty_text: bool = False  # every token chunk carried empty text (usage still counts the tokens)
    token_reads: int = 0  # pieces of the body (decoded HTTP chunks, as httpx yields them) that completed a token chunk
    max_chunks_per_read: int = 0
    # The arrival time of every token chunk, in order (the time the piece of the body that
    # completed it was handed over): inter-token gaps and bursts are read from them.
    arrivals: list[float] = field(default_factory=list)
    # Token chunks whose text was empty (see _read_line): counted apart from content_chunks.
    choice_chunks: int = 0

    @property
    def ok(self) -> bool:
        return self.error is None and self.done and self.t_first is not None

    @property
    def burst_chunks(self) -> int:
        """The most token chunks that arrived together (1 when none did, 0 without tokens)."""
        return max(arrival_groups(self.arrivals), default=0)

    @property
    def burst(self) -> bool:
        """Did the token chunks arrive in bursts (see BURST_GAP_S and BURST_MIN_CHUNKS)?"""
        return is_burst(arrival_groups(self.arrivals))

    @property
    def buffered(self) -> bool:
        """The older name of `burst`, kept for the readers of benchmark.json that know it."""
        return self.burst

    @property
    def completion_tokens(self) -> tuple[int | None, str | None]:
        """(tokens, source): the server's usage when it sent one, else the token chunks, empty
        ones included (an undercount when a chunk carries several tokens, e.g. speculative decoding)."""
        if self.usage_completion_tokens is not None:
            return self.usage_completion_tokens, "usage"
        if self.content_chunks + self.choice_chunks:
            return self.content_chunks + self.choice_chunks, "chunks"
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


def _chunk_has_empty_token(event: dict, chat: bool) -> bool:
    """A choice whose text (or delta content) is present but empty: a token that decoded to
    nothing printable. A chat delta with only the role announces the answer; it is no token."""
    for choice in event.get("choices") or ():
        if chat:
            delta = choice.get("delta") or {}
            if delta.get("content") == "" and "role" not in delta:
                return True
        elif choice.get("text") == "":
            return True
    return False


def _finish_reason(event: dict) -> str | None:
    for choice in event.get("choices") or ():
        if choice.get("finish_reason"):
            return choice["finish_reason"]
    return None


async def stream_request(client: httpx.AsyncClient, url: str, payload: bytes, headers: dict, *, chat: bool,
                         timeout_s: float, stall_timeout_s: float | None = None,
                         clock=time.perf_counter) -> StreamOutcome:
    """POST a streaming request (payload: the JSON body, already encoded so encoding a long
    prompt is not timed as TTFT) and read it to its end within timeout_s; once the first token
    has come, each next one must come within stall_timeout_s (None: no such limit).

    The end is data: [DONE], or (as the OpenAI client accepts) the body ending after a chunk
    with finish_reason or usage; a body that ends without either was cut off."""
    outcome = StreamOutcome(t_send=clock())
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(timeout_s):
            async with client.stream("POST", url, content=payload, headers=headers) as response:
                outcome.status = response.status_code
                if response.status_code != 200:
                    outcome.error = error_message(response.status_code, await response.aread())
                    outcome.length_rejected = is_length_rejection(response.status_code, outcome.error)
                    return outcome
                pending = b""
                reads = response.aiter_bytes().__aiter__()
                # One timer for the whole stream, pushed forward at every token: no task or timer
                # per read, so the reader's own cost stays as low as before.
                stall = asyncio.timeout(None)
                try:
                    async with stall:
                        while True:
                            try:
                                data = await anext(reads)
                            except StopAsyncIteration:
                                break
                            now = clock()
                            pending += data
                            if b"\n" not in data:
                                continue
                            lines = pending.split(b"\n")
                            pending = lines.pop()
                            before = outcome.content_chunks + outcome.choice_chunks
                            for line in lines:
                                _read_line(line, now, outcome, chat)
                            if outcome.error:
                                return outcome
                            completed = outcome.content_chunks + outcome.choice_chunks - before
                            if completed > 0:
                                outcome.token_reads += 1
                                outcome.max_chunks_per_read = max(outcome.max_chunks_per_read, completed)
                                if stall_timeout_s is not None:
                                    stall.reschedule(loop.time() + stall_timeout_s)
                except TimeoutError:
                    if stall.expired():
                        raise _Stalled() from None
                    raise
                if pending.strip():
                    _read_line(pending, clock(), outcome, chat)
                _finish(outcome)
    except _Stalled:
        outcome.error = (f"the stream stalled: no token for {stall_timeout_s:g} s after token "
                         f"{outcome.content_chunks + outcome.choice_chunks} (--stall-timeout)")
    except TimeoutError:
        outcome.error = f"no complete answer within {timeout_s:g} s (--timeout)"
    except httpx.HTTPError as exc:
        outcome.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    finally:
        outcome.t_end = clock()
    return outcome


class _Stalled(Exception):
    pass


def _finish(outcome: StreamOutcome) -> None:
    """Decide, at the end of the body, whether the stream ended cleanly and carried tokens."""
    if outcome.error is not None:
        return
    if not outcome.done_marker:
        if outcome.finish_reason is None and outcome.usage_completion_tokens is None:
            outcome.error = ("the stream ended before data: [DONE] and without a finish_reason or usage chunk "
                             f"(cut off after {outcome.content_chunks} token chunk(s))")
            return
    outcome.done = True
    if outcome.t_first is None or not (outcome.content_chunks or outcome.usage_completion_tokens):
        # Chunks of empty text alone, with no usage counting tokens: nothing shows one was made.
        outcome.error = "the stream carried no token"
    elif not outcome.content_chunks:
        # The tokens decoded to empty text (special tokens, or a model emitting nothing
        # printable): usage still counts them and their chunks still time them.
        outcome.empty_text = True


def _read_line(line: bytes, now: float, outcome: StreamOutcome, chat: bool) -> None:
    line = line.strip()
    if not line.startswith(b"data:"):
        return  # blank separators, comments (": ping"), event:/id: fields
    data = line[5:].strip()
    if data == b"[DONE]":
        outcome.done_marker = True
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
    # A chunk whose text is empty still carries a token: vLLM sends one chunk per engine step,
    # its text empty while the detokenizer holds back a token that ends mid-character (byte-level
    # vocabularies split a character across tokens), and the characters come with a later chunk.
    # Timed at its arrival as the engine made it, as vLLM's own client (`vllm bench serve`) times
    # every chunk with a choice; without it a first token held back read as a decode step of TTFT.
    has_text = _chunk_has_token(event, chat)
    if has_text or _chunk_has_empty_token(event, chat):
        if outcome.t_first is None:
            outcome.t_first = now
        outcome.t_last = now
        outcome.arrivals.append(now)
        if has_text:
            outcome.content_chunks += 1
        else:
            outcome.choice_chunks += 1
    reason = _finish_reason(event)
    if reason:
        outcome.finish_reason = reason
    usage = event.get("usage")
    if isinstance(usage, dict):
        if usage.get("completion_tokens") is not None:
            outcome.usage_completion_tokens = int(usage["completion_tokens"])
        if usage.get("prompt_tokens") is not None:
            outcome.usage_prompt_tokens = int(usage["prompt_tokens"])


# Fields beyond the OpenAI schema, or beyond what every server accepts, that a run can do
# without: ignore_eos (vLLM, SGLang) keeps answers at max_tokens, stream_options asks for the
# usage chunk. A server that validates strictly (FastAPI/pydantic) refuses them with 400/422.
OPTIONAL_FIELDS = ("ignore_eos", "stream_options")


def refused_field(status: int | None, message: str | None, sent: dict) -> str | None:
    """The optional field a 400/422 refusal names, when the request carried it; else None."""
    if status not in (400, 422) or not message:
        return None
    return next((name for name in OPTIONAL_FIELDS if name in sent and name in message), None)


@dataclass
class ProbeOutcome:
    prompt_tokens: int | None = None
    status: int | None = None
    error: str | None = None
    length_rejected: bool = False
    missing_usage: bool = False  # answered 200 without usage.prompt_tokens


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
        outcome.missing_usage = True
    return outcome


async def get_json(client: httpx.AsyncClient, method: str, url: str, headers: dict, *, timeout_s: float,
                   body: dict | None = None) -> tuple[int | None, object, str | None]:
    """(status, parsed JSON or None, error) of one small request; never raises for the network."""
    try:
        async with asyncio.timeout(timeout_s):
            if body is None:
                response = await client.request(method, url, headers=headers)
            else:
                response = await client.request(method, url, headers=headers, content=json.dumps(body).encode())
    except TimeoutError:
        return None, None, f"no answer within {timeout_s:g} s"
    except httpx.HTTPError as exc:
        return None, None, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if response.status_code != 200:
        return response.status_code, None, error_message(response.status_code, response.content)
    try:
        return 200, response.json(), None
    except ValueError:
        return 200, None, "answered 200 with a body that is not JSON"


async def list_models(client: httpx.AsyncClient, api_base: str, headers: dict, *,
                      timeout_s: float) -> tuple[list[str] | None, str | None]:
    """The model ids GET /v1/models lists, or (None, why not)."""
    status, body, error = await get_json(client, "GET", api_base + "/models", headers, timeout_s=timeout_s)
    if error:
        return None, ("answered " + error) if status else error
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        return None, "answered without a data list"
    return [str(m["id"]) for m in data if isinstance(m, dict) and m.get("id") is not None], None


async def count_tokens(client: httpx.AsyncClient, url: str, body: dict, headers: dict, *,
                       timeout_s: float) -> tuple[int | None, str | None]:
    """A tokenizer endpoint's count: vLLM's POST /tokenize and SGLang's POST /v1/tokenize both
    answer {"count": N, "tokens": [...], "max_model_len": M}."""
    status, answer, error = await get_json(client, "POST", url, headers, timeout_s=timeout_s, body=body)
    if error:
        return None, error
    count = answer.get("count") if isinstance(answer, dict) else None
    if isinstance(count, int) and not isinstance(count, bool) and count > 0:
        return count, None
    tokens = answer.get("tokens") if isinstance(answer, dict) else None
    if isinstance(tokens, list) and tokens:
        return len(tokens), None
    return None, "answered 200 without a token count"

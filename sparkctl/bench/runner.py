"""One benchmark run: warm-up, prompt sizing, the measurement points, client overhead.

Order: the model (GET /v1/models: checks --model, or picks the only one served) -> warm-up
requests (not counted) -> two short probes fit tokens-per-word -> for each
prompt length (ascending) size the filler to the target with max_tokens=1 probes, then
measure it at every load -> the loopback self-test. A point is skipped (not
failed) when prompt + max_tokens exceeds --max-model-len or the server refuses the length
with a 400; any other failed measured request makes the run fail (exit 1) but the report is
still written, the failures marked.

A load is a closed loop (concurrency:N, --concurrency: N streams, each sending its requests
back to back) or a rate (constant, poisson, ramp: --num-requests requests, each started as its
own task at its offset in the schedule, arrivals.py, whether or not the earlier ones have
ended; --max-concurrency caps how many are in flight). With --slo each point's summary carries
its goodput; with --capacity the rate points are walked upwards by goodput.find_capacity, which
stops the walk once the SLO is clearly missed. --repeat K measures each point K times in a row
(repeat.py: the summary pools them, `repeat` gives each repetition's headline figures and their
95 % intervals). After the points come the workloads (workloads.py: --dataset, --prefix-sharing,
--depth-sweep), through the same send/closed_loop/open_loop/measure_load as the points.

Servers other than vLLM and SGLang differ in small ways the run adapts to, each said once in
the report's warnings: an optional field refused with a 400/422 (ignore_eos, stream_options)
is dropped and the request sent again; no usage.prompt_tokens in non-streamed answers switches
prompt sizing to the server's tokenizer endpoint, else to a characters-per-token estimate
(the lengths are then marked estimated); streams ending without data: [DONE], tokens that
decode to empty text, and streams that arrive in bursts (buffered) are accepted but noted."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from . import SCHEMA_VERSION, arrivals, goodput, prompts, reference as reference_mod, repeat, stats, workloads
from .arrivals import LoadSpec
from .client import (BURST_GAP_S, OPTIONAL_FIELDS, ProbeOutcome, StreamOutcome, count_tokens, list_models,
                     probe_prompt_tokens, refused_field, stream_request)
from .selftest import measure_capacity
from .settings import Settings

WARMUP_WORDS = 256
FIT_WORDS = (32, 256)
CALIBRATION_TOLERANCE = 0.02
CALIBRATION_ATTEMPTS = 4
OVERHEAD_WARN_FRACTION = 0.10
CORE_WARN_FRACTION = 0.5
# Used only when the server reports no prompt token count anywhere and has no tokenizer endpoint.
DEFAULT_CHARS_PER_TOKEN = prompts.DEFAULT_CHARS_PER_TOKEN
# vLLM serves /tokenize beside /v1; SGLang serves /v1/tokenize (prompt strings only).
TOKENIZER_ROUTES = ("/tokenize", "/v1/tokenize")
MODELS_TIMEOUT_S = 30.0
# A rate point's request sent this much later than its schedule says (without --max-concurrency,
# whose queue delays requests on purpose) means the client fell behind: the load it offered was
# lower than the one asked for, and the report says so.
LATE_SEND_WARN_S = 0.1


class ModelChoiceError(Exception):
    """--model cannot be settled from what the server lists; str() is the message (flag, fix)."""


def _now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def _round(value, digits=6):
    return None if value is None else round(value, digits)


def load_specs(settings: Settings) -> list[LoadSpec]:
    """The loads of the run in order: the --load specs (or those --sweep-rates made), else one
    closed loop per --concurrency level, as before loads existed."""
    if settings.loads:
        return [arrivals.parse_load(text) for text in settings.loads]
    return [LoadSpec(kind="concurrency", streams=streams) for streams in settings.concurrency]


def offered_rate(spec: LoadSpec, offsets: list[float] | None = None) -> float | None:
    """Requests/s a rate load offers: its rate (None for an infinite one, all sent at once); for a
    ramp the mean over its schedule, (n - 1) / span. None for a closed loop, which offers no rate."""
    if spec.kind in ("constant", "poisson"):
        return None if spec.rate == math.inf else spec.rate
    if spec.kind == "ramp" and offsets and len(offsets) > 1 and offsets[-1] > 0:
        return (len(offsets) - 1) / offsets[-1]
    return None


class FillerPrompts:
    """The prompts of a measurement point: the sized filler for every request, `per_stream`
    requests per stream of a closed loop (an open loop's count is its schedule's). A length the
    server refuses ends a stream: its further prompts are as long."""

    stops_on_length = True

    def __init__(self, words: int, per_stream: int):
        self.prompt, self.per_stream = prompts.Prompt(words=words), per_stream

    def start(self) -> None:
        """A new repetition: nothing to reset."""

    def take(self, stream: int | None, index: int) -> prompts.Prompt | None:
        return self.prompt if stream is None or index < self.per_stream else None


class Runner:
    def __init__(self, settings: Settings, api_key: str | None, *, transport: httpx.AsyncBaseTransport | None = None,
                 progress: Callable[[str], None] | None = None, progress_file: Path | None = None,
                 reference: dict | None = None, clock: Callable[[], float] = time.perf_counter,
                 dataset: workloads.Dataset | None = None):
        self.settings = settings
        self.dataset = dataset  # --dataset, read and checked by cli.py
        self._api_key = api_key
        self.transport = transport
        self.progress = progress or (lambda message: print(message, file=sys.stderr, flush=True))
        self.progress_file = progress_file
        self.reference = reference
        self.clock = clock
        self.nonces = prompts.Nonces()
        self.headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        self.url = settings.api_base + prompts.endpoint_path(settings.endpoint)
        self.chat = settings.endpoint == "chat"
        self.errors: list[str] = []
        self.warnings: list[str] = []
        self.t0 = 0.0
        self._fillers: dict[int, str] = {}
        self.dropped: dict[str, str] = {}  # optional field -> the refusal that dropped it
        self.sizing = {"method": "usage.prompt_tokens", "estimated": False, "chars_per_token": None,
                       "chars_per_token_source": None, "route": None}
        self._sized_tokens: dict[int, int] = {}  # filler words -> prompt tokens as sized
        self._last_text_chars = 0
        self._cpu0 = 0.0
        self.started_at = ""
        self.warmup: list[dict] = []
        self.points: list[dict] = []
        self.requests: list[dict] = []
        self.calibration: dict = {"fit": None, "probes": [], "lengths": []}
        self.plan: list[tuple[int, LoadSpec]] = []
        self._warmup_chars: list[tuple[dict, int]] = []
        self._fit_result: prompts.LinearFit | None = None
        self._sized_lengths: dict[int, dict] = {}  # prompt target -> its sizing (calibration["lengths"])
        self._abandon: str | None = None  # set: every further point is failed with this reason, unmeasured
        self.capacity: dict | None = None
        self.workloads: dict = {}  # workload key -> its result (workloads.measure_all)

    # ---- helpers ------------------------------------------------------------------------

    def _redact(self, text: str | None) -> str | None:
        if text and self._api_key:
            text = text.replace(self._api_key, "***")
        return text

    def _filler(self, words: int) -> str:
        if words not in self._fillers:
            self._fillers[words] = prompts.filler(words)
        return self._fillers[words]

    def _body(self, words: int, max_tokens: int, *, stream: bool) -> dict:
        return self._body_of(prompts.Prompt(words=words), max_tokens, stream=stream)

    def _body_of(self, prompt: prompts.Prompt, max_tokens: int, *, stream: bool) -> dict:
        body_text = prompt.text if prompt.text is not None else self._filler(prompt.words)
        text = prompts.prompt_text(self.nonces.next(), body_text) if prompt.nonce_first else body_text
        self._last_text_chars = len(text)
        body = prompts.request_body(self.settings.endpoint, self.settings.model, text, max_tokens, stream=stream,
                                    ignore_eos=self.settings.ignore_eos)
        for name in self.dropped:
            body.pop(name, None)
        return body

    def _payload(self, words: int, max_tokens: int, *, stream: bool) -> bytes:
        return json.dumps(self._body(words, max_tokens, stream=stream)).encode()

    def max_tokens_of(self, prompt: prompts.Prompt) -> int:
        return prompt.max_tokens or self.settings.max_tokens

    def payload(self, prompt: prompts.Prompt) -> bytes:
        """The encoded body of a streamed request of `prompt` (a fresh nonce each call)."""
        return json.dumps(self._body_of(prompt, self.max_tokens_of(prompt), stream=True)).encode()

    def _drop_refused(self, status: int | None, error: str | None, payload: bytes) -> bool:
        """Drop an optional field the server refused (once per run, said once); True to resend."""
        name = refused_field(status, error, json.loads(payload))
        if name is None or name in self.dropped:
            return False
        self.dropped[name] = self._redact(error)
        consequence = {
            "ignore_eos": "measuring with the server's own stopping instead: answers may stop before --max-tokens, "
                          "and each point counts those that stopped early",
            "stream_options": "streams then carry no usage chunk: completion tokens are counted from the chunks",
        }[name]
        if name == "ignore_eos":
            self.settings.ignore_eos = False
        message = f"the server refuses {name} ({self.dropped[name][:200]}): {consequence}"
        self.warnings.append(message)
        self.progress(f"note: {message}")
        return True

    def _rel(self, t):
        return None if t is None else _round(t - self.t0)

    def _record(self, outcome: StreamOutcome, prompt: prompts.Prompt, *, phase: str, point: int | None,
                stream: int | None, index: int, target: int | None, scheduled: float | None = None,
                offset: float | None = None, repetition: int = 0) -> dict:
        words, max_tokens = prompt.words, self.max_tokens_of(prompt)
        tokens, source = outcome.completion_tokens
        ok, error = outcome.ok, outcome.error
        burst, burst_chunks = outcome.burst, outcome.burst_chunks
        if ok and burst and self.settings.strict:
            ok, error = False, (f"the stream arrived in bursts, buffered on its way ({burst_chunks} token chunks within "
                                f"{BURST_GAP_S * 1e6:.0f} us of each other): its TTFT, TPOT, ITL and decode rate are not "
                                "the server's (--strict)")
        ttft = stats.time_to_first_token(outcome.t_send, outcome.t_first)
        e2e = stats.end_to_end(outcome.t_send, outcome.t_end, outcome.t_last) if ok else None
        prompt_tokens, prompt_source = outcome.usage_prompt_tokens, "usage"
        if prompt_tokens is None and words is not None:
            prompt_tokens = self._sized_tokens.get(words)
            prompt_source = None if prompt_tokens is None else ("estimate" if self.sizing["estimated"] else "tokenizer")
        record = {
            "phase": phase, "point": point, "stream": stream, "index": index, "repetition": repetition,
            "prompt_tokens_target": target, "prompt_words": words,
            "prompt_tokens": prompt_tokens, "prompt_tokens_source": prompt_source,
            "max_tokens": max_tokens,
            "completion_tokens": tokens, "token_count_source": source, "content_chunks": outcome.content_chunks,
            "t_send": self._rel(outcome.t_send), "t_first": self._rel(outcome.t_first), "t_last": self._rel(outcome.t_last),
            "t_end": self._rel(outcome.t_end),
            # Rate points: when the schedule said to send (same clock as t_send) and the offset in
            # the schedule; t_send - t_scheduled is how late the request left (--max-concurrency's
            # queue included). None in closed loops, which have no schedule.
            "t_scheduled": self._rel(scheduled), "offset_s": _round(offset),
            "ttft_s": _round(ttft),
            "decode_tok_s": _round(stats.decode_rate(tokens, outcome.t_first, outcome.t_last)) if ok else None,
            "tpot_s": _round(stats.time_per_output_token(e2e, ttft, tokens)),
            "e2e_s": _round(e2e),
            "finish_reason": outcome.finish_reason,
            "stopped_early": bool(outcome.ok and tokens is not None and tokens < max_tokens
                                  and outcome.finish_reason != "length"),
            "done_marker": outcome.done_marker, "empty_text": outcome.empty_text,
            "burst": burst, "burst_chunks": burst_chunks,
            "buffered": burst, "token_reads": outcome.token_reads, "max_chunks_per_read": outcome.max_chunks_per_read,
            "ok": ok, "status": outcome.status, "error": self._redact(error),
            "length_rejected": outcome.length_rejected,
        }
        if prompt.line is not None:
            record["dataset_line"] = prompt.line
        # Last: one gap per token chunk, the longest entry of a record.
        record["itl_s"] = [round(gap, 6) for gap in stats.inter_token_latencies(outcome.arrivals)] if ok else []
        return record

    async def send(self, client, prompt: prompts.Prompt, payload: bytes | None = None, **where) -> dict:
        """Stream one request of `prompt` (payload: its body, already encoded) -> its record. An
        optional field the server refuses is dropped and the request sent again."""
        for _ in range(len(OPTIONAL_FIELDS) + 1):
            payload = payload or self.payload(prompt)
            outcome = await stream_request(client, self.url, payload, self.headers, chat=self.chat,
                                           timeout_s=self.settings.timeout_s, stall_timeout_s=self.settings.stall_timeout_s,
                                           clock=self.clock)
            if outcome.ok or not self._drop_refused(outcome.status, outcome.error, payload):
                break
            payload = None
        return self._record(outcome, prompt, **where)

    async def _probe(self, client, words) -> ProbeOutcome:
        for _ in range(len(OPTIONAL_FIELDS) + 1):
            payload = self._payload(words, 1, stream=False)
            probe = await probe_prompt_tokens(client, self.url, payload, self.headers, timeout_s=self.settings.timeout_s)
            if not probe.error or not self._drop_refused(probe.status, probe.error, payload):
                break
        probe.error = self._redact(probe.error)
        return probe

    async def _count(self, client, words) -> ProbeOutcome:
        """The prompt tokens of a prompt of `words` filler words, by the sizing method in use:
        the server's usage, its tokenizer endpoint, or the characters-per-token estimate."""
        if self.sizing["method"] == "usage.prompt_tokens":
            probe = await self._probe(client, words)
            if not probe.missing_usage:
                return self._remember(words, probe)
            await self._choose_sizing(client, probe.error)
        if self.sizing["route"]:
            body = self._body(words, 1, stream=False)
            request = {"model": body["model"]}
            if self.chat and self.sizing["route"].endswith("/v1/tokenize"):
                request["prompt"] = body["messages"][0]["content"]  # SGLang counts strings only
            else:
                request.update({k: body[k] for k in ("prompt", "messages") if k in body})
            tokens, error = await count_tokens(client, self.sizing["route"], request, self.headers,
                                               timeout_s=self.settings.timeout_s)
            return self._remember(words, ProbeOutcome(prompt_tokens=tokens, error=self._redact(
                None if error is None else f"{self.sizing['method']} {error}")))
        self._body(words, 1, stream=False)
        tokens = prompts.estimate_tokens(self._last_text_chars, self.sizing["chars_per_token"])
        return self._remember(words, ProbeOutcome(prompt_tokens=tokens))

    def _remember(self, words: int, probe: ProbeOutcome) -> ProbeOutcome:
        if probe.prompt_tokens is not None:
            self._sized_tokens[words] = probe.prompt_tokens
        return probe

    async def _choose_sizing(self, client, why: str) -> None:
        """No usage.prompt_tokens: a tokenizer endpoint if the server has one, else an estimate
        calibrated on the warm-up's streamed usage, else DEFAULT_CHARS_PER_TOKEN."""
        for path in TOKENIZER_ROUTES:
            url = self.settings.server_root + path
            text = prompts.prompt_text(self.nonces.next(), self._filler(FIT_WORDS[0]))
            request = {"model": self.settings.model, "prompt": text}
            if self.chat and path == "/tokenize":
                request = {"model": self.settings.model, "messages": [{"role": "user", "content": text}]}
            tokens, _ = await count_tokens(client, url, request, self.headers, timeout_s=min(self.settings.timeout_s, 30.0))
            if tokens:
                note = " (the chat template is not counted)" if self.chat and path == "/v1/tokenize" else ""
                self.sizing.update(method=f"tokenizer POST {path}", route=url)
                self.warnings.append(f"the server reports no usage.prompt_tokens; prompts are sized with its tokenizer "
                                     f"(POST {path}){note}")
                return
        calibration = next(((r["prompt_tokens"], chars) for r, chars in self._warmup_chars
                            if r["ok"] and r["prompt_tokens"] and r["prompt_tokens_source"] == "usage"), None)
        if calibration:
            cpt, source = calibration[1] / calibration[0], (f"calibrated on the warm-up: {calibration[1]} characters = "
                                                            f"{calibration[0]} prompt tokens in its streamed usage")
        else:
            cpt, source = DEFAULT_CHARS_PER_TOKEN, ("default: the server reports no prompt token count and has no "
                                                    "tokenizer endpoint")
        self.sizing.update(method="estimate", estimated=True, chars_per_token=round(cpt, 4), chars_per_token_source=source)
        self.warnings.append(f"prompt lengths are estimated at {cpt:.2f} characters per token ({source}); "
                             f"{why.split(', so ')[0]} and neither POST /tokenize nor POST /v1/tokenize answers")

    def _write_progress(self, entry: dict) -> None:
        if self.progress_file is None:
            return
        try:
            with open(self.progress_file, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(entry) + "\n")
        except OSError as exc:
            self.warnings.append(f"cannot append to the progress file {self.progress_file}: {exc.strerror or exc}")
            self.progress_file = None

    # ---- stages -------------------------------------------------------------------------

    async def _fit(self, client) -> tuple[prompts.LinearFit | None, list[dict]]:
        probes = []
        for words in FIT_WORDS:
            probe = await self._count(client, words)
            probes.append({"words": words, "prompt_tokens": probe.prompt_tokens, "error": probe.error})
            if probe.error:
                self.errors.append(f"prompt sizing probe ({words} words) failed: {probe.error}")
                return None, probes
        try:
            fit = prompts.LinearFit(FIT_WORDS[0], probes[0]["prompt_tokens"], FIT_WORDS[1], probes[1]["prompt_tokens"])
        except ValueError as exc:
            self.errors.append(str(exc))
            return None, probes
        return fit, probes

    async def _size(self, client, fit: prompts.LinearFit, target: int) -> dict:
        """Find the filler length whose usage.prompt_tokens is within 2 % of target."""
        s = self.settings
        ceiling = s.max_model_len - s.max_tokens if s.max_model_len else None
        result = {"prompt_tokens_target": target, "words": None, "prompt_tokens": None, "attempts": [], "status": "ok",
                  "reason": None}
        words = max(1, fit.words_for(target))
        best = None
        for _ in range(CALIBRATION_ATTEMPTS):
            probe = await self._count(client, words)
            result["attempts"].append({"words": words, "prompt_tokens": probe.prompt_tokens, "error": probe.error})
            if probe.length_rejected:
                result.update(status="skipped", reason=f"the server refused a {target}-token prompt: {probe.error}")
                return result
            if probe.error:
                result.update(status="failed", reason=f"sizing the {target}-token prompt failed: {probe.error}")
                return result
            measured = probe.prompt_tokens
            fits_ceiling = ceiling is None or measured <= ceiling
            if fits_ceiling and (best is None or abs(measured - target) < abs(best[1] - target)):
                best = (words, measured)
            if prompts.within(measured, target, CALIBRATION_TOLERANCE, ceiling):
                break
            step = round((target - measured) / fit.per_word) or (1 if measured < target else -1)
            if not fits_ceiling:
                step = min(step, -1)
            words = max(1, words + step)
        if best is None:
            result.update(status="skipped", reason=f"no prompt near {target} tokens fits max_model_len {s.max_model_len} "
                                                   f"with max_tokens {s.max_tokens}")
            return result
        result.update(words=best[0], prompt_tokens=best[1])
        if not prompts.within(best[1], target, CALIBRATION_TOLERANCE):
            self.warnings.append(f"the {target}-token prompt could only be sized to {best[1]} tokens")
        return result

    async def closed_loop(self, client, point: int, target: int | None, streams: int, source, *, repetition: int = 0,
                          phase: str = "measure") -> list[dict]:
        """`streams` streams started together, each sending source.take(stream, index) back to back
        until it gives None -> the records, by stream and index."""
        records: list[dict] = []
        go = asyncio.Event()

        async def one_stream(stream: int):
            prompt = source.take(stream, 0)
            if prompt is None:
                return
            # The first body is encoded before the start signal, so the streams leave together
            # even when encoding a long prompt takes milliseconds.
            payload = self.payload(prompt)
            await go.wait()
            index = 0
            while prompt is not None:
                record = await self.send(client, prompt, payload, phase=phase, point=point, stream=stream, index=index,
                                         target=target, repetition=repetition)
                records.append(record)
                if record["length_rejected"] and prompt.text is None:
                    return  # the stream's further prompts are as long
                index += 1
                prompt, payload = source.take(stream, index), None

        tasks = [asyncio.create_task(one_stream(stream)) for stream in range(streams)]
        await asyncio.sleep(0)  # every stream is now waiting on `go`: they resume in the same loop turn
        go.set()
        await asyncio.gather(*tasks)
        return sorted(records, key=lambda r: (r["stream"], r["index"]))

    async def open_loop(self, client, point: dict, spec: LoadSpec, source, *, repetition: int = 0,
                        phase: str = "measure") -> list[dict]:
        """An open loop: --num-requests requests, request i (source.take(None, i)) started as its own
        task at the point's start + offset i of the schedule, whether or not the earlier ones have
        ended (--max-concurrency: it then waits for a free slot, as `vllm bench serve` does, and its
        t_send is when it got one). Sets the point's offered_rate and max_in_flight (the most over
        its repetitions)."""
        s = self.settings
        offsets = spec.offsets(s.num_requests)
        gate = asyncio.Semaphore(s.max_concurrency) if s.max_concurrency else None
        records: list[dict] = []
        in_flight = most = 0

        async def one(index: int, prompt: prompts.Prompt, payload: bytes, due: float):
            nonlocal in_flight, most
            async with gate if gate is not None else contextlib.nullcontext():
                in_flight += 1
                most = max(most, in_flight)
                try:
                    records.append(await self.send(client, prompt, payload, phase=phase, point=point["point"], stream=None,
                                                   index=index, target=point["prompt_tokens_target"], scheduled=due,
                                                   offset=offsets[index], repetition=repetition))
                finally:
                    in_flight -= 1

        # A TaskGroup: an interrupt while the schedule runs cancels the requests already in flight.
        async with asyncio.TaskGroup() as group:
            start = self.clock()
            for index, offset in enumerate(offsets):
                # Encoded before its time comes (while the previous requests are on their way), so
                # encoding a long prompt does not make it late; one at a time keeps the memory small.
                prompt = source.take(None, index)
                payload = self.payload(prompt)
                due = start + offset
                # Until the clock the records use says so: a timer may fire a little early.
                while (wait := due - self.clock()) > 0:
                    await asyncio.sleep(wait)
                group.create_task(one(index, prompt, payload, due))
        point["offered_rate"] = _round(offered_rate(spec, offsets))
        point["max_in_flight"] = max(point.get("max_in_flight") or 0, most)
        return sorted(records, key=lambda r: r["index"])

    async def measure_load(self, client, point: dict, spec: LoadSpec, source, *, phase: str = "measure") -> list[dict]:
        """The point's requests at its load, --repeat times in a row (each repetition's records
        carry its number) -> all the records. A length the server refuses ends the repetitions of
        sized prompts: every further one would be refused alike."""
        records: list[dict] = []
        for repetition in range(self.settings.repeat):
            source.start()
            if spec.kind == "concurrency":
                batch = await self.closed_loop(client, point["point"], point["prompt_tokens_target"], spec.streams, source,
                                               repetition=repetition, phase=phase)
            else:
                batch = await self.open_loop(client, point, spec, source, repetition=repetition, phase=phase)
            records += batch
            if source.stops_on_length and any(r["length_rejected"] for r in batch):
                break
        if spec.kind != "concurrency":
            lags = [r["t_send"] - r["t_scheduled"] for r in records
                    if r["t_send"] is not None and r["t_scheduled"] is not None]
            point["send_lag_s"] = {"median": _round(stats.percentile(lags, 50)), "max": _round(max(lags, default=None))}
        return records

    def summarize(self, point: dict, records: list[dict]) -> None:
        """Fill the point's summary (the repetitions pooled; `repeat` with each repetition's headline
        figures and their intervals when --repeat is above 1), goodput, early stops and bursts, its
        status when requests failed, and the warnings its requests call for."""
        point["summary"] = stats.summarize_point(records, point["streams"] or 0)
        if self.settings.slo:
            point["summary"]["goodput"] = goodput.goodput(records, self.settings.slo, point["summary"]["duration_s"])
        if self.settings.repeat > 1:
            point["repeat"] = repeat.summarize(records, point["streams"] or 0)
        point["early_stops"] = sum(1 for r in records if r["stopped_early"])
        point["burst_requests"] = point["buffered_requests"] = sum(1 for r in records if r["burst"])
        if point["burst_requests"]:
            most = max(r["burst_chunks"] for r in records)
            self.warnings.append(
                f"point {point['point']} ({self.where(point)}): "
                f"{point['burst_requests']} of {len(records)} answers arrived in bursts, buffered on their way (up to "
                f"{most} token chunks within {BURST_GAP_S * 1e6:.0f} us of each other, where the engine needs a decode "
                "step for each): they are left out of the point's decode, TPOT and ITL figures, and their TTFT may be "
                "late; is a proxy between client and server buffering the stream? (--strict fails such requests)")
        late = (point.get("send_lag_s") or {}).get("max")
        if late is not None and late > LATE_SEND_WARN_S and not self.settings.max_concurrency:
            self.warnings.append(
                f"point {point['point']} ({self.where(point)}): a request left {late:.3f} s after its scheduled time: "
                "the client fell behind the schedule, so the load offered was lower than asked (a busy client machine, "
                "or prompts too long to encode in time)")
        if point["summary"]["failed_requests"]:
            first = next(r for r in records if not r["ok"] and not r["length_rejected"])
            point.update(status="failed", reason=f"{point['summary']['failed_requests']} of {len(records)} requests "
                                                 f"failed; first: {first['error']}")

    async def _run_point(self, client, point: dict, size: dict, spec: LoadSpec) -> list[dict]:
        """Measure one point (updating its status, reason and summary) -> its request records."""
        if size["status"] != "ok":
            point.update(status=size["status"], reason=size["reason"])
            return []
        point["prompt_words"] = size["words"]
        records = await self.measure_load(client, point, spec, FillerPrompts(size["words"], self.settings.requests_per_stream))
        self.summarize(point, records)
        rejected = next((r for r in records if r["length_rejected"]), None)
        if rejected:
            point.update(status="skipped", reason=f"the server refused the length: {rejected['error']}")
            size.update(status="skipped", reason=point["reason"])  # the other loads of this length too
        return records

    @staticmethod
    def where(point: dict) -> str:
        """'prompt 2048 x 2 stream(s)' for a closed loop, 'prompt 2048 at poisson:rate=4,...' for a
        rate; 'dataset x 2 stream(s)' for a point of the dataset workload (no prompt target)."""
        what = "dataset" if point["prompt_tokens_target"] is None else f"prompt {point['prompt_tokens_target']}"
        if point.get("streams") is not None:
            return f"{what} x {point['streams']} stream(s)"
        return f"{what} at {point.get('load')}"

    def load_specs(self) -> list[LoadSpec]:
        return load_specs(self.settings)

    @property
    def abandoned(self) -> str | None:
        """Why every further measurement is failed unmeasured (the warm-up or the prompt fit
        failed, or every request of a point did), else None."""
        return self._abandon

    def new_point(self, number: int, target: int | None, spec: LoadSpec) -> dict:
        """A point before it is measured. streams: the closed loop's stream count; None for a rate
        load, whose requests are not tied to streams (max_in_flight says how many overlapped)."""
        closed = spec.kind == "concurrency"
        return {"point": number, "prompt_tokens_target": target, "streams": spec.streams if closed else None,
                "load": str(spec), "status": "ok", "reason": None, "prompt_words": None, "summary": None, "early_stops": 0,
                "burst_requests": 0, "buffered_requests": 0, "started_s": None, "elapsed_s": None,
                "offered_rate": None if closed else _round(offered_rate(spec)), "max_in_flight": None, "send_lag_s": None}

    async def _point(self, client, number: int, target: int, spec: LoadSpec) -> list[dict]:
        """Measure (or skip) point `number` of the plan, append it to the points, report progress
        -> its request records."""
        s = self.settings
        began = self.clock()
        point = self.new_point(number, target, spec)
        point["started_s"] = self._rel(began)
        records: list[dict] = []
        if s.max_model_len and target + s.max_tokens > s.max_model_len:
            point.update(status="skipped", reason=f"{target} prompt + {s.max_tokens} max_tokens exceeds "
                                                  f"--max-model-len {s.max_model_len}")
        elif self._abandon:
            point.update(status="failed", reason=self._abandon)
        else:
            size = await self.sized(client, target)
            records = await self._run_point(client, point, size, spec)
            summary = point["summary"]
            if point["status"] == "failed" and summary and not summary["ok_requests"]:
                # Nothing got through (server gone or wedged): each further request would
                # only wait out --timeout.
                self._abandon = f"not measured: every request of point {number} failed"
        point["elapsed_s"] = _round(self.clock() - began, 3)
        self.points.append(point)
        self.requests.extend(records)
        self._report_point(point)
        return records

    async def sized(self, client, target: int) -> dict:
        if target not in self._sized_lengths:
            self.progress(f"sizing the {target}-token prompt")
            self._sized_lengths[target] = await self._size(client, self._fit_result, target)
            self.calibration["lengths"].append(self._sized_lengths[target])
        return self._sized_lengths[target]

    def _report_point(self, point: dict) -> None:
        message = self.point_message(point)
        self.progress(f"[{point['point']}/{len(self.plan)}] {message}")
        self._write_progress({"point": point["point"], "points": len(self.plan), "prompt_tokens": point["prompt_tokens_target"],
                              "streams": point["streams"], "load": point["load"],
                              "elapsed_s": _round(self.clock() - self.t0, 3), "message": message})

    async def _search_capacity(self, client, target: int, specs: list[LoadSpec]) -> None:
        """--capacity: goodput.find_capacity walks the rate loads upwards, one point each, and
        stops once the SLO is clearly missed; the loads it did not reach are listed as skipped
        points. find_capacity is synchronous and calls measure(rate) for each load: it runs in a
        worker thread, and each measurement is a coroutine on this event loop (the same client and
        connections) that the thread waits for, so the loop never blocks."""
        s = self.settings
        numbered = {spec.rate: (number, spec) for number, spec in enumerate(specs, start=1)}
        self.capacity = {"prompt_tokens_target": target, "slo": dict(s.slo), "slo_text": goodput.format_slo(s.slo),
                         "fraction": s.capacity_fraction, "margin": s.capacity_margin,
                         "loads": [str(spec) for spec in specs], "load": None, "rate": None, "points": [],
                         "stop": "", "note": "", "may_be_higher": False}
        why_not = None
        if s.max_model_len and target + s.max_tokens > s.max_model_len:
            why_not = f"the {target}-token prompt does not fit --max-model-len {s.max_model_len}"
        elif self._abandon:
            why_not = self._abandon
        else:
            size = await self.sized(client, target)
            if size["status"] != "ok":
                why_not = size["reason"]
        if why_not:
            for number, spec in numbered.values():
                await self._point(client, number, target, spec)
            self.capacity.update(stop="not searched", note=f"no capacity search: {why_not}")
            return

        loop = asyncio.get_running_loop()

        def measure(rate: float) -> list[dict]:
            number, spec = numbered[rate]
            return asyncio.run_coroutine_threadsafe(self._point(client, number, target, spec), loop).result()

        self.progress(f"capacity search at {target} prompt tokens: rates {', '.join(f'{rate:g}' for rate in numbered)} "
                      f"requests/s, {s.capacity_fraction:.0%} of requests within {goodput.format_slo(s.slo)}")
        result = await asyncio.to_thread(goodput.find_capacity, measure, list(numbered), s.slo, s.capacity_fraction,
                                         s.capacity_margin)
        by_number = {p["point"]: p for p in self.points}
        curve = []
        for entry in result.points:
            number, spec = numbered[entry["load"]]
            summary = by_number[number].get("summary") or {}
            curve.append({"point": number, "load": str(spec), "rate": entry["load"]}
                         | {k: v for k, v in entry.items() if k != "load"}
                         | {"output_throughput": summary.get("output_throughput")})
        reached = {p["point"] for p in curve}
        for number, spec in numbered.values():
            if number not in reached:
                point = self.new_point(number, target, spec)
                point.update(status="skipped", reason=f"not measured: the capacity search {result.stop}")
                self.points.append(point)
                self._report_point(point)
        self.points.sort(key=lambda p: p["point"])
        capacity_spec = numbered[result.capacity][1] if result.capacity is not None else None
        self.capacity.update(load=None if capacity_spec is None else str(capacity_spec), rate=result.capacity,
                             points=curve, stop=result.stop, note=result.note, may_be_higher=result.may_be_higher)
        self.progress(f"capacity: {result.note}")

    # ---- the run ------------------------------------------------------------------------

    async def resolve_model(self, client) -> None:
        """Settle the model from GET /v1/models: --model must be listed (when the server lists
        any); without --model the only listed model is taken. ModelChoiceError otherwise."""
        s = self.settings
        ids, error = await list_models(client, s.api_base, self.headers, timeout_s=min(s.timeout_s, MODELS_TIMEOUT_S))
        error = self._redact(error)
        listed = ", ".join(repr(i) for i in ids or [])
        if s.model is None:
            if ids is None:
                raise ModelChoiceError(f"--model: not given, and GET {s.api_base}/models {error}; give the served model "
                                       "name, e.g. --model NAME")
            if not ids:
                raise ModelChoiceError(f"--model: not given, and GET {s.api_base}/models lists no model; give the served "
                                       "model name, e.g. --model NAME")
            if len(ids) > 1:
                raise ModelChoiceError(f"--model: not given, and the server serves several models ({listed}); choose one, "
                                       f"e.g. --model {ids[0]}")
            s.model, s.model_source = ids[0], "GET /v1/models"
            self.progress(f"model: {s.model} (the one model GET /v1/models lists)")
        elif ids is None:
            self.warnings.append(f"GET {s.api_base}/models {error}: the model name {s.model!r} could not be checked")
        elif s.model not in ids:
            raise ModelChoiceError(f"--model: {s.model!r} is not served here; GET {s.api_base}/models lists {listed or 'nothing'}"
                                   f"; give one of them, e.g. --model {ids[0] if ids else 'NAME'}, or leave --model out when "
                                   "the server serves one model")

    def _plan(self) -> list[tuple[int, LoadSpec]]:
        """(prompt target, load) of every point in order: each length at every load."""
        return [(target, spec) for target in self.settings.prompt_tokens for spec in load_specs(self.settings)]

    def _connections(self) -> int:
        """Enough pooled connections that no request waits for one after its t_send: a closed loop
        needs its streams, a rate load as many as may overlap (--max-concurrency, else all of them)."""
        s = self.settings
        specs = load_specs(s)
        needed = [spec.streams for spec in specs if spec.kind == "concurrency"]
        if any(spec.kind != "concurrency" for spec in specs):
            needed.append(s.max_concurrency or s.num_requests)
        return max(needed, default=1) + 2

    async def run(self) -> dict:
        s = self.settings
        self.started_at = _now_iso()
        self.t0 = self.clock()
        self._cpu0 = time.process_time()
        connections = self._connections()
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        timeout = httpx.Timeout(s.timeout_s, connect=min(s.timeout_s, 30.0))
        warmup, calibration = self.warmup, self.calibration
        self.plan = plan = self._plan()

        # trust_env=False: a proxy from the environment would sit in the timed path.
        async with httpx.AsyncClient(transport=self.transport, limits=limits, timeout=timeout, trust_env=False) as client:
            await self.resolve_model(client)
            for i in range(s.warmup):
                self.progress(f"warm-up {i + 1}/{s.warmup}: {WARMUP_WORDS}-word prompt, {s.max_tokens} tokens")
                record = await self.send(client, prompts.Prompt(words=WARMUP_WORDS), phase="warmup", point=None, stream=0,
                                         index=i, target=None)
                warmup.append(record)
                self._warmup_chars.append((record, self._last_text_chars))
                if not record["ok"]:
                    self.errors.append(f"warm-up request failed: {record['error']}")
                    break
            fit = None
            if not self.errors:
                fit, calibration["probes"] = await self._fit(client)
                calibration["fit"] = fit.as_dict() if fit else None
            self._fit_result = fit
            self._abandon = None if fit else "not measured: " + (self.errors[0] if self.errors else "no prompt fit")
            if s.capacity_fraction is not None:
                # cli.py allows one prompt length and ascending rate loads with --capacity.
                await self._search_capacity(client, plan[0][0], [spec for _, spec in plan])
            else:
                for number, (target, spec) in enumerate(plan, start=1):
                    await self._point(client, number, target, spec)
            await workloads.measure_all(self, client, self.dataset)
        wall = self.clock() - self.t0
        cpu = time.process_time() - self._cpu0

        self.progress(f"client self-test ({s.selftest_s:g} s on loopback)")
        parse_capacity = await measure_capacity(s.endpoint, s.selftest_s)
        return self.document(cpu, wall, parse_capacity)

    def partial_document(self, signal_name: str) -> dict:
        """The report of what was measured before an interrupt: the finished points as they
        are, the rest marked not measured, no self-test (and no capacity: the search did not end)."""
        if not self.plan:
            self.plan = self._plan()
        measured = {p["point"] for p in self.points}
        done = len(measured)
        for number, (target, spec) in enumerate(self.plan, start=1):
            if number not in measured:
                point = self.new_point(number, target, spec)
                point.update(status="failed", reason=f"not measured: the run was interrupted ({signal_name})")
                self.points.append(point)
        self.points.sort(key=lambda p: p["point"])
        if self.capacity is not None and not self.capacity["stop"]:
            self.capacity.update(stop="interrupted", note=f"no capacity: the search was interrupted ({signal_name})")
        finished = ", ".join(self.workloads) or "none"
        workload_note = f" (workloads finished: {finished})" if self._workloads_asked() else ""
        self.errors.insert(0, f"interrupted by {signal_name} after {done} of {len(self.plan)} point(s){workload_note}: this "
                              "is a partial report")
        wall = self.clock() - self.t0 if self.t0 else 0.0
        cpu = time.process_time() - self._cpu0 if self._cpu0 else 0.0
        doc = self.document(cpu, wall, {"tokens_per_s": None, "error": None, "skipped": "the run was interrupted"},
                            count_unmeasured=False)
        doc["interrupted"] = signal_name
        return doc

    def _workloads_asked(self) -> bool:
        s = self.settings
        return bool(self.dataset or s.prefix_sharing or s.depth_sweep)

    def document(self, cpu: float, wall: float, parse_capacity: dict, *, count_unmeasured: bool = True) -> dict:
        """The benchmark.json document; parse_capacity is the client self-test's result."""
        s = self.settings
        requests, points = self.requests, self.points
        overhead = self._overhead(cpu, wall, self.warmup + requests + workloads.all_records(self.workloads), points,
                                  parse_capacity)
        failed_requests = sum(1 for r in requests if not r["ok"] and not r["length_rejected"])
        if failed_requests:
            self.errors.append(f"{failed_requests} measured request(s) failed")
        unmeasured = [p for p in points if p["status"] == "failed" and not p["summary"]]
        if unmeasured and count_unmeasured:
            self.errors.append(f"{len(unmeasured)} point(s) could not be measured; first: {unmeasured[0]['reason']}")
        if points and all(p["status"] == "skipped" for p in points) and not workloads.any_measured(self.workloads):
            self.errors.append("nothing was measured: every point was skipped")
        if not points and self.workloads and not workloads.any_measured(self.workloads) and not self.errors:
            self.errors.append("nothing was measured: no workload got an answer")
        self._note_stream_shapes()
        self.calibration.update({k: self.sizing[k] for k in ("method", "estimated", "chars_per_token",
                                                             "chars_per_token_source")})
        return {
            "schema_version": SCHEMA_VERSION,
            "tool": {"name": "sparkctl.bench", "version": _tool_version()},
            "label": s.label,
            "started_at": self.started_at or _now_iso(),
            "finished_at": _now_iso(),
            "duration_s": _round(self.clock() - self.t0, 3) if self.t0 else 0.0,
            "ok": not self.errors,
            "interrupted": None,
            "settings": s.as_dict() | {"api_key_set": bool(self._api_key)},
            "calibration": self.calibration,
            "points": points,
            "requests": requests,
            "warmup": self.warmup,
            "overhead": overhead,
            "reference": self.reference,
            "comparisons": reference_mod.compare(points, self.reference),
            "capacity": self.capacity,
            "dataset": self.workloads.get("dataset"),
            "prefix_sharing": self.workloads.get("prefix_sharing"),
            "depth_sweep": self.workloads.get("depth_sweep"),
            "errors": self.errors,
            "warnings": self.warnings,
        }

    def _note_stream_shapes(self) -> None:
        """One warning per stream quirk seen in the run (each request record says which had it)."""
        streamed = [r for r in self.warmup + self.requests if r["ok"]]
        no_marker = sum(1 for r in streamed if not r["done_marker"])
        if no_marker:
            self.warnings.append(f"{no_marker} of {len(streamed)} stream(s) ended without data: [DONE] (accepted: each "
                                 "ended cleanly after its finish_reason or usage chunk, as the OpenAI client accepts)")
        empty = sum(1 for r in streamed if r["empty_text"])
        if empty:
            self.warnings.append(f"{empty} answer(s) decoded to empty text although usage counts their tokens: counted "
                                 "by usage.completion_tokens and timed by the chunks that carried them (the model emits "
                                 "tokens that decode to nothing printable, e.g. special tokens)")
        early = sum(p.get("early_stops") or 0 for p in self.points)
        if early:
            self.warnings.append(f"{early} measured answer(s) stopped early (finish_reason before --max-tokens "
                                 f"{self.settings.max_tokens}); each point's early_stops counts them")

    @staticmethod
    def point_message(point: dict) -> str:
        where = Runner.where(point)
        if point["status"] == "skipped":
            return f"{where}: skipped ({point['reason']})"
        summary = point.get("summary")
        if not summary:
            return f"{where}: failed ({point['reason']})"
        decode, ttft, agg = summary["decode_tok_s"]["median"], summary["ttft_s"]["median"], summary["aggregate"]["tok_s"]
        if point.get("streams") is not None:
            text = (f"{where}: decode {_fmt(decode, '.1f')} tok/s median, TTFT {_fmt(ttft, '.3f')} s median, "
                    f"aggregate {_fmt(agg, '.1f')} tok/s")
        else:
            tpot = (summary.get("tpot_s") or {}).get("median")
            text = (f"{where}: TTFT {_fmt(ttft, '.3f')} s median, TPOT {_fmt(None if tpot is None else tpot * 1000, '.1f')} "
                    f"ms median, {_fmt(summary.get('request_throughput'), '.2f')} requests/s achieved, output "
                    f"{_fmt(summary.get('output_throughput'), '.1f')} tok/s, up to {point.get('max_in_flight')} in flight")
        good = summary.get("goodput")
        if good:
            share = "n/a" if good["fraction"] is None else f"{good['fraction']:.0%}"
            text += f"; goodput {_fmt(good['goodput_rps'], '.2f')} requests/s ({share} within the SLO)"
        if point.get("early_stops"):
            text += f"; {point['early_stops']} of {summary['requests']} answers stopped early"
        if point.get("burst_requests"):
            text += (f"; {point['burst_requests']} of {summary['requests']} answers arrived in BURSTS (left out of "
                     "decode, TPOT and ITL)")
        return text + (f"; FAILED: {point['reason']}" if point["status"] == "failed" else "")

    def _overhead(self, cpu: float, wall: float, streamed: list[dict], points: list[dict], capacity: dict) -> dict:
        tokens = sum(r["completion_tokens"] or 0 for r in streamed)
        peak = max(((p.get("summary") or {}).get("aggregate", {}).get("tok_s") or 0 for p in points), default=0) or None
        cap = capacity.get("tokens_per_s")
        fraction = stats.ratio(peak, cap)
        core = cpu / wall if wall > 0 else None
        warnings = []
        if capacity.get("error"):
            warnings.append(f"the client self-test failed: {capacity['error']}")
        if fraction is not None and fraction > OVERHEAD_WARN_FRACTION:
            warnings.append(f"the peak measured aggregate ({peak:.1f} tok/s) is {fraction:.0%} of the client's parse "
                            f"capacity ({cap:.0f} tok/s): the client may be part of what was measured")
        if core is not None and core > CORE_WARN_FRACTION and tokens and wall >= 1.0:
            warnings.append(f"the client used {core:.0%} of one CPU core during the run")
        self.warnings.extend(warnings)
        return {
            "client_cpu_s": _round(cpu),
            "wall_s": _round(wall),
            "tokens_received": tokens,
            "cpu_us_per_token": _round(cpu / tokens * 1e6, 3) if tokens else None,
            "core_fraction": _round(core),
            "selftest": {k: (_round(v) if isinstance(v, float) else v) for k, v in capacity.items()},
            "peak_aggregate_tok_s": _round(peak),
            "peak_fraction_of_capacity": _round(fraction),
            "warn_above_fraction": OVERHEAD_WARN_FRACTION,
            "warnings": warnings,
        }


def _fmt(value, spec):
    return "n/a" if value is None else format(value, spec)


def _tool_version() -> str:
    from sparkctl import __version__

    return __version__

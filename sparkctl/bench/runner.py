"""One benchmark run: warm-up, prompt sizing, the measurement points, client overhead.

Order: warm-up requests (not counted) -> two short probes fit tokens-per-word -> for each
prompt length (ascending) size the filler to the target with max_tokens=1 probes, then
measure it at every concurrency level -> the loopback self-test. A point is skipped (not
failed) when prompt + max_tokens exceeds --max-model-len or the server refuses the length
with a 400; any other failed measured request makes the run fail (exit 1) but the report is
still written, the failures marked."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from . import SCHEMA_VERSION, prompts, reference as reference_mod, stats
from .client import StreamOutcome, probe_prompt_tokens, stream_request
from .selftest import measure_capacity
from .settings import Settings

WARMUP_WORDS = 256
FIT_WORDS = (32, 256)
CALIBRATION_TOLERANCE = 0.02
CALIBRATION_ATTEMPTS = 4
OVERHEAD_WARN_FRACTION = 0.10
CORE_WARN_FRACTION = 0.5


def _now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def _round(value, digits=6):
    return None if value is None else round(value, digits)


class Runner:
    def __init__(self, settings: Settings, api_key: str | None, *, transport: httpx.AsyncBaseTransport | None = None,
                 progress: Callable[[str], None] | None = None, progress_file: Path | None = None,
                 reference: dict | None = None, clock: Callable[[], float] = time.perf_counter):
        self.settings = settings
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

    # ---- helpers ------------------------------------------------------------------------

    def _redact(self, text: str | None) -> str | None:
        if text and self._api_key:
            text = text.replace(self._api_key, "***")
        return text

    def _filler(self, words: int) -> str:
        if words not in self._fillers:
            self._fillers[words] = prompts.filler(words)
        return self._fillers[words]

    def _payload(self, words: int, max_tokens: int, *, stream: bool) -> bytes:
        text = prompts.prompt_text(self.nonces.next(), self._filler(words))
        body = prompts.request_body(self.settings.endpoint, self.settings.model, text, max_tokens, stream=stream,
                                    ignore_eos=self.settings.ignore_eos)
        return json.dumps(body).encode()

    def _rel(self, t):
        return None if t is None else _round(t - self.t0)

    def _record(self, outcome: StreamOutcome, *, phase: str, point: int | None, stream: int, index: int,
                target: int | None, words: int) -> dict:
        tokens, source = outcome.completion_tokens
        ok = outcome.ok
        return {
            "phase": phase, "point": point, "stream": stream, "index": index,
            "prompt_tokens_target": target, "prompt_words": words,
            "prompt_tokens": outcome.usage_prompt_tokens,
            "max_tokens": self.settings.max_tokens,
            "completion_tokens": tokens, "token_count_source": source, "content_chunks": outcome.content_chunks,
            "t_send": self._rel(outcome.t_send), "t_first": self._rel(outcome.t_first), "t_last": self._rel(outcome.t_last),
            "t_end": self._rel(outcome.t_end),
            "ttft_s": _round(stats.time_to_first_token(outcome.t_send, outcome.t_first)),
            "decode_tok_s": _round(stats.decode_rate(tokens, outcome.t_first, outcome.t_last)) if ok else None,
            "finish_reason": outcome.finish_reason,
            "ok": ok, "status": outcome.status, "error": self._redact(outcome.error),
            "length_rejected": outcome.length_rejected,
        }

    async def _stream(self, client, words, payload: bytes | None = None, **where) -> dict:
        payload = payload or self._payload(words, self.settings.max_tokens, stream=True)
        outcome = await stream_request(client, self.url, payload, self.headers, chat=self.chat,
                                       timeout_s=self.settings.timeout_s, clock=self.clock)
        return self._record(outcome, words=words, **where)

    async def _probe(self, client, words):
        payload = self._payload(words, 1, stream=False)
        probe = await probe_prompt_tokens(client, self.url, payload, self.headers, timeout_s=self.settings.timeout_s)
        probe.error = self._redact(probe.error)
        return probe

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
            probe = await self._probe(client, words)
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
            probe = await self._probe(client, words)
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

    async def _measure(self, client, point: int, target: int, streams: int, words: int) -> list[dict]:
        records: list[dict] = []
        go = asyncio.Event()

        async def one_stream(stream: int):
            # The first body is encoded before the start signal, so the streams leave together
            # even when encoding a long prompt takes milliseconds.
            payload = self._payload(words, self.settings.max_tokens, stream=True)
            await go.wait()
            for index in range(self.settings.requests_per_stream):
                record = await self._stream(client, words, payload, phase="measure", point=point, stream=stream,
                                            index=index, target=target)
                payload = None
                records.append(record)
                if record["length_rejected"]:
                    return

        tasks = [asyncio.create_task(one_stream(stream)) for stream in range(streams)]
        await asyncio.sleep(0)  # every stream is now waiting on `go`: they resume in the same loop turn
        go.set()
        await asyncio.gather(*tasks)
        return sorted(records, key=lambda r: (r["stream"], r["index"]))

    async def _run_point(self, client, point: dict, size: dict) -> list[dict]:
        """Measure one point (updating its status, reason and summary) -> its request records."""
        if size["status"] != "ok":
            point.update(status=size["status"], reason=size["reason"])
            return []
        point["prompt_words"] = size["words"]
        records = await self._measure(client, point["point"], point["prompt_tokens_target"], point["streams"], size["words"])
        point["summary"] = stats.summarize_point(records, point["streams"])
        rejected = next((r for r in records if r["length_rejected"]), None)
        if rejected:
            point.update(status="skipped", reason=f"the server refused the length: {rejected['error']}")
            size.update(status="skipped", reason=point["reason"])  # the other levels of this length too
        elif point["summary"]["failed_requests"]:
            first = next(r for r in records if not r["ok"])
            point.update(status="failed", reason=f"{point['summary']['failed_requests']} of {len(records)} requests "
                                                 f"failed; first: {first['error']}")
        return records

    # ---- the run ------------------------------------------------------------------------

    async def run(self) -> dict:
        s = self.settings
        started_at = _now_iso()
        self.t0 = self.clock()
        cpu0 = time.process_time()
        limits = httpx.Limits(max_connections=max(s.concurrency) + 2, max_keepalive_connections=max(s.concurrency) + 2)
        timeout = httpx.Timeout(s.timeout_s, connect=min(s.timeout_s, 30.0))
        warmup: list[dict] = []
        points: list[dict] = []
        requests: list[dict] = []
        calibration = {"fit": None, "probes": [], "lengths": []}
        plan = [(target, streams) for target in s.prompt_tokens for streams in s.concurrency]
        total = len(plan)

        # trust_env=False: a proxy from the environment would sit in the timed path.
        async with httpx.AsyncClient(transport=self.transport, limits=limits, timeout=timeout, trust_env=False) as client:
            for i in range(s.warmup):
                self.progress(f"warm-up {i + 1}/{s.warmup}: {WARMUP_WORDS}-word prompt, {s.max_tokens} tokens")
                record = await self._stream(client, WARMUP_WORDS, phase="warmup", point=None, stream=0, index=i, target=None)
                warmup.append(record)
                if not record["ok"]:
                    self.errors.append(f"warm-up request failed: {record['error']}")
                    break
            fit = None
            if not self.errors:
                fit, calibration["probes"] = await self._fit(client)
                calibration["fit"] = fit.as_dict() if fit else None
            sized: dict[int, dict] = {}
            abandon = None if fit else "not measured: " + (self.errors[0] if self.errors else "no prompt fit")
            for number, (target, streams) in enumerate(plan, start=1):
                began = self.clock()
                point = {"point": number, "prompt_tokens_target": target, "streams": streams, "status": "ok", "reason": None,
                         "prompt_words": None, "summary": None, "started_s": self._rel(began), "elapsed_s": None}
                if s.max_model_len and target + s.max_tokens > s.max_model_len:
                    point.update(status="skipped", reason=f"{target} prompt + {s.max_tokens} max_tokens exceeds "
                                                          f"--max-model-len {s.max_model_len}")
                elif abandon:
                    point.update(status="failed", reason=abandon)
                else:
                    if target not in sized:
                        self.progress(f"sizing the {target}-token prompt")
                        sized[target] = await self._size(client, fit, target)
                        calibration["lengths"].append(sized[target])
                    requests.extend(await self._run_point(client, point, sized[target]))
                    summary = point["summary"]
                    if point["status"] == "failed" and summary and not summary["ok_requests"]:
                        # Nothing got through (server gone or wedged): each further request would
                        # only wait out --timeout.
                        abandon = f"not measured: every request of point {number} failed"
                point["elapsed_s"] = _round(self.clock() - began, 3)
                points.append(point)
                message = self._point_message(point)
                self.progress(f"[{number}/{total}] {message}")
                self._write_progress({"point": number, "points": total, "prompt_tokens": target, "streams": streams,
                                      "elapsed_s": _round(self.clock() - self.t0, 3), "message": message})
        wall = self.clock() - self.t0
        cpu = time.process_time() - cpu0

        self.progress(f"client self-test ({s.selftest_s:g} s on loopback)")
        capacity = await measure_capacity(s.endpoint, s.selftest_s)
        overhead = self._overhead(cpu, wall, warmup + requests, points, capacity)

        failed_requests = sum(1 for r in requests if not r["ok"] and not r["length_rejected"])
        if failed_requests:
            self.errors.append(f"{failed_requests} measured request(s) failed")
        unmeasured = [p for p in points if p["status"] == "failed" and not p["summary"]]
        if unmeasured:
            self.errors.append(f"{len(unmeasured)} point(s) could not be measured; first: {unmeasured[0]['reason']}")
        if points and all(p["status"] == "skipped" for p in points):
            self.errors.append("nothing was measured: every point was skipped")
        return {
            "schema_version": SCHEMA_VERSION,
            "tool": {"name": "sparkctl.bench", "version": _tool_version()},
            "label": s.label,
            "started_at": started_at,
            "finished_at": _now_iso(),
            "duration_s": _round(self.clock() - self.t0, 3),
            "ok": not self.errors,
            "settings": s.as_dict() | {"api_key_set": bool(self._api_key)},
            "calibration": calibration,
            "points": points,
            "requests": requests,
            "warmup": warmup,
            "overhead": overhead,
            "reference": self.reference,
            "comparisons": reference_mod.compare(points, self.reference),
            "errors": self.errors,
            "warnings": self.warnings,
        }

    @staticmethod
    def _point_message(point: dict) -> str:
        where = f"prompt {point['prompt_tokens_target']} x {point['streams']} stream(s)"
        if point["status"] == "skipped":
            return f"{where}: skipped ({point['reason']})"
        summary = point.get("summary")
        if not summary:
            return f"{where}: failed ({point['reason']})"
        decode, ttft, agg = summary["decode_tok_s"]["median"], summary["ttft_s"]["median"], summary["aggregate"]["tok_s"]
        text = (f"{where}: decode {_fmt(decode, '.1f')} tok/s median, TTFT {_fmt(ttft, '.3f')} s median, "
                f"aggregate {_fmt(agg, '.1f')} tok/s")
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

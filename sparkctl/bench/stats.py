"""Benchmark arithmetic: pure functions over recorded request timings (no I/O, no clock).

A request record is the dict benchmark.json stores under `requests` (see runner.py); the
functions here read `ok`, `completion_tokens`, `t_send`, `t_first`, `t_last`, `t_end`, `ttft_s`,
`decode_tok_s`, `tpot_s`, `itl_s`, `e2e_s`, `burst`, `stopped_early`, `stream` and
`prompt_tokens` from it. The latency metrics mirror `vllm bench serve` (README: "Against
`vllm bench serve`")."""

from __future__ import annotations

import math
from collections.abc import Iterable
from itertools import pairwise


def percentile(values: Iterable[float], q: float) -> float | None:
    """The q-th percentile (0..100) by linear interpolation between closest ranks, numpy's
    default; None for no values."""
    ordered = sorted(v for v in values if v is not None)
    if not ordered:
        return None
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be within 0..100, got {q}")
    position = (len(ordered) - 1) * q / 100.0
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def distribution(values: Iterable[float | None]) -> dict:
    """{n, mean, median, p90, p99, min, max} of the values that are not None (all None when
    there are none)."""
    present = [v for v in values if v is not None]
    if not present:
        return {"n": 0, "mean": None, "median": None, "p90": None, "p99": None, "min": None, "max": None}
    return {"n": len(present), "mean": math.fsum(present) / len(present), "median": percentile(present, 50),
            "p90": percentile(present, 90), "p99": percentile(present, 99), "min": min(present), "max": max(present)}


def time_to_first_token(t_send: float | None, t_first: float | None) -> float | None:
    if t_send is None or t_first is None:
        return None
    return t_first - t_send


def end_to_end(t_send: float | None, t_end: float | None, t_last: float | None = None) -> float | None:
    """The end of the stream (t_end; t_last when there is none) minus the send."""
    end = t_end if t_end is not None else t_last
    if t_send is None or end is None:
        return None
    return end - t_send


def time_per_output_token(e2e_s: float | None, ttft_s: float | None, completion_tokens: int | None) -> float | None:
    """(e2e - ttft) / (completion_tokens - 1), vLLM's TPOT: the time after the first token,
    shared by the tokens after it. None for fewer than two tokens."""
    if e2e_s is None or ttft_s is None or completion_tokens is None or completion_tokens < 2:
        return None
    return (e2e_s - ttft_s) / (completion_tokens - 1)


def inter_token_latencies(arrivals: list[float]) -> list[float]:
    """The gaps between successive token-bearing chunks' arrivals, vLLM's ITL: a chunk that
    carries several tokens is one gap, as vLLM counts it."""
    return [later - earlier for earlier, later in pairwise(arrivals)]


def decode_rate(completion_tokens: int | None, t_first: float | None, t_last: float | None) -> float | None:
    """(completion_tokens - 1) / (t_last - t_first): the first token's time belongs to the
    prefill, so the decode window holds the remaining tokens. None when it is undefined
    (fewer than two tokens, or all tokens arrived in one read)."""
    if completion_tokens is None or completion_tokens < 2 or t_first is None or t_last is None:
        return None
    window = t_last - t_first
    if window <= 0:
        return None
    return (completion_tokens - 1) / window


def aggregate_throughput(records: Iterable[dict]) -> dict:
    """Aggregate throughput of one concurrency level:

        completion tokens of all successful requests / (latest last-token time - earliest first-token time)

    The window starts at the first token any stream received (the prefill of the first
    requests is excluded) and ends at the last token of the level, so the prefill of the
    later back-to-back requests IS inside it: this is the delivered rate while the level was
    producing, not the peak decode rate. {completion_tokens, window_s, tok_s}; tok_s is None
    when the window is empty."""
    counted = [r for r in records if r.get("ok") and r.get("completion_tokens") and r.get("t_first") is not None
               and r.get("t_last") is not None]
    tokens = sum(r["completion_tokens"] for r in counted)
    if not counted:
        return {"completion_tokens": 0, "window_s": None, "tok_s": None}
    window = max(r["t_last"] for r in counted) - min(r["t_first"] for r in counted)
    return {"completion_tokens": tokens, "window_s": window, "tok_s": tokens / window if window > 0 else None}


def point_duration(records: Iterable[dict]) -> float | None:
    """The wall time of a point: the latest end (t_end, else t_last) minus the earliest send, over
    the requests that have both. None when there is no such request or the span is empty."""
    spans = [(r["t_send"], r["t_end"] if r.get("t_end") is not None else r["t_last"]) for r in records
             if r.get("t_send") is not None and (r.get("t_end") is not None or r.get("t_last") is not None)]
    if not spans:
        return None
    duration = max(end for _, end in spans) - min(send for send, _ in spans)
    return duration if duration > 0 else None


def _per_second(count: float, duration: float | None) -> float | None:
    return None if duration is None else count / duration


def latency_samples(records: Iterable[dict]) -> dict[str, list[float]]:
    """The values each latency figure of a point is taken over, in the summary's order: TTFT and
    E2E of every successful request; decode, TPOT and ITL (every gap) of those that did not
    arrive in bursts (their arrival times are the buffer's). None values are left out."""
    ok = [r for r in records if r.get("ok")]
    steady = [r for r in ok if not r.get("burst")]

    def present(values):
        return [v for v in values if v is not None]

    return {
        "ttft_s": present(r.get("ttft_s") for r in ok),
        "decode_tok_s": present(r.get("decode_tok_s") for r in steady),
        "tpot_s": present(r.get("tpot_s") for r in steady),
        "itl_s": present(gap for r in steady for gap in r.get("itl_s") or ()),
        "e2e_s": present(r.get("e2e_s") for r in ok),
    }


def summarize_point(records: list[dict], streams: int) -> dict:
    """The summary of one measurement point (one prompt length at one concurrency).

    Requests whose chunks arrived in bursts (`burst`) are left out of decode_tok_s, tpot_s and
    itl_s: their arrival times are the buffer's. They stay in ttft_s, e2e_s and the throughputs,
    whose ends a burst does not move (its last chunk arrives when the buffer lets go of it).
    The throughputs are vLLM's: successful requests, their completion tokens, and their prompt
    plus completion tokens, each over the point's wall time (point_duration)."""
    ok = [r for r in records if r.get("ok")]
    per_stream = []
    for stream in range(streams):
        mine = [r for r in ok if r.get("stream") == stream]
        per_stream.append({
            "stream": stream,
            "requests": len(mine),
            "decode_tok_s": distribution(r.get("decode_tok_s") for r in mine if not r.get("burst")),
            "ttft_s": distribution(r.get("ttft_s") for r in mine),
        })
    duration = point_duration(records)
    completion_tokens = sum(r.get("completion_tokens") or 0 for r in ok)
    prompt_tokens = sum(r.get("prompt_tokens") or 0 for r in ok)
    failed = sum(1 for r in records if not r.get("ok") and not r.get("length_rejected"))
    return {
        "requests": len(records),
        "ok_requests": len(ok),
        "failed_requests": failed,
        "errors": failed,
        "early_stops": sum(1 for r in records if r.get("stopped_early")),
        "burst_requests": sum(1 for r in records if r.get("burst")),
        "prompt_tokens": distribution(r.get("prompt_tokens") for r in ok),
        **{metric: distribution(values) for metric, values in latency_samples(records).items()},
        "duration_s": duration,
        "request_throughput": _per_second(len(ok), duration),
        "output_throughput": _per_second(completion_tokens, duration),
        "total_token_throughput": _per_second(prompt_tokens + completion_tokens, duration),
        "aggregate": aggregate_throughput(ok),
        "per_stream": per_stream,
    }


def ratio(measured: float | None, reference: float | None) -> float | None:
    """measured / reference (None when either is missing or the reference is 0)."""
    if measured is None or reference is None or reference == 0:
        return None
    return measured / reference

"""Benchmark arithmetic: pure functions over recorded request timings (no I/O, no clock).

A request record is the dict benchmark.json stores under `requests` (see runner.py); the
functions here read `ok`, `completion_tokens`, `t_send`, `t_first`, `t_last`, `ttft_s`,
`decode_tok_s`, `stream` and `prompt_tokens` from it."""

from __future__ import annotations

import math
from collections.abc import Iterable


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
    """{n, median, p90, min, max} of the values that are not None (all None when there are none)."""
    present = [v for v in values if v is not None]
    if not present:
        return {"n": 0, "median": None, "p90": None, "min": None, "max": None}
    return {"n": len(present), "median": percentile(present, 50), "p90": percentile(present, 90),
            "min": min(present), "max": max(present)}


def time_to_first_token(t_send: float | None, t_first: float | None) -> float | None:
    if t_send is None or t_first is None:
        return None
    return t_first - t_send


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


def summarize_point(records: list[dict], streams: int) -> dict:
    """The summary of one measurement point (one prompt length at one concurrency)."""
    ok = [r for r in records if r.get("ok")]
    per_stream = []
    for stream in range(streams):
        mine = [r for r in ok if r.get("stream") == stream]
        per_stream.append({
            "stream": stream,
            "requests": len(mine),
            "decode_tok_s": distribution(r.get("decode_tok_s") for r in mine),
            "ttft_s": distribution(r.get("ttft_s") for r in mine),
        })
    return {
        "requests": len(records),
        "ok_requests": len(ok),
        "failed_requests": sum(1 for r in records if not r.get("ok") and not r.get("length_rejected")),
        "prompt_tokens": distribution(r.get("prompt_tokens") for r in ok),
        "ttft_s": distribution(r.get("ttft_s") for r in ok),
        "decode_tok_s": distribution(r.get("decode_tok_s") for r in ok),
        "aggregate": aggregate_throughput(ok),
        "per_stream": per_stream,
    }


def ratio(measured: float | None, reference: float | None) -> float | None:
    """measured / reference (None when either is missing or the reference is 0)."""
    if measured is None or reference is None or reference == 0:
        return None
    return measured / reference

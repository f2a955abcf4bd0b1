"""Goodput: the rate of requests that met every latency objective, and the capacity search that
walks a load sweep up to the highest load at which enough requests still meet them. Pure: the
measuring is the caller's (find_capacity calls the function it is given).

Objectives (--slo ttft=2s,tpot=100ms,e2e=30s; units s or ms, a unit is required):

| metric | per request | meets when |
|---|---|---|
| ttft | first token's arrival - send (`ttft_s`) | <= objective |
| tpot | (e2e - ttft) / (completion tokens - 1): the mean time per output token after the first; 0 for fewer than 2 tokens | <= objective |
| itl  | the LONGEST gap between two successive token arrivals (`itl_s`, a list of gaps); 0 for fewer than 2 tokens | <= objective |
| e2e  | end of the stream - send (`e2e_s`) | <= objective |

A request meets the SLO when it succeeded and meets every objective given; a failed request
never does. A request that lacks a value an objective needs (no `itl_s` list, no timing) does not
meet it either, and is counted under `unmeasured`: a missing measurement is not a pass.
Records from runner.py carry no `tpot_s`/`e2e_s`: they are derived from `t_send`, `t_first`,
`t_end` (else `t_last`) and `completion_tokens`.

itl takes the longest gap, not a percentile: a request's ITL objective then says "this stream
never paused longer than X", which is what a reader watching the tokens notices; the typical
pace is what tpot is for. Requests whose stream arrived in bursts (`burst`, buffered on the way)
are judged on what arrived, like the others: a reader behind the same buffer sees the same
pauses.

goodput(records, slo, duration_s) = requests meeting the SLO / duration_s (requests/s), and
fraction = requests meeting / all requests (failed ones included).

find_capacity(measure, loads, slo, fraction=0.9, margin=0.1) measures the loads in ascending
order; `measure(load)` is a plain (synchronous) callable returning the request records of that
load. The capacity is the highest load measured whose fraction meeting the SLO is >= `fraction`.
The walk stops after a load whose fraction is below `fraction - margin` (a clear miss), or after
the second miss in a row (a near miss once may be noise, twice is not)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from .arrivals import SpecError
from .stats import percentile

METRICS = ("ttft", "tpot", "itl", "e2e")
# vLLM's --goodput spells the end-to-end latency e2el.
ALIASES = {"e2el": "e2e"}
SLO_FLAG = "--slo"
SLO_EXAMPLE = "--slo ttft=2s,tpot=100ms,e2e=30s"
_VALUE = re.compile(r"^([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ms|s)$")


def parse_slo(text: str, flag: str = SLO_FLAG) -> dict[str, float]:
    """'ttft=2s,tpot=100ms' -> {'ttft': 2.0, 'tpot': 0.1} (seconds); SpecError naming the flag,
    the bad item and an example. A bare number is refused: vLLM's --goodput reads one as
    milliseconds, and guessing either way would silently set an objective 1000 times off."""
    items = [item.strip() for item in str(text).split(",") if item.strip()]
    if not items:
        raise SpecError(flag, "no objective given", f"give e.g. {SLO_EXAMPLE}")
    slo: dict[str, float] = {}
    for item in items:
        name, eq, value = item.partition("=")
        if not eq and ":" in item:
            raise SpecError(flag, f"{item!r} is written as vLLM's KEY:VALUE", f"write KEY=VALUE with a unit, e.g. {SLO_EXAMPLE}")
        name = ALIASES.get(name.strip().lower(), name.strip().lower())
        if not eq or name not in METRICS:
            problem = f"{item!r} is not METRIC=VALUE" if not eq else f"{item!r}: {name!r} is not one of {', '.join(METRICS)}"
            raise SpecError(flag, problem, f"give e.g. {SLO_EXAMPLE}")
        match = _VALUE.match(value.strip().lower())
        if not match:
            raise SpecError(flag, f"{item!r}: {value.strip()!r} is not a number with a unit (s or ms)",
                            f"give e.g. {name}=2s or {name}=2000ms, as in {SLO_EXAMPLE}")
        seconds = float(match.group(1)) / (1000.0 if match.group(2) == "ms" else 1.0)
        if not seconds > 0:
            raise SpecError(flag, f"{item!r}: an objective of 0 is met by no request", f"give e.g. {SLO_EXAMPLE}")
        if name in slo:
            raise SpecError(flag, f"{item!r}: {name} is given twice", f"give each metric once, e.g. {SLO_EXAMPLE}")
        slo[name] = seconds
    return slo


def format_slo(slo: dict[str, float]) -> str:
    """{'ttft': 2.0, 'tpot': 0.1} -> 'ttft=2s,tpot=100ms' (the --slo form)."""
    return ",".join(f"{name}={value * 1000:g}ms" if value < 1 else f"{name}={value:g}s" for name, value in slo.items())


def request_metrics(record: dict) -> dict[str, float | None]:
    """{ttft, tpot, itl, e2e} of one request in seconds, read from the record's ttft_s, tpot_s,
    itl_s, e2e_s or derived from its times (None when neither is there)."""
    ttft = record.get("ttft_s")
    if ttft is None:
        ttft = _difference(record.get("t_first"), record.get("t_send"))
    e2e = record.get("e2e_s")
    if e2e is None:
        end = record.get("t_end") if record.get("t_end") is not None else record.get("t_last")
        e2e = _difference(end, record.get("t_send"))
    tokens = record.get("completion_tokens")
    tpot = record.get("tpot_s")
    if tpot is None and tokens is not None:
        # vLLM's convention: a one-token answer has no time per output token and does not miss on it.
        if tokens < 2:
            tpot = 0.0
        elif e2e is not None and ttft is not None:
            tpot = (e2e - ttft) / (tokens - 1)
    gaps = record.get("itl_s")
    itl = None if gaps is None else max(gaps, default=0.0)
    return {"ttft": ttft, "tpot": tpot, "itl": itl, "e2e": e2e}


def missed_objectives(record: dict, slo: dict[str, float]) -> list[str]:
    """The objectives the request misses (every one for a failed request); [] when it meets the SLO."""
    if not record.get("ok"):
        return list(slo)
    values = request_metrics(record)
    return [name for name, limit in slo.items() if values[name] is None or values[name] > limit]


def meets(record: dict, slo: dict[str, float]) -> bool:
    """The request succeeded and met every objective of the SLO."""
    return not missed_objectives(record, slo)


def goodput(records: Iterable[dict], slo: dict[str, float], duration_s: float | None = None) -> dict:
    """{requests, ok_requests, good_requests, fraction, duration_s, goodput_rps, throughput_rps,
    missed, unmeasured}. fraction = good / all requests (None with none); goodput_rps = good /
    duration_s and throughput_rps = successful / duration_s. duration_s None: the span of the
    records, earliest t_send to latest end (t_end, else t_last); the rates are None without one.
    missed: per objective, the successful requests that missed it; unmeasured: per objective,
    the successful requests that lacked its value."""
    records = list(records)
    ok = [r for r in records if r.get("ok")]
    good = [r for r in ok if meets(r, slo)]
    missed = {name: 0 for name in slo}
    unmeasured = {name: 0 for name in slo}
    for record in ok:
        values = request_metrics(record)
        for name, limit in slo.items():
            if values[name] is None:
                unmeasured[name] += 1
            elif values[name] > limit:
                missed[name] += 1
    if duration_s is None:
        duration_s = records_span(records)
    rate_ok = duration_s is not None and duration_s > 0
    return {
        "requests": len(records),
        "ok_requests": len(ok),
        "good_requests": len(good),
        "fraction": len(good) / len(records) if records else None,
        "duration_s": duration_s,
        "goodput_rps": len(good) / duration_s if rate_ok else None,
        "throughput_rps": len(ok) / duration_s if rate_ok else None,
        "missed": missed,
        "unmeasured": unmeasured,
    }


def records_span(records: Iterable[dict]) -> float | None:
    """Latest end (t_end, else t_last) - earliest t_send of the records; None without those times."""
    sends, ends = [], []
    for record in records:
        if record.get("t_send") is not None:
            sends.append(record["t_send"])
        end = record.get("t_end") if record.get("t_end") is not None else record.get("t_last")
        if end is not None:
            ends.append(end)
    if not sends or not ends:
        return None
    return max(ends) - min(sends)


@dataclass
class Capacity:
    """The outcome of find_capacity. capacity: the highest load measured that met the SLO for at
    least `fraction` of its requests, None when none did. points: one per load measured, in
    order (the latency-throughput curve). stop: why the walk ended. note: the sentence to print."""

    capacity: float | None
    fraction: float
    slo: dict[str, float]
    points: list[dict] = field(default_factory=list)
    stop: str = ""
    note: str = ""
    may_be_higher: bool = False

    def as_dict(self) -> dict:
        return {"capacity": self.capacity, "fraction": self.fraction, "slo": dict(self.slo), "slo_text": format_slo(self.slo),
                "points": self.points, "stop": self.stop, "note": self.note, "may_be_higher": self.may_be_higher}


def find_capacity(measure: Callable[[float], list[dict]], loads: Iterable[float], slo: dict[str, float],
                  fraction: float = 0.9, margin: float = 0.1) -> Capacity:
    """Measure the loads in ascending order (measure(load) -> that load's request records) and
    return the highest load at which at least `fraction` of the requests met the SLO. The walk
    stops after a clear miss (fraction meeting below `fraction - margin`) or after two misses in
    a row; every load measured is a point of the result."""
    ordered = sorted(set(loads))
    if not ordered:
        raise ValueError("no load to measure")
    if not slo:
        raise ValueError("an empty SLO: every successful request would meet it")
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be within (0, 1], got {fraction}")
    if margin < 0:
        raise ValueError(f"margin must be >= 0, got {margin}")
    result = Capacity(capacity=None, fraction=fraction, slo=dict(slo))
    misses_in_a_row = 0
    for load in ordered:
        point = load_point(load, measure(load), slo, fraction)
        result.points.append(point)
        met = point["meets"]
        if met:
            result.capacity = load
            misses_in_a_row = 0
            continue
        misses_in_a_row += 1
        share = point["fraction"]
        if share is None or share < fraction - margin:
            result.stop = (f"stopped after load {load:g}: {_percent(share)} of its requests met the SLO, more than "
                           f"{margin * 100:g} percentage points below the {fraction:.0%} required")
            break
        if misses_in_a_row >= 2:
            result.stop = f"stopped after load {load:g}: the second load in a row below {fraction:.0%}"
            break
    else:
        result.stop = "every load was measured"
    result.note = _note(result, ordered)
    return result


def load_point(load: float, records: list[dict], slo: dict[str, float], fraction: float) -> dict:
    """One point of the capacity curve: the goodput of the load's records plus the latency
    percentiles of its successful requests."""
    point = {"load": load} | goodput(records, slo)
    point["meets"] = point["fraction"] is not None and point["fraction"] >= fraction
    per_request = [request_metrics(r) for r in records if r.get("ok")]
    for name in METRICS:
        values = [m[name] for m in per_request if m[name] is not None]
        point[f"{name}_s"] = {"n": len(values), "median": percentile(values, 50), "p90": percentile(values, 90),
                              "p99": percentile(values, 99)}
    return point


def _note(result: Capacity, ordered: list[float]) -> str:
    measured = [p["load"] for p in result.points]
    if result.capacity is None:
        first = result.points[0]
        return (f"no load met the SLO ({format_slo(result.slo)}) for {result.fraction:.0%} of its requests: at the lowest "
                f"load, {first['load']:g}, {_percent(first['fraction'])} did; try lower loads or a looser SLO")
    text = f"capacity {result.capacity:g}: the highest load at which {result.fraction:.0%} of the requests met {format_slo(result.slo)}"
    if result.capacity == ordered[-1]:
        result.may_be_higher = True
        text += f"; it is the highest load tried, so the capacity may be higher: try loads above {ordered[-1]:g}"
    below = [p["load"] for p in result.points if not p["meets"] and p["load"] < result.capacity]
    if below:
        text += (f"; load(s) {', '.join(f'{x:g}' for x in below)} below it missed: the results are noisy near the "
                 "knee, repeat them")
    elif len(measured) < len(ordered):
        text += f"; {result.stop}"
    return text


def _percent(share: float | None) -> str:
    return "none (no requests)" if share is None else f"{share:.0%}"


def _difference(later: float | None, earlier: float | None) -> float | None:
    if later is None or earlier is None or not math.isfinite(later - earlier):
        return None
    return later - earlier

"""Arrival schedules: when each of N requests is sent, as offsets in seconds from the start of a
measurement. Pure and seeded (no I/O, no clock): the same arguments give the same schedule.

Every schedule sends request 0 at offset 0 and spaces the following ones by a gap each; the gap
before request i is drawn at the rate of request i:

- constant(rate, n): every gap is 1/rate (an open loop at a fixed rate).
- poisson(rate, n, burstiness): gaps drawn from a gamma distribution with shape `burstiness` and
  scale 1/(rate * burstiness), so the mean gap is 1/rate and its variance 1/(burstiness * rate^2).
  burstiness 1 is the exponential distribution (a Poisson process); below 1 the arrivals come in
  clumps, above 1 they are more even, and infinity is `constant`. An infinite rate sends all
  requests at once.
- ramp(start_rate, end_rate, n, shape): request i is sent at the rate
  start + (end - start) * i/(n-1) (linear) or start * (end/start)^(i/(n-1)) (exponential), so
  the first gap is at nearly the start rate and the last gap is exactly 1/end_rate. The gaps are
  1/rate (deterministic) unless a burstiness is given, then they are gamma draws at that rate.
- concurrency: a closed loop (N streams, each sending its next request when the previous one
  ends, as `run --concurrency` does); it has no schedule, `LoadSpec.offsets` returns None.

`parse_load("poisson:rate=4,burstiness=0.5")` reads the command-line form into a LoadSpec; a bad
spec raises SpecError naming the flag, the problem and a fix. LOAD.md compares these schedules
with `vllm bench serve`."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from itertools import accumulate

SHAPES = ("linear", "exponential")
KINDS = ("constant", "poisson", "ramp", "concurrency")
LOAD_FLAG = "--load"
LOAD_EXAMPLES = "--load poisson:rate=4,burstiness=0.5, --load constant:rate=2, --load ramp:start=1,end=8 or --load concurrency:4"
# vLLM's benchmark seeds with 0 unless told otherwise; the same default makes two runs that
# name no seed send the same schedule.
DEFAULT_SEED = 0


class SpecError(ValueError):
    """A command-line spec that cannot be used: '<flag>: <problem>; <fix>' (the format of the
    benchmark's other usage errors)."""

    def __init__(self, flag: str, problem: str, fix: str):
        super().__init__(f"{flag}: {problem}; {fix}")
        self.flag, self.problem, self.fix = flag, problem, fix


def constant(rate: float, n: int) -> list[float]:
    """Offsets of n requests evenly spaced 1/rate apart, the first at 0 (all at 0 for an infinite rate)."""
    _check_count(n)
    _check_rate("rate", rate)
    if rate == math.inf:
        return [0.0] * n
    # i / rate rather than a running sum: no rounding drift over long schedules.
    return [i / rate for i in range(n)]


def poisson(rate: float, n: int, burstiness: float = 1.0, seed: int = DEFAULT_SEED) -> list[float]:
    """Offsets of n requests whose gaps are gamma draws with shape `burstiness` and mean 1/rate
    (burstiness 1: a Poisson process), from random.Random(seed); the first request at 0."""
    _check_count(n)
    _check_rate("rate", rate)
    _check_burstiness(burstiness)
    if rate == math.inf:
        return [0.0] * n
    rng = random.Random(seed)
    return _offsets(_gap(rng, rate, burstiness) for _ in range(n - 1)) if n else []


def ramp_rates(start_rate: float, end_rate: float, n: int, shape: str = "linear") -> list[float]:
    """The rate of each of n requests rising from start_rate (request 0) to end_rate (request
    n-1), linearly or exponentially in the request's index."""
    _check_count(n)
    _check_rate("start_rate", start_rate, finite=True)
    _check_rate("end_rate", end_rate, finite=True)
    if end_rate < start_rate:
        raise ValueError(f"end_rate {end_rate} is below start_rate {start_rate}: a ramp rises")
    if shape not in SHAPES:
        raise ValueError(f"shape must be one of {', '.join(SHAPES)}, got {shape!r}")
    rates = []
    for i in range(n):
        progress = i / max(n - 1, 1)
        if shape == "linear":
            rates.append(start_rate + (end_rate - start_rate) * progress)
        else:
            rates.append(start_rate * (end_rate / start_rate) ** progress)
    if n > 1:
        rates[-1] = float(end_rate)  # exactly the end rate, whatever the power's rounding
    return rates


def ramp(start_rate: float, end_rate: float, n: int, shape: str = "linear", burstiness: float | None = None,
         seed: int = DEFAULT_SEED) -> list[float]:
    """Offsets of n requests sent at a rate rising from start_rate to end_rate (ramp_rates): the
    gap before request i is 1/rate_i, or a gamma draw with mean 1/rate_i when a burstiness is
    given; the first request at 0."""
    rates = ramp_rates(start_rate, end_rate, n, shape)
    if not n:
        return []
    if burstiness is None:
        return _offsets(1.0 / rate for rate in rates[1:])
    _check_burstiness(burstiness)
    rng = random.Random(seed)
    return _offsets(_gap(rng, rate, burstiness) for rate in rates[1:])


@dataclass(frozen=True)
class LoadSpec:
    """A parsed --load: `kind` is constant, poisson, ramp or concurrency; the other fields are
    those the kind uses (None otherwise)."""

    kind: str
    rate: float | None = None
    burstiness: float | None = None
    seed: int | None = None
    start: float | None = None
    end: float | None = None
    shape: str | None = None
    streams: int | None = None

    def offsets(self, n: int) -> list[float] | None:
        """The send offsets of n requests; None for a closed loop (concurrency), which has no schedule."""
        if self.kind == "constant":
            return constant(self.rate, n)
        if self.kind == "poisson":
            return poisson(self.rate, n, self.burstiness, self.seed)
        if self.kind == "ramp":
            return ramp(self.start, self.end, n, self.shape, self.burstiness, self.seed)
        return None

    def __str__(self) -> str:
        """The spec in the command-line form, every default spelled out (for reports)."""
        if self.kind == "concurrency":
            return f"concurrency:{self.streams}"
        fields = {"constant": ("rate",), "poisson": ("rate", "burstiness", "seed"),
                  "ramp": ("start", "end", "shape", "burstiness", "seed")}[self.kind]
        values = [(name, getattr(self, name)) for name in fields]
        return f"{self.kind}:" + ",".join(f"{name}={_text(value)}" for name, value in values if value is not None)


def parse_load(text: str, flag: str = LOAD_FLAG) -> LoadSpec:
    """KIND:key=value,... -> LoadSpec; SpecError naming `flag`, the problem and an example.

        constant:rate=R                    R requests/s (inf: all at once)
        poisson:rate=R[,burstiness=B][,seed=S]
        ramp:start=R0,end=R1[,shape=linear|exponential][,burstiness=B][,seed=S]
        concurrency:N                      N streams back to back (a closed loop)"""
    spec = str(text).strip()
    kind, sep, rest = spec.partition(":")
    kind = kind.strip().lower()
    if kind not in KINDS:
        problem = "no load given" if not spec else f"{kind or spec!r} is not a load kind ({', '.join(KINDS)})"
        raise SpecError(flag, problem, f"give e.g. {LOAD_EXAMPLES}")
    if kind == "concurrency":
        value = rest.strip()
        if value.lower().startswith("streams="):
            value = value.split("=", 1)[1].strip()
        if not value.isdigit() or int(value) < 1:
            raise SpecError(flag, f"concurrency needs a positive number of streams, got {value or 'nothing'!r}",
                            f"give e.g. {flag} concurrency:4")
        return LoadSpec(kind="concurrency", streams=int(value))

    allowed = {"constant": ("rate",), "poisson": ("rate", "burstiness", "seed"),
               "ramp": ("start", "end", "shape", "burstiness", "seed")}[kind]
    required = {"constant": ("rate",), "poisson": ("rate",), "ramp": ("start", "end")}[kind]
    example = {"constant": "constant:rate=2", "poisson": "poisson:rate=4,burstiness=0.5",
               "ramp": "ramp:start=1,end=8,shape=linear"}[kind]
    pairs: dict[str, str] = {}
    for item in (part.strip() for part in rest.split(",")):
        if not item:
            continue
        key, eq, value = item.partition("=")
        key, value = key.strip().lower(), value.strip()
        if not eq or not key or not value:
            raise SpecError(flag, f"{item!r} is not key=value", f"give e.g. {flag} {example}")
        if key not in allowed:
            raise SpecError(flag, f"{kind} takes no {key!r} (it takes {', '.join(allowed)})", f"give e.g. {flag} {example}")
        if key in pairs:
            raise SpecError(flag, f"{key} is given twice", f"give each key once, e.g. {flag} {example}")
        pairs[key] = value
    missing = [key for key in required if key not in pairs]
    if missing:
        raise SpecError(flag, f"{kind} needs {' and '.join(missing)}", f"give e.g. {flag} {example}")

    def number(key: str, *, allow_inf: bool) -> float | None:
        if key not in pairs:
            return None
        try:
            value = float(pairs[key])
        except ValueError:
            value = math.nan
        if not value > 0 or (value == math.inf and not allow_inf):
            kind_of = "a positive number" + (" or inf" if allow_inf else "")
            raise SpecError(flag, f"{key}={pairs[key]} is not {kind_of}", f"give e.g. {flag} {example}")
        return value

    burstiness = number("burstiness", allow_inf=True)
    seed = None
    if kind != "constant":
        seed = DEFAULT_SEED
        if "seed" in pairs:
            try:
                seed = int(pairs["seed"])
            except ValueError:
                raise SpecError(flag, f"seed={pairs['seed']} is not an integer", f"give e.g. {flag} {example},seed=1") from None
    if kind == "constant":
        return LoadSpec(kind=kind, rate=number("rate", allow_inf=True))
    if kind == "poisson":
        return LoadSpec(kind=kind, rate=number("rate", allow_inf=True), burstiness=burstiness or 1.0, seed=seed)
    start, end = number("start", allow_inf=False), number("end", allow_inf=False)
    if end < start:
        raise SpecError(flag, f"end={_text(end)} is below start={_text(start)}: a ramp rises",
                        f"give the lower rate as start, e.g. {flag} ramp:start={_text(end)},end={_text(start)}")
    shape = pairs.get("shape", "linear").lower()
    if shape not in SHAPES:
        raise SpecError(flag, f"shape={pairs['shape']} is not {' or '.join(SHAPES)}",
                        f"give e.g. {flag} ramp:start=1,end=8,shape=exponential")
    return LoadSpec(kind=kind, start=start, end=end, shape=shape, burstiness=burstiness, seed=seed)


def _gap(rng: random.Random, rate: float, burstiness: float) -> float:
    if burstiness == math.inf:
        return 1.0 / rate  # the gamma distribution's limit: no spread left
    return rng.gammavariate(burstiness, 1.0 / (rate * burstiness))


def _offsets(gaps) -> list[float]:
    return list(accumulate(gaps, initial=0.0))


def _check_count(n: int) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"the number of requests must be an integer >= 0, got {n!r}")


def _check_rate(name: str, rate: float, finite: bool = False) -> None:
    if not isinstance(rate, (int, float)) or not rate > 0 or (finite and rate == math.inf):
        raise ValueError(f"{name} must be a positive{' finite' if finite else ''} number of requests/s, got {rate!r}")


def _check_burstiness(burstiness: float) -> None:
    if not isinstance(burstiness, (int, float)) or not burstiness > 0:
        raise ValueError(f"burstiness must be a positive number (1 = Poisson), got {burstiness!r}")


def _text(value) -> str:
    if isinstance(value, float):
        return "inf" if value == math.inf else f"{value:g}"
    return str(value)

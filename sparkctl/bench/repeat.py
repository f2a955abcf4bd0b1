"""--repeat K: each measurement point (and each workload's measurement) run K times, and for each
headline figure the mean over the K repetitions with its two-sided 95 % Student's t confidence
interval. Pure arithmetic; the interval is compare.confidence_interval, the same t distribution
the before/after comparison judges by (LOAD.md, "Comparisons"), not a second one.

A repetition's headline figures are the figures of its own requests: median TTFT, median TPOT,
median ITL (stats.summarize_point's, bursts left out as there) and the output throughput
(completion tokens / the repetition's wall time). The interval is over those K numbers, one per
repetition: it says how far the figure moves from one run of the same test to the next, which
is what a before/after reader needs, and it does not pretend the requests of one run are
independent samples."""

from __future__ import annotations

from collections.abc import Iterable

from . import stats
from .compare import DEFAULT_LEVEL, confidence_interval

# (name in benchmark.json, the summary's distribution, its statistic); a None statistic is a
# plain number of the summary.
HEADLINES = (
    ("ttft_median_s", "ttft_s", "median"),
    ("tpot_median_s", "tpot_s", "median"),
    ("itl_median_s", "itl_s", "median"),
    ("output_throughput", "output_throughput", None),
)


def interval(values: Iterable[float | None], level: float = DEFAULT_LEVEL) -> dict:
    """{n, mean, half_width, low, high, values} of the values that are not None: the mean and its
    two-sided Student's t interval at `level`. half_width, low and high are None for fewer than
    two values (no spread to estimate); everything but n and values is None for none."""
    present = [v for v in values if v is not None]
    if not present:
        return {"n": 0, "mean": None, "half_width": None, "low": None, "high": None, "values": []}
    estimate = confidence_interval(present, level)
    return {"n": len(present), "mean": estimate.mean, "half_width": estimate.half_width, "low": estimate.low,
            "high": estimate.high, "values": present}


def headline_figures(summary: dict) -> dict:
    """The headline figures of one repetition's summary (stats.summarize_point)."""
    figures = {}
    for name, key, statistic in HEADLINES:
        value = summary.get(key)
        figures[name] = (value or {}).get(statistic) if statistic else value
    return figures


def by_repetition(records: Iterable[dict]) -> dict[int, list[dict]]:
    """The records grouped by their `repetition` (0 when a record has none), in order."""
    groups: dict[int, list[dict]] = {}
    for record in records:
        groups.setdefault(record.get("repetition") or 0, []).append(record)
    return dict(sorted(groups.items()))


def summarize(records: list[dict], streams: int, level: float = DEFAULT_LEVEL) -> dict:
    """The repetitions of one point: {k, level, runs, figures}. runs: per repetition its headline
    figures; figures: per headline figure the interval over the repetitions."""
    runs = []
    for repetition, mine in by_repetition(records).items():
        runs.append({"repetition": repetition} | headline_figures(stats.summarize_point(mine, streams)))
    return {"k": len(runs), "level": level, "runs": runs,
            "figures": {name: interval((run[name] for run in runs), level) for name, _, _ in HEADLINES}}


def figures_interval(runs: list[dict], names: Iterable[str], level: float = DEFAULT_LEVEL) -> dict:
    """Per named figure, the interval over the runs' values of it (a workload's repetitions)."""
    return {name: interval((run.get(name) for run in runs), level) for name in names}

"""Repetitions and before/after comparisons of benchmark.json documents. Pure arithmetic apart
from load_document, which reads a file.

confidence_interval(values, level) is the mean and the half-width of its two-sided
Student's t interval: t(1 - (1 - level)/2, n - 1) * s / sqrt(n), s the sample standard
deviation. The t distribution is exact for df <= 1000: its closed-form CDF for integer degrees
of freedom (a finite series in cos(atan(t / sqrt(df)))), inverted by bisection for the
quantile. Above 1000 the quantile is the Cornish-Fisher expansion around the normal one and the
CDF a corrected normal; both are within 1e-6 of the exact values there.

compare(before, after) matches the measured points of the two runs by (prompt tokens target,
streams), a rate point (no streams) by (prompt tokens target, its load spec), and, for each
headline figure, gives the before and after values, after/before and a verdict:

| figure | shown | judged on | better |
|---|---|---|---|
| median TTFT (s) | median of the successful requests' `ttft_s` | those per-request values | lower |
| median decode (tok/s) | median of the successful requests' `decode_tok_s` (not `burst` ones) | those per-request values | higher |
| aggregate (tok/s) | the point's `summary.aggregate.tok_s` (mean over repetitions) | one value per repetition | higher |

The verdict is Welch's t-test (unequal variances, Welch-Satterthwaite degrees of freedom,
rounded down, which makes the p value slightly conservative) on the two samples' MEANS,
two-sided at 1 - level (0.05 by default): p below it and the after mean better -> "faster",
worse -> "slower", otherwise "within noise". With fewer than two values on a side there is no
variance to judge by: "no noise estimate". The aggregate is one number per run, so it needs
repetitions of each run (before and after may each be a list of documents: their per-request
values are pooled and their aggregates are the samples). Requests of one point are treated as
independent samples, which they are not quite (the streams share the server, back-to-back
requests share a queue): the verdict is a guide, repetitions settle it."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist, fmean, stdev
from typing import NamedTuple

from .stats import percentile

DEFAULT_LEVEL = 0.95
# Beyond this many degrees of freedom the exact series costs more than it is worth: the
# Cornish-Fisher expansion is within 1e-6 of the quantile there.
EXACT_DF_LIMIT = 1000
# Settings that change what a figure means: a comparison across them compares two different tests.
SETTINGS_THAT_MATTER = ("model", "endpoint", "max_tokens", "requests_per_stream", "ignore_eos")


@dataclass(frozen=True)
class Headline:
    key: str
    title: str
    better: str  # "lower" or "higher"
    per_request: bool  # judged on per-request values (else on one value per repetition)


HEADLINES = (
    Headline("ttft_s", "median TTFT (s)", "lower", True),
    Headline("decode_tok_s", "median decode (tok/s)", "higher", True),
    Headline("aggregate_tok_s", "aggregate (tok/s)", "higher", False),
)


class Interval(NamedTuple):
    mean: float
    half_width: float | None  # None for a single value: no spread to estimate

    @property
    def low(self) -> float | None:
        return None if self.half_width is None else self.mean - self.half_width

    @property
    def high(self) -> float | None:
        return None if self.half_width is None else self.mean + self.half_width


class Welch(NamedTuple):
    t: float
    df: float
    p: float


class DocumentError(Exception):
    """A file that is not a readable benchmark.json: '<path>: <problem>; <fix>'."""

    def __init__(self, path, problem: str, fix: str = "give a benchmark.json written by `python -m sparkctl.bench run`"):
        super().__init__(f"{path}: {problem}; {fix}")


# ---- Student's t ------------------------------------------------------------------------------


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with df degrees of freedom (a non-integer df is rounded down)."""
    nu = max(1, math.floor(df))
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    central = _central(abs(t), nu)  # P(|T| <= |t|)
    return 0.5 + central / 2 if t >= 0 else 0.5 - central / 2


def t_quantile(p: float, df: float) -> float:
    """The t with P(T <= t) = p for Student's t with df degrees of freedom (rounded down)."""
    if not 0 < p < 1:
        raise ValueError(f"p must be within (0, 1), got {p}")
    nu = max(1, math.floor(df))
    if p < 0.5:
        return -t_quantile(1 - p, nu)
    if p == 0.5:
        return 0.0
    if nu > EXACT_DF_LIMIT:
        return _cornish_fisher(NormalDist().inv_cdf(p), nu)
    target = 2 * p - 1  # P(|T| <= t)
    low, high = 0.0, 1.0
    while _central(high, nu) < target:
        low, high = high, high * 2
    for _ in range(200):
        middle = (low + high) / 2
        if _central(middle, nu) < target:
            low = middle
        else:
            high = middle
        if high - low <= 1e-12 * high:
            break
    return (low + high) / 2


def _central(t: float, nu: int) -> float:
    """P(|T| <= t), t >= 0, integer nu: the closed-form series in theta = atan(t / sqrt(nu))
    (a finite sum of powers of cos(theta), odd and even nu apart)."""
    if nu > EXACT_DF_LIMIT:
        # Corrected normal approximation: t (1 - 1/(4 nu)) / sqrt(1 + t^2 / (2 nu)) is close to normal.
        z = t * (1 - 1 / (4 * nu)) / math.sqrt(1 + t * t / (2 * nu))
        return 2 * NormalDist().cdf(z) - 1
    theta = math.atan(t / math.sqrt(nu))
    sin, cos = math.sin(theta), math.cos(theta)
    cos2 = cos * cos
    if nu % 2:
        if nu == 1:
            return 2 * theta / math.pi
        term = total = cos
        for k in range(3, nu - 1, 2):
            term *= cos2 * (k - 1) / k
            total += term
        return min(1.0, 2 / math.pi * (theta + sin * total))
    term = total = 1.0
    for k in range(2, nu - 1, 2):
        term *= cos2 * (k - 1) / k
        total += term
    return min(1.0, sin * total)


def _cornish_fisher(z: float, nu: int) -> float:
    g1 = (z ** 3 + z) / 4
    g2 = (5 * z ** 5 + 16 * z ** 3 + 3 * z) / 96
    g3 = (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / 384
    return z + g1 / nu + g2 / nu ** 2 + g3 / nu ** 3


# ---- intervals and tests ----------------------------------------------------------------------


def confidence_interval(values: Iterable[float], level: float = DEFAULT_LEVEL) -> Interval:
    """The mean of the values and the half-width of its two-sided Student's t interval at
    `level` (None for a single value). ValueError for no values."""
    present = [float(v) for v in values if v is not None]
    if not present:
        raise ValueError("no values")
    if not 0 < level < 1:
        raise ValueError(f"level must be within (0, 1), got {level}")
    mean = fmean(present)
    if len(present) < 2:
        return Interval(mean, None)
    t = t_quantile(1 - (1 - level) / 2, len(present) - 1)
    return Interval(mean, t * stdev(present) / math.sqrt(len(present)))


def welch(a: Sequence[float], b: Sequence[float]) -> Welch | None:
    """Welch's t-test of mean(b) - mean(a): (t, df, two-sided p); None with fewer than two values
    in either sample. Both samples without spread: p 1 for equal means, 0 for different ones."""
    if len(a) < 2 or len(b) < 2:
        return None
    mean_a, mean_b = fmean(a), fmean(b)
    share_a, share_b = stdev(a) ** 2 / len(a), stdev(b) ** 2 / len(b)
    se2 = share_a + share_b
    if se2 == 0:
        same = mean_a == mean_b
        return Welch(0.0 if same else math.copysign(math.inf, mean_b - mean_a), math.inf, 1.0 if same else 0.0)
    t = (mean_b - mean_a) / math.sqrt(se2)
    df = se2 ** 2 / (share_a ** 2 / (len(a) - 1) + share_b ** 2 / (len(b) - 1))
    p = 2 * (1 - t_cdf(abs(t), df))
    return Welch(t, df, max(0.0, min(1.0, p)))


def verdict(test: Welch | None, better: str, level: float = DEFAULT_LEVEL) -> str:
    """"faster", "slower", "within noise", or "no noise estimate" (no test possible)."""
    if test is None:
        return "no noise estimate"
    if test.p >= 1 - level:
        return "within noise"
    improved = test.t < 0 if better == "lower" else test.t > 0
    return "faster" if improved else "slower"


# ---- documents ----------------------------------------------------------------------------------


def load_document(path: str | Path) -> dict:
    """The benchmark.json at path; DocumentError naming the file when it cannot be read or is not one."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DocumentError(path, "no such file") from None
    except IsADirectoryError:
        raise DocumentError(path, "is a directory", f"give the benchmark.json inside it, e.g. {path / 'benchmark.json'}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DocumentError(path, f"cannot be read ({getattr(exc, 'strerror', None) or exc})") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DocumentError(path, f"is not JSON ({exc.msg} at line {exc.lineno})") from None
    problem = document_problem(doc)
    if problem:
        raise DocumentError(path, problem)
    return doc


def document_problem(doc) -> str | None:
    """Why doc is not a benchmark.json compare can read, or None."""
    if not isinstance(doc, dict):
        return "is not a benchmark.json (not a JSON object)"
    if not isinstance(doc.get("points"), list):
        return "is not a benchmark.json (no `points` list)"
    for point in doc["points"]:
        if not isinstance(point, dict) or not {"point", "prompt_tokens_target", "streams"} <= point.keys():
            return "is not a benchmark.json (a point lacks point, prompt_tokens_target or streams)"
    if not isinstance(doc.get("requests", []), list):
        return "is not a benchmark.json (`requests` is not a list)"
    return None


def compare(before: dict | Sequence[dict], after: dict | Sequence[dict], level: float = DEFAULT_LEVEL) -> dict:
    """Before/after comparison of benchmark.json documents (each side one document or a list of
    repetitions): {level, before, after, rows, only_before, only_after, not_measured, settings_differ}.
    rows: one per point in both and headline figure, {prompt_tokens, streams, load, figure, title,
    better, before, after, ratio, before_n, after_n, before_ci, after_ci, p, verdict}; load is the
    spec of a rate point (its streams None), None for a closed loop."""
    before_docs, after_docs = _as_list(before), _as_list(after)
    for side, docs in (("before", before_docs), ("after", after_docs)):
        for doc in docs:
            problem = document_problem(doc)
            if problem:
                raise ValueError(f"{side}: {problem}")
    samples_before, samples_after = _samples(before_docs), _samples(after_docs)
    keys_before, keys_after = set(samples_before), set(samples_after)
    rows = []
    for key in sorted(keys_before & keys_after, key=_order):
        for headline in HEADLINES:
            rows.append(_row(key, headline, samples_before[key], samples_after[key], level))
    not_measured = []
    for side, docs in (("before", before_docs), ("after", after_docs)):
        for doc in docs:
            for point in doc["points"]:
                key = _key(point)
                if not _measured(point) and key not in (samples_before if side == "before" else samples_after):
                    not_measured.append({"side": side} | _point_name(key)
                                        | {"status": point.get("status"), "reason": point.get("reason")})
    return {
        "level": level,
        "before": _describe(before_docs),
        "after": _describe(after_docs),
        "rows": rows,
        "only_before": [_point_name(k) for k in sorted(keys_before - keys_after, key=_order)],
        "only_after": [_point_name(k) for k in sorted(keys_after - keys_before, key=_order)],
        "not_measured": _unique(not_measured),
        "settings_differ": _settings_differ(before_docs, after_docs),
    }


def render_markdown(result: dict, before_name: str = "before", after_name: str = "after") -> str:
    """The comparison as Markdown: a table of the rows, then the points only one side has."""
    level = result["level"]
    lines = [f"# Benchmark comparison: {before_name} -> {after_name}", ""]
    lines.append(f"- before: {_side_text(result['before'])}")
    lines.append(f"- after: {_side_text(result['after'])}")
    lines.append(f"- verdict: Welch's t-test of the means at {1 - level:.2g} (two-sided); figures shown are medians "
                 "for TTFT and decode, means over repetitions for aggregate")
    for difference in result["settings_differ"]:
        lines.append(f"- **settings differ**: {difference['setting']}: {difference['before']} -> {difference['after']}")
    lines.append("")
    if result["rows"]:
        rates = any(row.get("load") for row in result["rows"])
        header = ["prompt tokens", "load" if rates else "streams", "figure", "before", "after", "after/before", "p", "verdict"]
        lines += ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
        for row in result["rows"]:
            cells = [str(row["prompt_tokens"]), _load_cell(row) if rates else str(row["streams"]), row["title"],
                     _value(row["before"], row["before_n"]), _value(row["after"], row["after_n"]), _ratio(row["ratio"]), _p(row["p"]),
                     f"**{row['verdict']}**" if row["verdict"] in ("faster", "slower") else row["verdict"]]
            lines.append("| " + " | ".join(cells) + " |")
        unjudged = {row["figure"] for row in result["rows"] if row["verdict"] == "no noise estimate"}
        if "aggregate_tok_s" in unjudged:
            lines += ["", "The aggregate is one value per run: repeat each run and give the repetitions "
                          "(`compare --also-before FILE --also-after FILE`) to judge it."]
        if unjudged - {"aggregate_tok_s"}:
            lines += ["", "TTFT and decode are judged on the per-request values: a point with fewer than two on a "
                          "side (or a document without request records) shows its medians unjudged."]
    else:
        lines.append("No measured point is in both runs.")
    for side, name in (("only_before", before_name), ("only_after", after_name)):
        if result[side]:
            lines += ["", f"Only in {name}: " + ", ".join(_where(p) for p in result[side])]
    if result["not_measured"]:
        lines += ["", "Not measured:"]
        for item in result["not_measured"]:
            lines.append(f"- {before_name if item['side'] == 'before' else after_name}: {_where(item)}: {item['status']}"
                         + (f" ({item['reason']})" if item["reason"] else ""))
    return "\n".join(lines) + "\n"


# ---- helpers ------------------------------------------------------------------------------------


def _as_list(docs: dict | Sequence[dict]) -> list[dict]:
    docs = [docs] if isinstance(docs, dict) else list(docs)
    if not docs:
        raise ValueError("no document on one side")
    return docs


def _key(point: dict) -> tuple[int, int | None, str | None]:
    """(prompt tokens target, streams, None) of a closed loop; (target, None, load spec) of a rate
    point. Reports written before loads existed have closed loops only, and match these."""
    if point["streams"] is not None:
        return point["prompt_tokens_target"], point["streams"], None
    return point["prompt_tokens_target"], None, point.get("load")


def _order(key: tuple) -> tuple:
    """Closed loops by streams, then rate points by spec, each prompt length in turn."""
    target, streams, load = key
    return target, streams is None, streams or 0, load or ""


def _where(item: dict) -> str:
    if item.get("streams") is None and item.get("load"):
        return f"prompt {item['prompt_tokens']} at {item['load']}"
    return f"prompt {item['prompt_tokens']} x {item['streams']} stream(s)"


def _load_cell(row: dict) -> str:
    return f"`{row['load']}`" if row.get("load") else f"concurrency:{row['streams']}"


def _measured(point: dict) -> bool:
    """The point has a summary with at least one successful request (a point whose every request
    failed has figures of nothing)."""
    summary = point.get("summary")
    return bool(summary) and summary.get("ok_requests", 1) > 0


def _point_name(key: tuple) -> dict:
    """{prompt_tokens, streams}, and the load of a rate point."""
    return {"prompt_tokens": key[0], "streams": key[1]} | ({"load": key[2]} if key[2] else {})


def _samples(docs: list[dict]) -> dict[tuple, dict]:
    """Per measured point: the pooled per-request values of each figure, the per-run aggregates,
    and the summaries' medians (the fallback when a document kept no request records)."""
    samples: dict[tuple, dict] = {}
    for doc in docs:
        by_point: dict[int, list[dict]] = {}
        for record in doc.get("requests") or []:
            if record.get("ok") and record.get("phase", "measure") != "warmup":
                by_point.setdefault(record.get("point"), []).append(record)
        for point in doc["points"]:
            if not _measured(point):
                continue
            summary = point["summary"]
            entry = samples.setdefault(_key(point), {"ttft_s": [], "decode_tok_s": [], "aggregate_tok_s": [],
                                                     "summary_ttft_s": [], "summary_decode_tok_s": []})
            records = by_point.get(point["point"], [])
            for figure in ("ttft_s", "decode_tok_s"):
                # A stream that arrived in bursts (buffered on its way) has the buffer's decode
                # rate: stats.summarize_point leaves it out of decode_tok_s, and so does this.
                entry[figure] += [r[figure] for r in records if r.get(figure) is not None
                                  and not (figure == "decode_tok_s" and r.get("burst"))]
                median = (summary.get(figure) or {}).get("median")
                if median is not None:
                    entry[f"summary_{figure}"].append(median)
            aggregate = (summary.get("aggregate") or {}).get("tok_s")
            if aggregate is not None:
                entry["aggregate_tok_s"].append(aggregate)
    return samples


def _row(key: tuple, headline: Headline, before: dict, after: dict, level: float) -> dict:
    a, b = before[headline.key], after[headline.key]
    if headline.per_request:
        # Without request records only the summaries' medians are left: shown, not judged.
        value_a = percentile(a, 50) if a else _mean(before[f"summary_{headline.key}"])
        value_b = percentile(b, 50) if b else _mean(after[f"summary_{headline.key}"])
    else:
        value_a, value_b = _mean(a), _mean(b)
    test = welch(a, b)
    return {
        "prompt_tokens": key[0], "streams": key[1], "load": key[2], "figure": headline.key, "title": headline.title,
        "better": headline.better, "before": value_a, "after": value_b,
        "ratio": value_b / value_a if value_a and value_b is not None else None,
        "before_n": len(a), "after_n": len(b),
        "before_ci": _interval(a, level), "after_ci": _interval(b, level),
        "p": None if test is None else test.p,
        "verdict": verdict(test, headline.better, level),
    }


def _interval(values: list[float], level: float) -> dict | None:
    if not values:
        return None
    interval = confidence_interval(values, level)
    return {"mean": interval.mean, "half_width": interval.half_width}


def _mean(values: list[float]) -> float | None:
    return fmean(values) if values else None


def _describe(docs: list[dict]) -> dict:
    return {"runs": len(docs), "labels": [doc.get("label") or "" for doc in docs],
            "started_at": [doc.get("started_at") for doc in docs]}


def _settings_differ(before: list[dict], after: list[dict]) -> list[dict]:
    differences = []
    for name in SETTINGS_THAT_MATTER:
        values_before = {json.dumps((doc.get("settings") or {}).get(name)) for doc in before}
        values_after = {json.dumps((doc.get("settings") or {}).get(name)) for doc in after}
        if values_before != values_after:
            differences.append({"setting": name, "before": ", ".join(sorted(values_before)),
                                "after": ", ".join(sorted(values_after))})
    return differences


def _unique(items: list[dict]) -> list[dict]:
    seen, kept = set(), []
    for item in items:
        marker = json.dumps(item, sort_keys=True)
        if marker not in seen:
            seen.add(marker)
            kept.append(item)
    return kept


def _side_text(side: dict) -> str:
    labels = ", ".join(label for label in side["labels"] if label) or "unlabelled"
    started = ", ".join(s for s in side["started_at"] if s)
    return f"{side['runs']} run(s) ({labels})" + (f", started {started}" if started else "")


def _value(value: float | None, n: int) -> str:
    if value is None:
        return "n/a"
    text = f"{value:.3f}" if abs(value) < 10 else f"{value:,.1f}"
    return f"{text} (n={n})"


def _ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}x"


def _p(value: float | None) -> str:
    if value is None:
        return "n/a"
    return "<0.001" if value < 0.001 else f"{value:.3f}"

"""The PNG plots: the three of the closed loops, measured points beside the profile's published
reference, with rate loads the latency-throughput curve (latency_vs_throughput.png: median
TTFT and TPOT against the output throughput each load achieved, the SLO's objectives and the
capacity marked), and with --depth-sweep the speeds against context depth (depth_sweep.png:
prefill and decode tok/s at each depth).

Each plot is built from `series` (plain data, stored in benchmark.json under `plots` so
what was drawn can be checked without reading pixels); the figure is drawn from exactly
that data with matplotlib's object API on the Agg backend (no display, no global pyplot
state). A reference at prompt_tokens 0 means "short prompt": it is drawn at half the
shortest requested (or referenced) prompt length, annotated and ticked "short"."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import FuncFormatter, MaxNLocator, NullLocator  # noqa: E402

# Drawn for every run with closed loops (and for a run without any point, as before loads existed).
FILES = {
    "decode_vs_context": "decode_vs_context.png",
    "ttft_vs_context": "ttft_vs_context.png",
    "throughput_vs_streams": "throughput_vs_streams.png",
}
# Drawn for a run with rate loads.
RATE_FILES = {"latency_vs_throughput": "latency_vs_throughput.png"}
# Drawn for a run with --depth-sweep.
DEPTH_FILES = {"depth_sweep": "depth_sweep.png"}
ALL_FILES = FILES | RATE_FILES | DEPTH_FILES
# benchmark.json's workload keys: a run of workloads alone draws no closed-loop plot.
WORKLOAD_KEYS = ("dataset", "prefix_sharing", "depth_sweep")
DEPTH_PANELS = (("prefill_tok_s", "prefill tok/s (prompt tokens / TTFT)"), ("decode_tok_s", "decode tok/s (one stream)"))
SLO_STYLE = {"linestyle": "--", "color": "tab:red", "linewidth": 1}
CAPACITY_STYLE = {"marker": "o", "markersize": 16, "markerfacecolor": "none", "markeredgecolor": "tab:green",
                  "markeredgewidth": 2, "linestyle": "none", "zorder": 6}
# Measured lines get distinct, shrinking markers so equal values (e.g. 1 and 2 streams below
# a server's cap) stay visible on top of each other; the reference is a red star above them.
MEASURED_MARKERS = (("o", 9), ("s", 7), ("^", 6), ("D", 4), ("v", 4), ("x", 6))
REFERENCE_STYLE = {"marker": "*", "markersize": 14, "linestyle": ":", "color": "tab:red", "zorder": 5}
SHORT_PROMPT_FALLBACK = 1024


def _summary_value(point: dict, metric: str, stat: str):
    summary = point.get("summary") or {}
    if metric == "aggregate":
        return (summary.get("aggregate") or {}).get("tok_s")
    return (summary.get(metric) or {}).get(stat)


def _measured_x(point: dict):
    """The prompt length actually sent (usage.prompt_tokens median), else the target."""
    actual = ((point.get("summary") or {}).get("prompt_tokens") or {}).get("median")
    return actual if actual is not None else point["prompt_tokens_target"]


def context_series(doc: dict, metric: str) -> list[dict]:
    """Series of `metric` (decode_tok_s or ttft_s) against prompt tokens: one measured line
    per stream count, then the reference."""
    series = []
    for streams in doc["settings"]["concurrency"]:
        chosen = [p for p in doc["points"] if p["streams"] == streams and _summary_value(p, metric, "median") is not None]
        if not chosen:
            continue
        chosen.sort(key=_measured_x)
        series.append({
            "kind": "measured", "label": f"measured, {streams} stream{'s' if streams > 1 else ''}",
            "x": [_measured_x(p) for p in chosen],
            "y": [_summary_value(p, metric, "median") for p in chosen],
            "y_min": [_summary_value(p, metric, "min") for p in chosen],
            "y_max": [_summary_value(p, metric, "max") for p in chosen],
            "streams": streams,
        })
    reference = doc.get("reference") or {}
    entries = reference.get(metric) or []
    if entries:
        positive = list(doc["settings"]["prompt_tokens"]) + [e["prompt_tokens"] for e in entries if e["prompt_tokens"] > 0]
        short_x = min(positive) / 2 if positive else SHORT_PROMPT_FALLBACK
        series.append({
            "kind": "reference", "label": f"reference: {reference.get('source')}",
            "x": [e["prompt_tokens"] or short_x for e in entries],
            "y": [e["value"] for e in entries],
            "prompt_tokens": [e["prompt_tokens"] for e in entries],
            "short_prompt_x": short_x if any(e["prompt_tokens"] == 0 for e in entries) else None,
        })
    return series


def _is_rate(point: dict) -> bool:
    return point.get("streams") is None and bool(point.get("load"))


def throughput_series(doc: dict) -> list[dict]:
    series = []
    for target in doc["settings"]["prompt_tokens"]:
        chosen = sorted((p for p in doc["points"] if p["prompt_tokens_target"] == target and not _is_rate(p)
                         and _summary_value(p, "aggregate", None) is not None), key=lambda p: p["streams"])
        if chosen:
            series.append({"kind": "measured", "label": f"measured, {target}-token prompt", "prompt_tokens": target,
                           "x": [p["streams"] for p in chosen], "y": [_summary_value(p, "aggregate", None) for p in chosen]})
    reference = doc.get("reference") or {}
    entries = reference.get("throughput_tok_s") or []
    if entries:
        series.append({"kind": "reference", "label": f"reference: {reference.get('source')}",
                       "x": [e["streams"] for e in entries], "y": [e["value"] for e in entries]})
    return series


def latency_series(doc: dict) -> list[dict]:
    """The rate points' latency-throughput curve: per prompt length, in the order measured, the
    output tok/s each load achieved (x) and its median TTFT and TPOT; then each objective of the
    SLO on TTFT or TPOT, and the capacity's point."""
    series = []
    for target in doc["settings"]["prompt_tokens"]:
        chosen = [p for p in doc["points"] if p["prompt_tokens_target"] == target and _is_rate(p)
                  and (p.get("summary") or {}).get("output_throughput") is not None]
        if chosen:
            series.append({
                "kind": "measured", "label": f"measured, {target}-token prompt", "prompt_tokens": target,
                "load": [p["load"] for p in chosen], "offered_rate": [p.get("offered_rate") for p in chosen],
                "x": [p["summary"]["output_throughput"] for p in chosen],
                "ttft_s": [_summary_value(p, "ttft_s", "median") for p in chosen],
                "tpot_s": [_summary_value(p, "tpot_s", "median") for p in chosen],
            })
    for metric in ("ttft", "tpot"):
        objective = (doc["settings"].get("slo") or {}).get(metric)
        if objective is not None:
            series.append({"kind": "slo", "label": f"SLO: {metric} <= {_seconds_label(objective)}", "metric": metric,
                           "y": objective})
    capacity = doc.get("capacity") or {}
    point = next((p for p in doc["points"] if capacity.get("load") and p.get("load") == capacity["load"]
                  and p["prompt_tokens_target"] == capacity.get("prompt_tokens_target")), None)
    if point is not None and (point.get("summary") or {}).get("output_throughput") is not None:
        series.append({"kind": "capacity", "label": f"capacity: {capacity['rate']:g} requests/s", "load": point["load"],
                       "x": [point["summary"]["output_throughput"]], "ttft_s": [_summary_value(point, "ttft_s", "median")],
                       "tpot_s": [_summary_value(point, "tpot_s", "median")]})
    return series


def depth_series(doc: dict) -> list[dict]:
    """--depth-sweep: per figure (prefill, decode) the measured depths and their values: the
    median over the depth's requests, or with --repeat the mean of the repetitions' medians and
    the half-width of its 95 % interval (`half_width`, drawn as bars)."""
    depths = [e for e in (doc.get("depth_sweep") or {}).get("depths", []) if e.get("status") == "ok"]
    series = []
    for metric, label in DEPTH_PANELS:
        chosen = [e for e in depths if _depth_value(e, metric)[0] is not None]
        if chosen:
            values = [_depth_value(e, metric) for e in chosen]
            repeated = any(half is not None for _, half in values)
            series.append({"kind": "measured", "metric": metric, "label": label, "x": [e["depth"] for e in chosen],
                           "y": [value for value, _ in values], "half_width": [half for _, half in values],
                           "statistic": "mean of the repetitions' medians" if repeated else "median"})
    return series


def _depth_value(entry: dict, metric: str) -> tuple[float | None, float | None]:
    interval = ((entry.get("repeat") or {}).get("figures") or {}).get(metric)
    if interval and interval.get("half_width") is not None:
        return interval["mean"], interval["half_width"]
    return entry.get(metric), None


def _draw_depth(series: list[dict], title: str) -> Figure:
    """Two panels side by side: prefill and decode tok/s against the context depth (a symlog
    axis, base 2: depth 0 and 64K on one axis, each depth ticked)."""
    figure = Figure(figsize=(10, 4.6), dpi=110, layout="constrained")
    axes = dict(zip((metric for metric, _ in DEPTH_PANELS), figure.subplots(1, 2), strict=True))
    depths = sorted({x for s in series for x in s["x"]})
    positive = [d for d in depths if d > 0]
    for metric, label in DEPTH_PANELS:
        ax = axes[metric]
        mine = next((s for s in series if s["metric"] == metric), None)
        if mine is None:
            ax.text(0.5, 0.5, "no measured depth", transform=ax.transAxes, ha="center", va="center", color="grey")
        else:
            bars = [h or 0 for h in mine["half_width"]]
            ax.errorbar(mine["x"], mine["y"], yerr=bars if any(bars) else None, capsize=3, marker="o", linestyle="-",
                        label=f"measured ({mine['statistic']})")
            ax.legend(fontsize=7)
        if positive:
            ax.set_xscale("symlog", base=2, linthresh=min(positive))
        if depths:
            ax.set_xticks(depths)
            ax.xaxis.set_minor_locator(NullLocator())
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: _tokens_label(v)))
        ax.set_ylim(bottom=0)
        ax.set_xlabel("context depth (prompt tokens)")
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
    figure.suptitle(title)
    figure.supxlabel("one request at a time; prefill = prompt tokens / TTFT, decode = (completion tokens - 1) / "
                     "(last token - first token); bars: 95 % interval over --repeat repetitions", fontsize=7, color="grey")
    return figure


def _seconds_label(value: float) -> str:
    return f"{value * 1000:g} ms" if value < 1 else f"{value:g} s"


def _draw_latency(series: list[dict], title: str) -> Figure:
    """Two panels side by side sharing the throughput axis: TTFT (s) and TPOT (ms) against the
    output tok/s achieved, each point labelled with its offered rate."""
    figure = Figure(figsize=(10, 4.6), dpi=110, layout="constrained")
    ax_ttft, ax_tpot = figure.subplots(1, 2, sharex=True)
    panels = ((ax_ttft, "ttft", "ttft_s", 1.0, "TTFT s (median)"), (ax_tpot, "tpot", "tpot_s", 1000.0, "TPOT ms (median)"))
    measured_index = 0
    for s in series:
        if s["kind"] != "measured":
            continue
        marker, size = MEASURED_MARKERS[measured_index % len(MEASURED_MARKERS)]
        measured_index += 1
        for ax, _metric, key, scale, _label in panels:
            pairs = [(x, y * scale, rate) for x, y, rate in zip(s["x"], s[key], s["offered_rate"], strict=True)
                     if y is not None]
            ax.plot([x for x, _, _ in pairs], [y for _, y, _ in pairs], marker=marker, markersize=size, linestyle="-",
                    label=s["label"])
            for x, y, rate in pairs:
                if rate is not None:
                    ax.annotate(f"{rate:g}/s", (x, y), textcoords="offset points", xytext=(5, 5), fontsize=7, color="grey")
    for s in series:
        for ax, metric, key, scale, _label in panels:
            if s["kind"] == "slo" and s["metric"] == metric:
                ax.axhline(s["y"] * scale, label=s["label"], **SLO_STYLE)
            elif s["kind"] == "capacity" and s[key][0] is not None:
                ax.plot(s["x"], [s[key][0] * scale], label=s["label"], **CAPACITY_STYLE)
    for ax, _metric, _key, _scale, label in panels:
        if not measured_index:
            ax.text(0.5, 0.5, "no measured points", transform=ax.transAxes, ha="center", va="center", color="grey")
        ax.margins(0.1)  # room for the rate labels beside the outermost points
        ax.set_xlim(left=0)
        ax.set_ylim(bottom=0)
        ax.set_xlabel("output tok/s (achieved)")
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
        if series:
            ax.legend(fontsize=7)
    figure.suptitle(title)
    figure.supxlabel("one point per rate load, labelled with its offered requests/s; TPOT = (E2E - TTFT) / "
                     "(completion tokens - 1); output tok/s = completion tokens / (last end - first send) of the point",
                     fontsize=7, color="grey")
    return figure


def _tokens_label(value, _pos=None):
    if value >= 1024 and value % 1024 == 0:
        return f"{value / 1024:g}K"
    if value >= 1000:
        return f"{value / 1024:.3g}K"
    return f"{value:g}"


def _draw(series: list[dict], title: str, xlabel: str, ylabel: str, *, caption: str, ticks: list | None = None) -> Figure:
    """ticks given: a log2 prompt-token axis with ticks there; else an integer axis."""
    figure = Figure(figsize=(7.5, 4.6), dpi=110, layout="constrained")
    ax = figure.add_subplot()
    measured_index = 0
    for s in series:
        if s["kind"] == "reference":
            ax.plot(s["x"], s["y"], label=s["label"], **REFERENCE_STYLE)
            if s.get("short_prompt_x") is not None:
                for x, y, tokens in zip(s["x"], s["y"], s["prompt_tokens"], strict=True):
                    if tokens == 0:
                        ax.annotate("short prompt", (x, y), textcoords="offset points", xytext=(6, 6), fontsize=8,
                                    color="tab:red")
            continue
        marker, size = MEASURED_MARKERS[measured_index % len(MEASURED_MARKERS)]
        measured_index += 1
        style = {"marker": marker, "markersize": size, "linestyle": "-"}
        if "y_min" in s:
            lower = [y - lo for y, lo in zip(s["y"], s["y_min"], strict=True)]
            upper = [hi - y for y, hi in zip(s["y"], s["y_max"], strict=True)]
            ax.errorbar(s["x"], s["y"], yerr=[lower, upper], capsize=3, label=s["label"], **style)
        else:
            ax.plot(s["x"], s["y"], label=s["label"], **style)
    if not any(s["kind"] == "measured" for s in series):
        ax.text(0.5, 0.5, "no measured points", transform=ax.transAxes, ha="center", va="center", color="grey")
    if ticks:
        # Ticks at the requested lengths and the reference's (few, and meaningful; the
        # measured points sit at the length actually sent, a little off the target); the
        # "short prompt" position is labelled as such, not as a token count.
        short = {s.get("short_prompt_x") for s in series} - {None}
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks)
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: "short" if v in short else _tokens_label(v)))
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylim(bottom=0)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    if series:
        ax.legend(fontsize=8)
    figure.supxlabel(caption, fontsize=7, color="grey")
    return figure


def build(doc: dict) -> dict[str, tuple[Figure, list[dict]]]:
    """{plot name: (figure, series)}: the three closed-loop plots when the run has closed loops (or
    no point and no workload at all), the latency-throughput plot when it has rate loads, the
    depth plot with a depth sweep."""
    name = doc.get("label") or doc["settings"]["model"]
    figures = {}
    rates = [p for p in doc["points"] if _is_rate(p)]
    if rates:
        latency = latency_series(doc)
        figures["latency_vs_throughput"] = (_draw_latency(latency, f"{name}: latency against throughput"), latency)
    if doc.get("depth_sweep"):
        depth = depth_series(doc)
        figures["depth_sweep"] = (_draw_depth(depth, f"{name}: prefill and decode against context depth"), depth)
    if rates and all(_is_rate(p) for p in doc["points"]):
        return figures
    if not doc["points"] and any(doc.get(key) for key in WORKLOAD_KEYS):
        return figures
    decode = context_series(doc, "decode_tok_s")
    ttft = context_series(doc, "ttft_s")
    throughput = throughput_series(doc)

    def ticks(series):
        return sorted(set(doc["settings"]["prompt_tokens"]) | {x for s in series if s["kind"] == "reference" for x in s["x"]})

    return {
        "decode_vs_context": (_draw(decode, f"{name}: decode rate per request", "prompt tokens", "decode tok/s (median)",
                                    ticks=ticks(decode), caption="decode = (completion tokens - 1) / (last token - first token); "
                                                         "bars: min..max over requests"), decode),
        "ttft_vs_context": (_draw(ttft, f"{name}: time to first token", "prompt tokens", "TTFT s (median)", ticks=ticks(ttft),
                                  caption="TTFT = first token arrival - request sent; bars: min..max over requests"), ttft),
        "throughput_vs_streams": (_draw(throughput, f"{name}: aggregate throughput", "concurrent streams", "aggregate tok/s",
                                        caption="aggregate = completion tokens of the level / (last token - "
                                                "first first-token) of the level"), throughput),
    } | figures


def render(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()

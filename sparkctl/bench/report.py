"""benchmark.json, benchmark.md and the PNG plots, each written atomically (a temporary file
in the same directory, then rename), JSON last: a run that fails while reporting leaves the
previous report whole, never a half-written one."""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

from . import plots
from . import reference as reference_mod
from .goodput import format_slo

JSON_FILE = "benchmark.json"
MARKDOWN_FILE = "benchmark.md"


def atomic_write(path: Path, data: bytes) -> None:
    path = Path(path)
    handle = tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp", delete=False)
    try:
        with handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(handle.name, 0o644)
        os.replace(handle.name, path)
    except BaseException:
        Path(handle.name).unlink(missing_ok=True)
        raise


# ---- Markdown -------------------------------------------------------------------------------


def _num(value, digits=1):
    return "n/a" if value is None else f"{value:,.{digits}f}"


def _seconds(value):
    if value is None:
        return "n/a"
    return f"{value:.3f}" if value < 10 else f"{value:,.1f}"


def _ms(value):
    """Seconds shown in milliseconds, with fewer decimals as the value grows."""
    if value is None:
        return "n/a"
    ms = value * 1000
    return f"{ms:,.0f}" if ms >= 100 else f"{ms:.1f}" if ms >= 10 else f"{ms:.2f}"


def _spread_ms(distribution: dict | None) -> str:
    """median / p90 / p99 of a distribution of seconds, in milliseconds."""
    d = distribution or {}
    if not d.get("n"):
        return "n/a"
    return " / ".join(_ms(d.get(stat)) for stat in ("median", "p90", "p99"))


def _ratio(value):
    return "" if value is None else f"{value:.2f}x"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines


def _comparison(doc: dict, metric: str, point: dict) -> dict | None:
    return next((c for c in doc.get("comparisons", []) if c["metric"] == metric and c["point"] == point["point"]), None)


def _where(comparison: dict) -> str:
    if comparison["metric"] == "throughput_tok_s":
        return f"{comparison['streams']} stream(s)"
    return "a short prompt" if comparison["prompt_tokens"] == 0 else f"prompt {comparison['prompt_tokens']}"


def is_rate_point(point: dict) -> bool:
    """A point of an open loop (constant, poisson or ramp load): no streams, a load spec. Reports
    written before loads existed have closed loops only."""
    return point.get("streams") is None and bool(point.get("load"))


def point_where(point: dict) -> str:
    """'prompt 2048 x 2 stream(s)', 'prompt 2048 at poisson:...'; 'dataset ...' for a point of the
    --dataset workload, which has no prompt target."""
    what = "dataset" if point.get("prompt_tokens_target") is None else f"prompt {point['prompt_tokens_target']}"
    if is_rate_point(point):
        return f"{what} at {point['load']}"
    return f"{what} x {point['streams']} stream(s)"


def _percent(value):
    return "n/a" if value is None else f"{value:.0%}"


def _goodput(summary: dict) -> str:
    """'90 % / 1.80/s': the share of the point's requests within the SLO and good requests/s."""
    good = summary.get("goodput")
    if not good:
        return "n/a"
    return f"{_percent(good.get('fraction'))} / {_num(good.get('goodput_rps'), 2)}/s"


def _capacity_lines(doc: dict) -> list[str]:
    capacity = doc.get("capacity")
    if not capacity:
        return []
    lines = ["## Capacity", ""]
    if capacity.get("rate") is not None:
        lines.append(f"**{capacity['rate']:g} requests/s** (`{capacity['load']}`) at {capacity['prompt_tokens_target']}-token "
                     f"prompts: the highest rate measured at which {capacity['fraction']:.0%} of the requests met "
                     f"`{capacity['slo_text']}`.")
    else:
        lines.append(f"**No capacity** at {capacity['prompt_tokens_target']}-token prompts for `{capacity['slo_text']}` "
                     f"at {capacity['fraction']:.0%}.")
    lines.append("")
    lines.append(f"{capacity['note']}" + (f" ({capacity['stop']})" if capacity.get("stop") and capacity["stop"] not in
                                          capacity["note"] else ""))
    lines.append("")
    if capacity.get("points"):
        rows = []
        for p in capacity["points"]:
            rows.append([f"`{p['load']}`", _num(p.get("rate"), 2), _percent(p.get("fraction")), _num(p.get("goodput_rps"), 2),
                         _num(p.get("throughput_rps"), 2), _num(p.get("output_throughput")),
                         _ms((p.get("ttft_s") or {}).get("median")), _ms((p.get("tpot_s") or {}).get("median")),
                         "yes" if p.get("meets") else "**no**"])
        lines += _table(["load", "offered requests/s", "within SLO", "goodput requests/s", "requests/s", "output tok/s",
                         "TTFT median ms", "TPOT median ms", "meets"], rows)
        lines.append("")
    return lines


def render_markdown(doc: dict) -> str:
    s = doc["settings"]
    points = doc["points"]
    closed = [p for p in points if not is_rate_point(p)]
    rates = [p for p in points if is_rate_point(p)]
    failed = [r for r in doc["requests"] if not r["ok"] and not r["length_rejected"]]
    verdict = "OK" if doc["ok"] else "FAILED"
    lines = [f"# Benchmark: {doc.get('label') or s['model']} - {verdict}", ""]
    load = f"{s['requests_per_stream']} request(s) per stream"
    if rates:
        load = (f"{s.get('num_requests')} request(s) per rate point"
                + (f" (at most {s['max_concurrency']} in flight)" if s.get("max_concurrency") else "")
                + (f", {load}" if closed else ""))
    lines.append(f"`{s['model']}` at {s['api_base']} ({s['endpoint']} endpoint), max_tokens {s['max_tokens']}, "
                 f"{load}, {s['warmup']} warm-up, started {doc['started_at']}, {doc['duration_s']:.0f} s.")
    if s.get("slo"):
        lines.append(f"SLO: each request within {format_slo(s['slo'])} (goodput: the requests/s that met it).")
    lines.append("")
    calibration = doc.get("calibration") or {}
    estimated = bool(calibration.get("estimated"))
    if estimated:
        lines.append(f"**Prompt lengths are ESTIMATED** at {calibration.get('chars_per_token')} characters per token "
                     f"({calibration.get('chars_per_token_source')}): the server counted none of them. Values marked ~ "
                     "are estimates.")
        lines.append("")
    for error in doc.get("errors", []):
        lines.append(f"- **error:** {error}")
    for warning in doc.get("warnings", []):
        lines.append(f"- **warning:** {warning}")
    if doc.get("errors") or doc.get("warnings"):
        lines.append("")

    lines += _capacity_lines(doc)

    single = 1 if 1 in s["concurrency"] else min(s["concurrency"], default=None)
    by_length = [p for p in closed if p["streams"] == single]
    if single is not None and closed:
        lines.append(f"## By prompt length ({single} stream{'s' if single > 1 else ''})")
        lines.append("")
    rows = []
    for p in by_length:
        summary = p.get("summary") or {}
        decode, ttft = summary.get("decode_tok_s") or {}, summary.get("ttft_s") or {}
        ref_decode, ref_ttft = _comparison(doc, "decode_tok_s", p), _comparison(doc, "ttft_s", p)
        sent = _num((summary.get("prompt_tokens") or {}).get("median"), 0)
        if estimated and sent != "n/a" and any(r.get("prompt_tokens_source") == "estimate" for r in doc["requests"]
                                               if r.get("point") == p["point"]):
            sent = "~" + sent
        rows.append([
            p["prompt_tokens_target"], sent,
            _seconds(ttft.get("median")), _seconds(ttft.get("p90")),
            _num(decode.get("median")), _num(decode.get("p90")),
            _num(ref_decode["reference"]) if ref_decode else "", _ratio(ref_decode["ratio"]) if ref_decode else "",
            _seconds(ref_ttft["reference"]) if ref_ttft else "", _ratio(ref_ttft["ratio"]) if ref_ttft else "",
            p["status"],
        ])
    if single is not None and closed:
        lines += _table(["prompt (target)", "prompt (sent)", "TTFT median s", "TTFT p90 s", "decode median tok/s",
                         "decode p90 tok/s", "ref decode tok/s", "decode ratio", "ref TTFT s", "TTFT ratio", "status"], rows)
        lines.append("")
    rows = []
    for p in closed:
        summary = p.get("summary") or {}
        decode, ttft = summary.get("decode_tok_s") or {}, summary.get("ttft_s") or {}
        aggregate = (summary.get("aggregate") or {}).get("tok_s")
        ref = _comparison(doc, "throughput_tok_s", p)
        rows.append([
            p["prompt_tokens_target"], p["streams"], _num(aggregate),
            f"{_num(decode.get('median'))} ({_num(decode.get('min'))}-{_num(decode.get('max'))})",
            f"{_seconds(ttft.get('median'))} ({_seconds(ttft.get('max'))})",
            _num(ref["reference"]) if ref else "", _ratio(ref["ratio"]) if ref else "",
            f"{summary.get('failed_requests', 0)}/{summary.get('requests', 0)}" if summary else "",
            p["status"],
        ])
    if closed:
        lines += ["## By concurrency", ""]
        lines += _table(["prompt (target)", "streams", "aggregate tok/s", "decode/stream median (min-max)",
                         "TTFT median (max) s", "ref aggregate tok/s", "ratio", "failed", "status"], rows)
        lines.append("")

    if rates:
        lines.append("## By offered load")
        lines.append("")
        lines.append(f"Open loops: {s.get('num_requests')} requests per point, each sent at its time in the load's schedule "
                     "whether or not the earlier ones had ended"
                     + (f", at most {s['max_concurrency']} in flight (--max-concurrency)" if s.get("max_concurrency") else "")
                     + ". Latest send: how long after its scheduled time the latest request left.")
        lines.append("")
        rows = []
        for p in rates:
            summary = p.get("summary") or {}
            ttft, tpot = summary.get("ttft_s") or {}, summary.get("tpot_s") or {}
            rows.append([
                p["prompt_tokens_target"], f"`{p['load']}`", _num(p.get("offered_rate"), 2),
                _num(summary.get("request_throughput"), 2), _num(summary.get("output_throughput")),
                p.get("max_in_flight") if p.get("max_in_flight") is not None else "n/a",
                f"{_seconds(ttft.get('median'))} ({_seconds(ttft.get('p90'))})", _ms(tpot.get("median")),
                _ms((p.get("send_lag_s") or {}).get("max")),
                f"{summary.get('failed_requests', 0)}/{summary.get('requests', 0)}" if summary else "", p["status"],
            ])
        lines += _table(["prompt (target)", "load", "offered requests/s", "requests/s", "output tok/s", "most in flight",
                         "TTFT median (p90) s", "TPOT median ms", "latest send ms", "failed", "status"], rows)
        lines.append("")

    measured = [p for p in points if p.get("summary")]
    if measured:
        lines.append("## Latency and throughput per point")
        lines.append("")
        lines.append("As `vllm bench serve` reports them (sparkctl's README, \"Against `vllm bench serve`\", says where "
                     "the definitions differ): milliseconds, median / p90 / p99 over the successful requests; answers "
                     "that arrived in bursts are left out of TPOT and ITL.")
        lines.append("")
        if s.get("slo"):
            lines.append(f"Goodput: the share of the point's requests (failed ones included) that met every objective of "
                         f"`{format_slo(s['slo'])}`, and those requests per second of the point's duration.")
            lines.append("")
        rows = []
        for p in measured:
            summary = p["summary"]
            row = [
                p["prompt_tokens_target"], f"`{p['load']}`" if rates else p["streams"],
                _spread_ms(summary.get("ttft_s")), _spread_ms(summary.get("tpot_s")), _spread_ms(summary.get("itl_s")),
                _spread_ms(summary.get("e2e_s")), _num(summary.get("output_throughput")),
                _num(summary.get("request_throughput"), 2)]
            if s.get("slo"):
                row.append(_goodput(summary))
            rows.append(row + [_bursts(p), p["status"]])
        header = ["prompt (target)", "load" if rates else "streams", "TTFT ms", "TPOT ms", "ITL ms", "E2E ms", "output tok/s",
                  "requests/s"]
        lines += _table(header + (["goodput (within SLO / good requests/s)"] if s.get("slo") else []) + ["bursts", "status"],
                        rows)
        lines.append("")

    lines += _repetition_lines(doc)
    lines += _dataset_lines(doc)
    lines += _prefix_lines(doc)
    lines += _depth_lines(doc)

    noted = [p for p in points if p.get("early_stops") or _burst_count(p)]
    if noted:
        lines.append("## Answers that stopped early or arrived in bursts")
        lines.append("")
        for p in noted:
            requests = (p.get("summary") or {}).get("requests", 0)
            where = f"- {point_where(p)}:"
            if p.get("early_stops"):
                where += (f" {p['early_stops']} of {requests} answers stopped early (finish_reason before max_tokens "
                          f"{s['max_tokens']});")
            if _burst_count(p):
                where += (f" {_burst_count(p)} of {requests} answers arrived in bursts, buffered on their way (token "
                          "chunks together that the engine made a decode step apart): left out of decode, TPOT and ITL, "
                          "and their TTFT may be late;")
            lines.append(where.rstrip(";"))
        lines.append("")

    not_measured = [p for p in points if p["status"] == "skipped" or (p["status"] == "failed" and not p.get("summary"))]
    if not_measured:
        lines.append("## Skipped and unmeasured points")
        lines.append("")
        groups: dict[tuple, list] = {}
        for p in not_measured:
            rate = is_rate_point(p)
            groups.setdefault((p["prompt_tokens_target"], rate, p["status"], p["reason"]), []).append(
                f"`{p['load']}`" if rate else str(p["streams"]))
        for (target, rate, status, reason), which in groups.items():
            lines.append(f"- {target} tokens, {'loads' if rate else 'streams'} {', '.join(which)}: {status}: {reason}")
        lines.append("")
    if failed:
        lines.append(f"Failed requests ({len(failed)}):")
        lines.append("")
        for r in failed[:10]:
            stream = "" if r.get("stream") is None else f" stream {r['stream']}"
            lines.append(f"- point {r['point']}{stream} request {r['index']}: {r['error']}")
        if len(failed) > 10:
            lines.append(f"- ... {len(failed) - 10} more in {JSON_FILE}")
        lines.append("")

    unmatched = [c for c in doc.get("comparisons", []) if c["measured"] is None]
    reference = doc.get("reference")
    if reference:
        lines.append("## Reference")
        lines.append("")
        if not any(reference.get(name) for name in reference_mod.SERIES):
            lines.append(f"Source: {reference['source']}. No published figures to compare with.")
        else:
            lines.append(f"Source: {reference['source']}. Ratio = measured / reference (tok/s below 1 and TTFT above 1 "
                         "are slower than published).")
        if reference.get("notes"):
            lines.append(f"Notes: {reference['notes']}")
        for c in doc.get("comparisons", []):
            if c["note"] and c["measured"] is not None:
                lines.append(f"- {c['metric']} at {_where(c)}: {c['note']}")
        for c in unmatched:
            lines.append(f"- not compared: {c['metric']} at {_where(c)} = {c['reference']:g} ({c['note']})")
        lines.append("")

    o = doc["overhead"]
    test = o.get("selftest") or {}
    lines.append("## Client overhead")
    lines.append("")
    lines.append(f"- client CPU: {_num(o.get('cpu_us_per_token'), 0)} us per received token "
                 f"({o['tokens_received']} tokens, {_num(o.get('client_cpu_s'), 2)} s CPU over {_num(o.get('wall_s'), 1)} s, "
                 f"{_num((o.get('core_fraction') or 0) * 100, 1)} % of one core)")
    lines.append(f"- parse capacity (loopback self-test): {_num(test.get('tokens_per_s'), 0)} tok/s; peak measured aggregate "
                 f"{_num(o.get('peak_aggregate_tok_s'))} tok/s = {_num((o.get('peak_fraction_of_capacity') or 0) * 100, 2)} % "
                 f"of it (warning above {o['warn_above_fraction']:.0%})")
    for warning in o.get("warnings", []):
        lines.append(f"- **warning:** {warning}")
    lines.append("")
    lines.append("Definitions: TTFT = first token arrival - request sent; E2E = end of the stream - request sent; "
                 "TPOT = (E2E - TTFT) / (completion tokens - 1); ITL = the gaps between successive token chunks; "
                 "decode = (completion tokens - 1) / (last token - first token) per request; aggregate = completion "
                 "tokens of a level / (last token - first first-token of the level); output and request throughput = "
                 "completion tokens and successful requests of a point / (last end - first send). Plots: "
                 + ", ".join(_plot_files(doc)) + f"; raw records: {JSON_FILE}.")
    return "\n".join(lines) + "\n"


# ---- repetitions and workloads ----------------------------------------------------------------


def _interval(interval: dict | None, show) -> str:
    """'mean ± half-width' of an interval (repeat.interval) with `show` formatting each number;
    the mean alone when there is no spread to estimate."""
    if not interval or interval.get("mean") is None:
        return "n/a"
    if interval.get("half_width") is None:
        return f"{show(interval['mean'])} (n={interval['n']})"
    return f"{show(interval['mean'])} ± {show(interval['half_width'])}"


def _repetition_lines(doc: dict) -> list[str]:
    repeated = [p for p in doc["points"] + ((doc.get("dataset") or {}).get("points") or []) if p.get("repeat")]
    if not repeated:
        return []
    k, level = repeated[0]["repeat"]["k"], repeated[0]["repeat"]["level"]
    lines = ["## Repetitions", "",
             f"Each point measured {k} times in a row: the mean over the repetitions of each one's own figure, ± the "
             f"half-width of its two-sided {level:.0%} Student's t interval (t(1 - (1 - level)/2, K - 1) x s / sqrt(K) over "
             "the K values). The tables above pool the repetitions' requests.", ""]
    rows = []
    for p in repeated:
        figures = p["repeat"]["figures"]
        rows.append([point_where(p), _interval(figures["ttft_median_s"], _ms), _interval(figures["tpot_median_s"], _ms),
                     _interval(figures["itl_median_s"], _ms), _interval(figures["output_throughput"], _num)])
    lines += _table(["point", "TTFT median ms", "TPOT median ms", "ITL median ms", "output tok/s"], rows)
    return lines + [""]


def _dataset_lines(doc: dict) -> list[str]:
    dataset = doc.get("dataset")
    if not dataset:
        return []
    left_out = ", ".join(f"{count} {why}" for why, count in dataset["left_out"].items())
    lines = ["## Dataset", "",
             f"`{dataset['file']}`: {dataset['conversations']} usable conversations"
             + (f" ({left_out} left out)" if left_out else "")
             + f"; {dataset['num_requests']} sampled with seed {dataset['seed']}, sent at each load"
             + f" ({dataset['output_tokens_estimated']} answers' lengths estimated at 4 characters a token)."
             + " Milliseconds, median / p90 / p99.", ""]
    rows = []
    for p in dataset["points"]:
        summary = p.get("summary") or {}
        rows.append([f"`{p['load']}`", _spread_ms(summary.get("ttft_s")), _spread_ms(summary.get("tpot_s")),
                     _spread_ms(summary.get("itl_s")), _spread_ms(summary.get("e2e_s")),
                     _num(summary.get("output_throughput")), _num(summary.get("request_throughput"), 2),
                     f"{summary.get('failed_requests', 0)}/{summary.get('requests', 0)}" if summary else "",
                     p.get("length_rejected") or 0, p["status"]])
    lines += _table(["load", "TTFT ms", "TPOT ms", "ITL ms", "E2E ms", "output tok/s", "requests/s", "failed",
                     "refused as too long", "status"], rows)
    return lines + [""]


def _prefix_lines(doc: dict) -> list[str]:
    prefix = doc.get("prefix_sharing")
    if not prefix:
        return []
    lines = ["## Prefix sharing", "",
             f"{prefix['requests_per_repetition']} requests one after another sharing a {prefix['prefix_tokens_target']}-"
             f"token prefix (sent: {_num(prefix.get('prompt_tokens'), 0)} prompt tokens with the suffix): the first "
             "finds nothing cached (a miss), the rest find the prefix cached (hits).", ""]
    if prefix["status"] != "ok" and not prefix.get("requests"):
        return lines + [f"{prefix['status']}: {prefix['reason']}", ""]
    hits = prefix.get("ttft_hit_s") or {}
    rows = [["first request (miss)", _seconds(prefix.get("ttft_miss_s"))],
            [f"the rest (hits, n={hits.get('n', 0)}): median (p90)", f"{_seconds(hits.get('median'))} ({_seconds(hits.get('p90'))})"],
            ["miss / median hit", _ratio(prefix.get("miss_to_hit")) or "n/a"]]
    figures = (prefix.get("repeat") or {}).get("figures")
    if figures:
        rows[0].append(_interval(figures["ttft_miss_s"], _seconds))
        rows[1].append(_interval(figures["ttft_hit_median_s"], _seconds))
        rows[2].append(_interval(figures["miss_to_hit"], lambda v: f"{v:.2f}x"))
    header = ["TTFT", "s"] + (["mean ± 95 % interval over the repetitions"] if figures else [])
    lines += _table(header, rows)
    if prefix["status"] != "ok":
        lines.append(f"\n{prefix['status']}: {prefix['reason']}")
    return lines + [""]


def _depth_lines(doc: dict) -> list[str]:
    sweep = doc.get("depth_sweep")
    if not sweep:
        return []
    lines = ["## Depth sweep", "",
             f"At each context depth {sweep['requests_per_depth']} request(s) one after another (one stream), each "
             "prompt its own (no cache hit): prefill = prompt tokens / TTFT, decode = (completion tokens - 1) / (last "
             "token - first token); medians over the depth's requests"
             + ("; ± the 95 % interval of the mean over the repetitions" if _repeated(sweep) else "") + ".", ""]
    rows = []
    for entry in sweep["depths"]:
        figures = (entry.get("repeat") or {}).get("figures") or {}
        rows.append([entry["depth"], _num(entry.get("prompt_tokens"), 0), _seconds(entry.get("ttft_s")),
                     _interval(figures["prefill_tok_s"], _num) if figures else _num(entry.get("prefill_tok_s"), 0),
                     _interval(figures["decode_tok_s"], _num) if figures else _num(entry.get("decode_tok_s")),
                     entry["status"] + (f": {entry['reason']}" if entry.get("reason") else "")])
    lines += _table(["depth (tokens)", "prompt tokens sent", "TTFT s", "prefill tok/s", "decode tok/s", "status"], rows)
    return lines + [""]


def _repeated(sweep: dict) -> bool:
    return any(entry.get("repeat") for entry in sweep["depths"])


def _plot_files(doc: dict) -> list[str]:
    """The PNGs written beside the report (doc["plots"], filled by write()), else those every run has."""
    drawn = [entry["file"] for entry in (doc.get("plots") or {}).values()]
    return drawn or list(plots.FILES.values())


def _burst_count(point: dict) -> int:
    """Requests of the point that arrived in bursts (`buffered_requests` in reports written
    before bursts had their own name)."""
    return point.get("burst_requests", point.get("buffered_requests")) or 0


def _bursts(point: dict) -> str:
    count, requests = _burst_count(point), (point.get("summary") or {}).get("requests", 0)
    return f"**{count} of {requests}**" if count else "0"


# ---- files ----------------------------------------------------------------------------------


# A list of numbers as json.dumps(indent=2) lays it out, one number a line. Strings in JSON hold
# no raw newline, so a "[" followed by a newline is always the start of a list.
_NUMBER_LIST = re.compile(r"\[\n\s*(-?[0-9][-+0-9.eE,\s]*?)\n\s*\]")


def json_text(doc: dict) -> str:
    """The document indented, with lists of numbers (each request's itl_s, the plotted series)
    kept on one line: one line per inter-token gap would bury the records."""
    text = json.dumps(doc, indent=2)
    return _NUMBER_LIST.sub(lambda match: "[" + " ".join(match.group(1).split()) + "]", text) + "\n"


def write(doc: dict, out_dir: str | Path) -> dict[str, Path]:
    """Draw the plots (their series go into doc["plots"]), then write every file."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    doc["plots"] = {}
    images = {}
    for name, (figure, series) in plots.build(doc).items():
        doc["plots"][name] = {"file": plots.ALL_FILES[name], "series": series}
        images[name] = plots.render(figure)
    for name, data in images.items():
        atomic_write(out / plots.ALL_FILES[name], data)
        written[name] = out / plots.ALL_FILES[name]
    markdown = render_markdown(doc)
    atomic_write(out / MARKDOWN_FILE, markdown.encode())
    written["markdown"] = out / MARKDOWN_FILE
    atomic_write(out / JSON_FILE, json_text(doc).encode())
    written["json"] = out / JSON_FILE
    return written

"""benchmark.json, benchmark.md and the PNG plots, each written atomically (a temporary file
in the same directory, then rename), JSON last: a run that fails while reporting leaves the
previous report whole, never a half-written one."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from . import plots
from . import reference as reference_mod

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


def render_markdown(doc: dict) -> str:
    s = doc["settings"]
    points = doc["points"]
    failed = [r for r in doc["requests"] if not r["ok"] and not r["length_rejected"]]
    verdict = "OK" if doc["ok"] else "FAILED"
    lines = [f"# Benchmark: {doc.get('label') or s['model']} - {verdict}", ""]
    lines.append(f"`{s['model']}` at {s['api_base']} ({s['endpoint']} endpoint), max_tokens {s['max_tokens']}, "
                 f"{s['requests_per_stream']} request(s) per stream, {s['warmup']} warm-up, started {doc['started_at']}, "
                 f"{doc['duration_s']:.0f} s.")
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

    single = 1 if 1 in s["concurrency"] else min(s["concurrency"])
    by_length = [p for p in points if p["streams"] == single]
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
    lines += _table(["prompt (target)", "prompt (sent)", "TTFT median s", "TTFT p90 s", "decode median tok/s",
                     "decode p90 tok/s", "ref decode tok/s", "decode ratio", "ref TTFT s", "TTFT ratio", "status"], rows)
    lines.append("")

    lines.append("## By concurrency")
    lines.append("")
    rows = []
    for p in points:
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
    lines += _table(["prompt (target)", "streams", "aggregate tok/s", "decode/stream median (min-max)",
                     "TTFT median (max) s", "ref aggregate tok/s", "ratio", "failed", "status"], rows)
    lines.append("")

    noted = [p for p in points if p.get("early_stops") or p.get("buffered_requests")]
    if noted:
        lines.append("## Answers that stopped early or arrived buffered")
        lines.append("")
        for p in noted:
            requests = (p.get("summary") or {}).get("requests", 0)
            where = f"- prompt {p['prompt_tokens_target']} x {p['streams']} stream(s):"
            if p.get("early_stops"):
                where += (f" {p['early_stops']} of {requests} answers stopped early (finish_reason before max_tokens "
                          f"{s['max_tokens']});")
            if p.get("buffered_requests"):
                where += (f" {p['buffered_requests']} of {requests} answers arrived buffered (many tokens in one network "
                          "read): TTFT and decode figures are not the server's;")
            lines.append(where.rstrip(";"))
        lines.append("")

    not_measured = [p for p in points if p["status"] == "skipped" or (p["status"] == "failed" and not p.get("summary"))]
    if not_measured:
        lines.append("## Skipped and unmeasured points")
        lines.append("")
        groups: dict[tuple, list[int]] = {}
        for p in not_measured:
            groups.setdefault((p["prompt_tokens_target"], p["status"], p["reason"]), []).append(p["streams"])
        for (target, status, reason), streams in groups.items():
            lines.append(f"- {target} tokens, streams {', '.join(map(str, streams))}: {status}: {reason}")
        lines.append("")
    if failed:
        lines.append(f"Failed requests ({len(failed)}):")
        lines.append("")
        for r in failed[:10]:
            lines.append(f"- point {r['point']} stream {r['stream']} request {r['index']}: {r['error']}")
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
    lines.append("Definitions: TTFT = first token arrival - request sent; decode = (completion tokens - 1) / "
                 "(last token - first token) per request; aggregate = completion tokens of a level / (last token - "
                 "first first-token of the level). Plots: " + ", ".join(plots.FILES.values()) + f"; raw records: {JSON_FILE}.")
    return "\n".join(lines) + "\n"


# ---- files ----------------------------------------------------------------------------------


def write(doc: dict, out_dir: str | Path) -> dict[str, Path]:
    """Draw the plots (their series go into doc["plots"]), then write every file."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    doc["plots"] = {}
    images = {}
    for name, (figure, series) in plots.build(doc).items():
        doc["plots"][name] = {"file": plots.FILES[name], "series": series}
        images[name] = plots.render(figure)
    for name, data in images.items():
        atomic_write(out / plots.FILES[name], data)
        written[name] = out / plots.FILES[name]
    markdown = render_markdown(doc)
    atomic_write(out / MARKDOWN_FILE, markdown.encode())
    written["markdown"] = out / MARKDOWN_FILE
    atomic_write(out / JSON_FILE, (json.dumps(doc, indent=2) + "\n").encode())
    written["json"] = out / JSON_FILE
    return written

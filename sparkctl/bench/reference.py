"""The profile's published figures (profile key `reference`) and how measured points are
compared with them.

Matching rules (documented in README.md):
- decode_tok_s and ttft_s entries are single-stream figures at a prompt length: compared
  with the 1-stream point whose target length equals the reference's, or whose measured
  prompt is within 5 % of it. prompt_tokens 0 means "a short prompt" and is compared with
  the shortest prompt length measured.
- throughput_tok_s entries are per stream count: compared with the aggregate throughput at
  that stream count at the shortest prompt length measured (published figures use short
  prompts).
ratio = measured / reference for every metric (TTFT: above 1 is slower; tok/s: below 1 is slower)."""

from __future__ import annotations

import json
from pathlib import Path

from .stats import ratio

SERIES = {"decode_tok_s": "prompt_tokens", "ttft_s": "prompt_tokens", "throughput_tok_s": "streams"}
PROMPT_MATCH_TOLERANCE = 0.05


class ReferenceFileError(ValueError):
    pass


def validate(mapping, origin: str = "reference") -> dict:
    """The profile's `reference` mapping (or a document holding it under `reference`) ->
    {source, notes, decode_tok_s, ttft_s, throughput_tok_s} with the series sorted."""
    if isinstance(mapping, dict) and isinstance(mapping.get("reference"), dict) and "source" not in mapping:
        mapping = mapping["reference"]
    if not isinstance(mapping, dict):
        raise ReferenceFileError(f"{origin}: expected a JSON object (the profile's `reference` mapping)")
    unknown = sorted(set(mapping) - set(SERIES) - {"source", "notes"})
    if unknown:
        raise ReferenceFileError(f"{origin}: unknown key(s) {', '.join(unknown)}; known: source, notes, {', '.join(SERIES)}")
    result = {"source": str(mapping.get("source") or "unnamed source"), "notes": mapping.get("notes")}
    for name, key in SERIES.items():
        entries = mapping.get(name) or []
        if not isinstance(entries, list):
            raise ReferenceFileError(f"{origin}: {name} must be a list of {{{key}, value}}")
        series = []
        for i, entry in enumerate(entries):
            if not isinstance(entry, dict) or set(entry) != {key, "value"}:
                raise ReferenceFileError(f"{origin}: {name}[{i}] must be {{{key}: N, value: X}}, got {entry!r}")
            x, value = entry[key], entry["value"]
            if isinstance(x, bool) or not isinstance(x, int) or x < (1 if key == "streams" else 0):
                raise ReferenceFileError(f"{origin}: {name}[{i}].{key} must be an integer >= {1 if key == 'streams' else 0}")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ReferenceFileError(f"{origin}: {name}[{i}].value must be a positive number")
            series.append({key: x, "value": float(value)})
        result[name] = sorted(series, key=lambda e: e[key])
    return result


def load(path: str | Path) -> dict:
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise ReferenceFileError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise ReferenceFileError(f"{path}: not valid JSON ({exc})") from None
    return validate(data, origin=str(path))


def _measured(point: dict, metric: str):
    summary = point.get("summary") or {}
    if metric == "throughput_tok_s":
        return (summary.get("aggregate") or {}).get("tok_s")
    return (summary.get(metric) or {}).get("median")


def _single_stream_match(points: list[dict], prompt_tokens: int) -> tuple[dict | None, str | None]:
    singles = [p for p in points if p["streams"] == 1 and p["status"] != "skipped"]
    if not singles:
        return None, "no 1-stream point was measured"
    if prompt_tokens == 0:
        shortest = min(singles, key=lambda p: p["prompt_tokens_target"])
        return shortest, f"reference is for a short prompt; compared with the shortest measured ({shortest['prompt_tokens_target']})"
    for point in singles:
        if point["prompt_tokens_target"] == prompt_tokens:
            return point, None
    for point in singles:
        actual = ((point.get("summary") or {}).get("prompt_tokens") or {}).get("median")
        if actual and abs(actual - prompt_tokens) <= PROMPT_MATCH_TOLERANCE * prompt_tokens:
            return point, None
    return None, "no measured prompt length within 5 % of it"


def compare(points: list[dict], reference: dict | None) -> list[dict]:
    """One row per reference figure: {metric, prompt_tokens|streams, reference, measured,
    ratio, point, note}; measured is None when no point matches (note says why)."""
    if not reference:
        return []
    rows = []
    for metric in ("decode_tok_s", "ttft_s"):
        for entry in reference.get(metric, []):
            point, note = _single_stream_match(points, entry["prompt_tokens"])
            measured = _measured(point, metric) if point else None
            rows.append({"metric": metric, "prompt_tokens": entry["prompt_tokens"], "streams": 1,
                         "reference": entry["value"], "measured": measured, "ratio": ratio(measured, entry["value"]),
                         "point": point["point"] if point else None, "note": note})
    measured_points = [p for p in points if p["status"] != "skipped"]
    shortest = min((p["prompt_tokens_target"] for p in measured_points), default=None)
    for entry in reference.get("throughput_tok_s", []):
        point = next((p for p in measured_points if p["prompt_tokens_target"] == shortest and p["streams"] == entry["streams"]),
                     None)
        measured = _measured(point, "throughput_tok_s") if point else None
        note = (f"aggregate at the shortest measured prompt ({shortest})" if point
                else f"{entry['streams']} streams not measured")
        rows.append({"metric": "throughput_tok_s", "prompt_tokens": None, "streams": entry["streams"],
                     "reference": entry["value"], "measured": measured, "ratio": ratio(measured, entry["value"]),
                     "point": point["point"] if point else None, "note": note})
    return rows

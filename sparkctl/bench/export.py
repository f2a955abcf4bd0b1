"""sparkctl's results under the field names `vllm bench serve --save-result` writes (vLLM 0.32,
vllm/benchmarks/serve.py: the result JSON, `benchmark()`'s `result` and `process_one_metric`),
so a sparkctl run can be read by whatever reads vLLM's result files.

One JSON object per measurement: a point of the run (or of the --dataset workload) and, with
--repeat, each repetition apart, as each would be one `vllm bench serve` run. The objects are
written one a line, as `vllm bench serve --append-result` appends its runs to one file. The
figures are sparkctl's own (README.md, "Against `vllm bench serve`", says where a definition
differs); a field vLLM writes that sparkctl has no equivalent for is left out, never filled
with a guess (README.md, "Export in vLLM's field names", lists them). Where vLLM writes 0 for a
statistic of no values (np.mean(x or 0)), null is written. Keys starting with `sparkctl_` say
which measurement an object is, in the place of vLLM's `--metadata KEY=VALUE` keys."""

from __future__ import annotations

import datetime as dt
import json
import math
from pathlib import Path
from statistics import pstdev

from . import goodput, stats
from .arrivals import parse_load
from .repeat import by_repetition
from .report import atomic_write

# Per latency figure: vLLM's metric name and the records' field. vLLM writes ttft, tpot and itl
# by default, e2el with `--percentile-metrics ttft,tpot,itl,e2el`.
LATENCY_METRICS = (("ttft", "ttft_s"), ("tpot", "tpot_s"), ("itl", "itl_s"), ("e2el", "e2e_s"))
# vLLM's default `--metric-percentiles 99`.
PERCENTILES = (99,)
STATISTICS = ("mean", "median", "std", *(f"p{p}" for p in PERCENTILES))
# Written by vLLM with --max-concurrency: the wait for a slot, and E2E with it (finite rates only).
QUEUE_METRICS = ("client_queue_time", "e2el_including_client_queue")
# vLLM's backend for each sparkctl endpoint (`--backend openai` / `openai-chat`).
BACKENDS = {"completions": "openai", "chat": "openai-chat"}

# Every vLLM field written here, in the order vLLM writes them.
VLLM_FIELDS = (
    "date", "endpoint_type", "backend", "label", "model_id", "num_prompts",
    "request_rate", "burstiness", "max_concurrency", "ramp_up_strategy", "ramp_up_start_rps", "ramp_up_end_rps",
    "duration", "completed", "failed", "total_input_tokens", "total_output_tokens", "request_throughput",
    "request_goodput", "output_throughput", "total_token_throughput",
    *(f"{stat}_{metric}_ms" for metric, _ in LATENCY_METRICS for stat in STATISTICS),
    *(f"{stat}_{metric}_ms" for metric in QUEUE_METRICS for stat in STATISTICS),
)
# Which measurement an object is (vLLM's `--metadata` keys take this place in its file).
SPARKCTL_FIELDS = ("sparkctl_workload", "sparkctl_point", "sparkctl_prompt_tokens_target", "sparkctl_load",
                   "sparkctl_repetition")


def vllm_results(doc: dict) -> list[dict]:
    """One vLLM-named result per measurement of the document, in order: the points, then the
    dataset's points; each repetition apart."""
    results = []
    for workload, point, records in _measured(doc):
        for repetition, batch in by_repetition(records).items():
            results.append(vllm_result(doc, point, batch, workload=workload, repetition=repetition))
    return results


def vllm_result(doc: dict, point: dict, records: list[dict], *, workload: str = "points", repetition: int = 0) -> dict:
    """The fields `vllm bench serve --save-result` writes, for one measurement's records."""
    summary = stats.summarize_point(records, point.get("streams") or 0)
    result = _setup(doc) | {"num_prompts": len(records)}
    result |= {"sparkctl_workload": workload, "sparkctl_point": point["point"],
               "sparkctl_prompt_tokens_target": point.get("prompt_tokens_target"), "sparkctl_load": point.get("load"),
               "sparkctl_repetition": repetition}
    result |= _traffic(point, doc["settings"])
    result |= _counts(summary, records, doc["settings"].get("slo"))
    result |= latency_fields(records)
    result |= queue_fields(point, records, doc["settings"])
    return result


def write_vllm(doc: dict, path: str | Path) -> int:
    """Write vllm_results(doc) to path, one JSON object a line, atomically -> how many."""
    results = vllm_results(doc)
    atomic_write(Path(path), "".join(json.dumps(result) + "\n" for result in results).encode())
    return len(results)


def latency_fields(records: list[dict]) -> dict:
    """mean, median, std (population, numpy's default as vLLM calls it) and p99 of TTFT, TPOT,
    ITL and E2E in milliseconds, over the values the point's summary takes them over
    (stats.latency_samples: bursts left out of TPOT and ITL); null without values."""
    samples = stats.latency_samples(records)
    fields = {}
    for metric, key in LATENCY_METRICS:
        fields |= _statistics(metric, samples[key])
    return fields


def queue_fields(point: dict, records: list[dict], settings: dict) -> dict:
    """A rate point under --max-concurrency: the successful requests' wait for a slot (t_send -
    t_scheduled, vLLM's client_queue_time) and, at a finite rate, E2E with that wait; nothing
    elsewhere (a closed loop has no schedule to wait behind, and vLLM writes them only with
    --max-concurrency)."""
    if point.get("streams") is not None or settings.get("max_concurrency") is None:
        return {}
    ok = [r for r in records if r.get("ok") and r.get("t_scheduled") is not None and r.get("t_send") is not None]
    waits = [r["t_send"] - r["t_scheduled"] for r in ok]
    fields = _statistics("client_queue_time", waits)
    if _traffic(point, settings)["request_rate"] != "inf":
        fields |= _statistics("e2el_including_client_queue", [r["e2e_s"] + wait for r, wait in zip(ok, waits, strict=True)])
    return fields


def _statistics(metric: str, values: list[float]) -> dict:
    """mean, median, std and the percentiles of seconds, in milliseconds (null without values)."""
    present = bool(values)
    fields = {f"mean_{metric}_ms": _ms(math.fsum(values) / len(values)) if present else None,
              f"median_{metric}_ms": _ms(stats.percentile(values, 50)),
              f"std_{metric}_ms": _ms(pstdev(values)) if present else None}
    for p in PERCENTILES:
        fields[f"p{p}_{metric}_ms"] = _ms(stats.percentile(values, p))
    return fields


def _measured(doc: dict):
    """(workload, point, its records) for every point with a summary: the run's points, then the
    dataset workload's."""
    yield from _with_records("points", doc.get("points") or [], doc.get("requests") or [])
    dataset = doc.get("dataset") or {}
    yield from _with_records("dataset", dataset.get("points") or [], dataset.get("requests") or [])


def _with_records(workload: str, points: list[dict], records: list[dict]):
    by_point: dict[int, list[dict]] = {}
    for record in records:
        if record.get("phase", "measure") != "warmup":
            by_point.setdefault(record.get("point"), []).append(record)
    for point in points:
        if point.get("summary") and by_point.get(point["point"]):
            yield workload, point, by_point[point["point"]]


def _setup(doc: dict) -> dict:
    settings = doc["settings"]
    backend = BACKENDS.get(settings.get("endpoint"), settings.get("endpoint"))
    return {"date": _date(doc.get("started_at")), "endpoint_type": backend, "backend": backend,
            "label": doc.get("label") or None, "model_id": settings.get("model")}


def _date(iso: str | None) -> str | None:
    """vLLM's "%Y%m%d-%H%M%S" of the run's start (UTC here, the local time in vLLM)."""
    if not iso:
        return None
    return dt.datetime.fromisoformat(iso).strftime("%Y%m%d-%H%M%S")


def _traffic(point: dict, settings: dict) -> dict:
    """request_rate, burstiness, max_concurrency and a ramp's fields as vLLM would have been asked
    for the same load. A closed loop of N streams is vLLM's `--request-rate inf --max-concurrency
    N`; a constant schedule has no burstiness in vLLM (left out), a closed loop none either."""
    spec = parse_load(point["load"]) if point.get("load") else None
    if spec is None or spec.kind == "concurrency":
        return {"request_rate": "inf", "max_concurrency": point.get("streams")}
    fields = {"request_rate": _number(spec.rate) if spec.kind != "ramp" else point.get("offered_rate")}
    if spec.burstiness is not None:
        fields["burstiness"] = _number(spec.burstiness)
    fields["max_concurrency"] = settings.get("max_concurrency")
    if spec.kind == "ramp":
        fields |= {"ramp_up_strategy": spec.shape, "ramp_up_start_rps": spec.start, "ramp_up_end_rps": spec.end}
    return fields


def _counts(summary: dict, records: list[dict], slo: dict | None) -> dict:
    ok = [r for r in records if r.get("ok")]
    good = goodput.goodput(records, slo, summary["duration_s"])["goodput_rps"] if slo else None
    return {
        "duration": summary["duration_s"],
        "completed": summary["ok_requests"],
        "failed": summary["failed_requests"],
        "total_input_tokens": sum(r.get("prompt_tokens") or 0 for r in ok),
        "total_output_tokens": sum(r.get("completion_tokens") or 0 for r in ok),
        "request_throughput": summary["request_throughput"],
        "request_goodput": good,
        "output_throughput": summary["output_throughput"],
        "total_token_throughput": summary["total_token_throughput"],
    }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


def _number(value: float | None):
    """JSON has no infinity: vLLM writes an infinite request rate as "inf", and so does this."""
    return "inf" if value == math.inf else value

"""The stand-in's /metrics: Prometheus text exposition under vLLM's own metric names (its v1
engine's: vllm:num_requests_running, vllm:generation_tokens_total,
vllm:time_to_first_token_seconds, ...), labelled model_name like vLLM's, so sparkctl's scrape
job, alert rules and dashboard queries read the stand-in as they read vLLM.

LAB-ONLY: the numbers are the stand-in's own bookkeeping (its Stats counters, the times its
Generator paces tokens at), not a model's."""

from __future__ import annotations

import bisect
import threading

# Bucket bounds in seconds (upper bounds; +Inf is added when rendered).
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
               40.0, 80.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
               480.0, 960.0, 1920.0, 7680.0)


class Histogram:
    def __init__(self, bounds):
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.total = 0.0

    def observe(self, value):
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value

    def lines(self, name, labels):
        out, running = [], 0
        bounds = (*self.bounds, float("inf"))
        for index, count in enumerate(self.counts):
            bound = bounds[index]
            running += count
            le = "+Inf" if bound == float("inf") else repr(float(bound))
            out.append(f'{name}_bucket{{{labels},le="{le}"}} {running}')
        out.append(f"{name}_count{{{labels}}} {running}")
        out.append(f"{name}_sum{{{labels}}} {self.total!r}")
        return out


class Latencies:
    """TTFT, inter-token and end-to-end latencies of the generations, as vLLM's histograms."""

    def __init__(self):
        self._lock = threading.Lock()
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.e2e = Histogram(E2E_BUCKETS)
        self.finished = {}

    def first_token(self, seconds):
        with self._lock:
            self.ttft.observe(seconds)

    def next_token(self, seconds):
        with self._lock:
            self.itl.observe(seconds)

    def finish(self, seconds, reason):
        with self._lock:
            self.e2e.observe(seconds)
            self.finished[reason] = self.finished.get(reason, 0) + 1


def _label_value(value):
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render(model_name, counters, latencies, max_num_seqs):
    """The exposition text: counters are the stand-in's Stats snapshot, latencies its Latencies."""
    labels = f'model_name="{_label_value(model_name)}",engine="0"'
    running, waiting = max(counters.get("active_generations", 0), 0), max(counters.get("queued", 0), 0)
    lines = []

    def metric(name, kind, text, value):
        lines.extend([f"# HELP {name} {text}", f"# TYPE {name} {kind}", f"{name}{{{labels}}} {value}"])

    metric("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", running)
    metric("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", waiting)
    # The stand-in has no blocks: a running sequence holds an equal share of its max_num_seqs slots.
    metric("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.",
           repr(min(running / max(int(max_num_seqs), 1), 1.0)))
    metric("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", counters.get("prompt_tokens", 0))
    metric("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
           counters.get("completion_tokens", 0))
    with latencies._lock:
        lines += ["# HELP vllm:request_success_total Count of successfully processed requests.",
                  "# TYPE vllm:request_success_total counter"]
        for reason in sorted(latencies.finished) or ["stop"]:
            lines.append(f'vllm:request_success_total{{{labels},finished_reason="{_label_value(reason)}"}} '
                         f"{latencies.finished.get(reason, 0)}")
        for name, text, hist in (
                ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", latencies.ttft),
                ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", latencies.itl),
                ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", latencies.e2e)):
            lines += [f"# HELP {name} {text}", f"# TYPE {name} histogram", *hist.lines(name, labels)]
    return "\n".join(lines) + "\n"


_LATENCIES = {}
_LATENCIES_LOCK = threading.Lock()


def latencies_of(engine):
    """The engine's Latencies, made on first use (kept here, by the engine's id, so the engine's
    own boot code needs no change for them)."""
    with _LATENCIES_LOCK:
        return _LATENCIES.setdefault(id(engine), Latencies())

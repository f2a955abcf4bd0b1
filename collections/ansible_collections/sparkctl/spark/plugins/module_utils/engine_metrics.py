# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The engines' Prometheus metrics, by what sparkctl reads them for, and the queries built
from them.

vLLM and SGLang export the same numbers under different names (vLLM's running requests are
`vllm:num_requests_running`, SGLang's `sglang:num_running_reqs`). ENGINE_METRICS is the one
place that knows them: the observe stage's alert rules (through the filter
`sparkctl.spark.observe_engine_metrics`), `sparkctl status`'s live numbers (the filter
`observe_status_queries`) and the Grafana dashboard (tools/observe_dashboard.py) all take
their names from it, so a renamed metric is fixed here once.

Each name is the series as Prometheus stores it: a counter with prometheus_client's `_total`,
a histogram's `_bucket` series (what histogram_quantile reads). The names were read from
the engines' own registrations in their released wheels: vLLM 0.12 to 0.25 and SGLang 0.5.20
to 0.5.23 (sglang/srt/observability/metrics_collector.py). SGLang exports them only
when it runs with --enable-metrics; without it its /metrics has none of them.

The dashboard serves whichever engine runs: its queries name every engine's series joined
with PromQL's `or` (only one engine's series exist), while the alert rules and
`sparkctl status` use the profile's engine only.

Standard library only, no Ansible import: the dashboard tool imports it outside Ansible."""

from __future__ import annotations

# {engine: {role: series name}}; every engine names every role.
ENGINE_METRICS = {
    "vllm": {
        # Gauges: requests in the running batch and queued for it.
        "requests_running": "vllm:num_requests_running",
        "requests_waiting": "vllm:num_requests_waiting",
        # Gauge, a 0..1 ratio despite its name.
        "kv_cache_usage_ratio": "vllm:kv_cache_usage_perc",
        # Counters.
        "generation_tokens": "vllm:generation_tokens_total",
        "prompt_tokens": "vllm:prompt_tokens_total",
        "requests_finished": "vllm:request_success_total",
        # Histograms' buckets, in seconds.
        "time_to_first_token_buckets": "vllm:time_to_first_token_seconds_bucket",
        "inter_token_latency_buckets": "vllm:inter_token_latency_seconds_bucket",
        "e2e_latency_buckets": "vllm:e2e_request_latency_seconds_bucket",
    },
    "sglang": {
        "requests_running": "sglang:num_running_reqs",
        "requests_waiting": "sglang:num_queue_reqs",
        # The KV pool's token usage, a 0..1 ratio.
        "kv_cache_usage_ratio": "sglang:token_usage",
        # Registered with their `_total` already: prometheus_client exposes the name unchanged.
        "generation_tokens": "sglang:generation_tokens_total",
        "prompt_tokens": "sglang:prompt_tokens_total",
        "requests_finished": "sglang:num_requests_total",
        "time_to_first_token_buckets": "sglang:time_to_first_token_seconds_bucket",
        "inter_token_latency_buckets": "sglang:inter_token_latency_seconds_bucket",
        "e2e_latency_buckets": "sglang:e2e_request_latency_seconds_bucket",
    },
}

ENGINES = tuple(ENGINE_METRICS)


def engine_metrics(engine):
    """The engine's {role: series name} (a copy); ValueError for an engine without a table."""
    if not isinstance(engine, str) or engine not in ENGINE_METRICS:
        raise ValueError("no metric names for the engine %r; sparkctl knows %s" % (engine, ", ".join(ENGINES)))
    return dict(ENGINE_METRICS[engine])


def series(engine, role, matchers=""):
    """The selector of one role's series, `name{matchers}` (matchers like `job="engine"`), or the bare name."""
    names = engine_metrics(engine)
    if role not in names:
        raise ValueError("no metric for %r; the roles are %s" % (role, ", ".join(names)))
    return "%s{%s}" % (names[role], matchers) if matchers else names[role]


def _either(queries):
    # Only the running engine's series exist, so `or` returns that engine's answer.
    return " or ".join(queries)


def counter_rate(engines, role, window, matchers=""):
    """The summed per-second rate of a counter over `window`, for the first of `engines` that exports it."""
    return _either("sum(rate(%s[%s]))" % (series(engine, role, matchers), window) for engine in engines)


def gauge(engines, role, aggregation="sum", matchers=""):
    """A gauge aggregated over its series (`sum`, `max`, ...), for the first of `engines` that exports it."""
    return _either("%s(%s)" % (aggregation, series(engine, role, matchers)) for engine in engines)


def latency_quantile(engines, role, quantile, window, matchers=""):
    """A histogram's quantile over `window`. The engines' bucket rates are joined inside the sum by
    `le`, so the quantile is computed from whichever engine's buckets exist."""
    rates = _either("rate(%s[%s])" % (series(engine, role, matchers), window) for engine in engines)
    return "histogram_quantile(%s, sum by (le) (%s))" % (quantile, rates)

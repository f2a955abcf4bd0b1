#!/usr/bin/env python3
"""Generate the observe stage's Grafana dashboard with grafana-foundation-sdk.

    python tools/observe_dashboard.py            # write roles/observe/files/sparkctl-dashboard.json
    python tools/observe_dashboard.py --check    # exit 1 when the committed JSON differs

The JSON is committed; the observe role provisions it on Grafana (roles/observe/tasks/grafana.yml).
PANELS is the one list of the dashboard's queries: tests/unit/test_observe_dashboard.py checks the
committed JSON is this script's output, and tests/integration/test_lab_observe.py runs every query
against the lab's Prometheus.

One dashboard serves every engine: the engine panels' queries take the metric names from
module_utils/engine_metrics.py (ENGINE_METRICS) and join every engine's with PromQL's `or`, so
whichever engine runs (vLLM or SGLang) fills them."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from grafana_foundation_sdk.builders import dashboard, prometheus, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import DataSourceRef

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "collections"))
from ansible_collections.sparkctl.spark.plugins.module_utils import engine_metrics  # noqa: E402

OUTPUT = REPO / "roles" / "observe" / "files" / "sparkctl-dashboard.json"
UID = "sparkctl-cluster"
# The data source the role provisions (roles/observe/templates/grafana-datasource.yml.j2).
DATASOURCE = DataSourceRef(type_val="prometheus", uid="sparkctl-prometheus")

# The engine panels' queries, each over every engine sparkctl runs (vLLM's names first), on the engine's scrape job.
ENGINES = engine_metrics.ENGINES
ENGINE_JOB = 'job="engine"'
QUANTILES = ("50", "95", "99")


def engine_rate(role: str) -> str:
    return engine_metrics.counter_rate(ENGINES, role, "1m", ENGINE_JOB)


def engine_gauge(role: str, aggregation: str) -> str:
    return engine_metrics.gauge(ENGINES, role, aggregation, ENGINE_JOB)


def engine_latency(role: str) -> list[tuple[str, str]]:
    return [(f"p{q}", engine_metrics.latency_quantile(ENGINES, role, f"0.{q}", "5m", ENGINE_JOB)) for q in QUANTILES]


# (title, unit, [(legend, query)]): each panel's queries, in the order they are drawn.
PANELS = [
    ("Tokens per second", "short", [
        ("generated", engine_rate("generation_tokens")),
        ("prompt", engine_rate("prompt_tokens")),
    ]),
    ("Time to first token", "s", engine_latency("time_to_first_token_buckets")),
    ("Inter-token latency", "s", engine_latency("inter_token_latency_buckets")),
    ("Requests", "short", [
        ("running", engine_gauge("requests_running", "sum")),
        ("waiting", engine_gauge("requests_waiting", "sum")),
    ]),
    ("KV cache usage", "percentunit", [
        ("used", engine_gauge("kv_cache_usage_ratio", "max")),
    ]),
    ("MemAvailable per node, and the OOM guard's line", "bytes", [
        ("{{node}}", "node_memory_MemAvailable_bytes{job=\"node\"}"),
        ("{{node}} OOM line", "sparkctl_oom_guard_line_bytes{job=\"node\"}"),
    ]),
    # RDMA traffic bypasses the kernel's interface counters: the RDMA ports' counters
    # (node exporter's infiniband collector) carry it; the interface counters carry TCP/IP.
    ("Cable throughput per half", "Bps", [
        ("{{node}} {{device}}/{{port}} RDMA tx", "rate(node_infiniband_port_data_transmitted_bytes_total{job=\"node\"}[1m])"),
        ("{{node}} {{device}}/{{port}} RDMA rx", "rate(node_infiniband_port_data_received_bytes_total{job=\"node\"}[1m])"),
        ("{{node}} {{device}} IP tx", "rate(node_network_transmit_bytes_total{job=\"node\"}[1m])"
                                      " * on (node, device) group_left sparkctl_cable_half_info"),
        ("{{node}} {{device}} IP rx", "rate(node_network_receive_bytes_total{job=\"node\"}[1m])"
                                      " * on (node, device) group_left sparkctl_cable_half_info"),
    ]),
]


def build() -> dict:
    board = (dashboard.Dashboard("sparkctl: the cluster")
             .uid(UID)
             .tags(["sparkctl"])
             .refresh("30s")
             .time("now-1h", "now")
             .timezone("browser"))
    for title, unit, queries in PANELS:
        panel = timeseries.Panel().title(title).unit(unit).datasource(DATASOURCE).height(8).span(12).min(0)
        for index, (legend, expr) in enumerate(queries):
            panel = panel.with_target(prometheus.Dataquery().expr(expr).legend_format(legend)
                                      .ref_id(chr(ord("A") + index)).datasource(DATASOURCE))
        board = board.with_panel(panel)
    return json.loads(json.dumps(board.build(), cls=JSONEncoder))


def render() -> str:
    return json.dumps(build(), indent=2, sort_keys=True) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the committed JSON is not this script's output")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        same = OUTPUT.is_file() and OUTPUT.read_text(encoding="utf-8") == text
        print(f"{OUTPUT}: {'up to date' if same else 'differs: run python tools/observe_dashboard.py'}")
        return 0 if same else 1
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

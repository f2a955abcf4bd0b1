"""sparkctl's Grafana dashboard (roles/observe/files/sparkctl-dashboard.json): generated with
grafana-foundation-sdk by tools/observe_dashboard.py and committed. Regenerating gives the same
bytes; its panels are the issue's; every panel's query is one the lab test runs against the lab's
Prometheus (tests/integration/test_lab_observe.py reads the same committed file). The engine
panels serve vLLM and SGLang alike, each query naming both engines' series (module_utils/engine_metrics.py);
promtool parses every query."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml
from ansible_collections.sparkctl.spark.plugins.module_utils.engine_metrics import ENGINE_METRICS
from test_observe_rules import PROMTOOL, needs_promtool

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))
import observe_dashboard  # noqa: E402

COMMITTED = REPO / "roles" / "observe" / "files" / "sparkctl-dashboard.json"
LAB_TEST = REPO / "tests" / "integration" / "test_lab_observe.py"


def _queries(board: dict) -> list[str]:
    return [target["expr"] for panel in board["panels"] for target in panel["targets"]]


def test_regenerating_gives_the_committed_json():
    assert COMMITTED.read_text(encoding="utf-8") == observe_dashboard.render(), \
        "run python tools/observe_dashboard.py and commit roles/observe/files/sparkctl-dashboard.json"
    assert observe_dashboard.main(["--check"]) == 0


def test_a_changed_panel_is_caught(monkeypatch):
    """The comparison can fail: one query changed in the script differs from the committed JSON."""
    panels = [list(panel) for panel in observe_dashboard.PANELS]
    panels[0][2] = [("generated", "sum(rate(vllm:generation_tokens_total[5m]))")]
    monkeypatch.setattr(observe_dashboard, "PANELS", [tuple(p) for p in panels])
    assert observe_dashboard.render() != COMMITTED.read_text(encoding="utf-8")


def test_the_panels_are_the_ones_the_issue_asks_for():
    board = json.loads(COMMITTED.read_text(encoding="utf-8"))
    assert [panel["title"] for panel in board["panels"]] == [
        "Tokens per second", "Time to first token", "Inter-token latency", "Requests", "KV cache usage",
        "MemAvailable per node, and the OOM guard's line", "Cable throughput per half"]
    queries = _queries(board)
    for needed in ("vllm:generation_tokens_total", "vllm:time_to_first_token_seconds_bucket", "vllm:inter_token_latency_seconds_bucket",
                   "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                   "node_memory_MemAvailable_bytes", "sparkctl_oom_guard_line_bytes", "node_infiniband_port_data_transmitted_bytes_total"):
        assert any(needed in query for query in queries), needed
    assert all(panel["datasource"]["uid"] == "sparkctl-prometheus" for panel in board["panels"])
    # Panels do not overlap on Grafana's 24-column grid.
    cells = [(p["gridPos"]["x"], p["gridPos"]["y"]) for p in board["panels"]]
    assert len(set(cells)) == len(cells)


def test_every_panel_query_is_run_by_the_lab_test():
    """The lab test takes its queries from the committed JSON (the file Grafana gets), one
    check per panel: every query of the dashboard is among them."""
    source = LAB_TEST.read_text(encoding="utf-8")
    assert 'DASHBOARD = REPO / "roles" / "observe" / "files" / "sparkctl-dashboard.json"' in source
    assert "def test_every_dashboard_panel_returns_lab_data" in source
    sys.path.insert(0, str(REPO / "tests" / "integration"))
    import ast
    tree = ast.parse(source)
    names = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
    assert "dashboard_queries" in names
    namespace: dict = {"json": json, "REPO": REPO, "Path": Path}
    func = next(node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "dashboard_queries")
    exec(compile(ast.Module(body=[func], type_ignores=[]), str(LAB_TEST), "exec"), namespace)
    namespace["DASHBOARD"] = COMMITTED
    lab = namespace["dashboard_queries"]()
    assert sorted(q for queries in lab.values() for q in queries) == sorted(_queries(json.loads(COMMITTED.read_text(encoding="utf-8"))))


def test_the_engine_panels_fill_with_either_engine_s_metrics():
    """Each engine panel's query names the same series role in every engine's name, so a vLLM and an
    SGLang profile both fill it; no other engine's name appears."""
    board = json.loads(COMMITTED.read_text(encoding="utf-8"))
    engine_panels = {"Tokens per second", "Time to first token", "Inter-token latency", "Requests", "KV cache usage"}
    for panel in board["panels"]:
        for target in panel["targets"]:
            named = {engine: sorted(role for role, name in names.items() if f"{name}{{" in target["expr"])
                     for engine, names in ENGINE_METRICS.items()}
            if panel["title"] in engine_panels:
                assert named["vllm"] and all(roles == named["vllm"] for roles in named.values()), (panel["title"], named)
            else:
                assert not any(named.values()), (panel["title"], named)
    queries = " ".join(_queries(board))
    for engine, names in ENGINE_METRICS.items():
        for role in ("generation_tokens", "prompt_tokens", "time_to_first_token_buckets", "inter_token_latency_buckets",
                     "requests_running", "requests_waiting", "kv_cache_usage_ratio"):
            assert names[role] in queries, (engine, role)


@needs_promtool
def test_every_panel_query_is_promql(tmp_path):
    """promtool parses each query, as the expression of a recording rule."""
    queries = _queries(json.loads(COMMITTED.read_text(encoding="utf-8")))
    rules = {"groups": [{"name": "dashboard", "rules": [{"record": f"sparkctl:dashboard_query_{i}", "expr": q}
                                                         for i, q in enumerate(queries)]}]}
    (tmp_path / "dashboard.rules.yml").write_text(yaml.safe_dump(rules))
    done = subprocess.run([PROMTOOL, "check", "rules", str(tmp_path / "dashboard.rules.yml")], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr

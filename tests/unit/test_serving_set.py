"""The serving set as the roles read it (spark_serving, roles/spark), evaluated by Ansible's own
templating: the nodes the profile does not need are left out of Ray's cluster and of the memory
floors, and the units an idle node must not run are the engine's and Ray's."""
from __future__ import annotations

from pathlib import Path

import yaml
from role_templating import evaluate

ROLES = Path(__file__).resolve().parents[2] / "roles"
SERVING = {"nodes": 2, "serving": ["spark1", "spark2"], "idle": ["spark3"]}
UNITS = {"engine": "sparkctl-engine.service", "sglang_rank": "sparkctl-sglang-rank.service",
         "sglang_router": "sparkctl-sglang-router.service", "ray_worker": "sparkctl-ray-worker.service",
         "ray_head": "sparkctl-ray-head.service"}


def _vars(role: str, where: str = "defaults") -> dict:
    return yaml.safe_load((ROLES / role / where / "main.yml").read_text())


def test_ray_reads_the_serving_nodes_only():
    variables = {"ansible_play_hosts": ["spark1", "spark2", "spark3"], "spark_serving": SERVING,
                 "ray_cluster_hosts": _vars("ray_cluster", "vars")["ray_cluster_hosts"]}
    assert evaluate("{{ ray_cluster_hosts }}", variables) == ["spark1", "spark2"]
    # A run limited to some nodes reads those of them that serve.
    variables["ansible_play_hosts"] = ["spark1", "spark3"]
    assert evaluate("{{ ray_cluster_hosts }}", variables) == ["spark1"]


def test_an_idle_node_needs_only_the_oom_guards_memory():
    defaults = _vars("preflight")
    names = ("preflight_model_memory_bytes", "preflight_mem_total_min_bytes", "preflight_mem_available_min_bytes")
    for host, expected in (("spark2", 100 + 8), ("spark3", 8)):
        variables = {"inventory_hostname": host, "spark_serving": SERVING, "spark_model_memory_bytes": 100,
                     "preflight_memory_guard_bytes": 8, **{name: defaults[name] for name in names}}
        assert int(evaluate("{{ preflight_mem_available_min_bytes }}", variables)) == expected, host
        assert int(evaluate("{{ preflight_mem_total_min_bytes }}", variables)) == expected, host


def test_an_idle_node_stops_every_engine_and_ray_unit():
    role_vars = _vars("engine_service", "vars")
    variables = {"spark_units": UNITS, **{name: role_vars[name]
                                          for name in ("engine_service_all_units", "engine_service_idle_units")}}
    assert sorted(evaluate("{{ engine_service_idle_units }}", variables)) == sorted(UNITS.values())

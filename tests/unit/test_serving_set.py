"""The serving set as the roles read it (spark_serving, roles/spark), evaluated by Ansible's own
templating: the nodes the profile does not need are left out of Ray's cluster and of the memory
floors, and the units an idle node must not run are the engine's and Ray's."""
from __future__ import annotations

from pathlib import Path

import yaml
from ansible_collections.sparkctl.spark.plugins.module_utils.units import UNITS, unit_groups
from role_templating import evaluate

ROLES = Path(__file__).resolve().parents[2] / "roles"
SERVING = {"nodes": 2, "serving": ["spark1", "spark2"], "idle": ["spark3"]}


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
    names = ("engine_service_all_units", "engine_service_idle_units", "engine_service_unused_units")
    variables = {"spark_units": UNITS, "spark_unit_groups": unit_groups(), "inventory_hostname": "spark3",
                 "engine_service_render": {"units": {}}, **{name: role_vars[name] for name in names}}
    engine_and_ray = sorted(UNITS[key] for key in ("engine", "vllm_rank", "sglang_rank", "sglang_router",
                                                    "ray_worker", "ray_head"))
    assert sorted(evaluate("{{ engine_service_idle_units }}", variables)) == engine_and_ray
    assert sorted(evaluate("{{ engine_service_unused_units }}", variables)) == engine_and_ray


def test_a_serving_node_stops_the_units_of_another_topology():
    """After a switch between Ray and vllm_ranks the other topology's units must not run or come back
    at boot: on a serving node, every engine and Ray unit its profile does not render is stopped."""
    role_vars = _vars("engine_service", "vars")
    names = ("engine_service_all_units", "engine_service_idle_units", "engine_service_unused_units")
    base = {"spark_units": UNITS, "spark_unit_groups": unit_groups(), "inventory_hostname": "spark2",
            **{name: role_vars[name] for name in names}}
    ranks = dict(base, engine_service_render={"units": {"spark1": {UNITS["engine"]: ""},
                                                        "spark2": {UNITS["vllm_rank"]: ""}}})
    unused = evaluate("{{ engine_service_unused_units }}", ranks)
    assert UNITS["ray_worker"] in unused and UNITS["ray_head"] in unused and UNITS["vllm_rank"] not in unused
    ray = dict(base, engine_service_render={"units": {"spark1": {UNITS["ray_head"]: "", UNITS["engine"]: ""},
                                                      "spark2": {UNITS["ray_worker"]: ""}}})
    unused = evaluate("{{ engine_service_unused_units }}", ray)
    assert UNITS["vllm_rank"] in unused and UNITS["ray_worker"] not in unused

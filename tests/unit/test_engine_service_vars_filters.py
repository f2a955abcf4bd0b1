"""The engine_service role's restart decision (engine_service_restart) and the running units a switch
of the served model replaces (engine_service_replaced_units), roles/engine_service/vars/main.yml, as
Ansible's own templating evaluates them with the collection's filters: the same values the role's
earlier Jinja loops computed (kept below as they were), for two and three nodes, an idle worker
included; and sparkctl.spark.engine_restart_due and engine_units_replaced on their own."""
from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.sparkctl.spark.plugins.filter.engine_service import engine_restart_due, engine_units_replaced
from ansible_collections.sparkctl.spark.plugins.module_utils.units import UNITS
from collection_templating import TemplateFailed, evaluate

ROLE = Path(__file__).resolve().parents[2] / "roles" / "engine_service"
VARS = yaml.safe_load((ROLE / "vars" / "main.yml").read_text(encoding="utf-8"))
DEFAULTS = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text(encoding="utf-8"))
UNIT_DIR = DEFAULTS["engine_service_unit_dir"]
RUNNING_STATES = ["active", "activating", "reloading"]

# The role's vars before the loops moved into sparkctl.spark.engine_restart_due and engine_units_replaced.
OLD_VARS = yaml.safe_load(r"""
engine_service_restart: >-
  {%- set ns = namespace(restart=hostvars[spark_cluster.head.name].engine_service_key_written | default({}) is changed) -%}
  {%- for host in ansible_play_hosts -%}
  {%-   set node = hostvars[host] -%}
  {%-   if (node.engine_service_node | default({})).stale | default([]) | length > 0
          or node.engine_service_units_written | default({}) is changed
          or ansible_check_mode and node.engine_service_env_written | default({}) is changed
          or ((node.jit_cache_node | default({})).reset | default(false)
              or (node.jit_cache_node | default({})).relinked | default(false))
             and not engine_service_ray_restarted_engine | bool -%}
  {%-     set ns.restart = true -%}
  {%-   endif -%}
  {%- endfor -%}
  {{ ns.restart }}
engine_service_replaced_units: >-
  {%- set ns = namespace(found=[]) -%}
  {%- for name, unit in (engine_service_before.units | default({})).items() -%}
  {%-   if unit.active_state | default('inactive') in spark_unit_running_states
          and (name not in engine_service_units
               or (engine_service_unit_dir ~ '/' ~ name) in engine_service_before.drifted | default([])) -%}
  {%-     set ns.found = ns.found + [name] -%}
  {%-   endif -%}
  {%- endfor -%}
  {{ ns.found }}
""")

CHANGED = {"changed": True, "failed": False}
UNCHANGED = {"changed": False, "failed": False}
SKIPPED = {"changed": False, "skipped": True, "skip_reason": "Conditional result was False"}


def _node_read(stale=()) -> dict:
    """A node's registered read of its engine units (sparkctl.spark.node_state, units.yml)."""
    return {"changed": False, "drifted": [], "daemon_reload": False, "stale": list(stale),
            "units": {UNITS["engine"]: {"active_state": "active", "sub_state": "running", "restart_pending": False}},
            "paths": {f"{UNIT_DIR}/{UNITS['engine']}": {"exists": True}}}


def _jit(reset=False, relinked=False) -> dict:
    return {"changed": reset or relinked, "identity": "venv-3f0c9e1a2b4d5e6f", "reset": reset, "relinked": relinked,
            "cache": {"files": 3, "digest": "d1", "names": []}}


def _restart_variables(hostvars: dict, nodes: int, check_mode: bool = False, role_vars: dict = VARS) -> dict:
    """hostvars: host -> its registered results; every host of the play has its read and kernel cache
    unless given otherwise. The head is spark1; with three nodes spark3 is idle (outside the serving set)."""
    names = [f"spark{n + 1}" for n in range(nodes)]
    full = {name: {"ansible_host": f"10.0.0.{11 + n}", "engine_service_node": _node_read(), "jit_cache_node": _jit(),
                   **hostvars.get(name, {})} for n, name in enumerate(names)}
    full = {name: {key: value for key, value in values.items() if value is not None} for name, values in full.items()}
    cluster = {"head": {"name": "spark1", "link_ip": "192.168.100.10"},
               "workers": [{"name": "spark2", "link_ip": "192.168.100.11"}]}
    return {**role_vars, "hostvars": full, "ansible_play_hosts": names, "spark_cluster": cluster,
            "ansible_check_mode": check_mode, "inventory_hostname": "spark1"}


def _old(variables: dict) -> dict:
    return {**variables, **OLD_VARS}


def _restart(variables: dict) -> bool:
    return evaluate("{{ engine_service_restart }}", variables)


# One registered result (or its absence, None) on one host: what each can change in the decision.
ONE_RESULT = {
    "nothing": {},
    "stale unit": {"engine_service_node": _node_read(stale=["/etc/sparkctl/engine.env"])},
    "no read": {"engine_service_node": None},
    "skipped read": {"engine_service_node": SKIPPED},
    "units written": {"engine_service_units_written": CHANGED},
    "units as they were": {"engine_service_units_written": UNCHANGED},
    "units write skipped": {"engine_service_units_written": SKIPPED},
    "units written in a loop": {"engine_service_units_written": {"changed": False, "results": [UNCHANGED, CHANGED]}},
    "units written as a loop without change": {"engine_service_units_written": {"results": [UNCHANGED, UNCHANGED]}},
    "engine.env written": {"engine_service_env_written": CHANGED},
    "engine.env as it was": {"engine_service_env_written": UNCHANGED},
    "kernel cache reset": {"jit_cache_node": _jit(reset=True)},
    "kernel cache relinked": {"jit_cache_node": _jit(relinked=True)},
    "no kernel cache read": {"jit_cache_node": None},
    "api key written": {"engine_service_key_written": CHANGED},
    "api key as it was": {"engine_service_key_written": UNCHANGED},
    "ray restarted its head": {"ray_cluster_head_start": CHANGED},
}
# The worker of two nodes; the head and the idle worker of three.
MATRIX = [(nodes, host, result) for nodes, host in ((2, "spark2"), (3, "spark1"), (3, "spark3")) for result in ONE_RESULT]


@pytest.mark.parametrize("nodes, host, result", MATRIX, ids=["%d nodes, %s: %s" % case for case in MATRIX])
def test_the_restart_decision_is_the_loops(nodes, host, result):
    """In a real run and in --check, with and without Ray's restart of the head."""
    for check_mode, ray in itertools.product((False, True), (False, True)):
        hostvars = {host: dict(ONE_RESULT[result])}
        if ray:
            hostvars.setdefault("spark1", {})["ray_cluster_head_start"] = CHANGED
        variables = _restart_variables(hostvars, nodes, check_mode=check_mode)
        assert _restart(variables) is _restart(_old(variables)), dict(check_mode=check_mode, ray_restarted=ray)


@pytest.mark.parametrize("nodes", [2, 3])
def test_what_restarts_the_engine(nodes):
    idle_or_worker = f"spark{nodes}"
    assert _restart(_restart_variables({}, nodes)) is False
    assert _restart(_restart_variables({idle_or_worker: {"engine_service_node": _node_read(stale=["x"])}}, nodes)) is True
    assert _restart(_restart_variables({"spark1": {"engine_service_key_written": CHANGED}}, nodes)) is True
    # engine.env counts through the read in a real run, by itself in --check only.
    env = {idle_or_worker: {"engine_service_env_written": CHANGED}}
    assert _restart(_restart_variables(env, nodes)) is False
    assert _restart(_restart_variables(env, nodes, check_mode=True)) is True
    # A kernel cache change, unless Ray's restart of the head already restarted the engine after it.
    cache = {idle_or_worker: {"jit_cache_node": _jit(reset=True)}}
    assert _restart(_restart_variables(cache, nodes)) is True
    assert _restart(_restart_variables({**cache, "spark1": {"ray_cluster_head_start": CHANGED}}, nodes)) is False


def test_a_result_of_the_wrong_shape_fails_wherever_it_is_as_before():
    """Every host is judged, also after one that restarts the engine."""
    hostvars = {"spark1": {"engine_service_node": _node_read(stale=["x"])},
                "spark3": {"engine_service_units_written": ["not", "a", "result"]}}
    variables = _restart_variables(hostvars, 3)
    for each in (variables, _old(variables)):
        with pytest.raises(TemplateFailed, match="changed"):
            _restart(each)


# --- the units a switch of the served model replaces ---------------------------------------------------

def _before(units: dict, drifted=()) -> dict:
    """This node's read before the switch (replace.yml): every engine unit sparkctl names, with its state."""
    return {"changed": False, "drifted": list(drifted), "paths": {},
            "units": {UNITS[key]: {"active_state": state, "sub_state": "running" if state == "active" else "dead"}
                      for key, state in units.items()}}


def _replaced_variables(before: dict | None, rendered: list[str]) -> dict:
    variables = {**DEFAULTS, **VARS, "spark_unit_running_states": RUNNING_STATES, "inventory_hostname": "spark2",
                 "engine_service_render": {"units": {"spark2": {UNITS[key]: "[Unit]" for key in rendered}}}}
    if before is not None:
        variables["engine_service_before"] = before
    return variables


REPLACED = {
    "nothing runs": (_before({"engine": "inactive", "vllm_rank": "inactive"}), ["engine"], []),
    "the same engine runs": (_before({"engine": "active", "vllm_rank": "inactive"}), ["engine"], []),
    "another topology's rank runs": (_before({"engine": "inactive", "vllm_rank": "active"}), ["engine"], ["vllm_rank"]),
    "the engine's unit drifted": (_before({"engine": "active"}, drifted=[f"{UNIT_DIR}/{UNITS['engine']}"]), ["engine"],
                                  ["engine"]),
    "a drifted unit that does not run": (
        _before({"engine": "failed"}, drifted=[f"{UNIT_DIR}/{UNITS['engine']}"]), ["engine"], []),
    "an idle node's units still starting": (
        _before({"engine": "activating", "sglang_rank": "reloading", "vllm_rank": "inactive"}), [],
        ["engine", "sglang_rank"]),
    "a unit without a state": ({"units": {UNITS["engine"]: {}}, "drifted": []}, [], []),
    "a read without drifted": ({"units": {UNITS["engine"]: {"active_state": "active"}}}, ["engine"], []),
    "a skipped read": (SKIPPED, ["engine"], []),
}


@pytest.mark.parametrize("before, rendered, expected", REPLACED.values(), ids=REPLACED.keys())
def test_the_replaced_units_are_the_loops(before, rendered, expected):
    variables = _replaced_variables(before, rendered)
    expr = "{{ engine_service_replaced_units }}"
    assert evaluate(expr, variables) == evaluate(expr, _old(variables)) == [UNITS[key] for key in expected]


# --- the filters on their own ----------------------------------------------------------------------


def test_the_restart_filter_counts_a_loops_changed_results_as_ansible_does():
    empty = [{}]
    assert engine_restart_due(empty, [{"results": [UNCHANGED, CHANGED]}], empty, empty, {}, False, False) is True
    assert engine_restart_due(empty, [{"changed": False, "results": [CHANGED]}], empty, empty, {}, False, False) is False
    assert engine_restart_due([], [], [], [], CHANGED, False, False) is True
    assert engine_restart_due([], [], [], [], {}, False, False) is False


def test_the_restart_filter_refuses_a_result_that_is_not_one():
    with pytest.raises(AnsibleFilterError, match="changed"):
        engine_restart_due([{}], [{}], [{}], [{}], "changed", False, False)


def test_the_restart_filter_refuses_lists_of_other_hosts():
    with pytest.raises(AnsibleFilterError, match="same hosts"):
        engine_restart_due([{}, {}], [{}], [{}, {}], [{}, {}], {}, False, False)


def test_the_replaced_filter_keeps_the_reads_order():
    units = {"b.service": {"active_state": "active"}, "a.service": {"active_state": "reloading"}}
    assert engine_units_replaced(units, {}, [], UNIT_DIR, RUNNING_STATES) == ["b.service", "a.service"]
    assert engine_units_replaced(units, {"b.service": "", "a.service": ""}, [f"{UNIT_DIR}/a.service"], UNIT_DIR,
                                 RUNNING_STATES) == ["a.service"]

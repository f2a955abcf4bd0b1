"""The ray_cluster role's cluster-wide decisions (roles/ray_cluster/vars/main.yml), made by the
collection's ray_cluster filters from every node's registered results through hostvars: each
node's unit state, whether the cluster restarts, whether any node starts, each node's raylet id,
and the head and its GCS address from the pinned spark_cluster.

The role's expressions are evaluated by Ansible's own templating with the collection's filters
(collection_templating.evaluate: role_templating.evaluate in a fresh interpreter), each compared
with the Jinja loops the filters replaced (OLD_VARS), on clusters of two and three nodes, one
with an idle worker; the filters' edge cases are tested directly."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.sparkctl.spark.plugins.filter import ray_cluster as F
from ansible_collections.sparkctl.spark.plugins.filter.profile import profile_cluster
from ansible_collections.sparkctl.spark.plugins.module_utils.node_state import unit_summary
from ansible_collections.sparkctl.spark.plugins.module_utils.units import UNITS
from collection_templating import judge, old_and_new

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "ray_cluster"
VARS = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
HEAD_UNIT, WORKER_UNIT, ENGINE_UNIT = UNITS["ray_head"], UNITS["ray_worker"], UNITS["engine"]

# The expressions as they were before the filters, kept to check the filters decide the same.
OLD_VARS = yaml.safe_load(r"""
ray_cluster_head: "{{ groups['spark_head'][0] }}"
ray_cluster_address: >-
  {{ hostvars[groups['spark_head'][0]]['spark_link'] | sparkctl.spark.link_ips | first }}:{{ ray_cluster_gcs_port }}
ray_cluster_units: >-
  {%- set ns = namespace(pairs=[]) -%}
  {%- for host in ray_cluster_hosts -%}
  {%-   set unit = ray_cluster_head_unit if host in groups['spark_head'] else ray_cluster_worker_unit -%}
  {%-   set read = hostvars[host].ray_cluster_node.units[unit] -%}
  {%-   set ns.pairs = ns.pairs + [[host, {
          'unit': unit,
          'state': 'stopped' if hostvars[host].ray_cluster_stopped_for_new_file | default({}) is changed
                   else 'running' if read.sub_state == 'running'
                   else 'absent' if read.load_state == 'not-found' else 'stopped',
          'ip': hostvars[host]['spark_link'] | sparkctl.spark.link_ips | first}]] -%}
  {%- endfor -%}
  {{ dict(ns.pairs) }}
ray_cluster_engine_read: >-
  {{ (((hostvars[groups['spark_head'][0]].ray_cluster_node | default({})).units | default({}))[ray_cluster_engine_unit]
      | default({})) }}
ray_cluster_restart: >-
  {%- set ns = namespace(restart=false) -%}
  {%- for host in ray_cluster_hosts -%}
  {%-   set node = hostvars[host] -%}
  {%-   if (node.ray_cluster_node | default({})).stale | default([]) | length > 0
          or node.ray_cluster_unit_file | default({}) is changed
          or node.engine_service_env_written | default({}) is changed
          or node.engine_venv_marked | default({}) is changed -%}
  {%-     set ns.restart = true -%}
  {%-   endif -%}
  {%- endfor -%}
  {{ ns.restart }}
ray_cluster_start_drift: >-
  {%- set ns = namespace(start=ray_cluster_restart | bool) -%}
  {%- for host in ray_cluster_hosts -%}
  {%-   if hostvars[host].ray_cluster_recovered | default(false) | bool
          or ray_cluster_units[host].unit in hostvars[host].ray_cluster_node.drifted
          or ray_cluster_units[host].state != 'running' -%}
  {%-     set ns.start = true -%}
  {%-   endif -%}
  {%- endfor -%}
  {{ ns.start }}
ray_cluster_raylet_ids: >-
  {%- set ns = namespace(pairs=[]) -%}
  {%- for host in ray_cluster_hosts -%}
  {%-   set waited = hostvars[host].ray_cluster_raylet_waited | default({}) -%}
  {%-   set ns.pairs = ns.pairs + [[host, waited.node_id if waited.node_id is defined
                                           else hostvars[host].ray_cluster_node.raylet_node_id]] -%}
  {%- endfor -%}
  {{ dict(ns.pairs) }}
""")
COMPARED = ("ray_cluster_head", "ray_cluster_address", "ray_cluster_units", "ray_cluster_running_hosts",
            "ray_cluster_engine_read", "ray_cluster_engine_active", "ray_cluster_restart", "ray_cluster_start_here",
            "ray_cluster_start_drift", "ray_cluster_raylet_ids")

# Registered results as Ansible leaves them.
SKIPPED = {"changed": False, "skipped": True, "skip_reason": "Conditional result was False", "false_condition": "x"}
WRITTEN = {"changed": True, "dest": "/etc/systemd/system/x", "mode": "0644"}
UNCHANGED = {"changed": False}
# A loop's result: changed only through its items.
LOOP_CHANGED = {"results": [{"changed": False, "item": "a"}, {"changed": True, "item": "b"}], "msg": "All items completed"}


def link(n):
    return [{"interface": "enp1s0f1np1", "address": f"192.168.100.{n}/24"},
            {"interface": "enP2p1s0f1np1", "address": f"192.168.101.{n}/24"}]


def unit(sub="running", load="loaded"):
    """One unit as sparkctl.spark.node_state reads it from systemctl show."""
    active = {"running": "active", "auto-restart": "activating", "failed": "failed"}.get(sub, "inactive")
    return unit_summary({"LoadState": load, "ActiveState": active, "SubState": sub,
                         "UnitFileState": "enabled" if load == "loaded" else "", "MainPID": "4242" if sub == "running" else "0"})


def read(ray_unit, ray_state=None, engine=None, drifted=(), stale=(), raylet="", daemon_reload=False):
    """units.yml's registered node_state read of one node."""
    units = {ray_unit: ray_state or unit()}
    if engine is not None:
        units[ENGINE_UNIT] = engine
    return {"changed": False, "units": units, "drifted": list(drifted), "stale": list(stale),
            "daemon_reload": daemon_reload, "raylet_node_id": raylet, "processes": [], "paths": {}}


def cluster(nodes, serving=None, play_hosts=None, this_host=None):
    """The variables the role's expressions see on this_host: nodes is host -> its hostvars
    besides spark_link (the first host is the head); serving defaults to every node."""
    hosts = list(nodes)
    serving = list(serving or hosts)
    groups = {"spark_head": hosts[:1], "spark_workers": hosts[1:], "all": hosts}
    hostvars = {host: {"spark_link": link(10 + index), **facts} for index, (host, facts) in enumerate(nodes.items())}
    spark_cluster = profile_cluster(groups, hostvars, "sparkctl", "/srv/sparkctl/models/m", "/etc/sparkctl/api-key.env",
                                    serving=serving)
    return {**VARS, "groups": groups, "hostvars": hostvars, "ansible_play_hosts": list(play_hosts or hosts),
            "inventory_hostname": this_host or hosts[0], "spark_serving": {"nodes": len(serving), "serving": serving,
                                                                         "idle": [h for h in hosts if h not in serving]},
            "spark_cluster": spark_cluster, "ray_cluster_head_unit": HEAD_UNIT, "ray_cluster_worker_unit": WORKER_UNIT,
            "ray_cluster_engine_unit": ENGINE_UNIT, "ray_cluster_gcs_port": 6379,
            # This node's own registered results, as its vars see them.
            **{name: value for name, value in hostvars[this_host or hosts[0]].items() if name != "spark_link"}}


HEALTHY_TWO = {
    "spark1": {"ray_cluster_node": read(HEAD_UNIT, engine=unit(), raylet="a" * 56),
               "ray_cluster_stopped_for_new_file": SKIPPED, "ray_cluster_unit_file": SKIPPED,
               "engine_service_env_written": UNCHANGED, "engine_venv_marked": UNCHANGED},
    "spark2": {"ray_cluster_node": read(WORKER_UNIT, raylet="b" * 56),
               "ray_cluster_stopped_for_new_file": SKIPPED, "ray_cluster_unit_file": SKIPPED,
               "engine_service_env_written": UNCHANGED, "engine_venv_marked": UNCHANGED},
}

SCENARIOS = {
    # Converged: nothing to write, start or wait for.
    "two nodes, healthy": cluster(HEALTHY_TWO),
    "two nodes, healthy, on the worker": cluster(HEALTHY_TWO, this_host="spark2"),
    # The worker's raylet died and systemd gave up; the head's unit file is replaced under a running unit.
    "two nodes, a dead worker and a replaced head file": cluster({
        "spark1": {"ray_cluster_node": read(HEAD_UNIT, engine=unit(), drifted=["/etc/systemd/system/" + HEAD_UNIT],
                                            raylet="a" * 56),
                   "ray_cluster_stopped_for_new_file": {"changed": True, "name": HEAD_UNIT, "state": "stopped"},
                   "ray_cluster_unit_file": WRITTEN},
        "spark2": {"ray_cluster_node": read(WORKER_UNIT, unit("failed"), drifted=[WORKER_UNIT])},
    }),
    # A first run: no unit anywhere, the engine's files and the venv written before this role.
    "two nodes, first run": cluster({
        "spark1": {"ray_cluster_node": read(HEAD_UNIT, unit("dead", "not-found"), engine=unit("dead", "not-found"),
                                            drifted=[HEAD_UNIT]),
                   "ray_cluster_stopped_for_new_file": SKIPPED, "ray_cluster_unit_file": WRITTEN,
                   "engine_service_env_written": WRITTEN, "engine_venv_marked": WRITTEN},
        "spark2": {"ray_cluster_node": read(WORKER_UNIT, unit("dead", "not-found"), drifted=[WORKER_UNIT]),
                   "ray_cluster_stopped_for_new_file": SKIPPED, "ray_cluster_unit_file": WRITTEN,
                   "engine_service_env_written": WRITTEN, "engine_venv_marked": WRITTEN},
    }, this_host="spark2"),
    # Three serving nodes: one worker's unit is older than fabric.env, the head was recovered, the
    # raylets were waited for on two nodes (one wait skipped).
    "three nodes, stale worker, recovered head, raylets waited": cluster({
        "spark1": {"ray_cluster_node": read(HEAD_UNIT, engine=unit("auto-restart"), raylet="a" * 56),
                   "ray_cluster_recovered": True, "ray_cluster_raylet_waited": {"changed": False, "node_id": "c" * 56}},
        "spark2": {"ray_cluster_node": read(WORKER_UNIT, stale=[WORKER_UNIT], raylet="b" * 56),
                   "ray_cluster_raylet_waited": SKIPPED},
        "spark3": {"ray_cluster_node": read(WORKER_UNIT, raylet="d" * 56),
                   "ray_cluster_raylet_waited": {"changed": False, "node_id": "e" * 56}},
    }),
    # Three serving nodes, all running; only the venv's change marker, a loop's result, changed on one.
    "three nodes, venv marker changed in a loop": cluster({
        "spark1": {"ray_cluster_node": read(HEAD_UNIT, engine=unit(), raylet="a" * 56)},
        "spark2": {"ray_cluster_node": read(WORKER_UNIT, raylet="b" * 56), "engine_venv_marked": LOOP_CHANGED},
        "spark3": {"ray_cluster_node": read(WORKER_UNIT, raylet="d" * 56), "ray_cluster_recovered": "no"},
    }, this_host="spark3"),
    # Three nodes, two serve: the idle worker read nothing and registered nothing of this role.
    "three nodes, one idle": cluster({
        "spark1": {"ray_cluster_node": read(HEAD_UNIT, engine=unit("dead"), raylet="a" * 56)},
        "spark2": {"ray_cluster_node": read(WORKER_UNIT, unit("dead"), raylet="")},
        "spark3": {},
    }, serving=["spark1", "spark2"]),
    # A run limited to the workers (--limit): no read of the head.
    "three nodes, limited to the workers": cluster({
        "spark1": {},
        "spark2": {"ray_cluster_node": read(WORKER_UNIT, raylet="b" * 56)},
        "spark3": {"ray_cluster_node": read(WORKER_UNIT, unit("dead"), raylet="")},
    }, play_hosts=["spark2", "spark3"], this_host="spark3"),
}

@pytest.fixture(scope="module")
def evaluated():
    """scenario -> name -> {"new": ..., "old": ...}."""
    return old_and_new(SCENARIOS, COMPARED, OLD_VARS)


def test_the_vars_hold_no_jinja_blocks_and_name_the_head_by_spark_cluster():
    assert set(OLD_VARS) <= set(VARS)
    for name, text in OLD_VARS.items():
        assert VARS[name] != text, name
    assert not [name for name, text in VARS.items() if "{%" in str(text)]
    assert "groups['spark_head'][0]" not in (ROLE / "vars" / "main.yml").read_text()


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("name", COMPARED)
def test_each_decision_is_the_one_the_jinja_loops_made(evaluated, scenario, name):
    new, old = evaluated[scenario][name]["new"], evaluated[scenario][name]["old"]
    assert "error" not in new, new
    assert new == old


def _value(evaluated, scenario, name):
    return evaluated[scenario][name]["new"]["value"]


def test_a_healthy_cluster_neither_restarts_nor_starts(evaluated):
    scenario = "two nodes, healthy"
    assert _value(evaluated, scenario, "ray_cluster_units") == {
        "spark1": {"unit": HEAD_UNIT, "state": "running", "ip": "192.168.100.10"},
        "spark2": {"unit": WORKER_UNIT, "state": "running", "ip": "192.168.100.11"}}
    for name in ("ray_cluster_restart", "ray_cluster_start_drift", "ray_cluster_start_here"):
        assert evaluated[scenario][name]["new"] == {"value": False, "kind": "bool"}, name
    assert _value(evaluated, scenario, "ray_cluster_raylet_ids") == {"spark1": "a" * 56, "spark2": "b" * 56}
    assert evaluated[scenario]["ray_cluster_engine_active"]["new"] == {"value": True, "kind": "bool"}


def test_the_head_and_its_gcs_come_from_the_pinned_cluster(evaluated):
    for scenario in SCENARIOS:
        assert evaluated[scenario]["ray_cluster_head"]["new"] == {"value": "spark1", "kind": "str"}
        assert evaluated[scenario]["ray_cluster_address"]["new"] == {"value": "192.168.100.10:6379", "kind": "str"}


def test_the_address_follows_spark_cluster_not_the_heads_hostvars():
    variables = cluster(HEALTHY_TWO)
    variables["spark_cluster"] = dict(variables["spark_cluster"], head={"name": "spark1", "link_ip": "192.168.102.10"})
    variables["hostvars"] = {host: {key: value for key, value in facts.items() if key != "spark_link"}
                             for host, facts in variables["hostvars"].items()}
    [address, head] = judge([("{{ ray_cluster_address }}", variables), ("{{ ray_cluster_head }}", variables)])
    assert address == {"value": "192.168.102.10:6379", "kind": "str"}
    assert head == {"value": "spark1", "kind": "str"}


def test_a_unit_stopped_for_its_new_file_is_stopped_and_the_cluster_restarts(evaluated):
    scenario = "two nodes, a dead worker and a replaced head file"
    assert {host: unit["state"] for host, unit in _value(evaluated, scenario, "ray_cluster_units").items()} == {
        "spark1": "stopped", "spark2": "stopped"}
    assert _value(evaluated, scenario, "ray_cluster_restart") is True
    assert _value(evaluated, scenario, "ray_cluster_start_drift") is True


def test_units_systemd_does_not_know_are_absent_and_the_written_files_restart(evaluated):
    scenario = "two nodes, first run"
    assert {host: unit["state"] for host, unit in _value(evaluated, scenario, "ray_cluster_units").items()} == {
        "spark1": "absent", "spark2": "absent"}
    assert _value(evaluated, scenario, "ray_cluster_restart") is True


def test_a_stale_unit_restarts_and_waited_raylets_win_over_the_read(evaluated):
    scenario = "three nodes, stale worker, recovered head, raylets waited"
    assert _value(evaluated, scenario, "ray_cluster_restart") is True
    assert _value(evaluated, scenario, "ray_cluster_start_drift") is True
    assert _value(evaluated, scenario, "ray_cluster_start_here") is True
    assert _value(evaluated, scenario, "ray_cluster_raylet_ids") == {"spark1": "c" * 56, "spark2": "b" * 56,
                                                                     "spark3": "e" * 56}


def test_a_loops_changed_item_restarts_as_is_changed_says(evaluated):
    scenario = "three nodes, venv marker changed in a loop"
    assert _value(evaluated, scenario, "ray_cluster_restart") is True
    assert _value(evaluated, scenario, "ray_cluster_start_here") is False


def test_an_idle_worker_and_a_host_outside_the_play_are_left_out(evaluated):
    idle = _value(evaluated, "three nodes, one idle", "ray_cluster_units")
    assert list(idle) == ["spark1", "spark2"] and idle["spark2"]["state"] == "stopped"
    assert _value(evaluated, "three nodes, one idle", "ray_cluster_start_drift") is True
    limited = "three nodes, limited to the workers"
    assert list(_value(evaluated, limited, "ray_cluster_units")) == ["spark2", "spark3"]
    assert _value(evaluated, limited, "ray_cluster_engine_read") == {}
    assert _value(evaluated, limited, "ray_cluster_raylet_ids") == {"spark2": "b" * 56, "spark3": ""}


# ----------------------------------------------------------------------------- the filters directly

def _units(**states):
    return {host: {"unit": HEAD_UNIT if host == "spark1" else WORKER_UNIT, "state": state, "ip": "x"}
            for host, state in states.items()}


def test_no_hosts_decide_nothing():
    assert F.ray_cluster_unit_states([], ["spark1"], HEAD_UNIT, WORKER_UNIT, {}, {}, {}) == {}
    assert F.ray_cluster_restart_needed([], {}, {}, {}, {}) is False
    assert F.ray_cluster_start_needed([], {}, False, {}, {}) is False
    assert F.ray_cluster_start_needed([], {}, True, {}, {}) is True
    assert F.ray_cluster_raylet_ids([], {}, {}) == {}


def test_unit_states_take_the_head_unit_from_the_head_group_and_the_first_cable_address():
    reads = {"spark1": read(HEAD_UNIT), "spark2": read(WORKER_UNIT, unit("dead", "not-found"))}
    states = F.ray_cluster_unit_states(["spark2", "spark1"], ["spark1"], HEAD_UNIT, WORKER_UNIT, reads,
                                       {"spark1": {}, "spark2": {}}, {"spark1": link(10), "spark2": link(11)})
    assert list(states) == ["spark2", "spark1"]
    assert states == {"spark2": {"unit": WORKER_UNIT, "state": "absent", "ip": "192.168.100.11"},
                      "spark1": {"unit": HEAD_UNIT, "state": "running", "ip": "192.168.100.10"}}


@pytest.mark.parametrize("stopped, state", [({}, "running"), (SKIPPED, "running"), (UNCHANGED, "running"),
                                            ({"changed": "yes"}, "stopped"), (WRITTEN, "stopped"),
                                            (LOOP_CHANGED, "stopped"), ({"results": [{"changed": False}]}, "running")])
def test_a_unit_reads_as_stopped_exactly_when_its_stop_is_changed(stopped, state):
    states = F.ray_cluster_unit_states(["spark1"], ["spark1"], HEAD_UNIT, WORKER_UNIT, {"spark1": read(HEAD_UNIT)},
                                       {"spark1": stopped}, {"spark1": link(10)})
    assert states["spark1"]["state"] == state


def test_a_stopped_unit_needs_no_read_of_its_state():
    states = F.ray_cluster_unit_states(["spark1"], ["spark1"], HEAD_UNIT, WORKER_UNIT, {"spark1": {"units": {}}},
                                       {"spark1": WRITTEN}, {"spark1": link(10)})
    assert states["spark1"]["state"] == "stopped"


@pytest.mark.parametrize("sub, load, state", [("running", "loaded", "running"), ("dead", "loaded", "stopped"),
                                              ("failed", "loaded", "stopped"), ("auto-restart", "loaded", "stopped"),
                                              ("dead", "not-found", "absent"), ("running", "not-found", "running")])
def test_a_unit_is_running_by_its_sub_state_and_absent_when_systemd_does_not_know_it(sub, load, state):
    reads = {"spark2": read(WORKER_UNIT, {"sub_state": sub, "load_state": load})}
    states = F.ray_cluster_unit_states(["spark2"], ["spark1"], HEAD_UNIT, WORKER_UNIT, reads, {"spark2": {}},
                                       {"spark2": link(11)})
    assert states["spark2"]["state"] == state


def test_unit_states_refuse_what_is_not_a_read_a_result_or_a_link():
    args = (["spark1"], ["spark1"], HEAD_UNIT, WORKER_UNIT)
    with pytest.raises(AnsibleFilterError, match="spark1: no usable read of"):
        F.ray_cluster_unit_states(*args, {"spark1": {"units": {}}}, {"spark1": {}}, {"spark1": link(10)})
    with pytest.raises(AnsibleFilterError, match="no value for spark1"):
        F.ray_cluster_unit_states(*args, {}, {"spark1": {}}, {"spark1": link(10)})
    with pytest.raises(AnsibleFilterError, match="expects a dictionary"):
        F.ray_cluster_unit_states(*args, {"spark1": read(HEAD_UNIT)}, {"spark1": "changed"}, {"spark1": link(10)})
    with pytest.raises(AnsibleFilterError, match="prefix"):
        F.ray_cluster_unit_states(*args, {"spark1": read(HEAD_UNIT)}, {"spark1": {}},
                                  {"spark1": [{"interface": "enp1s0f1np1", "address": "192.168.100.10"}]})


@pytest.mark.parametrize("results, restart", [
    ({}, False),
    ({"reads": {"spark2": read(WORKER_UNIT, stale=[WORKER_UNIT])}}, True),
    ({"reads": {"spark2": {}}}, False),
    ({"unit_files": {"spark2": WRITTEN}}, True),
    ({"unit_files": {"spark2": SKIPPED}}, False),
    ({"env_files": {"spark1": WRITTEN}}, True),
    ({"venv_markers": {"spark2": LOOP_CHANGED}}, True),
    ({"venv_markers": {"spark2": {"changed": False, "results": [{"changed": True}]}}}, False),
])
def test_the_cluster_restarts_when_any_node_is_stale_or_written(results, restart):
    given = {"reads": {"spark1": read(HEAD_UNIT), "spark2": read(WORKER_UNIT)},
             "unit_files": {"spark1": {}, "spark2": {}}, "env_files": {"spark1": {}, "spark2": {}},
             "venv_markers": {"spark1": {}, "spark2": {}}}
    for name, values in results.items():
        given[name] = {**given[name], **values}
    assert F.ray_cluster_restart_needed(["spark1", "spark2"], **given) is restart


def test_restart_judges_every_host_even_after_one_restarts():
    with pytest.raises(AnsibleFilterError, match="spark2: the read's stale is not a list"):
        F.ray_cluster_restart_needed(["spark1", "spark2"], {"spark1": read(HEAD_UNIT, stale=[HEAD_UNIT]),
                                                            "spark2": {"stale": None}},
                                     {"spark1": {}, "spark2": {}}, {"spark1": {}, "spark2": {}},
                                     {"spark1": {}, "spark2": {}})
    with pytest.raises(AnsibleFilterError, match="no value for spark2"):
        F.ray_cluster_restart_needed(["spark1", "spark2"], {"spark1": {}, "spark2": {}}, {"spark1": WRITTEN}, {}, {})


@pytest.mark.parametrize("restart, recovered, drifted, states, start", [
    (False, {}, {}, {"spark1": "running", "spark2": "running"}, False),
    (True, {}, {}, {"spark1": "running", "spark2": "running"}, True),
    (False, {"spark2": True}, {}, {"spark1": "running", "spark2": "running"}, True),
    (False, {}, {"spark1": [HEAD_UNIT]}, {"spark1": "running", "spark2": "running"}, True),
    # A worker's drifted list naming the head's unit is not its own unit's drift.
    (False, {}, {"spark2": [HEAD_UNIT, "/etc/systemd/system/" + WORKER_UNIT]},
     {"spark1": "running", "spark2": "running"}, False),
    (False, {}, {}, {"spark1": "running", "spark2": "absent"}, True),
    (False, {}, {}, {"spark1": "failed", "spark2": "running"}, True),
])
def test_any_node_starting_starts_every_node(restart, recovered, drifted, states, start):
    hosts = ["spark1", "spark2"]
    assert F.ray_cluster_start_needed(hosts, _units(**states), restart, {**dict.fromkeys(hosts, False), **recovered},
                                      {**dict.fromkeys(hosts, []), **drifted}) is start


def test_start_refuses_units_that_are_not_unit_states():
    with pytest.raises(AnsibleFilterError, match="spark1: not a unit state"):
        F.ray_cluster_start_needed(["spark1"], {"spark1": {"state": "running"}}, False, {"spark1": False},
                                   {"spark1": []})


def test_a_raylet_waited_for_wins_even_when_its_id_is_empty_or_null():
    waited = {"spark1": {"changed": False, "node_id": "c" * 56}, "spark2": SKIPPED, "spark3": {"node_id": None},
              "spark4": {}}
    read_ids = {"spark1": "a" * 56, "spark2": "b" * 56, "spark3": "d" * 56, "spark4": ""}
    assert F.ray_cluster_raylet_ids(["spark1", "spark2", "spark3", "spark4"], waited, read_ids) == {
        "spark1": "c" * 56, "spark2": "b" * 56, "spark3": None, "spark4": ""}
    with pytest.raises(AnsibleFilterError, match="no value for spark2"):
        F.ray_cluster_raylet_ids(["spark2"], {"spark2": {}}, {})

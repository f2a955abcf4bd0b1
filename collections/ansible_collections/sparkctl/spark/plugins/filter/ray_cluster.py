# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Decisions of the ray_cluster role: each node's Ray unit as the reads found it, whether the
cluster restarts or any node starts, the nodes the cluster must register under which raylet,
and whether a running cluster is degraded enough to need the full recovery."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible.plugins.test.core import changed as result_changed
from ansible_collections.sparkctl.spark.plugins.module_utils import ray_cluster
from ansible_collections.sparkctl.spark.plugins.module_utils.link_address import bare_address, primary_address

DOCUMENTATION = r"""
name: ray_cluster_degraded
short_description: Why a running Ray cluster needs the full recovery (stop all, clean, start head then workers)
version_added: 0.1.0
description:
  - Input is the C(cluster) result of C(sparkctl.spark.ray_cluster_facts) read on the head (or V(null) when the head's
    unit is not running). Returns a list of sentences, empty when the cluster is fine or simply not started.
  - Degraded means any of, while a Ray unit runs, the GCS does not answer; a node whose unit is active is not
    registered ALIVE; a node registered fewer GPUs than expected; also a Ray unit in the failed state (its start limit
    hit) and, while the engine is stopped, an engine process left on a node.
  - Companion filter C(ray_cluster_expected) turns the cluster description of C(profile_cluster) into the
    C(expected) list of C(ray_cluster_facts) (name, ip, gpus, and node_id where its second argument, host to raylet
    id, names one); C(ray_cluster_engine_prefix) (input the rendered
    engine argv, argument the checkpoint directory) returns the argv up to the checkpoint directory, the exact prefix
    C(sparkctl.spark.engine_leftovers) compares.
  - Companion filters judge the registered results of every node, passed as mappings host to result (a result a
    node did not register passed as C({})), with Ansible's own C(changed) test. C(ray_cluster_unit_states) (input
    the Ray hosts; arguments the spark_head group, the head's and the workers' unit names, and per host the
    C(node_state) read, the result of stopping the unit before its file was replaced and the C(spark_link)) returns
    per host C(unit), C(state) (C(stopped) when that stop changed something, else C(running) for the sub-state
    C(running), C(absent) for the load state C(not-found), else C(stopped)) and C(ip) (the first cable address).
  - C(ray_cluster_restart_needed) (input the Ray hosts; per host the read, the unit file written, engine.env written
    and the venv's change marker) is true when any node's read lists its unit as stale or any of those results
    changed. C(ray_cluster_start_needed) (input the Ray hosts; the unit states, the restart decision, per host
    whether the recovery ran and the read's drifted list) is true when the cluster restarts, or any node was
    recovered, has its unit drifted or not running. C(ray_cluster_raylet_ids) (input the Ray hosts; per host the
    raylet wait's result and the read's raylet id) returns per host the id waited for in this run, else the read's.
options:
  _input:
    description: The C(cluster) return value of C(ray_cluster_facts), or V(null).
    type: dict
    required: true
  units:
    description: Per host, C(unit) (name), C(state) (C(running), C(stopped), C(failed), ...), C(ip) (link address).
    type: dict
    required: true
  leftovers:
    description: Per host, the C(processes) of C(sparkctl.spark.engine_leftovers).
    type: dict
    default: {}
  engine_active:
    description: The engine service runs; its processes are then not leftovers.
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Decide
  ansible.builtin.set_fact:
    reasons: "{{ head_facts.cluster | sparkctl.spark.ray_cluster_degraded(units, leftovers, false) }}"
"""

RETURN = r"""
_value:
  description: Sentences naming the host and what is wrong; empty when no recovery is needed.
  type: list
  elements: str
"""


def ray_cluster_degraded(assessment, units, leftovers=None, engine_active=False):
    if assessment is not None and not isinstance(assessment, dict):
        raise AnsibleFilterError("ray_cluster_degraded: expected the cluster result of ray_cluster_facts or null")
    if not isinstance(units, dict):
        raise AnsibleFilterError("ray_cluster_degraded: units must be a mapping host -> {unit, state, ip}")
    return ray_cluster.degraded_reasons(assessment or None, units, leftovers or {}, bool(engine_active))


def ray_cluster_expected(cluster, gpus_per_node=1, node_ids=None):
    """node_ids: host -> the id of its running raylet ('' = none runs); hosts left out are
    matched by address only."""
    node_ids = node_ids or {}
    try:
        nodes = [cluster["head"]] + list(cluster["workers"])
        expected = []
        for node in nodes:
            entry = {"name": node["name"], "ip": bare_address(node["link_ip"]), "gpus": float(gpus_per_node)}
            if node_ids.get(node["name"]) is not None:
                entry["node_id"] = str(node_ids[node["name"]])
            expected.append(entry)
        return expected
    except (KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"ray_cluster_expected: not a cluster description from profile_cluster ({exc})") from exc


def ray_cluster_engine_prefix(argv, model_dir):
    """The engine's argv up to and including the checkpoint directory: what every engine
    process of this profile starts with, whatever flags follow."""
    argv = [str(a) for a in argv or []]
    if str(model_dir) in argv:
        return argv[:argv.index(str(model_dir)) + 1]
    return argv


def _per_host(name, values, host):
    """values[host], or a filter error naming what is missing: every Ray host's result is
    passed, one a node did not register as {}."""
    try:
        return values[host]
    except (KeyError, TypeError) as exc:
        raise AnsibleFilterError(f"{name}: no value for {host} ({exc!r})") from exc


def _changed(name, result, host):
    """Ansible's own `is changed`, so a result reads as changed exactly as the test says."""
    try:
        return result_changed(result)
    except AnsibleFilterError as exc:
        raise AnsibleFilterError(f"{name}: {host}: {exc}") from exc


def ray_cluster_unit_states(hosts, head_hosts, head_unit, worker_unit, reads, stopped_for_new_file, links):
    """host -> {unit, state, ip}: the Ray unit the host runs (the head's on a spark_head host),
    its state, and the host's first cable address. A unit units.yml stopped before replacing its
    file is stopped, whatever the read before the stop found."""
    name = "ray_cluster_unit_states"
    states = {}
    for host in hosts:
        unit = head_unit if host in head_hosts else worker_unit
        if _changed(name, _per_host(name, stopped_for_new_file, host), host):
            state = "stopped"
        else:
            try:
                read = _per_host(name, reads, host)["units"][unit]
                state = ("running" if read["sub_state"] == "running"
                         else "absent" if read["load_state"] == "not-found" else "stopped")
            except (KeyError, TypeError) as exc:
                raise AnsibleFilterError(f"{name}: {host}: no usable read of {unit} ({exc!r})") from exc
        try:
            ip = primary_address(_per_host(name, links, host))
        except ValueError as exc:
            raise AnsibleFilterError(str(exc)) from exc
        states[host] = {"unit": unit, "state": state, "ip": ip}
    return states


def ray_cluster_restart_needed(hosts, reads, unit_files, env_files, venv_markers):
    """Whether the whole cluster restarts: some node's Ray unit is older than a file it read at
    start (its read's `stale`), or its unit file, engine.env or the venv's change marker was
    written by this run. Every host's results are judged, even after one calls for the restart:
    a malformed result fails the run wherever it is."""
    name = "ray_cluster_restart_needed"
    restart = False
    for host in hosts:
        try:
            stale = len(_per_host(name, reads, host).get("stale", [])) > 0
        except (AttributeError, TypeError) as exc:
            raise AnsibleFilterError(f"{name}: {host}: the read's stale is not a list ({exc})") from exc
        if (stale or _changed(name, _per_host(name, unit_files, host), host)
                or _changed(name, _per_host(name, env_files, host), host)
                or _changed(name, _per_host(name, venv_markers, host), host)):
            restart = True
    return restart


def ray_cluster_start_needed(hosts, units, restart, recovered, drifted):
    """Whether any node's Ray unit (re)starts: the cluster restarts, or a node was recovered,
    its unit drifted (stopped, disabled or failed) or is not running. A worker restarts when the
    head does, so the answer is the same on every node."""
    name = "ray_cluster_start_needed"
    needed = bool(restart)
    for host in hosts:
        unit = _per_host(name, units, host)
        try:
            if (_per_host(name, recovered, host) or unit["unit"] in _per_host(name, drifted, host)
                    or unit["state"] != "running"):
                needed = True
        except (KeyError, TypeError) as exc:
            raise AnsibleFilterError(f"{name}: {host}: not a unit state from ray_cluster_unit_states ({exc})") from exc
    return needed


def ray_cluster_raylet_ids(hosts, waited, read_ids):
    """host -> the id of its running raylet: the one waited for in this run (settle.yml), else
    the one the read found."""
    name = "ray_cluster_raylet_ids"
    ids = {}
    for host in hosts:
        result = _per_host(name, waited, host)
        ids[host] = result["node_id"] if "node_id" in result else _per_host(name, read_ids, host)
    return ids


class FilterModule:
    def filters(self):
        return {"ray_cluster_degraded": ray_cluster_degraded, "ray_cluster_expected": ray_cluster_expected,
                "ray_cluster_engine_prefix": ray_cluster_engine_prefix,
                "ray_cluster_unit_states": ray_cluster_unit_states,
                "ray_cluster_restart_needed": ray_cluster_restart_needed,
                "ray_cluster_start_needed": ray_cluster_start_needed,
                "ray_cluster_raylet_ids": ray_cluster_raylet_ids}

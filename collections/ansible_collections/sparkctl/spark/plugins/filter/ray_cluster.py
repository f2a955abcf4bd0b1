# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Decisions of the ray_cluster role: the nodes the cluster must register, and whether a
running cluster is degraded enough to need the full recovery."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.sparkctl.spark.plugins.module_utils import ray_cluster
from ansible_collections.sparkctl.spark.plugins.module_utils.link_address import bare_address

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


class FilterModule:
    def filters(self):
        return {"ray_cluster_degraded": ray_cluster_degraded, "ray_cluster_expected": ray_cluster_expected,
                "ray_cluster_engine_prefix": ray_cluster_engine_prefix}

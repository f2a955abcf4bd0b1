# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Does the engine fit in the memory a node has right now?"""

from __future__ import annotations

from ansible_collections.sparkctl.spark.plugins.plugin_utils import profile as profiles

DOCUMENTATION = r"""
name: engine_memory_fit
short_description: Whether a node's available memory holds the profile's budget plus the OOM guard's line
version_added: 0.1.0
description:
  - On unified memory (GB10) the weights, the KV pool and the runtime share C(MemAvailable) with the OS. An engine that
    starts without room does not fail cleanly; the node can wedge. Checked before launch, after the page cache is
    dropped, against the profile's per-node need (weights per rank + KV pool + overhead) plus the OOM guard's line
    (the guard trips when C(MemAvailable) falls below it, so the engine must leave that much free).
options:
  _input:
    description: The node's C(spark_host_facts.meminfo) (from C(sparkctl.spark.host_facts)).
    type: dict
    required: true
  profile:
    description: The resolved model profile.
    type: dict
    required: true
  guard_bytes:
    description: The OOM guard's C(MemAvailable) line, in bytes.
    type: int
    required: true
"""

EXAMPLES = r"""
- name: Refuse to start an engine that does not fit
  ansible.builtin.assert:
    that: fit.fits
    fail_msg: "{{ fit.message }}"
  vars:
    fit: "{{ ansible_facts['spark_host_facts']['meminfo'] | sparkctl.spark.engine_memory_fit(spark_profile, 8589934592) }}"
"""

RETURN = r"""
_value:
  description: C(fits), C(need_bytes), C(available_bytes), C(parts) (weights, kv_pool, overhead, guard) and C(message).
  type: dict
"""

GIB = 1024 ** 3


def _gib(value):
    return "%.1f GiB" % (value / GIB)


def engine_memory_fit(meminfo, profile, guard_bytes):
    parts = profiles.node_memory_bytes(profile)
    parts = {"weights": parts["weights"], "kv_pool": parts["kv_pool"], "overhead": parts["overhead"], "guard": int(guard_bytes)}
    need = sum(parts.values())
    available = (meminfo or {}).get("mem_available_bytes")
    if available is None:
        return {"fits": False, "need_bytes": need, "available_bytes": None, "parts": parts,
                "message": "MemAvailable could not be read from /proc/meminfo."}
    detail = "weights %s + KV pool %s + overhead %s + OOM guard line %s = %s" % (
        _gib(parts["weights"]), _gib(parts["kv_pool"]), _gib(parts["overhead"]), _gib(parts["guard"]), _gib(need))
    if available >= need:
        return {"fits": True, "need_bytes": need, "available_bytes": available, "parts": parts,
                "message": "%s available >= %s" % (_gib(available), detail)}
    return {
        "fits": False, "need_bytes": need, "available_bytes": available, "parts": parts,
        "message": "%s available < %s needed by profile %s (%s). Free memory on the node (stop other GPU work, "
                   "containers), or lower memory.kv_pool_bytes / the engine's KV cache size through "
                   "spark_profile_overrides." % (_gib(available), _gib(need), profile.get("name", "?"), detail),
    }


class FilterModule:
    def filters(self):
        return {"engine_memory_fit": engine_memory_fit}

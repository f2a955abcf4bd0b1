# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The engine_service role's decisions over its reads: whether the engine's units restart on this
run, and which running engine units a switch of the served model replaces."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible.plugins.test.core import changed as result_changed

DOCUMENTATION = r"""
name: engine_restart_due
short_description: Whether the engine's units restart on every node of the play
version_added: 0.1.0
description:
  - The ranks of one engine start together, so one stale node restarts every node's units. Takes the play's hosts'
    reads of the engine's units (C(sparkctl.spark.node_state), C({}) where a host has none) and returns V(true) when
    a new API key was written on the head, or any host of the play has one of these.
  - Its read found a unit C(stale) (a file the unit read at start is newer than the unit's start); this run wrote its
    units; in check mode, this run wrote its C(engine.env) (a real run counts that write through the read, which
    follows it); its kernel cache was emptied (C(reset)) or moved to another runtime's directory (C(relinked)), unless
    Ray restarted the head on this run, which restarted the engine after the cache changed.
  - A registered result counts as changed as Ansible's C(changed) test says (its C(changed) key, or a loop's
    C(results)); C({}), what a skipped include leaves, is not changed.
  - Companion filter C(engine_units_replaced) (input the C(units) of the read made before the switch, by name;
    arguments the engine units this run renders, the paths that read found C(drifted), the unit directory and the
    C(ActiveState) values of a running unit) returns, in the read's order, the names of the units that run and that
    this run does not render as they are (another profile's, or drifted), whose engine is being replaced.
options:
  _input:
    description: Each play host's C(engine_service_node) read, C({}) where it has none.
    type: list
    elements: dict
    required: true
  units_written:
    description: Each play host's registered write of its unit files, C({}) where it has none.
    type: list
    elements: dict
    required: true
  env_written:
    description: Each play host's registered write of C(engine.env), C({}) where it has none.
    type: list
    elements: dict
    required: true
  kernel_caches:
    description: Each play host's C(sparkctl.spark.jit_cache) result, C({}) where it has none.
    type: list
    elements: dict
    required: true
  key_written:
    description: The head's registered write of the API key, C({}) where it has none.
    type: dict
    required: true
  check_mode:
    description: Whether the run is in check mode.
    type: bool
    required: true
  ray_restarted_engine:
    description: Whether Ray restarted its head on this run (the engine unit, PartOf it, restarted with it).
    type: bool
    required: true
"""

EXAMPLES = r"""
- name: Restart the engine's units when any node's are stale
  ansible.builtin.systemd_service:
    name: "{{ item.key }}"
    state: restarted
  loop: "{{ engine_service_units | dict2items }}"
  when: >-
    ansible_play_hosts | map('extract', hostvars, 'engine_service_node') | map('default', {}) | list
    | sparkctl.spark.engine_restart_due(
        units_written=ansible_play_hosts | map('extract', hostvars, 'engine_service_units_written') | map('default', {}) | list,
        env_written=ansible_play_hosts | map('extract', hostvars, 'engine_service_env_written') | map('default', {}) | list,
        kernel_caches=ansible_play_hosts | map('extract', hostvars, 'jit_cache_node') | map('default', {}) | list,
        key_written=hostvars['spark1'].engine_service_key_written | default({}),
        check_mode=ansible_check_mode, ray_restarted_engine=false)

- name: Note whether this node runs an engine this run replaces
  ansible.builtin.set_fact:
    replaced: >-
      {{ engine_service_before.units | default({})
         | sparkctl.spark.engine_units_replaced(engine_service_units, engine_service_before.drifted | default([]),
           '/etc/systemd/system', ['active', 'activating', 'reloading']) }}
"""

RETURN = r"""
_value:
  description:
    - "C(engine_restart_due): whether the engine's units restart."
    - "C(engine_units_replaced): the names of the running engine units a switch of the served model replaces."
  type: raw
"""


def engine_restart_due(nodes, units_written, env_written, kernel_caches, key_written, check_mode,
                       ray_restarted_engine):
    nodes, units_written, env_written, kernel_caches = (list(values or []) for values in
                                                        (nodes, units_written, env_written, kernel_caches))
    if not len(nodes) == len(units_written) == len(env_written) == len(kernel_caches):
        raise AnsibleFilterError("engine_restart_due: the reads, unit writes, engine.env writes and kernel caches "
                                 "must be given for the same hosts (%d, %d, %d, %d)"
                                 % (len(nodes), len(units_written), len(env_written), len(kernel_caches)))
    restart = result_changed(key_written)
    # Every host is judged, not only up to the first that restarts: a result of the wrong shape
    # fails the decision wherever it is.
    for node, units, env, cache in zip(nodes, units_written, env_written, kernel_caches, strict=True):
        if (len(node.get("stale", [])) > 0
                or result_changed(units)
                or check_mode and result_changed(env)
                or (cache.get("reset", False) or cache.get("relinked", False)) and not ray_restarted_engine):
            restart = True
    return restart


def engine_units_replaced(units, rendered_units, drifted, unit_dir, running_states):
    """The running units (units: the read's, by name) that this run does not render as they are."""
    return [name for name, unit in (units or {}).items()
            if unit.get("active_state", "inactive") in running_states
            and (name not in rendered_units or "%s/%s" % (unit_dir, name) in drifted)]


class FilterModule:
    def filters(self):
        return {"engine_restart_due": engine_restart_due, "engine_units_replaced": engine_units_replaced}

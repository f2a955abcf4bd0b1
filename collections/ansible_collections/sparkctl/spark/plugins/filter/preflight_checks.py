# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Turn the facts one node reported into the preflight verdict: one entry per
check, each with what was found, what is required and how to fix it. The checks live in
plugin_utils/preflight_checks.py, which the checkpoint filters share."""

from __future__ import annotations

from ansible_collections.sparkctl.spark.plugins.plugin_utils.preflight_checks import preflight_checks, preflight_lines, preflight_report

DOCUMENTATION = r"""
name: preflight_checks
short_description: Evaluate a node's facts against what sparkctl needs
version_added: 0.1.0
description:
  - Takes the facts gathered on one node (distribution, kernel, GPU, link, memory, disk, ports, sudo, pending firmware
    updates) and the requirements, and returns one result per check with C(status) C(pass), C(fail), C(warn) or
    C(skip), what was found, and the fix.
  - "Pure evaluation: it never contacts the node, so the same verdict can be unit-tested on recorded facts."
  - C(platform.known_bad) matches the node's kernel release, driver and CUDA versions, the firmware of the cable's
    RDMA devices (C(nic_firmware)) and C(/proc/meminfo) fields
    against the known-bad platform entries (the data file C(known_bad_platforms_file) of the requirements, then
    C(known_bad_platforms_extra), less the ids in C(known_bad_platforms_ignore)); each match fails the check (or
    warns, for an entry of C(severity) C(warn)) with the entry's id, reason, fix and source.
  - C(platform.firmware_updates) warns about pending firmware updates C(fwupdmgr) listed; it is skipped, as not
    checked, where the node has no C(fwupdmgr).
options:
  _input:
    description: Facts of one node, see the preflight role's tasks/facts.yml for the keys.
    type: dict
    required: true
  requirements:
    description: Requirements, see the preflight role's defaults.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Evaluate this node
  ansible.builtin.set_fact:
    preflight_results: "{{ preflight_node_facts | sparkctl.spark.preflight_checks(preflight_requirements) }}"
"""

RETURN = r"""
_value:
  description: One result per check.
  type: list
  elements: dict
  contains:
    id: {description: "Stable identifier of the check, e.g. C(gpu.driver).", type: str}
    title: {description: What is checked., type: str}
    status: {description: "C(pass), C(fail), C(warn) or C(skip).", type: str}
    detail: {description: "What was found, with the numbers.", type: str}
    fix: {description: How to fix a failure; empty when it passed., type: str}
"""


class FilterModule:
    def filters(self):
        return {
            "preflight_checks": preflight_checks,
            "preflight_lines": preflight_lines,
            "preflight_report": preflight_report,
        }

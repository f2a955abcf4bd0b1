#!/usr/bin/python
# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: unit_staleness
short_description: Find running systemd units whose inputs changed after they started
version_added: 0.1.0
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - sparkctl.spark.attributes.info_linux
description:
  - For each unit, compares the modification time of every file it reads at start with the start of its current main
    process (C(ExecMainStartTimestampMonotonic)); a file written afterwards is not in effect until a restart.
  - The inputs are the unit file, its drop-ins and its C(EnvironmentFile=) files as systemd reports them, plus the
    files named in O(inputs) (a C(--config) file, a docker C(--env-file)).
  - Restart decisions then follow the node's state, not what the current run changed, so a run that failed between
    writing a file (an API key, C(fabric.env)) and restarting its unit is completed by the next run.
  - A unit that does not run is never stale (its next start reads the files anyway). Never changes anything.
author:
  - sparkctl developers (!UNKNOWN)
options:
  units:
    description: The units to judge.
    type: list
    elements: str
    required: true
  inputs:
    description: Per unit, more files it reads at start that systemd does not know of; a missing file is ignored.
    type: dict
    default: {}
"""

EXAMPLES = r"""
---
- name: Find the engine's units older than their inputs
  sparkctl.spark.unit_staleness:
    units: [sparkctl-engine.service]
    inputs:
      sparkctl-engine.service: [/etc/sparkctl/api-key.env]
  register: staleness

- name: Restart what is stale
  ansible.builtin.systemd_service:
    name: "{{ item }}"
    state: restarted
  loop: "{{ staleness.stale }}"
"""

RETURN = r"""
units:
  description: Per unit, C(state), C(loaded), C(started) (epoch seconds, null when not running), C(newer) (inputs
    modified after the start), C(stale) and C(daemon_reload) (systemd has not read the changed unit file yet).
  returned: always
  type: dict
stale:
  description: The running units with an input newer than their start.
  returned: always
  type: list
  elements: str
daemon_reload:
  description: Whether any unit's file changed since systemd last read it.
  returned: always
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkctl.spark.plugins.module_utils.unit_staleness import assess


def main():
    module = AnsibleModule(
        argument_spec=dict(
            units=dict(type="list", elements="str", required=True),
            inputs=dict(type="dict", default={}),
        ),
        supports_check_mode=True,
    )

    def run(argv):
        return module.run_command(argv)

    units = assess(module.params["units"], module.params["inputs"], run=run)
    module.exit_json(changed=False, units=units,
                     stale=[name for name, unit in units.items() if unit["stale"]],
                     daemon_reload=any(unit["daemon_reload"] for unit in units.values()))


if __name__ == "__main__":
    main()

#!/usr/bin/python
# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: probe_commands
short_description: Run several probe commands in one module run and return each outcome as a loop would
version_added: 0.1.0
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - sparkctl.spark.attributes.info_posix
description:
  - Runs each command of O(probes) in turn (no shell), retrying one that exits non-zero when asked, and returns every
    outcome in RV(results) shaped like the registered results of an C(ansible.builtin.command) loop (C(item), C(cmd),
    C(rc), C(stdout), C(stderr), C(attempts)), so the filters that judge such a loop take them as they are.
  - A role that checks several paths end to end (an SSH login to each peer address) then pays for one module run
    instead of one per command.
  - Meant for commands that change nothing; a command that fails is an outcome, not a failure of the module.
author:
  - sparkctl developers (!UNKNOWN)
options:
  probes:
    description: The commands, run in the order given.
    type: list
    elements: dict
    required: true
    suboptions:
      argv:
        description: The command and its arguments.
        type: list
        elements: str
        required: true
      item:
        description: Returned as the result's C(item), as a loop returns its item.
        type: raw
      retries:
        description: How many more times to run the command while it exits non-zero.
        type: int
        default: 0
      delay:
        description: Seconds between two runs of the command.
        type: int
        default: 0
"""

EXAMPLES = r"""
---
- name: Log in to every peer link address
  sparkctl.spark.probe_commands:
    probes:
      - argv: [ssh, -o, BatchMode=yes, 192.168.100.11, "true"]
        item: {peer: spark2, address: 192.168.100.11}
        retries: 2
        delay: 3
  register: probes
"""

RETURN = r"""
results:
  description: One per probe, in order, with C(item), C(cmd), C(rc), C(stdout), C(stderr) (of the last run) and
    C(attempts).
  returned: always
  type: list
  elements: dict
"""

import time

from ansible.module_utils.basic import AnsibleModule


def run_probes(probes, run, sleep=time.sleep):
    """[{item, cmd, rc, stdout, stderr, attempts}] for the probes; run(argv) -> (rc, stdout, stderr)."""
    results = []
    for probe in probes:
        attempts = 0
        while True:
            attempts += 1
            rc, out, err = run(probe["argv"])
            if rc == 0 or attempts > max(int(probe.get("retries") or 0), 0):
                break
            sleep(max(int(probe.get("delay") or 0), 0))
        results.append({"item": probe.get("item"), "cmd": list(probe["argv"]), "rc": rc, "stdout": out, "stderr": err,
                        "attempts": attempts})
    return results


def main():
    module = AnsibleModule(
        argument_spec=dict(
            probes=dict(type="list", elements="dict", required=True, options=dict(
                argv=dict(type="list", elements="str", required=True),
                item=dict(type="raw"),
                retries=dict(type="int", default=0),
                delay=dict(type="int", default=0),
            )),
        ),
        supports_check_mode=True,
    )

    def run(argv):
        return module.run_command(argv)

    module.exit_json(changed=False, results=run_probes(module.params["probes"], run))


if __name__ == "__main__":
    main()

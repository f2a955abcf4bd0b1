#!/usr/bin/python
# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: link_ping
short_description: Ping every peer on every cable half at once, in one module run
version_added: 0.1.0
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - sparkctl.spark.attributes.info_linux
description:
  - Runs one C(ping) per item of O(targets), all at the same time, from the item's interface to its address, and
    returns each one's exit code and output in RV(pings). A loop of C(command) tasks would cost a module run per
    peer and cable half, one after the other.
  - Judges nothing. The C(link_ping_problems) and C(link_ping_failed_targets) filters read RV(pings) as they read
    the results of a loop. Never changes anything.
author:
  - sparkctl developers (!UNKNOWN)
options:
  targets:
    description:
      - What to ping, as the C(link_ping_targets) filter lists it; each item needs C(interface) and C(address) and
        comes back whole as the C(item) of its result.
    type: list
    elements: dict
    required: true
  size:
    description: Payload bytes (C(ping -s)); the MTU less 28 for a frame of the full MTU. Ping's default when omitted.
    type: int
  prohibit_fragmentation:
    description: Forbid fragmentation (C(ping -M do)), so that a frame above some MTU on the path fails instead of splitting.
    type: bool
    default: false
  count:
    description: Pings per target (C(ping -c)).
    type: int
    default: 3
  interval:
    description: Seconds between pings (C(ping -i)).
    type: float
    default: 0.2
  wait:
    description: Seconds to wait for each reply (C(ping -W)).
    type: float
    default: 2
requirements:
  - C(ping) from iputils on the target.
"""

EXAMPLES = r"""
---
- name: Ping every peer on every cable half with full-MTU frames that must not fragment
  sparkctl.spark.link_ping:
    targets: "{{ hostvars | sparkctl.spark.link_ping_targets(groups['spark_head'] + groups['spark_workers'], inventory_hostname) }}"
    size: "{{ spark_link_mtu | int - 28 }}"
    prohibit_fragmentation: true
  register: jumbo_ping

- name: Fail with one sentence per path that lost frames
  ansible.builtin.assert:
    that: problems | length == 0
    fail_msg: "{{ problems }}"
  vars:
    problems: "{{ jumbo_ping.pings | sparkctl.spark.link_ping_problems(spark_link_mtu) }}"
"""

RETURN = r"""
pings:
  description: One result per target, in the order of O(targets).
  returned: always
  type: list
  elements: dict
  contains:
    item:
      description: The target as given.
      type: dict
    cmd:
      description: The command run.
      type: list
      elements: str
    rc:
      description: Ping's exit code.
      type: int
      sample: 0
    stdout:
      description: What ping printed.
      type: str
    stderr:
      description: What ping printed on its error stream.
      type: str
"""

import subprocess

from ansible.module_utils.basic import AnsibleModule


def ping_command(ping, target, size=None, prohibit_fragmentation=False, count=3, interval=0.2, wait=2):
    argv = [ping]
    if prohibit_fragmentation:
        argv += ["-M", "do"]
    if size is not None:
        argv += ["-s", str(size)]
    argv += ["-c", str(count), "-i", "%g" % interval, "-W", "%g" % wait, "-I", str(target["interface"]),
             str(target["address"])]
    return argv


def ping_all(commands, targets):
    """Start every command, then collect each one's result: the pings run side by side."""
    # Not run_command, which waits for one command before the next starts.
    started = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,  # pylint: disable=ansible-bad-function
                                errors="replace")
               for argv in commands]
    results = []
    for argv, target, process in zip(commands, targets, started):
        stdout, stderr = process.communicate()
        results.append({"item": target, "cmd": argv, "rc": process.returncode, "stdout": stdout, "stderr": stderr})
    return results


def main():
    module = AnsibleModule(
        argument_spec=dict(
            targets=dict(type="list", elements="dict", required=True),
            size=dict(type="int"),
            prohibit_fragmentation=dict(type="bool", default=False),
            count=dict(type="int", default=3),
            interval=dict(type="float", default=0.2),
            wait=dict(type="float", default=2),
        ),
        supports_check_mode=True,
    )
    params = module.params
    unnamed = [index for index, target in enumerate(params["targets"]) if not target.get("interface") or not target.get("address")]
    if unnamed:
        module.fail_json(msg="targets %s lack an interface or an address" % ", ".join(map(str, unnamed)))
    ping = module.get_bin_path("ping", required=True)
    commands = [ping_command(ping, target, size=params["size"], prohibit_fragmentation=params["prohibit_fragmentation"],
                             count=params["count"], interval=params["interval"], wait=params["wait"])
                for target in params["targets"]]
    module.exit_json(changed=False, pings=ping_all(commands, params["targets"]))


if __name__ == "__main__":
    main()

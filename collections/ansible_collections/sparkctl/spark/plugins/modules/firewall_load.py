#!/usr/bin/python
# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: firewall_load
short_description: Load sparkctl's firewall table with an automatic revert, and confirm it
version_added: 0.1.0
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - sparkctl.spark.attributes.linux
  - sparkctl.spark.nft_table
description:
  - O(state=loaded) saves the live table O(family) O(table) (C(nft -s list table)) as an nft file that restores it
    (or deletes the table when there was none), arms a transient systemd timer (C(systemd-run --on-active)) that loads
    that file after O(revert_seconds), then loads O(content). Nothing is loaded unless the timer is armed; a rule set
    nft refuses changes nothing.
  - O(state=confirmed) cancels a pending revert. The role runs it over a fresh SSH connection
    (C(ansible.builtin.wait_for_connection) resets the connection before each attempt), after a load or when
    M(sparkctl.spark.firewall_state) reports a revert still pending (RV(sparkctl.spark.firewall_state#module:revert_pending)).
    When the new table drops the management SSH, the task never reaches the node, the timer puts the previous table back and the node is
    reachable again.
  - The rule set file under C(/etc/sparkctl) is written by the role only after the confirmation, so a node that
    reverts keeps booting with the previous rule set.
attributes:
  check_mode:
    details:
      - O(state=loaded) changes nothing and reports a change; O(state=confirmed) reports whether a revert is pending
        without cancelling it.
author:
  - sparkctl developers (!UNKNOWN)
options:
  state:
    description: V(loaded) arms the revert and loads O(content); V(confirmed) cancels a pending revert.
    type: str
    choices: [loaded, confirmed]
    default: loaded
  content:
    description: The rule set to load (the text of the nft file C(sparkctl.spark.firewall_ruleset) renders). Required
      with O(state=loaded).
    type: str
  revert_seconds:
    description: Seconds after the load at which the previous table comes back unless confirmed.
    type: int
    default: 60
  run_dir:
    description: Directory for the candidate and the revert file (root only, cleared at boot).
    type: path
    default: /run/sparkctl
requirements:
  - nftables, systemd (C(systemd-run), C(systemctl)) and root on the target.
"""

EXAMPLES = r"""
- name: Load the changed rule set; it reverts in 60 s unless confirmed
  sparkctl.spark.firewall_load:
    content: "{{ firewall_rendered }}"
    revert_seconds: 60

- name: Open a new SSH connection for the confirmation
  ansible.builtin.meta: reset_connection

- name: Confirm over the new connection
  sparkctl.spark.firewall_load:
    state: confirmed
"""

RETURN = r"""
previous_present:
  description: Whether a table was loaded before (the revert restores it; otherwise the revert deletes the table).
  returned: state=loaded, not in check mode
  type: bool
  sample: true
revert_unit:
  description: The transient timer that reverts the load.
  returned: state=loaded, not in check mode
  type: str
  sample: sparkctl-firewall-revert.timer
revert_seconds:
  description: Seconds until the revert.
  returned: state=loaded, not in check mode
  type: int
  sample: 60
pending:
  description: Whether a revert was pending (and, outside check mode, has now been cancelled).
  returned: state=confirmed
  type: bool
  sample: true
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkctl.spark.plugins.module_utils import firewall


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", choices=["loaded", "confirmed"], default="loaded"),
            content=dict(type="str"),
            revert_seconds=dict(type="int", default=60),
            run_dir=dict(type="path", default="/run/sparkctl"),
            family=dict(type="str", default=firewall.FAMILY),
            table=dict(type="str", default=firewall.TABLE),
            nft=dict(type="path", default="/usr/sbin/nft"),
        ),
        required_if=[("state", "loaded", ("content",))],
        supports_check_mode=True,
    )
    params = module.params
    systemctl = module.get_bin_path("systemctl", required=True)

    def run(argv):
        return module.run_command(argv)

    try:
        if params["state"] == "confirmed":
            pending = firewall.confirm(run, systemctl=systemctl, check_mode=module.check_mode)
            module.exit_json(changed=False, pending=pending)
        if module.check_mode:
            module.exit_json(changed=True)
        if not os.access(params["nft"], os.X_OK):
            module.fail_json(msg=f"{params['nft']} is missing: install nftables (the firewall role does).")
        os.makedirs(params["run_dir"], mode=0o700, exist_ok=True)

        def write(path, text):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(text)

        result = firewall.arm_and_load(
            run, write, params["nft"], params["content"],
            candidate_file=os.path.join(params["run_dir"], "firewall.candidate.nft"),
            revert_file=os.path.join(params["run_dir"], "firewall.revert.nft"),
            seconds=params["revert_seconds"], systemd_run=module.get_bin_path("systemd-run", required=True),
            systemctl=systemctl, family=params["family"], table=params["table"])
    except firewall.FirewallStateError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=True, **result)


if __name__ == "__main__":
    main()

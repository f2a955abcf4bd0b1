#!/usr/bin/python
# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: firewall_state
short_description: Compare sparkctl's live nftables table with the rule set it should hold
version_added: 0.1.0
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - sparkctl.spark.attributes.info_linux
  - sparkctl.spark.nft_table
  - sparkctl.spark.node_paths
  - sparkctl.spark.node_units
description:
  - Reads whether the table O(family) O(table) is loaded (C(nft -j list tables)) and, given O(content), whether it holds
    exactly the rule set O(content) defines.
  - The comparison loads O(content) into an empty network namespace (C(unshare --net)), lists it there with C(nft -j)
    and compares both listings without handles and counter values, so nft's own normal form (sets reordered,
    single-element sets folded, implicit protocol matches) never shows as a difference. Nothing is loaded into the
    host's ruleset.
  - Where no network namespace can be made, it falls back to the comments C(firewall_ruleset) writes (the table's
    digest of its definition and one comment per rule). A missing table, a flushed chain, a rule deleted or added,
    another version of the rule set or a changed chain policy are still found; a rule edited in place keeping its
    comment is not.
  - Also reads whether C(nft) is installed (RV(nft_installed); without it the table is reported not loaded rather
    than failing), whether a revert armed by M(sparkctl.spark.firewall_load) is still pending (RV(revert_pending)), and,
    as M(sparkctl.spark.node_state) compares them, the files, links and units the firewall role manages (O(paths),
    O(units)). One module run reads everything the role needs, and each writing task runs only for what differs.
  - Changes nothing; the role reloads the file when RV(in_sync) is false.
attributes:
  check_mode:
    details:
      - The module only reads (the scratch namespace vanishes with its process); it runs the same commands in check mode.
author:
  - sparkctl developers (!UNKNOWN)
options:
  content:
    description:
      - The rule set the table should hold, as the text of the nft file (C(sparkctl.spark.firewall_ruleset)).
      - Without it only RV(present) is reported.
    type: str
requirements:
  - nftables (C(nft) with JSON output) and root on the target; C(unshare) from util-linux for the exact comparison;
    systemd (C(systemctl)).
"""

EXAMPLES = r"""
- name: Compare the live table with the rendered file, and read the rule set file and the unit
  sparkctl.spark.firewall_state:
    content: "{{ firewall_rendered }}"
    paths:
      - path: /etc/sparkctl/firewall.nft
        checksum: "{{ firewall_rendered | hash('sha1') }}"
        owner: root
        group: root
        mode: "0600"
    units:
      - name: "{{ spark_units.firewall }}"
        enabled: true
        started: true
  register: firewall_live

- name: Reload when it drifted
  ansible.builtin.command: nft -f /etc/sparkctl/firewall.nft
  when: not firewall_live.in_sync
  changed_when: true
"""

RETURN = r"""
nft_installed:
  description: Whether O(nft) is an executable on the target; when it is not, the table reads as not loaded.
  returned: always
  type: bool
  sample: true
present:
  description: Whether the table is loaded.
  returned: always
  type: bool
  sample: true
in_sync:
  description: Whether the loaded table holds exactly the rule set of O(content); V(null) without O(content).
  returned: always
  type: bool
  sample: true
method:
  description: C(canonical) (compared in a scratch network namespace) or C(comments) (the fallback); V(null) without O(content).
  returned: always
  type: str
  sample: canonical
differences:
  description: How the live table differs, one readable line each; empty when in sync.
  returned: always
  type: list
  elements: str
  sample: ["table inet sparkctl is not loaded"]
revert_pending:
  description:
    - Whether the revert timer M(sparkctl.spark.firewall_load) arms is still waiting to put the previous table back (a
      run interrupted between the load and its confirmation leaves it so).
  returned: always
  type: bool
  sample: false
paths:
  description: Per path of O(paths), what is there, as M(sparkctl.spark.node_state) returns it.
  returned: always
  type: dict
units:
  description: Per unit of O(units), its state, as M(sparkctl.spark.node_state) returns it.
  returned: always
  type: dict
node_differences:
  description: Per path or unit that differs from what O(paths) and O(units) ask, the differences as sentences.
  returned: always
  type: dict
  sample: {"/etc/sparkctl/firewall.nft": ["content differs"]}
drifted:
  description: The paths and units that differ, in the order given (paths first).
  returned: always
  type: list
  elements: str
  sample: ["/etc/sparkctl/firewall.nft"]
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkctl.spark.plugins.module_utils import firewall
from ansible_collections.sparkctl.spark.plugins.module_utils.node_state import PATHS_ARGUMENT, UNITS_ARGUMENT, assess


def main():
    module = AnsibleModule(
        argument_spec=dict(
            content=dict(type="str"),
            family=dict(type="str", default=firewall.FAMILY),
            table=dict(type="str", default=firewall.TABLE),
            nft=dict(type="path", default="/usr/sbin/nft"),
            paths=PATHS_ARGUMENT,
            units=UNITS_ARGUMENT,
        ),
        supports_check_mode=True,
    )
    params = module.params
    nft = params["nft"]
    unshare = module.get_bin_path("unshare")

    def run(argv, data=None):
        return module.run_command(argv, data=data)

    nft_installed = os.access(nft, os.X_OK)
    units = params["units"]
    # The revert timer rides along in the same `systemctl show` as the role's units.
    timer_added = firewall.REVERT_TIMER not in [unit["name"] for unit in units]
    try:
        if nft_installed:
            result = firewall.table_state(run, nft, content=params["content"], unshare=unshare,
                                          family=params["family"], table=params["table"])
        else:
            result = firewall.without_nft(nft, params["content"], family=params["family"], table=params["table"])
        node = assess(params["paths"], units + ([{"name": firewall.REVERT_TIMER}] if timer_added else []), [], run=run)
    except (firewall.FirewallStateError, ValueError, RuntimeError) as exc:
        module.fail_json(msg=str(exc))
    timer = node["units"].pop(firewall.REVERT_TIMER) if timer_added else node["units"][firewall.REVERT_TIMER]
    module.exit_json(changed=False, nft_installed=nft_installed, revert_pending=firewall.revert_pending(timer["active_state"]),
                     paths=node["paths"], units=node["units"], node_differences=node["differences"],
                     drifted=node["drifted"], **result)


if __name__ == "__main__":
    main()

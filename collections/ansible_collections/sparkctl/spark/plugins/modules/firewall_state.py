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
  - nftables (C(nft) with JSON output) and root on the target; C(unshare) from util-linux for the exact comparison.
"""

EXAMPLES = r"""
- name: Compare the live table with the rendered file
  sparkctl.spark.firewall_state:
    content: "{{ firewall_rendered }}"
  register: firewall_live

- name: Reload when it drifted
  ansible.builtin.command: nft -f /etc/sparkctl/firewall.nft
  when: not firewall_live.in_sync
  changed_when: true
"""

RETURN = r"""
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
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkctl.spark.plugins.module_utils import firewall


def main():
    module = AnsibleModule(
        argument_spec=dict(
            content=dict(type="str"),
            family=dict(type="str", default=firewall.FAMILY),
            table=dict(type="str", default=firewall.TABLE),
            nft=dict(type="path", default="/usr/sbin/nft"),
        ),
        supports_check_mode=True,
    )
    nft = module.params["nft"]
    if not os.access(nft, os.X_OK):
        module.fail_json(msg=f"{nft} is missing: install nftables (the firewall role does), or set the path of nft.")
    unshare = module.get_bin_path("unshare")

    def run(argv, data=None):
        return module.run_command(argv, data=data)

    try:
        result = firewall.table_state(run, nft, content=module.params["content"], unshare=unshare,
                                      family=module.params["family"], table=module.params["table"])
    except (firewall.FirewallStateError, ValueError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()

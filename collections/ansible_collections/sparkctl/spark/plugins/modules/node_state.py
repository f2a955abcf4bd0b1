#!/usr/bin/python
# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: node_state
short_description: Read the files, links, units and accounts a role manages in one run and say which differ
version_added: 0.1.0
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - sparkctl.spark.attributes.info_linux
description:
  - A role names everything it manages (files with their wanted content checksum, owner, group and mode, directories,
    links, systemd units that must be enabled or started, accounts it needs) and reads all of it with one module run,
    then runs each writing task only for the entries in RV(drifted). A no-op run of the role then costs one round trip
    to the node instead of one per file and unit.
  - The comparisons are those of the modules that write, so an entry reported in sync is one they would leave
    unchanged; a property not given is not judged.
  - Changes nothing.
author:
  - sparkctl developers (!UNKNOWN)
options:
  paths:
    description: The paths to read and compare; a final symlink is not followed.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: Absolute path.
        type: path
        required: true
      state:
        description: What should be there.
        type: str
        choices: [file, directory, link, absent]
        default: file
      checksum:
        description:
          - SHA-1 of the content the file should have (C(lookup('ansible.builtin.template', ...) | hash('sha1')) for a
            template, C(content | hash('sha1')) for a copy). The file is read only when this is given.
        type: str
      owner:
        description: Owner name or uid.
        type: str
      group:
        description: Group name or gid.
        type: str
      mode:
        description: Octal permission bits (C("0644")); a symbolic mode is not judged.
        type: raw
      src:
        description: The target a link should have, as written in it.
        type: str
  units:
    description: systemd system units to read with one C(systemctl show).
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: Full unit name (C(foo.service)).
        type: str
        required: true
      enabled:
        description: Whether the unit should be enabled; not judged when omitted.
        type: bool
      started:
        description: Whether the unit should be active (or activating); not judged when omitted.
        type: bool
  users:
    description:
      - Accounts to look up in the passwd database; for each that exists, its user manager's unit
        (C(user@UID.service)) is read with the O(units).
    type: list
    elements: str
    default: []
  texts:
    description:
      - Glob patterns of files to return the text of (configuration a role reports on, or whose wanted content
        depends on what is there already); a leading C(~) or C(~user) is that account's home.
    type: list
    elements: str
    default: []
"""

EXAMPLES = r"""
---
- name: Read what the role manages
  sparkctl.spark.node_state:
    paths:
      - path: /etc/systemd/system/sparkctl-firewall.service
        checksum: "{{ lookup('ansible.builtin.template', 'sparkctl-firewall.service.j2') | hash('sha1') }}"
        owner: root
        group: root
        mode: "0644"
      - path: /etc/systemd/system/nftables.service.wants/sparkctl-firewall.service
        state: link
        src: /etc/systemd/system/sparkctl-firewall.service
    units:
      - name: sparkctl-firewall.service
        enabled: true
        started: true
  register: firewall_node

- name: Install the unit only where it differs
  ansible.builtin.template:
    src: sparkctl-firewall.service.j2
    dest: /etc/systemd/system/sparkctl-firewall.service
    owner: root
    group: root
    mode: "0644"
  when: "'/etc/systemd/system/sparkctl-firewall.service' in firewall_node.drifted"
"""

RETURN = r"""
paths:
  description: Per path, C(exists), C(type) (file, directory, link, other, absent), C(owner), C(group), C(uid), C(gid),
    C(mode) (C("0644")), C(target) for a link and C(checksum) for a file whose wanted checksum was given.
  returned: always
  type: dict
units:
  description: Per unit, C(load_state), C(active_state), C(sub_state), C(unit_file_state), C(main_pid) and
    C(need_daemon_reload); a unit systemd does not know reads as not-found and inactive.
  returned: always
  type: dict
users:
  description: Per account, C(exists) and, when it does, C(uid), C(gid), C(home), C(shell) and C(manager) (its
    C(user@UID.service) as in RV(units), with C(unit) its name).
  returned: always
  type: dict
texts:
  description:
    - The files O(texts) matched, sorted by path, each as C(path), C(content) (line ends made C(\\n), undecodable bytes
      replaced) and C(checksum) (SHA-1 of the file's bytes; C(content | hash('sha1')) equals it when the text is the
      file exactly), or with C(error) when unreadable.
  returned: always
  type: list
  elements: dict
differences:
  description: Per path or unit that differs from what was asked, the differences as sentences.
  returned: always
  type: dict
drifted:
  description: The paths and units that differ, in the order given (paths first).
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkctl.spark.plugins.module_utils.node_state import PATH_STATES, assess


def main():
    module = AnsibleModule(
        argument_spec=dict(
            paths=dict(type="list", elements="dict", default=[], options=dict(
                path=dict(type="path", required=True),
                state=dict(type="str", choices=list(PATH_STATES), default="file"),
                checksum=dict(type="str"),
                owner=dict(type="str"),
                group=dict(type="str"),
                mode=dict(type="raw"),
                src=dict(type="str"),
            )),
            units=dict(type="list", elements="dict", default=[], options=dict(
                name=dict(type="str", required=True),
                enabled=dict(type="bool"),
                started=dict(type="bool"),
            )),
            users=dict(type="list", elements="str", default=[]),
            texts=dict(type="list", elements="str", default=[]),
        ),
        supports_check_mode=True,
    )

    def run(argv):
        return module.run_command(argv)

    try:
        state = assess(module.params["paths"], module.params["units"], module.params["users"], run=run,
                       texts=module.params["texts"])
    except RuntimeError as err:
        module.fail_json(msg=str(err))
    module.exit_json(changed=False, **state)


if __name__ == "__main__":
    main()

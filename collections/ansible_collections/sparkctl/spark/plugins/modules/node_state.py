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
  - sparkctl.spark.node_paths
  - sparkctl.spark.node_units
  - sparkctl.spark.procfs
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
  users:
    description:
      - Accounts to look up in the passwd database; for each that exists, its user manager's unit
        (C(user@UID.service)) is read with the O(units).
    type: list
    elements: str
    default: []
  packages:
    description:
      - Debian packages that should be installed, read with one C(dpkg-query); those that are not are in
        RV(packages_missing).
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
  stale_inputs:
    description:
      - Units to judge for staleness, as C(sparkctl.spark.unit_staleness) does, each with the files it reads at start
        that systemd does not know of (an empty list when systemd knows them all).
    type: dict
    default: {}
  processes:
    description:
      - The engine's processes to look for, as C(sparkctl.spark.engine_leftovers) does (exact C(names), word-for-word
        C(argv_prefixes)); the module's own ancestors never count.
    type: dict
    suboptions:
      names:
        description: Process names or titles.
        type: list
        elements: str
        default: []
      argv_prefixes:
        description: Command lines that start with one of these words.
        type: list
        elements: list
        default: []
  raylets:
    description: Also read the node ids of the Ray raylets running here, as C(sparkctl.spark.ray_raylet_facts) does.
    type: bool
    default: false
"""

EXAMPLES = r"""
---
- name: Read what the role manages
  sparkctl.spark.node_state:
    paths:
      - path: /etc/systemd/system/{{ spark_units.firewall }}
        checksum: "{{ lookup('ansible.builtin.template', 'firewall.service.j2') | hash('sha1') }}"
        owner: root
        group: root
        mode: "0644"
      - path: /etc/systemd/system/nftables.service.wants/{{ spark_units.firewall }}
        state: link
        src: /etc/systemd/system/{{ spark_units.firewall }}
    units:
      - name: "{{ spark_units.firewall }}"
        enabled: true
        started: true
  register: firewall_node

- name: Install the unit only where it differs
  ansible.builtin.template:
    src: firewall.service.j2
    dest: /etc/systemd/system/{{ spark_units.firewall }}
    owner: root
    group: root
    mode: "0644"
  when: "'/etc/systemd/system/' ~ spark_units.firewall in firewall_node.drifted"
"""

RETURN = r"""
paths:
  description: Per path, C(exists), C(type) (file, directory, link, other, absent), C(owner), C(group), C(uid), C(gid),
    C(mode) (C("0644")), C(target) for a link, C(checksum) for a file whose checksum was asked for, C(entries) for a
    directory whose entries were, and C(error) when those could not be read.
  returned: always
  type: dict
units:
  description: Per unit, C(load_state), C(active_state), C(sub_state), C(unit_file_state), C(main_pid),
    C(need_daemon_reload) and C(restart_pending) (its main process died and systemd restarts it after RestartSec, if
    its start limit lets it); a unit systemd does not know reads as not-found and inactive.
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
packages_missing:
  description: The packages of O(packages) that dpkg does not list as installed, in the order given.
  returned: always
  type: list
  elements: str
differences:
  description: Per path or unit that differs from what was asked, the differences as sentences.
  returned: always
  type: dict
drifted:
  description: The paths and units that differ, in the order given (paths first).
  returned: always
  type: list
  elements: str
staleness:
  description: Per unit of O(stale_inputs), what C(sparkctl.spark.unit_staleness) returns for it.
  returned: always
  type: dict
stale:
  description: The units of O(stale_inputs) that run with an input newer than their start.
  returned: always
  type: list
  elements: str
daemon_reload:
  description: Whether systemd has not read the changed file of a unit of O(stale_inputs) yet.
  returned: always
  type: bool
processes:
  description: The processes O(processes) matched (C(pid), C(comm), C(argv), C(user)), as engine_leftovers lists them.
  returned: when O(processes) is given
  type: list
  elements: dict
raylets:
  description: The raylets running here, each C(pid) and C(node_id).
  returned: when O(raylets) is true
  type: list
  elements: dict
raylet_node_id:
  description: The node id of the one raylet running here, empty when there is none or more than one.
  returned: when O(raylets) is true
  type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkctl.spark.plugins.module_utils.node_state import (
    PATHS_ARGUMENT,
    UNITS_ARGUMENT,
    assess,
    missing_packages,
    processes,
    staleness,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            paths=PATHS_ARGUMENT,
            units=UNITS_ARGUMENT,
            users=dict(type="list", elements="str", default=[]),
            packages=dict(type="list", elements="str", default=[]),
            texts=dict(type="list", elements="str", default=[]),
            stale_inputs=dict(type="dict", default={}),
            processes=dict(type="dict", options=dict(
                names=dict(type="list", elements="str", default=[]),
                argv_prefixes=dict(type="list", elements="list", default=[]),
            )),
            raylets=dict(type="bool", default=False),
            proc_root=dict(type="path", default="/proc"),
        ),
        supports_check_mode=True,
    )

    def run(argv):
        return module.run_command(argv)

    params = module.params
    try:
        state = assess(params["paths"], params["units"], params["users"], run=run, texts=params["texts"])
    except RuntimeError as err:
        module.fail_json(msg=str(err))
    state["packages_missing"] = missing_packages(params["packages"], run, module.get_bin_path("dpkg-query"))
    state.update(staleness({unit: list(files or []) for unit, files in params["stale_inputs"].items()}, run=run))
    wanted = params["processes"] or {}
    if wanted or params["raylets"]:
        # The SSH session running this module is never the engine, whatever its command line.
        found = processes(wanted.get("names") or [], wanted.get("argv_prefixes") or [], params["raylets"],
                          params["proc_root"], own_pids=(os.getpid(), os.getppid()))
        state.update(found)
        if params["raylets"]:
            state["raylet_node_id"] = found["raylets"][0]["node_id"] if len(found["raylets"]) == 1 else ""
    module.exit_json(changed=False, **state)


if __name__ == "__main__":
    main()

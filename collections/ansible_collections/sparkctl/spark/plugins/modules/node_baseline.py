#!/usr/bin/python
# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: node_baseline
short_description: Record once what a node was before sparkctl's first change, for a later teardown
version_added: 0.1.0
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - sparkctl.spark.attributes.linux
description:
  - When O(path) does not exist, records in it the node as it is now, before sparkctl changes it
    (C(playbooks/teardown.yml) reads it); the installed packages, whether each of O(paths) exists, a copy of
    each of O(files) that exists (under O(backup_dir), with its mode and owner), the MTU, addresses and
    IPv6 address generation mode of each of O(interfaces), which of O(linger_users) linger, and which of O(users)
    exist (with, for each, whether a group of the same name exists).
  - The parents of O(paths) are recorded apart; a teardown removes one that did not exist only once it is empty.
  - When O(path) exists, what it records stays as it is (the first record is the node before sparkctl). Only a path
    of O(paths) it does not know yet (another profile's checkpoint or venv, named by the step of the run that creates
    it, right before it does) is added, with its existence now and its parents it does not know; otherwise the module
    reports no change. O(deferred_paths) are not added to an existing record.
  - Likewise an account of O(users) an existing record does not know (one written by a sparkctl that did not create
    accounts) is added with its existence now, so a later stage that creates it (provision) finds it noted as absent;
    an account the record knows keeps its first answer.
  - The packages a step of the run has just installed (O(installed_packages)) are added to the record's list of the
    packages sparkctl installed (C(installed_by_sparkctl)), which a first record always has (empty when nothing was
    installed yet); M(sparkctl.spark.node_teardown) purges only packages it lists, so one someone installs after
    sparkctl's first run stays. The module reports a change only when a name is new to the list. A record without the
    list (one an older sparkctl wrote, whose installs are not known) does not get one. A first record written by this
    call notes O(installed_packages) as absent before sparkctl.
  - In check mode it reports the record it would write, and writes nothing.
author:
  - sparkctl developers (!UNKNOWN)
options:
  path:
    description: The baseline file (JSON, mode 0600).
    type: path
    default: /var/lib/sparkctl/baseline.json
  backup_dir:
    description: Where the copies of O(files) go, each under its own path.
    type: path
    default: /var/lib/sparkctl/baseline
  paths:
    description: Paths whose existence is recorded (files, directories, links); a teardown removes only those recorded absent.
    type: list
    elements: path
    default: []
  deferred_paths:
    description:
      - Paths a later step of the run creates and a run may name anew (the checkpoint directory, the venv). A first
        record notes them like O(paths); an existing record does not learn them from this call but from the one that
        step makes right before it creates them (naming them in O(paths)), so a run refused before that step leaves
        the record as it was.
    type: list
    elements: path
    default: []
  empty_dirs:
    description:
      - Directories recorded with the parents of O(paths); a teardown removes one that did not exist only once it is empty
        (those a package sparkctl installs makes when its service first starts).
    type: list
    elements: path
    default: []
  files:
    description: Files sparkctl may replace or edit; each is recorded with a copy when it exists.
    type: list
    elements: path
    default: []
  interfaces:
    description: Network interfaces whose MTU, addresses and IPv6 address generation mode are recorded (the direct cable's).
    type: list
    elements: str
    default: []
  linger_users:
    description: Users whose linger state (C(/var/lib/systemd/linger/USER)) is recorded.
    type: list
    elements: str
    default: []
  groups:
    description:
      - Groups whose existence and members (from C(/etc/group)) are recorded.
      - A package sparkctl installs may create one, a role may add the service user to it.
    type: list
    elements: str
    default: []
  users:
    description:
      - Accounts sparkctl may create (its service user); whether each exists is recorded, and whether a group named
        like it exists (the private group C(useradd) would make).
      - M(sparkctl.spark.node_teardown) removes only an account recorded absent; for one that existed nothing else
        is recorded, nothing of it is undone.
      - An existing record learns each account it does not know yet (see above).
    type: list
    elements: str
    default: []
  installed_packages:
    description:
      - Packages a step of this run has just installed (those of its list it found missing), added to the record's
        list of the packages sparkctl installed (C(installed_by_sparkctl)); names already there are not added again.
    type: list
    elements: str
    default: []
seealso:
  - module: sparkctl.spark.node_teardown
"""

EXAMPLES = r"""
- name: Record the node before sparkctl's first change
  sparkctl.spark.node_baseline:
    paths: [/etc/sparkctl, /opt/sparkctl]
    deferred_paths: [/srv/sparkctl/models/my-model]
    files: [/etc/default/earlyoom]
    interfaces: [enp1s0f1np1]
    linger_users: [sparkctl]
    groups: [docker]
    users: [sparkctl]
  become: true

- name: Right before creating the checkpoint directory, note whether it was there
  sparkctl.spark.node_baseline:
    paths: [/srv/sparkctl/models/my-model]
  become: true

- name: Before provision creates the service user, note in an older record whether it was there
  sparkctl.spark.node_baseline:
    users: [sparkctl]
  become: true

- name: Right after installing earlyoom, note that sparkctl installed it
  sparkctl.spark.node_baseline:
    installed_packages: [earlyoom]
  become: true
"""

RETURN = r"""
baseline:
  description: The record (the one on the node when it existed).
  type: dict
  returned: always
  sample:
    version: 1
    packages: [bash]
    paths: {/etc/sparkctl: false}
    parents: {/srv/sparkctl: false}
    files: {}
    links: {}
    linger: {sparkctl: false}
    groups: {docker: null}
    users: {sparkctl: false}
    user_groups: {sparkctl: false}
    installed_by_sparkctl: [earlyoom]
added:
  description:
    - What an existing record learned (or would, in check mode) of O(paths) and O(users), each with its existence now,
      and the names of O(installed_packages) new to its list of the packages sparkctl installed.
  type: dict
  returned: when an existing record learned something
  sample:
    paths: {/srv/sparkctl/models/other: false}
    parents: {}
    users: {sparkctl: false}
    user_groups: {sparkctl: false}
    installed_by_sparkctl: []
recorded:
  description: Whether this run wrote the record (or would, in check mode).
  type: bool
  returned: always
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_bytes
from ansible_collections.sparkctl.spark.plugins.module_utils.files import read_file_state, write_file_atomic
from ansible_collections.sparkctl.spark.plugins.module_utils.teardown import (
    BASELINE_VERSION,
    INSTALLED_KEY,
    account,
    backup_path,
    group_members,
    installed_packages,
    read_addr_gen_mode,
)

DPKG_FORMAT = "${Package}\\t${db:Status-Abbrev}\\n"


def read_links(module, interfaces):
    """interface -> {'mtu', 'addresses', 'addr_gen_mode'} for each interface that exists."""
    links = {}
    for interface in interfaces:
        rc, out, _err = module.run_command(["ip", "-j", "addr", "show", "dev", interface])
        if rc != 0:
            continue
        for entry in json.loads(out or "[]"):
            links[interface] = {
                "mtu": entry.get("mtu"),
                "addresses": ["%s/%s" % (a["local"], a["prefixlen"]) for a in entry.get("addr_info", []) if "local" in a],
                "addr_gen_mode": read_addr_gen_mode(interface),
            }
    return links


def ancestors_of(paths):
    """Every parent directory of paths, up to (not including) the root."""
    found = set()
    for path in paths:
        parent = os.path.dirname(path)
        while parent not in ("", "/"):
            found.add(parent)
            parent = os.path.dirname(parent)
    return found


def added_users(baseline, users):
    """What a record already written lacks of users: {'users': {name: exists now}, 'user_groups':
    {name: a group of that name exists now}} for the accounts it does not know. A record without
    users (an older sparkctl's) knows none; one it knows keeps its first answer."""
    known = baseline.get("users") or {}
    new = [name for name in dict.fromkeys(users) if name not in known]
    return {"users": dict((name, account(name) is not None) for name in new),
            "user_groups": dict((name, group_members(name) is not None) for name in new)}


def added_installs(baseline, names):
    """The names a record already written does not list yet as installed by sparkctl, in the order given. A record
    without the list (an older sparkctl's) gets none: which packages that sparkctl installed is not known, so a list
    begun now would read as complete and the teardown would keep them."""
    known = baseline.get(INSTALLED_KEY)
    if not isinstance(known, list):
        return []
    return [name for name in dict.fromkeys(names) if name not in known]


def added_paths(baseline, paths, exists):
    """What a record already written lacks of paths: {'paths': {path: exists now}, 'parents':
    {parent: exists now}} for the paths it does not know and their parents it knows in neither list."""
    known_paths, known_parents = baseline.get("paths") or {}, baseline.get("parents") or {}
    new = [path for path in paths if path not in known_paths]
    parents = sorted(ancestors_of(new) - set(known_paths) - set(known_parents))
    return {"paths": dict((path, exists(path)) for path in new),
            "parents": dict((parent, exists(parent)) for parent in parents)}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", default="/var/lib/sparkctl/baseline.json"),
            backup_dir=dict(type="path", default="/var/lib/sparkctl/baseline"),
            paths=dict(type="list", elements="path", default=[]),
            deferred_paths=dict(type="list", elements="path", default=[]),
            empty_dirs=dict(type="list", elements="path", default=[]),
            files=dict(type="list", elements="path", default=[]),
            interfaces=dict(type="list", elements="str", default=[]),
            linger_users=dict(type="list", elements="str", default=[]),
            groups=dict(type="list", elements="str", default=[]),
            users=dict(type="list", elements="str", default=[]),
            installed_packages=dict(type="list", elements="str", default=[]),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if os.path.exists(p["path"]):
        try:
            with open(p["path"]) as handle:
                baseline = json.load(handle)
        except (OSError, ValueError) as exc:
            module.fail_json(msg="%s is not a readable baseline (%s); sparkctl wrote it before its first change: "
                             "restore it from a backup, or remove it only on a node sparkctl never changed." % (p["path"], exc))
        added = added_paths(baseline, p["paths"], os.path.lexists)
        added.update(added_users(baseline, p["users"]))
        added[INSTALLED_KEY] = added_installs(baseline, p["installed_packages"])
        if not any(added.values()):
            module.exit_json(changed=False, recorded=False, baseline=baseline)
        for key, learned in added.items():
            if learned and key == INSTALLED_KEY:
                baseline[key] = sorted(set(baseline[key]) | set(learned))
            elif learned:
                baseline.setdefault(key, {}).update(learned)
        if not module.check_mode:
            try:
                write_file_atomic(p["path"], to_bytes(json.dumps(baseline, indent=1, sort_keys=True) + "\n"), 0o600)
            except OSError as exc:
                module.fail_json(msg="could not add to the baseline %s: %s" % (p["path"], exc))
        module.exit_json(changed=True, recorded=False, baseline=baseline, added=added)

    rc, out, err = module.run_command(["dpkg-query", "-W", "-f", DPKG_FORMAT])
    if rc != 0:
        module.fail_json(msg="dpkg-query failed: %s" % err.strip())
    p["paths"] = list(dict.fromkeys(list(p["paths"]) + list(p["deferred_paths"])))
    parents = {os.path.dirname(p["path"]), p["backup_dir"]}
    parents |= {os.path.dirname(backup_path(p["backup_dir"], f)) for f in p["files"]}
    # The record's own directories are created here: recorded first, so a teardown removes them.
    recorded_paths = {path: os.path.lexists(path) for path in list(p["paths"]) + sorted(parents)}
    # A directory sparkctl creates with its parents (mkdir -p) takes them along: each parent
    # of O(paths) is recorded too.
    ancestors = set()
    for path in p["paths"]:
        parent = os.path.dirname(path)
        while parent not in ("", "/"):
            ancestors.add(parent)
            parent = os.path.dirname(parent)
    ancestors |= set(p["empty_dirs"])
    parent_paths = {parent: os.path.lexists(parent) for parent in sorted(ancestors - set(recorded_paths))}
    files, originals = {}, {}
    for path in p["files"]:
        # One read of the file itself, its directories reached as module_utils/safe_walk.py reaches
        # them: a link the service user planted in its home is never followed into a file it could
        # not read (the copy would be handed back to it at the teardown).
        try:
            content, mode, owner = read_file_state(path)
        except OSError as exc:
            module.warn("%s: recorded as there, without a copy (%s); a teardown leaves it as it finds it" % (path, exc))
            content = None
        if content is not None:
            originals[path] = content
            files[path] = {"existed": True, "backup": backup_path(p["backup_dir"], path),
                           "mode": "%04o" % mode, "uid": owner[0], "gid": owner[1]}
        else:
            files[path] = {"existed": os.path.lexists(path), "backup": None}
    installs = list(dict.fromkeys(p["installed_packages"]))
    baseline = {
        "version": BASELINE_VERSION,
        # What this call is told a step just installed was not there before it.
        "packages": sorted(installed_packages(out) - set(installs)),
        INSTALLED_KEY: sorted(installs),
        "paths": recorded_paths,
        "parents": parent_paths,
        "files": files,
        "links": read_links(module, p["interfaces"]),
        "linger": {user: os.path.exists("/var/lib/systemd/linger/%s" % user) for user in p["linger_users"]},
        "groups": {name: group_members(name) for name in p["groups"]},
    }
    baseline.update(added_users({}, p["users"]))
    if not module.check_mode:
        try:
            for directory in sorted(parents, key=len):
                os.makedirs(directory, mode=0o700, exist_ok=True)
            for path, entry in files.items():
                if entry["backup"]:
                    os.makedirs(os.path.dirname(entry["backup"]), mode=0o700, exist_ok=True)
                    write_file_atomic(entry["backup"], originals[path], 0o600)
            write_file_atomic(p["path"], to_bytes(json.dumps(baseline, indent=1, sort_keys=True) + "\n"), 0o600)
        except OSError as exc:
            module.fail_json(msg="could not write the baseline %s: %s" % (p["path"], exc))
    module.exit_json(changed=True, recorded=True, baseline=baseline)


if __name__ == "__main__":
    main()

#!/usr/bin/python
# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: node_teardown
short_description: Take off a node what sparkctl put on it, as its baseline record says
version_added: 0.1.0
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - sparkctl.spark.attributes.linux
attributes:
  check_mode:
    details:
      - Lists every action it would take (removals, restores, packages, link changes, accounts) and changes nothing;
        RV(removed_users) names the accounts it would remove.
  diff_mode:
    support: full
    details:
      - The diff lists what is there now (before) and what the teardown leaves (after), one action per line.
description:
  - Reads the record M(sparkctl.spark.node_baseline) wrote before sparkctl's first change, and undoes, in this order,
    only what it says sparkctl did.
  - Removes the images sparkctl built (those with the label O(docker_image_label)) when docker is there; deletes
    the nftables tables O(nft_tables) (sparkctl's own table holds only its rules, so deleting it never cuts the
    management path; other tables are not touched).
  - Files the record holds; one that existed is put back from its copy (content, mode, owner) unless it is one of
    O(strip), whose sparkctl lines are taken out instead and the rest kept; one that did not is removed (a stripped
    file only once nothing else is left in it).
  - Removes every path the record lists as absent then and present now, except O(keep) and the directories that hold
    them. When a path under C(/etc/netplan) changed, runs C(netplan generate) and C(networkctl reload) so that
    networkd lets the cable go (never C(netplan apply)).
  - On each interface of O(link_addresses); deletes the inventory's address when the interface did not have it,
    puts back the MTU and the IPv6 address generation mode it had (then cycles the link once so its link-local
    address comes back). The management interface is never in O(link_addresses).
  - Turns lingering off for each of O(linger_users) that did not linger then.
  - Purges each of O(packages) that was absent then, is installed now and that the record lists as installed by
    sparkctl (C(installed_by_sparkctl), which M(sparkctl.spark.node_baseline)'s
    O(sparkctl.spark.node_baseline#module:installed_packages) fills when a role installs it); one it does not list
    was installed by someone after sparkctl's first run, and is kept and named in RV(kept_packages). A record without
    that list (one an older sparkctl wrote) cannot tell them apart, so each that was absent then is purged, with a warning
    saying how to keep one.
  - Then what came with them; the packages apt marked as installed automatically that were absent then and that the
    purged ones reach through Pre-Depends, Depends and Recommends, except what a package staying on the node still
    needs (Pre-Depends, Depends, and Recommends too of one installed since the record), so a dependency of a package
    someone installed since stays. Each purge only when apt's simulation of it removes nothing but those packages;
    otherwise nothing of it is purged, with a warning.
  - Then each directory of O(shared_dirs) the record lists as absent then loses only what O(shared_dirs) names in it,
    what sparkctl writes there and what its packages' daemons write there (the packages' own files went with their
    purge). What is left is someone else's and stays, with the directories that hold it, named in RV(actions) and
    RV(kept_files). The directory goes once nothing is left in it.
  - Then removes each account of O(users) the record says did not exist and that exists now, as C(userdel --remove)
    does; an account the record says existed, or does not know, is never removed. Its processes must be gone first
    (the units were stopped, lingering turned off above); any left are ended with C(loginctl terminate-user), and
    when some remain after a short wait the module fails naming the account and their PIDs (it never uses
    C(userdel --force)). Its home directory (and mail spool) go with it (C(userdel --remove)) only when the home is an
    absolute path strictly under C(/home) or C(/var/lib), a directory (not a link) the account owns, neither another
    account's home nor holding one, and holds neither a path of O(keep) nor the record; otherwise the account goes
    without them (C(userdel)) and RV(actions) says which home was left and why.
  - Its private group (named like it, its primary group, without members, no other account's primary group) goes
    with it when the record says no such group existed before sparkctl (C(userdel) takes it when C(USERGROUPS_ENAB)
    is on in C(/etc/login.defs), C(groupdel) otherwise); when the record does not say so and C(userdel) would take
    it, the account stays, with a warning.
  - Then takes the user of each group of O(group_members) out of it, or deletes the group, as the record says.
  - Last, removes the record itself when O(remove_record) is true and it is under a path removed above.
  - Without a record (sparkctl never changed the node, or a run failed before its first change) it still deletes
    O(nft_tables) and reports that nothing else is known to be sparkctl's.
author:
  - sparkctl developers (!UNKNOWN)
options:
  path:
    description: The record M(sparkctl.spark.node_baseline) wrote.
    type: path
    default: /var/lib/sparkctl/baseline.json
  keep:
    description: Paths left in place with everything under them (the checkpoints unless they are purged).
    type: list
    elements: path
    default: []
  strip:
    description: Files sparkctl edits rather than owns; what it added is taken out line by line.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: The file.
        type: path
        required: true
      hosts:
        description: A line not in the recorded copy whose first field names one of these hosts is sparkctl's (known_hosts pins).
        type: list
        elements: str
        default: []
      markers:
        description: A line not in the recorded copy that contains one of these strings is sparkctl's (authorized keys' comment).
        type: list
        elements: str
        default: []
      block_marker:
        description: The text after C(# BEGIN ) and C(# END ) around a block sparkctl inserted (blockinfile).
        type: str
  served_file:
    description:
      - The list of the checkpoint directories this node served (roles/checkpoint's C(checkpoint_served_file)), read
        when it exists. Each is kept like O(keep) (after a switch of the served model, the other profiles' too), and
        with O(purge_served) purged like O(purge_dirs) when the record says sparkctl created it or it holds the mark
        the checkpoint stage puts in a directory it creates (C(.sparkctl-created)).
    type: path
  purge_served:
    description: Purge the checkpoint directories O(served_file) lists too.
    type: bool
    default: false
  purge_dirs:
    description:
      - Directories sparkctl created (the record says they were absent) whose own files go, and only those (the checkpoints,
        with C(teardown_purge_checkpoints) in roles/teardown); whatever else is in them stays, and keeps them.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: The directory.
        type: path
        required: true
      manifest:
        description:
          - The JSON manifest listing its files (relative names); default C(.sparkctl-manifest.json) in it.
          - The files the verification stamp C(.sparkctl-verified.json) in it lists are sparkctl's too (a worker has no manifest).
        type: path
  shared_dirs:
    description:
      - Directories sparkctl creates that packages it installs, their daemons or the node's administrator write into
        as well (C(/etc/docker), C(/etc/prometheus)). One the record lists as absent then is not removed with all it
        holds, as the other paths are (see above).
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: The directory. It must be one of the record's paths too (node_baseline's O(sparkctl.spark.node_baseline#module:paths)).
        type: path
        required: true
      sparkctl:
        description: What sparkctl writes in it, relative to it; a directory named goes with all it holds.
        type: list
        elements: str
        default: []
      daemon:
        description: What the daemons of the packages sparkctl installs write in it (their data), relative to it.
        type: list
        elements: str
        default: []
  link_addresses:
    description: Interface -> the address the inventory gives it (spark_link), the cable only.
    type: dict
    default: {}
  linger_users:
    description: Users whose lingering sparkctl may have turned on.
    type: list
    elements: str
    default: []
  users:
    description:
      - Accounts sparkctl may have created (its service user), as recorded by
        M(sparkctl.spark.node_baseline)'s O(sparkctl.spark.node_baseline#module:users).
      - Each that the record says did not exist and that exists now is removed (see above); the others are left alone.
    type: list
    elements: str
    default: []
  group_members:
    description:
      - Group -> the user a role adds to it. After the packages, the user leaves the group when the record says it was not
        a member; the group itself goes when the record says it did not exist (a package sparkctl installed made it).
    type: dict
    default: {}
  packages:
    description:
      - The packages sparkctl's roles install; only those absent in the record, installed now and (when the record
        has the list) listed by it as installed by sparkctl are purged.
    type: list
    elements: str
    default: []
  nft_tables:
    description: sparkctl's nftables tables, as C(FAMILY NAME).
    type: list
    elements: str
    default: []
  docker_image_label:
    description: The label every image sparkctl builds carries.
    type: str
  remove_record:
    description: Remove the record once the rest is done (a second teardown then finds nothing to do).
    type: bool
    default: true
seealso:
  - module: sparkctl.spark.node_baseline
"""

EXAMPLES = r"""
- name: Take sparkctl off the node
  sparkctl.spark.node_teardown:
    keep: [/srv/sparkctl/models/solar]
    link_addresses: {enp1s0f1np1: 192.168.100.10/24}
    linger_users: [sparkctl]
    users: [sparkctl]
    packages: [nftables, earlyoom]
    nft_tables: [inet sparkctl]
  become: true
"""

RETURN = r"""
actions:
  description: What was done (or would be, in check mode), in order.
  type: list
  elements: str
  returned: always
  sample: ["delete nft table inet sparkctl", "remove /etc/sparkctl", "purge nginx"]
kept:
  description: Paths sparkctl created that stay because they hold O(keep).
  type: list
  elements: str
  returned: always
kept_files:
  description:
    - Files in a directory of O(shared_dirs) that sparkctl created that stay, because neither sparkctl, nor its
      packages, nor their daemons put them there.
  type: list
  elements: str
  returned: always
  sample: [/etc/docker/certs.d/registry.example:5000/ca.crt]
kept_packages:
  description:
    - Packages of O(packages) absent at the record and installed now that stay, because the record does not list them
      as installed by sparkctl (someone installed them after sparkctl's first run).
  type: list
  elements: str
  returned: always
  sample: [iperf3]
recorded:
  description: Whether the node had a record.
  type: bool
  returned: always
removed_users:
  description: The accounts of O(users) removed (or that would be, in check mode).
  type: list
  elements: str
  returned: always
  sample: [sparkctl]
"""

import json
import os
import pwd
import stat
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_bytes, to_text
from ansible_collections.sparkctl.spark.plugins.module_utils.checkpoint_store import CREATED_MARK, sparkctl_files
from ansible_collections.sparkctl.spark.plugins.module_utils.served_record import read_served
from ansible_collections.sparkctl.spark.plugins.module_utils import safe_walk
from ansible_collections.sparkctl.spark.plugins.module_utils.shared_dirs import foreign_files, named_entries, package_files
from ansible_collections.sparkctl.spark.plugins.module_utils.files import read_file_state, write_file_atomic
from ansible_collections.sparkctl.spark.plugins.module_utils.teardown import (
    DPKG_RELATIONS_FORMAT,
    HOME_ROOTS,
    INSTALLED_KEY,
    account,
    dependencies_of,
    dependencies_to_purge,
    group_members,
    home_refusal,
    installed_packages,
    link_restore,
    package_relations,
    packages_to_purge,
    parents_to_remove,
    paths_to_remove,
    private_group,
    purge_is_contained,
    read_addr_gen_mode,
    recorded_installs,
    simulated_purges,
    split_by_record,
    strip_text,
    user_pids,
    usergroups_enabled,
    users_to_remove,
)

APT_ENV = {"DEBIAN_FRONTEND": "noninteractive"}
ADDR_GEN_MODES = {0: "eui64", 1: "none", 2: "stable_secret", 3: "random"}
# Where processes and login.defs are read; how long an account's processes have to end after
# loginctl terminate-user (seconds). Where an account's home may be is module_utils.teardown's HOME_ROOTS.
PROC_ROOT = "/proc"
LOGIN_DEFS = "/etc/login.defs"
TERMINATE_WAIT = 10.0


class Teardown:
    def __init__(self, module):
        self.module = module
        self.check = module.check_mode
        self.actions = []

    def act(self, description, argv=None, fn=None, ignore_rc=False):
        self.actions.append(description)
        if self.check:
            return
        if argv:
            rc, _out, err = self.module.run_command(argv, environ_update=APT_ENV)
            if rc != 0 and not ignore_rc:
                self.module.fail_json(msg="%s: %s failed: %s" % (description, " ".join(argv), err.strip()), actions=self.actions)
        if fn:
            try:
                fn()
            except OSError as exc:
                self.module.fail_json(msg="%s: %s" % (description, exc), actions=self.actions)

    def docker_images(self, label):
        docker = self.module.get_bin_path("docker")
        if not label or not docker:
            return
        rc, out, _err = self.module.run_command([docker, "image", "ls", "-q", "--no-trunc", "--filter", "label=" + label])
        if rc != 0:
            return
        for image in dict.fromkeys(out.split()):
            self.act("remove image %s (label %s)" % (image, label), [docker, "image", "rm", "-f", image])

    def nft_tables(self, tables):
        nft = self.module.get_bin_path("nft")
        if not nft:
            return
        for table in tables:
            family_name = table.split()
            rc, _out, _err = self.module.run_command([nft, "list", "table"] + family_name)
            if rc == 0:
                self.act("delete nft table %s" % table, [nft, "delete", "table"] + family_name)

    def files(self, recorded, strip):
        strip = {entry["path"]: entry for entry in strip}
        touched = []
        for path, entry in sorted(recorded.items()):
            try:
                content, mode, owner, exists = self._file_state(path)
            except OSError as exc:
                self.module.fail_json(msg="%s: not read, so not changed (%s); see what is there and remove sparkctl's "
                                      "lines yourself" % (path, exc), actions=self.actions)
            original = b""
            if entry.get("backup"):
                original, _m, _o = read_file_state(entry["backup"])
                if original is None:
                    self.module.fail_json(msg="the copy %s of %s the baseline recorded is missing: restore it from a backup "
                                          "of /var/lib/sparkctl, or put %s back yourself." % (entry["backup"], path, path))
            if path in strip and content is not None:
                s = strip[path]
                new = to_bytes(strip_text(to_text(content), to_text(original), s.get("hosts") or (), s.get("markers") or (),
                                          s.get("block_marker")))
                if not entry.get("existed") and not new.strip():
                    self.act("remove %s (sparkctl's lines were all it held)" % path, fn=lambda p=path: remove_path(p))
                    touched.append(path)
                elif new != content:
                    self.act("take sparkctl's lines out of %s" % path, fn=lambda p=path, n=new, m=mode, o=owner: rewrite(p, n, m, o))
                    touched.append(path)
            elif entry.get("existed") and entry.get("backup"):
                want_mode, want_owner = int(entry["mode"], 8), (entry["uid"], entry["gid"])
                if content != original or mode != want_mode or owner != want_owner:
                    self.act("restore %s from %s" % (path, entry["backup"]),
                             fn=lambda p=path, e=entry, o=original, m=want_mode: self._restore(p, e, o, m))
                    touched.append(path)
            elif not entry.get("existed") and exists and path not in strip:
                self.act("remove %s" % path, fn=lambda p=path: remove_path(p))
                touched.append(path)
        return touched

    @staticmethod
    def _file_state(path):
        """(content, mode, owner, exists) of path, reached as module_utils/safe_walk.py reaches it: a link
        followed only where root trusts the directory holding it (an administrator's), refused where the
        service user could have put it; content None for what is not a regular file."""
        info = safe_walk.lstat_path(path)
        if info is None:
            return None, None, None, False
        if not (stat.S_ISREG(info.st_mode) or stat.S_ISLNK(info.st_mode)):
            return None, None, None, True
        content, mode, owner = read_file_state(path)
        return content, mode, owner, True

    @staticmethod
    def _restore(path, entry, original, mode):
        info = safe_walk.lstat_path(path)
        if info is not None and not stat.S_ISREG(info.st_mode):
            remove_path(path)
        # The owner is given through the new file's own descriptor, before it takes the name.
        write_file_atomic(path, original, mode, (entry["uid"], entry["gid"]))

    def paths(self, recorded, keep, skip):
        remove, kept = paths_to_remove(list(recorded), recorded, keep)
        for path in remove:
            if os.path.lexists(path) and path not in skip:
                self.act("remove %s" % path, fn=lambda p=path: remove_path(p))
        return [p for p in kept if os.path.lexists(p)], [p for p in remove if os.path.lexists(p) or self.check]

    def purge_dir(self, path, manifest_path):
        if not os.path.isdir(path):
            return
        # The head keeps the manifest; every node keeps the stamp of what it verified (a worker's
        # only list of the files it received): module_utils/checkpoint_store.py reads both.
        remove, left, warnings = sparkctl_files(path, manifest_path)
        for warning in warnings:
            self.module.warn(warning)
        if remove:
            self.act("remove %d files sparkctl put in %s%s" % (len(remove), path, "" if left else ", and the directory"),
                     fn=lambda: self._remove_files(path, remove))
        if left:
            self.actions.append("keep %s: %d files sparkctl did not put there (%s)" % (path, len(left), ", ".join(left[:5])))
        elif not remove:
            self.act("remove %s (empty)" % path, fn=lambda: self._prune(path))

    def _remove_files(self, path, rel_files):
        # Every file is reached from the directory opened once, no link followed on the way: a
        # directory the service user swapped for a link since the listing fails that file only.
        fd = safe_walk.open_dir(path)
        try:
            for rel in rel_files:
                try:
                    safe_walk.unlink_rel(fd, rel)
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    self.module.warn("%s/%s: not removed (%s): it is not reached the way the listing found it" % (path, rel, exc))
        finally:
            os.close(fd)
        self._prune(path)

    @staticmethod
    def _prune(path):
        """Remove the directories under path, and path, that are left empty."""
        safe_walk.prune_tree(path)

    def parents(self, recorded, keep):
        def empty(directory):
            try:
                return os.path.isdir(directory) and not os.path.islink(directory) and not os.listdir(directory)
            except OSError:
                return False

        for directory in parents_to_remove(recorded, os.path.lexists):
            if self.check:
                if not any(k == directory or k.startswith(directory + "/") for k in keep if os.path.lexists(k)):
                    self.actions.append("remove %s once empty" % directory)
            elif empty(directory):
                self.act("remove %s (empty, made for sparkctl's paths)" % directory, fn=lambda d=directory: remove_empty_dir(d))

    def netplan(self):
        netplan, networkctl = self.module.get_bin_path("netplan"), self.module.get_bin_path("networkctl")
        if netplan:
            self.act("netplan generate (the cable's file is gone)", [netplan, "generate"])
        if networkctl:
            self.act("networkctl reload", [networkctl, "reload"], ignore_rc=True)

    def links(self, baseline_links, link_addresses):
        live = {}
        for interface in link_addresses:
            rc, out, _err = self.module.run_command(["ip", "-j", "addr", "show", "dev", interface])
            if rc == 0:
                for entry in json.loads(out or "[]"):
                    live[interface] = {"mtu": entry.get("mtu"),
                                       "addresses": ["%s/%s" % (a["local"], a["prefixlen"]) for a in entry.get("addr_info", [])
                                                     if "local" in a]}
        for action in link_restore(baseline_links, live, link_addresses):
            interface = action["interface"]
            for address in action["del_addresses"]:
                self.act("%s: delete %s" % (interface, address), fn=lambda i=interface, a=address: self._delete_address(i, a))
            if action["mtu"]:
                self.act("%s: mtu %s" % (interface, action["mtu"]), ["ip", "link", "set", "dev", interface, "mtu", str(action["mtu"])])
        for interface, before in sorted(baseline_links.items()):
            if interface not in link_addresses:
                continue
            mode = before.get("addr_gen_mode")
            now = read_addr_gen_mode(interface)
            if mode is not None and now is not None and mode != now and mode in ADDR_GEN_MODES:
                self.act("%s: IPv6 addrgenmode %s" % (interface, ADDR_GEN_MODES[mode]),
                         ["ip", "link", "set", "dev", interface, "addrgenmode", ADDR_GEN_MODES[mode]])
            lost_link_local = [a for a in before.get("addresses", []) if a.startswith("fe80:")
                               and a not in live.get(interface, {}).get("addresses", [])]
            if lost_link_local:
                self.act("%s: cycle the link for its link-local address %s" % (interface, ", ".join(lost_link_local)),
                         fn=lambda i=interface: self._cycle(i))

    def _delete_address(self, interface, address):
        # networkd may drop the address itself once the reload lets the interface go: gone is done.
        rc, _out, err = self.module.run_command(["ip", "addr", "del", address, "dev", interface])
        if rc != 0 and address in self._addresses(interface):
            raise OSError("ip addr del %s dev %s: %s" % (address, interface, err.strip()))

    def _addresses(self, interface):
        rc, out, _err = self.module.run_command(["ip", "-j", "addr", "show", "dev", interface])
        if rc != 0:
            return []
        return ["%s/%s" % (a["local"], a["prefixlen"]) for entry in json.loads(out or "[]") for a in entry.get("addr_info", [])
                if "local" in a]

    def _cycle(self, interface):
        for state in ("down", "up"):
            rc, _out, err = self.module.run_command(["ip", "link", "set", "dev", interface, state])
            if rc != 0:
                raise OSError("ip link set %s %s: %s" % (interface, state, err.strip()))

    def linger(self, recorded, users):
        for user in users:
            if recorded.get(user) is False and os.path.exists("/var/lib/systemd/linger/%s" % user):
                self.act("disable linger for %s" % user, ["loginctl", "disable-linger", user])

    def groups(self, recorded, users_added):
        for group, user in sorted(users_added.items()):
            if group not in recorded:
                continue
            group_members_now = group_members(group)
            if group_members_now is None:
                continue
            if recorded[group] is None:
                self.act("delete group %s (absent before sparkctl)" % group, ["groupdel", group])
            elif user in group_members_now and user not in recorded[group]:
                self.act("take %s out of group %s" % (user, group), ["gpasswd", "-d", user, group])

    def users(self, recorded, recorded_groups, names, keep, record_path):
        """Remove the accounts of names the record says sparkctl created; returns their names."""
        removed = []
        for name in users_to_remove(names, recorded, lambda n: account(n) is not None):
            entry = account(name)
            group = private_group(entry)
            # The record says whether a group of its name was there before sparkctl: only one that was not goes.
            takes_group = group is not None and recorded_groups.get(name) is False
            if group is not None and not takes_group and usergroups_enabled(LOGIN_DEFS):
                self.module.warn("not removing the account %s: userdel would delete its group %s, which the record does not "
                                 "say sparkctl created; remove the account yourself (userdel %s)" % (name, group, name))
                continue
            others = [(other.pw_name, other.pw_dir) for other in pwd.getpwall() if other.pw_name != name]
            refusal = home_refusal(entry.pw_dir, entry.pw_uid, others, keep, record_path, HOME_ROOTS)
            remove_home = refusal is None
            self._end_processes(name, entry.pw_uid)
            userdel = self.module.get_bin_path("userdel") or "userdel"
            what = ", its home %s" % entry.pw_dir if remove_home else ""
            what += ", its group %s" % group if takes_group else ""
            self.act("remove the account %s%s (created by sparkctl)" % (name, what),
                     [userdel] + (["--remove"] if remove_home else []) + [name])
            if not remove_home and entry.pw_dir and os.path.lexists(entry.pw_dir):
                self.actions.append("keep %s, the home of %s: %s" % (entry.pw_dir, name, refusal))
            if takes_group and not self.check and group_members(group) == []:
                # userdel leaves the private group when USERGROUPS_ENAB is off: it is sparkctl's all the same.
                groupdel = self.module.get_bin_path("groupdel") or "groupdel"
                rc, _out, err = self.module.run_command([groupdel, group])
                if rc != 0:
                    self.module.fail_json(msg="groupdel %s (the group of the account %s) failed: %s" % (group, name, err.strip()),
                                          actions=self.actions)
            removed.append(name)
        return removed

    def _end_processes(self, name, uid):
        """The account's processes gone: loginctl terminate-user, then a short wait; a failure names those left."""
        pids = user_pids(uid, PROC_ROOT)
        if not pids:
            return
        loginctl = self.module.get_bin_path("loginctl") or "loginctl"
        self.act("end the processes of %s (PIDs %s): loginctl terminate-user %s" % (name, " ".join(map(str, pids)), name),
                 [loginctl, "terminate-user", name], ignore_rc=True)
        if self.check:
            return
        deadline = time.monotonic() + TERMINATE_WAIT
        while pids and time.monotonic() < deadline:
            time.sleep(0.25)
            pids = user_pids(uid, PROC_ROOT)
        if pids:
            self.module.fail_json(msg="the account %s still has processes (PIDs %s) after loginctl terminate-user and %gs: it is "
                                  "not removed while in use (never userdel --force). Stop them (kill %s) and run the teardown "
                                  "again." % (name, " ".join(map(str, pids)), TERMINATE_WAIT, " ".join(map(str, pids))),
                                  actions=self.actions, pids=pids)

    def shared_dirs(self, entries):
        """Empty each directory of entries (those sparkctl created) of what they name; returns the files
        left because someone else put them there (absolute paths)."""
        kept = []
        packaged = package_files([entry["path"] for entry in entries]) if entries else set()
        for entry in entries:
            path = entry["path"].rstrip("/")
            try:
                named = named_entries(path, list(entry["sparkctl"]) + list(entry["daemon"]))
            except ValueError as exc:
                self.module.fail_json(msg="shared_dirs: %s" % exc, actions=self.actions)
            info = safe_walk.lstat_path(path)
            if info is None:
                continue
            if not stat.S_ISDIR(info.st_mode):
                self.act("remove %s" % path, fn=lambda q=path: remove_path(q))
                continue
            for target in named:
                if os.path.lexists(target):
                    self.act("remove %s" % target, fn=lambda q=target: remove_path(q))
            foreign = foreign_files(path, self._files_under(path), named, packaged)
            if foreign:
                kept += [path + "/" + rel for rel in foreign]
                more = " and %d more" % (len(foreign) - 5) if len(foreign) > 5 else ""
                self.actions.append("keep %s, which holds what sparkctl did not put there: %s%s"
                                    % (path, ", ".join(foreign[:5]), more))
                if not self.check:
                    self._prune_below(path)
            elif self.check:
                self.actions.append("remove %s once its packages' files are gone" % path)
            else:
                self._prune(path)
                if os.path.lexists(path):
                    self.actions.append("keep %s: it holds files of packages that stay" % path)
                else:
                    self.actions.append("remove %s (nothing else was in it)" % path)
        return kept

    @staticmethod
    def _files_under(path):
        """Everything under path that is not a directory (relative paths), no link followed."""
        fd = safe_walk.open_dir(path)
        try:
            return [entry.rel for entry in safe_walk.walk(fd) if not entry.is_dir()]
        finally:
            os.close(fd)

    @staticmethod
    def _prune_below(path):
        """Remove the directories under path left empty; path itself stays."""
        fd = safe_walk.open_dir(path)
        try:
            safe_walk.prune_empty_dirs(fd)
        finally:
            os.close(fd)

    def packages(self, requested, baseline_packages, recorded, record_path):
        """Purge the packages of requested that were absent at the baseline, are installed now and, when the
        record lists what sparkctl installed (recorded; None for an older record), that it lists; then what
        came with them. Returns the packages kept because sparkctl did not install them."""
        installed = self._installed()
        purge, kept = split_by_record(packages_to_purge(requested, baseline_packages, installed), recorded)
        if not purge:
            return kept
        if recorded is None:
            self.module.warn(older_record_warning(record_path, purge))
        # What came with them: what apt installed automatically since the record that they reach, except what
        # a package that stays still needs (a dependency of a package someone installed since is theirs).
        candidates = set(dependencies_to_purge(installed, self._auto_marked(), baseline_packages)) - set(purge)
        relations, provides = self._relations()
        deps = dependencies_of(purge, relations, provides, candidates, baseline_packages)
        # What a purge may take: sparkctl's packages and what came with them; any other package (someone
        # else's, or one the node had) it would take along keeps them all.
        allowed = set(purge) | set(deps)
        if not self._purge(purge, allowed, "purge %s" % " ".join(purge)) or not deps:
            return kept
        if not self.check:
            installed = self._installed()
            deps = [name for name in deps if name in installed]
        if deps:
            self._purge(deps, allowed, "purge %s (installed with sparkctl's packages)" % " ".join(deps))
        return kept

    def _relations(self):
        rc, out, err = self.module.run_command(["dpkg-query", "-W", "-f", DPKG_RELATIONS_FORMAT])
        if rc != 0:
            self.module.fail_json(msg="dpkg-query failed: %s" % err.strip(), actions=self.actions)
        return package_relations(out)

    def _auto_marked(self):
        rc, out, err = self.module.run_command(["apt-mark", "showauto"])
        if rc != 0:
            self.module.fail_json(msg="apt-mark showauto failed: %s" % err.strip(), actions=self.actions)
        return set(out.split())

    def _installed(self):
        rc, out, err = self.module.run_command(["dpkg-query", "-W", "-f", "${Package}\\t${db:Status-Abbrev}\\n"])
        if rc != 0:
            self.module.fail_json(msg="dpkg-query failed: %s" % err.strip(), actions=self.actions)
        return installed_packages(out)

    def _purge(self, names, allowed, description):
        """Purge names when apt's simulation of it removes nothing but allowed; returns whether it did (would)."""
        rc, out, err = self.module.run_command(["apt-get", "-s", "purge"] + names, environ_update=APT_ENV)
        if rc != 0:
            self.module.fail_json(msg="apt-get -s purge %s failed: %s" % (" ".join(names), err.strip()), actions=self.actions)
        would = simulated_purges(out)
        if not purge_is_contained(would, allowed):
            others = sorted(set(would) - set(allowed))
            self.module.warn("not purging %s: %s, which the node had before sparkctl or got since, would go with them"
                             % (" ".join(names), " ".join(others)))
            return False
        self.act(description, ["apt-get", "purge", "-y", "-q"] + names)
        return True


def rewrite(path, content, mode, owner):
    """path with content, keeping its mode and owner (the service user's SSH files stay its own)."""
    write_file_atomic(path, content, mode, owner)


def remove_path(path):
    """rm -r path, its directories reached as module_utils/safe_walk.py reaches them (a link another
    account placed on the way is never followed) and nothing below it followed either."""
    safe_walk.remove_tree(path)


def remove_empty_dir(path):
    parent, name = safe_walk.open_parent(path)
    try:
        os.rmdir(name, dir_fd=parent)
    finally:
        os.close(parent)


def older_record_warning(path, names):
    """What a teardown says when the record (an older sparkctl's) does not say which packages sparkctl installed
    and names (the packages of the list absent before sparkctl's first run) are purged all the same."""
    return ("%s was written by an older sparkctl, which did not note the packages it installed (no %s): %s, absent before "
            "sparkctl's first run, %s purged even if you installed it yourself since. To keep one, add to the record, "
            "before the teardown, \"%s\": [...] naming only the packages sparkctl installed (those left out are kept and "
            "named); `sparkctl teardown --check` lists what would go. A node first recorded by this sparkctl needs nothing "
            "of the sort." % (path, INSTALLED_KEY, ", ".join(names), "is" if len(names) == 1 else "are", INSTALLED_KEY))


def diff(module, actions):
    """With --diff, the actions as the lines of what goes (before) and nothing in their place (after)."""
    if not module._diff or not actions:
        return {}
    return {"diff": {"before": "".join(a + "\n" for a in actions), "after": "", "before_header": "sparkctl on this node",
                     "after_header": "after the teardown"}}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", default="/var/lib/sparkctl/baseline.json"),
            keep=dict(type="list", elements="path", default=[]),
            strip=dict(type="list", elements="dict", default=[], options=dict(
                path=dict(type="path", required=True),
                hosts=dict(type="list", elements="str", default=[]),
                markers=dict(type="list", elements="str", default=[]),
                block_marker=dict(type="str"),
            )),
            served_file=dict(type="path"),
            purge_served=dict(type="bool", default=False),
            purge_dirs=dict(type="list", elements="dict", default=[], options=dict(
                path=dict(type="path", required=True),
                manifest=dict(type="path"),
            )),
            shared_dirs=dict(type="list", elements="dict", default=[], options=dict(
                path=dict(type="path", required=True),
                sparkctl=dict(type="list", elements="str", default=[]),
                daemon=dict(type="list", elements="str", default=[]),
            )),
            link_addresses=dict(type="dict", default={}),
            linger_users=dict(type="list", elements="str", default=[]),
            packages=dict(type="list", elements="str", default=[]),
            group_members=dict(type="dict", default={}),
            users=dict(type="list", elements="str", default=[]),
            nft_tables=dict(type="list", elements="str", default=[]),
            docker_image_label=dict(type="str"),
            remove_record=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    p = module.params
    t = Teardown(module)
    t.docker_images(p["docker_image_label"])
    t.nft_tables(p["nft_tables"])
    if not os.path.exists(p["path"]):
        module.exit_json(changed=bool(t.actions), actions=t.actions, kept=[], kept_files=[], kept_packages=[], recorded=False,
                         removed_users=[],
                         **diff(module, t.actions))
    try:
        with open(p["path"]) as handle:
            baseline = json.load(handle)
    except (OSError, ValueError) as exc:
        module.fail_json(msg="%s is not a readable baseline (%s): nothing was removed from the record's list." % (p["path"], exc))
    recorded_paths = baseline.get("paths", {})
    served = read_served(p["served_file"]) if p["served_file"] else []
    p["keep"] = list(p["keep"]) + [path for path in served if path not in p["keep"]]
    if p["purge_served"]:
        listed = [e["path"].rstrip("/") for e in p["purge_dirs"]]
        p["purge_dirs"] = list(p["purge_dirs"]) + [{"path": path} for path in served if path.rstrip("/") not in listed]
    touched = t.files(baseline.get("files", {}), p["strip"])
    # The record and its copies go last: a teardown that fails half-way can run again.
    record_dirs = [d for d in recorded_paths if recorded_paths[d] is False
                   and (p["path"] == d or p["path"].startswith(d.rstrip("/") + "/"))]
    skip = set(record_dirs) if p["remove_record"] else set(recorded_paths)
    # A shared directory sparkctl created is emptied of what is sparkctl's after the packages' purge, not removed here.
    shared = [entry for entry in p["shared_dirs"] if recorded_paths.get(entry["path"].rstrip("/") or "/") is False]
    skip |= {entry["path"].rstrip("/") for entry in shared}
    kept, removed = t.paths(recorded_paths, p["keep"], skip)
    # A served checkpoint the record does not know (created before sparkctl added the paths a run
    # names first) is kept all the same, and said so.
    kept += [path for path in served if path not in kept and path not in recorded_paths and os.path.isdir(path)]
    for entry in p["purge_dirs"]:
        path = entry["path"].rstrip("/")
        if recorded_paths.get(path) is False or (path in served and os.path.isfile(os.path.join(path, CREATED_MARK))):
            t.purge_dir(entry["path"].rstrip("/"), entry.get("manifest") or os.path.join(entry["path"], ".sparkctl-manifest.json"))
    purged = [e["path"].rstrip("/") for e in p["purge_dirs"]]
    t.parents(baseline.get("parents", {}), [k.rstrip("/") for k in p["keep"] if k.rstrip("/") not in purged])
    if any(path.startswith("/etc/netplan/") for path in touched + removed):
        t.netplan()
    t.links(baseline.get("links", {}), p["link_addresses"])
    t.linger(baseline.get("linger", {}), p["linger_users"])
    baseline_packages = baseline.get("packages")
    kept_packages = []
    if isinstance(baseline_packages, list):
        kept_packages = t.packages(p["packages"], baseline_packages, recorded_installs(baseline), p["path"])
    else:
        # Without what the node had before, every package apt marked automatic would read as installed since.
        module.warn("%s lists no packages the node had before sparkctl: no package is purged; purge sparkctl's "
                    "(%s) by hand if you want them gone" % (p["path"], ", ".join(p["packages"]) or "none named"))
    kept_files = t.shared_dirs(shared)
    # After lingering is off (the user manager goes) and before the groups: userdel takes the account out of them.
    removed_users = t.users(baseline.get("users") or {}, baseline.get("user_groups") or {}, p["users"],
                            [k.rstrip("/") or "/" for k in p["keep"]], p["path"])
    t.groups(baseline.get("groups", {}), p["group_members"])
    if p["remove_record"]:
        outermost = sorted(record_dirs, key=len)[:1]
        for path in outermost or [p["path"]]:
            if os.path.lexists(path):
                t.act("remove %s (the baseline record)" % path, fn=lambda q=path: remove_path(q))
    module.exit_json(changed=bool(t.actions), actions=t.actions, kept=kept, kept_files=kept_files, kept_packages=kept_packages,
                     recorded=True,
                     removed_users=removed_users, **diff(module, t.actions))


if __name__ == "__main__":
    main()

# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What a node was before sparkctl's first change (its baseline), and what a teardown does
with it: the pure decisions the node_baseline and node_teardown modules share.

The baseline is one JSON document, written once, before the first stage that changes a node
(roles/teardown's tasks/baseline.yml, which roles/spark/tasks/main.yml includes at the start of
such a stage): the installed packages, whether each path sparkctl may create existed, a copy of
each file sparkctl may replace or edit, the cable interfaces' MTU and addresses, whether the
service user lingered, and whether the accounts sparkctl may create existed (and a group named
like each). A teardown removes only what the baseline says was not there, and puts back what it
says was.

The packages sparkctl installs are added to it when it installs them (INSTALLED_KEY, from
roles/teardown's tasks/installed.yml, right after each role's apt install): the teardown purges
only those, so a package someone installed after sparkctl's first run stays. A record without
that key (an older sparkctl's) cannot tell them apart.
"""

from __future__ import annotations

import grp
import os
import pwd
import re

BASELINE_VERSION = 1
# The record's list of the packages sparkctl installed (node_baseline's installed_packages); a first
# record always has it, a record without it is an older sparkctl's.
INSTALLED_KEY = "installed_by_sparkctl"
# What dpkg-query -W prints per package for package_relations: its status and the fields that make
# apt install another package with it.
DPKG_RELATIONS_FORMAT = "${Package}\\t${db:Status-Abbrev}\\t${Pre-Depends}\\t${Depends}\\t${Recommends}\\t${Provides}\\n"


def installed_packages(dpkg_output):
    """The names dpkg-query -W -f '${Package}\\t${db:Status-Abbrev}\\n' lists with files on the
    node: any status but n (not installed) and c (config files only)."""
    names = set()
    for line in dpkg_output.splitlines():
        name, _tab, status = line.partition("\t")
        if name and len(status) >= 2 and status[1] not in "nc":
            names.add(name.split(":")[0])
    return names


_SET_UP = re.compile(r"^Setting up ([^\s:]+)[:\s]")


def packages_set_up(apt_output_lines, candidates):
    """The candidates dpkg set up in one apt-get transaction ('Setting up NAME[:ARCH] (VERSION) ...'
    lines of its output), in the candidates' order: what that install put on the node."""
    set_up = {match.group(1) for match in (_SET_UP.match(line) for line in apt_output_lines or []) if match}
    return [name for name in dict.fromkeys(candidates or []) if name in set_up]


def simulated_purges(simulation_output):
    """The packages `apt-get -s purge ...` would remove ('Purg NAME [VERSION]' lines)."""
    names = []
    for line in simulation_output.splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0] in ("Purg", "Remv"):
            names.append(fields[1].split(":")[0])
    return names


def packages_to_purge(requested, baseline_packages, installed_now):
    """The packages sparkctl asks for that were absent at the baseline and are installed
    now, in the order given: only those are sparkctl's to remove."""
    before = set(baseline_packages)
    return [name for name in dict.fromkeys(requested) if name not in before and name in installed_now]


def dependencies_to_purge(installed_now, auto_marked, baseline_packages):
    """The packages apt installed automatically (dependencies, recommendations) that were absent
    at the baseline: what came with sparkctl's packages. apt's own autoremove would keep one a
    package of the node recommends, though the node did without it before sparkctl."""
    before = set(baseline_packages)
    return sorted(name for name in installed_now if name in auto_marked and name not in before)


def recorded_installs(baseline):
    """The packages the record says sparkctl installed (INSTALLED_KEY), or None for a record
    without the list (an older sparkctl's: which packages it installed is not known)."""
    names = baseline.get(INSTALLED_KEY)
    return list(names) if isinstance(names, list) else None


def split_by_record(candidates, recorded):
    """(purge, kept) of candidates (packages_to_purge's): with recorded (the packages the record
    says sparkctl installed), those it lists are purged and the others kept (someone installed them
    after sparkctl's first run); without it (None, an older record) all are purged."""
    if recorded is None:
        return list(candidates), []
    listed = set(recorded)
    return [name for name in candidates if name in listed], [name for name in candidates if name not in listed]


def _relation_groups(field):
    """A Depends-like field as its groups of alternatives, bare names: 'a (>= 1) | b:any, c' ->
    [['a', 'b'], ['c']]."""
    groups = []
    for group in field.split(","):
        names = []
        for alternative in group.split("|"):
            name = alternative.strip().split(" ")[0].split("(")[0].split(":")[0]
            if name:
                names.append(name)
        if names:
            groups.append(names)
    return groups


def package_relations(dpkg_output):
    """What `dpkg-query -W -f DPKG_RELATIONS_FORMAT` says of the installed packages: ({name: {'hard':
    [alternatives, ...] (Pre-Depends, Depends), 'soft': [...] (Recommends)}}, {virtual name: {the
    installed packages that provide it}}). Packages not installed (status n or c) are left out."""
    relations, provides = {}, {}
    for line in dpkg_output.splitlines():
        fields = line.split("\t")
        name, status = fields[0].split(":")[0], fields[1] if len(fields) > 1 else ""
        if not name or len(status) < 2 or status[1] in "nc":
            continue
        fields += [""] * (6 - len(fields))
        entry = relations.setdefault(name, {"hard": [], "soft": []})
        entry["hard"] += _relation_groups(fields[2]) + _relation_groups(fields[3])
        entry["soft"] += _relation_groups(fields[4])
        for group in _relation_groups(fields[5]):
            for virtual in group:
                provides.setdefault(virtual, set()).add(name)
    return relations, provides


def dependencies_of(roots, relations, provides, candidates, baseline_packages):
    """The packages that came with roots (the packages a teardown purges), to purge after them: those
    of candidates (dependencies_to_purge's: installed automatically, absent at the baseline) that
    roots reach through Pre-Depends, Depends and Recommends (alternatives and virtual packages
    resolved to what is installed), across candidates only. Left out, with what they need in turn:
    each that a package staying on the node still needs, through Pre-Depends or Depends, or through
    Recommends too when that package was absent at the baseline (someone installed it since: what
    came with it stays). Sorted."""
    installed, roots, candidates = set(relations), set(roots), set(candidates)
    before = set(baseline_packages)

    def resolve(group):
        found = set()
        for name in group:
            if name in installed:
                found.add(name)
            found |= provides.get(name, set()) & installed
        return found

    reach, todo = set(), [name for name in roots if name in relations]
    while todo:
        entry = relations[todo.pop()]
        for group in entry["hard"] + entry["soft"]:
            for name in resolve(group):
                if name in candidates and name not in roots and name not in reach:
                    reach.add(name)
                    todo.append(name)
    going = roots | reach
    changed = True
    while changed:
        changed = False
        for name in sorted(installed - going):
            entry = relations[name]
            for group in entry["hard"] + ([] if name in before else entry["soft"]):
                members = resolve(group)
                needed = members & reach if members and members <= going else set()
                if needed:
                    reach -= needed
                    going -= needed
                    changed = True
    return sorted(reach)


def purge_is_contained(would_remove, allowed):
    """Whether a purge removes nothing but allowed: a package installed since the baseline that
    depends on one of them (someone else's) would go with it, so the purge is not done then."""
    return set(would_remove) <= set(allowed)


def strip_text(current, original, hosts=(), markers=(), block_marker=None):
    """current with what sparkctl added taken out, everything else kept in order:
    the lines between '# BEGIN <block_marker>' and '# END <block_marker>' (a blockinfile block),
    and each line absent from original that contains one of markers or whose first field
    (comma-separated host names) names one of hosts. original is the file at the baseline
    ('' when it did not exist)."""
    kept_before = set(original.splitlines())
    out = []
    inside = False
    for line in current.splitlines(keepends=True):
        bare = line.rstrip("\n")
        if block_marker and bare == "# BEGIN " + block_marker:
            inside = True
            continue
        if block_marker and bare == "# END " + block_marker:
            inside = False
            continue
        if inside:
            continue
        if bare not in kept_before:
            if any(marker and marker in bare for marker in markers):
                continue
            fields = bare.split()
            if fields and hosts and set(fields[0].split(",")) & set(hosts):
                continue
        out.append(line)
    return "".join(out)


def paths_to_remove(candidates, baseline_paths, keep=()):
    """The paths among candidates to remove: those the baseline recorded as absent (sparkctl
    created them), minus any that is, or holds, a path in keep; a path inside another one
    removed is left out (the outer removal takes it). Paths the baseline does not know are
    never removed. Returns (remove, kept): kept lists the created paths left for keep."""
    created = [p.rstrip("/") or "/" for p in candidates if baseline_paths.get(p.rstrip("/") or "/") is False]
    keep = [k.rstrip("/") for k in keep if k]

    def holds(outer, inner):
        return inner == outer or inner.startswith(outer + "/")

    remove, kept = [], []
    for path in sorted(set(created), key=lambda p: (p.count("/"), p)):
        if any(holds(path, k) for k in keep):
            kept.append(path)
        elif not any(holds(r, path) for r in remove):
            remove.append(path)
    return remove, kept


def parents_to_remove(parents, exists):
    """The parent directories the record lists as absent then (a mkdir -p made them) that exist,
    deepest first: each goes only once it is empty, after the removals deeper down; what someone
    else put in one keeps it."""
    created = [p for p, existed in parents.items() if existed is False and exists(p)]
    return sorted(created, key=lambda p: (-p.count("/"), p))


def listed_files_to_remove(rel_files, manifest_names, leftover=lambda rel, names: False):
    """Of the files under a checkpoint directory (paths relative to it), the ones sparkctl put
    there: those its manifest lists, their unfinished copies (leftover(rel, names)), its own
    bookkeeping (.sparkctl-* at the top) and the hub client's download cache (.cache/huggingface/).
    Anything else is someone else's and stays."""
    names = set(manifest_names)
    return sorted(rel for rel in rel_files
                  if rel in names or leftover(rel, names) or ("/" not in rel and rel.startswith(".sparkctl-"))
                  or rel.startswith(".cache/huggingface/"))


def link_restore(baseline_links, live_links, inventory_addresses):
    """What to undo on each cable interface: the addresses the inventory gives it that it
    did not have at the baseline (other addresses stay), and the MTU back to the baseline's.
    live_links and baseline_links map interface -> {'mtu': int, 'addresses': ['a.b.c.d/n']};
    inventory_addresses maps interface -> the spark_link address. Returns a list of
    {'interface', 'del_addresses', 'mtu' (None when unchanged)}."""
    actions = []
    for interface, address in inventory_addresses.items():
        before = baseline_links.get(interface)
        live = live_links.get(interface)
        if before is None or live is None:
            continue
        delete = [address] if address in live.get("addresses", []) and address not in before.get("addresses", []) else []
        mtu = before.get("mtu") if before.get("mtu") and before.get("mtu") != live.get("mtu") else None
        if delete or mtu:
            actions.append({"interface": interface, "del_addresses": delete, "mtu": mtu})
    return actions


def backup_path(backup_dir, path):
    """Where the baseline keeps its copy of path: the same path under backup_dir."""
    return os.path.join(backup_dir, path.lstrip("/"))


def group_members(name):
    """The members of group name, sorted, or None when there is no such group: what the record
    keeps (node_baseline) and what teardown compares with it (node_teardown)."""
    try:
        return sorted(grp.getgrnam(name).gr_mem)
    except KeyError:
        return None


def read_addr_gen_mode(interface, proc_root="/proc"):
    """The interface's IPv6 address generation mode (net.ipv6.conf.<if>.addr_gen_mode), None when
    unreadable: recorded and put back by teardown."""
    try:
        with open("%s/sys/net/ipv6/conf/%s/addr_gen_mode" % (proc_root, interface)) as handle:
            return int(handle.read().strip())
    except (OSError, ValueError):
        return None


def account(name):
    """The passwd entry of the account name, or None when there is none."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        return None


def users_to_remove(requested, baseline_users, exists):
    """The accounts among requested the record says did not exist (sparkctl created them) and
    that exist now, in the order given. One the record says existed, or does not know, stays."""
    return [name for name in dict.fromkeys(requested) if baseline_users.get(name) is False and exists(name)]


def private_group(entry):
    """The name of the account's own group (named like it, its primary group, without members,
    the primary group of no other account): the one userdel takes along (USERGROUPS_ENAB).
    None when it has none."""
    try:
        group = grp.getgrnam(entry.pw_name)
    except KeyError:
        return None
    if group.gr_gid != entry.pw_gid or group.gr_mem:
        return None
    if any(other.pw_gid == group.gr_gid and other.pw_name != entry.pw_name for other in pwd.getpwall()):
        return None
    return group.gr_name


def usergroups_enabled(login_defs="/etc/login.defs"):
    """Whether login.defs sets USERGROUPS_ENAB (userdel then deletes the user's private group);
    shadow's default, when it does not, is no."""
    try:
        with open(login_defs) as handle:
            for line in handle:
                fields = line.split()
                if len(fields) >= 2 and fields[0] == "USERGROUPS_ENAB":
                    return fields[1].lower() == "yes"
    except OSError:
        pass
    return False


def user_pids(uid, proc_root="/proc"):
    """The processes running as uid (real, effective, saved or file-system uid, as userdel
    checks), by PID, sorted."""
    pids = []
    try:
        names = os.listdir(proc_root)
    except OSError:
        return pids
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(os.path.join(proc_root, name, "status")) as handle:
                for line in handle:
                    if line.startswith("Uid:"):
                        if str(uid) in line.split()[1:5]:
                            pids.append(int(name))
                        break
        except OSError:
            continue
    return sorted(pids)


# Where an account's home may be for it to go with the account.
HOME_ROOTS = ("/home", "/var/lib")


def home_refusal(home, uid, other_homes=(), keep=(), record_path=None, roots=HOME_ROOTS):
    """Why the home directory of an account sparkctl created must not go with it (userdel
    --remove), or None when it may: it must be an absolute path strictly under one of roots
    (never /), a directory and not a link, owned by the account, the home of no other account
    (nor hold one), and hold neither a path the teardown keeps nor the record itself.
    other_homes are the other accounts' (name, home)."""
    if not home or not os.path.isabs(home):
        return "%r is not an absolute path" % (home,)
    norm = os.path.normpath(home)
    if norm == "/":
        return "it is /"
    if not any(norm.startswith(root.rstrip("/") + "/") for root in roots):
        return "it is not under %s" % " or ".join(roots)
    if os.path.islink(norm):
        return "it is a symbolic link"
    if not os.path.isdir(norm):
        return "it is not a directory"
    owner = os.stat(norm).st_uid
    if owner != uid:
        return "uid %d owns it, not the account (uid %d)" % (owner, uid)

    def holds(outer, inner):
        inner = os.path.normpath(inner)
        return inner == outer or inner.startswith(outer + "/")

    for other, other_home in other_homes:
        if other_home and os.path.isabs(other_home) and holds(norm, other_home):
            return "it is, or holds, the home of %s" % other
    for path in keep:
        if path and os.path.lexists(path) and holds(norm, path):
            return "it holds %s, which the teardown keeps" % path
    if record_path and holds(norm, record_path):
        return "it holds the baseline record %s" % record_path
    return None

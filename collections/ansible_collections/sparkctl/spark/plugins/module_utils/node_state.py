# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What a role manages on a node, read in one go and compared with what the role wants.

Every module run costs a round trip and about a third of a second of Python start-up on
the node (docs/performance.md), so a role that checks ten files and units with ten tasks
spends seconds on a run that finds nothing to do. A role instead names everything it
manages here, reads it with one module run, and runs each writing task only for what
differs. The comparison is deliberately that of the modules that write: content by SHA-1
(what copy and template compare), owner and group by name or id, the mode's permission bits,
a link's target, a unit's enablement and activity; anything not named is not judged.

Pure except for read_path(), read_units(), read_users(), read_texts(), missing_packages()
and processes(). The reads run as root in places the service user writes (its home, the
checkpoint directory): files and directories are opened as module_utils/safe_walk.py opens them,
never through a symlink that account could have placed there."""

from __future__ import annotations

import glob
import grp
import hashlib
import os
import pwd
import stat

from ansible_collections.sparkctl.spark.plugins.module_utils import safe_walk, unit_staleness
from ansible_collections.sparkctl.spark.plugins.module_utils.ray_cluster import find_leftovers, local_raylets, read_processes
from ansible_collections.sparkctl.spark.plugins.module_utils.unit_staleness import parse_show

PATH_STATES = ("file", "directory", "link", "absent")
# The argument spec of a module's `paths` option (doc fragment sparkctl.spark.node_paths):
# node_state takes it, and so do the modules that already read a role's node state, so
# that one module run serves the whole role.
PATH_OPTIONS = dict(
    path=dict(type="path", required=True),
    state=dict(type="str", choices=list(PATH_STATES), default="file"),
    checksum=dict(type="str"),
    get_checksum=dict(type="bool", default=False),
    get_entries=dict(type="bool", default=False),
    checksum_prefix=dict(type="str", no_log=False),
    owner=dict(type="str"),
    group=dict(type="str"),
    mode=dict(type="raw"),
    src=dict(type="str"),
)
PATHS_ARGUMENT = dict(type="list", elements="dict", default=[], options=PATH_OPTIONS)
# The argument spec of a module's `units` option, shared the same way.
UNITS_ARGUMENT = dict(type="list", elements="dict", default=[], options=dict(
    name=dict(type="str", required=True),
    enabled=dict(type="bool"),
    started=dict(type="bool"),
    masked=dict(type="bool"),
))
UNIT_PROPERTIES = ("Id", "LoadState", "ActiveState", "SubState", "UnitFileState", "MainPID", "NeedDaemonReload")
# A unit on its way up counts as started, as systemd_service's state=started judges it.
STARTED_STATES = ("active", "activating", "reloading")
# A unit whose main process died and that systemd is about to restart (Restart=): it waits
# RestartSec in auto-restart (systemd 254 and later pass through failed-before-auto-restart or
# dead-before-auto-restart first, and queue the start in auto-restart-queued). Its start limit
# decides whether that restart happens at all.
RESTART_PENDING_SUBSTATES = frozenset(("auto-restart", "auto-restart-queued", "failed-before-auto-restart",
                                       "dead-before-auto-restart"))
# The enablement states in which `systemctl enable` has nothing left to do.
ENABLED_STATES = ("enabled", "enabled-runtime", "static", "alias", "indirect", "generated")
MASKED_STATES = ("masked", "masked-runtime")


def _owner_name(uid):
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _group_name(gid):
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


# What read_texts() reads whole: configuration files, far below this.
TEXT_LIMIT = 16 << 20


def sha1_of(path, chunk=1 << 20, prefix=""):
    """SHA-1 of prefix and the regular file at path (safe_walk.open_file: a symlink only out of a
    trusted directory; anything but a regular file or /dev/null is an OSError)."""
    digest = hashlib.sha1(prefix.encode("utf-8"))
    fd = safe_walk.open_file(path)
    try:
        safe_walk.check_regular(fd, path)
        with os.fdopen(os.dup(fd), "rb") as handle:
            for block in iter(lambda: handle.read(chunk), b""):
                digest.update(block)
    finally:
        os.close(fd)
    return digest.hexdigest()


def read_path(path, want_checksum=False, want_entries=False, checksum_prefix=""):
    """What is at path, without following a final symlink: exists, type, owner, group, uid,
    gid, mode ("0644"), target (a link's), checksum (a file's SHA-1, when asked for; of
    checksum_prefix followed by the content, when a prefix is given) and entries (a
    directory's names, hidden ones included, sorted, when asked for). An unreadable file or
    directory reports checksum or entries None and the error."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return {"exists": False, "type": "absent"}
    kind = ("link" if stat.S_ISLNK(info.st_mode) else "directory" if stat.S_ISDIR(info.st_mode)
            else "file" if stat.S_ISREG(info.st_mode) else "other")
    found = {"exists": True, "type": kind, "uid": info.st_uid, "gid": info.st_gid,
             "owner": _owner_name(info.st_uid), "group": _group_name(info.st_gid),
             "mode": "%04o" % stat.S_IMODE(info.st_mode)}
    if kind == "link":
        found["target"] = os.readlink(path)
    if kind == "file" and want_checksum:
        try:
            found["checksum"] = sha1_of(path, prefix=checksum_prefix or "")
        except OSError as err:
            found["checksum"], found["error"] = None, str(err)
    if kind == "directory" and want_entries:
        try:
            fd = safe_walk.open_dir(path)
            try:
                found["entries"] = sorted(os.listdir(fd))
            finally:
                os.close(fd)
        except OSError as err:
            found["entries"], found["error"] = None, str(err)
    return found


def _same_account(wanted, name, number):
    wanted = str(wanted)
    return wanted == name or (wanted.isdigit() and int(wanted) == number)


def _mode_bits(mode):
    """A mode as the file module takes it ("0644", "644", 420) -> its permission bits, or
    None for a symbolic mode (u+rw), which is not judged here."""
    if isinstance(mode, int):
        return mode & 0o7777
    text = str(mode).strip()
    try:
        return int(text, 8) & 0o7777
    except ValueError:
        return None


def path_differences(wanted, found):
    """How found (read_path) differs from wanted ({state, checksum, owner, group, mode, src}),
    as sentences; [] when the writing task would have nothing to do."""
    state = wanted.get("state") or "file"
    if state == "absent":
        return [] if not found["exists"] else [f"present as a {found['type']}, should be absent"]
    if not found["exists"]:
        return ["missing"]
    if found["type"] != state:
        return [f"is a {found['type']}, should be a {state}"]
    problems = []
    if state == "link" and wanted.get("src") is not None and found.get("target") != wanted["src"]:
        problems.append(f"points to {found.get('target')}, should point to {wanted['src']}")
    if state == "file" and wanted.get("checksum") and found.get("checksum") != wanted["checksum"]:
        problems.append("content differs" if found.get("checksum") else f"content unreadable: {found.get('error')}")
    if state != "link":
        if wanted.get("owner") is not None and not _same_account(wanted["owner"], found["owner"], found["uid"]):
            problems.append(f"owner {found['owner']}, should be {wanted['owner']}")
        if wanted.get("group") is not None and not _same_account(wanted["group"], found["group"], found["gid"]):
            problems.append(f"group {found['group']}, should be {wanted['group']}")
        bits = _mode_bits(wanted["mode"]) if wanted.get("mode") is not None else None
        if bits is not None and int(found["mode"], 8) != bits:
            problems.append(f"mode {found['mode']}, should be {bits:04o}")
    return problems


def parse_units(text):
    """`systemctl show -p ... a b c` output (one block per unit, blank-line separated)
    -> {Id: {property: value}}."""
    units = {}
    for block in str(text or "").split("\n\n"):
        props = parse_show(block)
        if props.get("Id"):
            units[props["Id"]] = props
    return units


def unit_summary(props):
    """The fields a role judges, from one unit's `systemctl show` properties; a unit systemd
    does not know reads as not-found and inactive."""
    props = props or {}
    try:
        main_pid = int(props.get("MainPID") or 0)
    except ValueError:
        main_pid = 0
    return {"load_state": props.get("LoadState") or "not-found",
            "active_state": props.get("ActiveState") or "inactive",
            "sub_state": props.get("SubState") or "dead",
            "unit_file_state": props.get("UnitFileState") or "",
            "main_pid": main_pid,
            "need_daemon_reload": props.get("NeedDaemonReload") == "yes",
            "restart_pending": props.get("SubState") in RESTART_PENDING_SUBSTATES}


def unit_differences(wanted, found):
    """How a unit (unit_summary) differs from wanted ({enabled, started, masked}), as sentences."""
    problems = []
    if wanted.get("masked") is not None:
        masked = found["unit_file_state"] in MASKED_STATES
        if bool(wanted["masked"]) != masked:
            problems.append(f"{found['unit_file_state'] or found['load_state']}, should be "
                            + ("masked" if wanted["masked"] else "unmasked"))
    if wanted.get("enabled") is not None:
        enabled = found["unit_file_state"] in ENABLED_STATES
        if bool(wanted["enabled"]) != enabled:
            problems.append(f"{found['unit_file_state'] or found['load_state']}, should be "
                            + ("enabled" if wanted["enabled"] else "disabled"))
    if wanted.get("started") is not None:
        started = found["active_state"] in STARTED_STATES
        if bool(wanted["started"]) != started:
            problems.append(f"{found['active_state']}, should be " + ("started" if wanted["started"] else "stopped"))
    return problems


def read_units(names, run):
    """{name: unit_summary} for the named units with one `systemctl show`; run(argv) ->
    (rc, stdout, stderr). Units systemd does not know come back as not-found."""
    if not names:
        return {}
    rc, out, err = run(["systemctl", "show", "--property=" + ",".join(UNIT_PROPERTIES), "--"] + list(names))
    if rc != 0:
        raise RuntimeError(f"systemctl show failed (rc {rc}): {err.strip() or out.strip()}")
    shown = parse_units(out)
    return {name: unit_summary(shown.get(name)) for name in names}


def read_users(names):
    """{name: {exists, uid, gid, home, shell}} from the passwd database."""
    users = {}
    for name in names:
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            users[name] = {"exists": False}
            continue
        users[name] = {"exists": True, "uid": entry.pw_uid, "gid": entry.pw_gid, "home": entry.pw_dir,
                       "shell": entry.pw_shell}
    return users


def read_texts(patterns):
    """[{path, content, checksum}] of the files the glob patterns match, each once, sorted by
    path; a leading ~ or ~user is that account's home. A link is read through (a drop-in
    linked to /dev/null reads empty) where the directory holding it is root's (safe_walk): one in
    a directory another account can write (the service user's ~/.ssh) is not, and reads as an
    error, as does anything but a regular file. content is the text with its line ends made \\n and
    undecodable bytes replaced; checksum is the SHA-1 of the bytes as they are, so
    content | hash('sha1') == checksum says the text is the file exactly. An unreadable
    file carries its error instead of content and checksum."""
    texts = []
    matches = {match for pattern in patterns for match in glob.glob(os.path.expanduser(pattern))}
    for path in sorted(matches):
        if os.path.isdir(path):
            continue
        try:
            raw = safe_walk.read_file(path, TEXT_LIMIT)
        except OSError as err:
            texts.append({"path": path, "content": None, "checksum": None, "error": str(err)})
            continue
        content = raw.decode("utf-8", errors="replace").replace("\r\n", "\n").replace("\r", "\n")
        texts.append({"path": path, "content": content, "checksum": hashlib.sha1(raw).hexdigest()})
    return texts


def parse_dpkg_query(text):
    """`dpkg-query -W -f='${Package}\\t${db:Status-Status}\\n'` output -> the packages installed."""
    installed = set()
    for line in str(text or "").splitlines():
        name, _sep, status = line.partition("\t")
        if status.strip() == "installed":
            installed.add(name.split(":", 1)[0].strip())
    return installed


def missing_packages(names, run, dpkg_query):
    """The Debian packages of names that dpkg does not list as installed, in the order given;
    run(argv) -> (rc, stdout, stderr). dpkg-query exits 1 when it knows some name not at
    all, which also means missing; without dpkg-query (dpkg_query None) every one is."""
    if not names:
        return []
    installed = set()
    if dpkg_query:
        _rc, out, _err = run([dpkg_query, "-W", "-f=${Package}\t${db:Status-Status}\n", "--"] + list(names))
        installed = parse_dpkg_query(out)
    return [name for name in names if name not in installed]


def manager_unit(uid):
    return f"user@{uid}.service"


def assess_paths(paths):
    """The paths of assess(): {paths: {path: read_path}, differences: {path: [sentences]},
    drifted: [paths that differ, in the order given]}."""
    found_paths, differences = {}, {}
    for wanted in paths:
        # A prefix asks for the checksum too: the caller compares it with another node's file.
        found = read_path(wanted["path"],
                          want_checksum=bool(wanted.get("checksum") or wanted.get("get_checksum")
                                             or wanted.get("checksum_prefix")),
                          want_entries=bool(wanted.get("get_entries")), checksum_prefix=wanted.get("checksum_prefix"))
        found_paths[wanted["path"]] = found
        problems = path_differences(wanted, found)
        if problems:
            differences[wanted["path"]] = problems
    return {"paths": found_paths, "differences": differences,
            "drifted": [w["path"] for w in paths if w["path"] in differences]}


def assess(paths, units, users, run, texts=()):
    """The node's state of what a role manages and where it differs from what it wants.

    paths: [{path, state, checksum, get_checksum, checksum_prefix, owner, group, mode, src}], units: [{name, enabled, started}],
    users: [name] (each existing one with its user manager's unit), texts: [glob]. Returns
    {paths, units, users, texts, differences: {key: [sentences]}, drifted: [keys]} where a key
    is a path or a unit name, in the order given. One systemctl call reads every unit."""
    read = assess_paths(paths)
    found_paths, differences = read["paths"], read["differences"]
    found_users = read_users(users)
    managers = [manager_unit(user["uid"]) for user in found_users.values() if user["exists"]]
    names = [unit["name"] for unit in units]
    found_units = read_units(names + [name for name in managers if name not in names], run)
    for user in found_users.values():
        if user["exists"]:
            user["manager"] = dict(found_units[manager_unit(user["uid"])], unit=manager_unit(user["uid"]))
    for wanted in units:
        problems = unit_differences(wanted, found_units[wanted["name"]])
        if problems:
            differences[wanted["name"]] = problems
    order = [w["path"] for w in paths] + names
    return {"paths": found_paths, "units": {name: found_units[name] for name in names}, "users": found_users,
            "texts": read_texts(texts), "differences": differences,
            "drifted": [key for key in order if key in differences]}


def processes(names=(), argv_prefixes=(), raylets=False, proc_root="/proc", own_pids=()):
    """One read of the process table: {processes: the engine's processes (find_leftovers:
    exact comm, title or argv prefix; the caller's own ancestors never count), raylets:
    [{pid, node_id}] when asked for}."""
    table = read_processes(proc_root)
    found = {}
    if names or argv_prefixes:
        prefixes = [[str(word) for word in prefix] for prefix in argv_prefixes]
        found["processes"] = [proc for proc in find_leftovers(table, names, prefixes)
                              if proc["pid"] not in set(own_pids)]
    if raylets:
        found["raylets"] = local_raylets(table)
    return found


def staleness(inputs, run, now=None):
    """unit_staleness for the units named as keys of inputs (each with the files it reads
    that systemd does not know of): {staleness: per unit, stale: [units], daemon_reload}."""
    judged = unit_staleness.assess(list(inputs), inputs, run=run, now=now) if inputs else {}
    return {"staleness": judged, "stale": [name for name, unit in judged.items() if unit["stale"]],
            "daemon_reload": any(unit["daemon_reload"] for unit in judged.values())}

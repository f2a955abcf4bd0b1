# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The engines' kernel and JIT caches (docs/jit-cache.md): one directory per runtime identity.

Layout on every node::

    /var/cache/sparkctl/jit/                 root, 0755
        current -> venv-<lock sha256>        the identity this node serves (a relative link)
        venv-<lock sha256>/                  the service user's, with .sparkctl-jit.json (who made it)
            flashinfer/ triton/ ...          one directory per cache variable (CACHE_VARIABLES)

engine.env points every cache variable at ``current/<sub>``, so the rendered files do not change
when the runtime does: the link moves, the old identity's directory goes (only one carrying the
marker this module writes), and the next boot starts cold in an empty directory.

Pure functions over a directory tree; the Ansible module jit_cache and the mirror call them.
The module runs as root in a tree the service user writes: every walk, read, write, chown and
removal below the cache root goes through module_utils/safe_walk.py (relative to opened
directories, never through a link the account could have planted).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat

from ansible_collections.sparkctl.spark.plugins.module_utils import safe_walk

BASE_DIR = "/var/cache/sparkctl/jit"
CURRENT = "current"
MARKER = ".sparkctl-jit.json"
MARKER_VERSION = 1
# A marker is a few hundred bytes; more is not sparkctl's.
MARKER_LIMIT = 64 * 1024

# Variable -> subdirectory of current/. Where each name comes from: docs/jit-cache.md.
CACHE_VARIABLES = (
    ("FLASHINFER_WORKSPACE_BASE", "flashinfer"),
    ("TORCHINDUCTOR_CACHE_DIR", "torchinductor"),
    ("TRITON_CACHE_DIR", "triton"),
    ("VLLM_CACHE_ROOT", "vllm"),
    ("SGLANG_CACHE_DIR", "sglang"),
    ("SGLANG_JIT_CACHE_DIR", "sglang-jit"),
    ("TORCH_EXTENSIONS_DIR", "torch_extensions"),
    ("CUDA_CACHE_PATH", "nv-compute"),
    ("XDG_CACHE_HOME", "xdg"),
)

_ID_RE = re.compile(r"^(?:sha256:)?([0-9a-f]{12,64})$")


class JitCacheError(Exception):
    pass


def cache_environment(base=BASE_DIR):
    """engine.env's cache variables: each one under base/current."""
    return {name: "%s/%s/%s" % (base.rstrip("/"), CURRENT, sub) for name, sub in CACHE_VARIABLES}


def identity_dir_name(runtime_kind, runtime_id):
    """venv-<hex> or image-<hex> for a venv lock sha256 or a docker image id (sha256:<hex>)."""
    if runtime_kind not in ("venv", "image"):
        raise JitCacheError("runtime kind must be venv or image, got %r" % (runtime_kind,))
    match = _ID_RE.match(str(runtime_id or "").strip().lower())
    if not match:
        raise JitCacheError("the %s's identity %r is not a sha256 (the %s)" % (
            runtime_kind, runtime_id, "venv lock hash" if runtime_kind == "venv" else "image id"))
    return "%s-%s" % (runtime_kind, match.group(1))


def marker_text(runtime_kind, runtime_id):
    return json.dumps({"version": MARKER_VERSION, "made_by": "sparkctl", "runtime_kind": runtime_kind,
                       "runtime_id": runtime_id}, sort_keys=True) + "\n"


def read_marker(path):
    """The marker of an identity directory, or None when it has none (not sparkctl's). Read as a
    regular file of the directory itself, never through a link."""
    try:
        fd = safe_walk.open_dir(path)
        try:
            data = json.loads(safe_walk.read_file_at(fd, MARKER, MARKER_LIMIT).decode("utf-8"))
        finally:
            os.close(fd)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("made_by") == "sparkctl" else None


def _open_tree(path):
    """A descriptor of the directory path, or None when there is no directory there."""
    try:
        return safe_walk.open_dir(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def scan(path):
    """Every cache file under path (the marker left out): {rel: (size, mtime seconds)}, symlinks
    as files of their own (not followed; one to a directory is left out, as os.walk leaves it)."""
    files = {}
    fd = _open_tree(path)
    if fd is None:
        return files
    try:
        for entry in safe_walk.walk(fd):
            if entry.is_dir() or entry.rel == MARKER or entry.is_dir_link():
                continue
            files[entry.rel] = (entry.st.st_size, int(entry.st.st_mtime))
    finally:
        os.close(fd)
    return files


def give(path, uid, gid, apply=True):
    """Give uid:gid every entry under path (path itself included, symlinks not followed) that has
    another owner. An image's containers run as root: what a boot compiles there is root's until
    it is handed to the service user, who mirrors the cache to the workers. Returns (given,
    refused): the paths given (apply False: that would be), sorted, and [(path, why)] of what is
    never given away (a file with other hard links, a device node)."""
    fd = _open_tree(path)
    if fd is None:
        return [], []
    try:
        return safe_walk.chown_tree(fd, uid, gid, path, apply=apply)
    finally:
        os.close(fd)


def foreign_owned(path, uid, gid):
    """The paths give() would give, without giving them."""
    return give(path, uid, gid, apply=False)[0]


def deletions(worker_names, head_names):
    """What a worker must delete to hold only the head's files: each file the head lacks, or, when
    the head lacks its whole directory, that directory once (the highest one the head lacks).
    Each rank compiles kernels of its own into directories of their own (torch's Inductor), so a
    worker holds directories the head never had, and rsync deletes a name only where the sender
    holds its directory."""
    head = set(head_names)
    head_dirs = set()
    for name in head:
        parts = name.split("/")[:-1]
        head_dirs.update("/".join(parts[:i]) for i in range(1, len(parts) + 1))
    found = set()
    for name in set(worker_names) - head:
        parts = name.split("/")
        top = next(("/".join(parts[:i]) for i in range(1, len(parts)) if "/".join(parts[:i]) not in head_dirs), name)
        found.add(top)
    return sorted(found)


def deletions_by_directory(names):
    """[(directory, [entry names in it])] of what deletions() returned, directories sorted ('' is the
    cache's top)."""
    groups = {}
    for name in names:
        parent, _sep, entry = name.rpartition("/")
        groups.setdefault(parent, []).append(entry)
    return [(parent, sorted(groups[parent])) for parent in sorted(groups)]


def manifest_digest(files):
    """sha256:<hex> over the scan (names, sizes, whole-second mtimes: rsync -a keeps them), so a
    worker that holds what the head holds has the head's digest."""
    digest = hashlib.sha256()
    for rel in sorted(files):
        size, mtime = files[rel]
        digest.update(("%s\0%d\0%d\n" % (rel, size, mtime)).encode("utf-8", "surrogateescape"))
    return "sha256:" + digest.hexdigest()


def summary(files, since=None):
    """What a node's cache holds: file count, bytes, digest and, with since (epoch seconds, the
    engine's start), how many files were written at or after it (a boot that compiled)."""
    result = {"files": len(files), "bytes": sum(size for size, _m in files.values()), "digest": manifest_digest(files)}
    if since is not None:
        result["written_since"] = sum(1 for _s, mtime in files.values() if mtime >= int(since))
    return result


def boot_state(cache, engine_started):
    """warm / cold / empty / unknown for one node's boot: cold when the boot wrote cache files
    (it compiled), warm when the cache held files and the boot wrote none, empty when nothing is
    cached at all (an engine that compiles nothing, or one not booted yet)."""
    if not cache or cache.get("files") is None:
        return "unknown"
    if not cache["files"]:
        return "empty"
    if engine_started is None or "written_since" not in cache:
        return "unknown"
    return "cold" if cache["written_since"] else "warm"


def unit_start_argv(systemctl, unit):
    """When the unit's main process started, as `@<epoch seconds>` (empty when it never did)."""
    return [systemctl, "show", "--property=ExecMainStartTimestamp", "--value", "--timestamp=unix", unit]


def parse_unit_start(text):
    """`@1764800000` -> 1764800000.0; None for a unit that has not started (empty, `n/a`, `0`)."""
    value = (text or "").strip()
    if not value.startswith("@"):
        return None
    try:
        started = float(value[1:])
    except ValueError:
        return None
    return started if started > 0 else None


def _empty_dir(path):
    fd = safe_walk.open_dir(path)
    try:
        return safe_walk.clear_dir(fd, keep=(MARKER,))
    finally:
        os.close(fd)


def plan(base, runtime_kind, runtime_id, reset=False):
    """What prepare() would do, without doing it: {name, path, create, link, remove, foreign, reset}."""
    name = identity_dir_name(runtime_kind, runtime_id)
    path = os.path.join(base, name)
    link = os.path.join(base, CURRENT)
    current = os.readlink(link) if os.path.islink(link) else None
    remove, foreign = [], []
    if os.path.isdir(base):
        for entry in sorted(os.listdir(base)):
            full = os.path.join(base, entry)
            if entry in (CURRENT, name) or os.path.islink(full) or not os.path.isdir(full):
                continue
            (remove if read_marker(full) else foreign).append(full)
    has_files = bool(scan(path)) if os.path.isdir(path) else False
    return {
        "name": name,
        "path": path,
        "create": not os.path.isdir(path) or read_marker(path) is None,
        "link": current != name,
        "link_was": current,
        "remove": remove,
        "foreign": foreign,
        "reset": bool(reset and has_files),
    }


def prepare(base, runtime_kind, runtime_id, subdirs, reset=False, owner=None):
    """Make base/<identity> (marker, one subdirectory per cache variable) and point current at it;
    remove the other identities' directories that carry sparkctl's marker; with reset, empty the
    identity's directory. owner (uid, gid) is given what this makes. Returns plan()'s answer, with
    made: the paths made."""
    todo = plan(base, runtime_kind, runtime_id, reset)
    path, name = todo["path"], todo["name"]
    if not os.path.isdir(base):
        os.makedirs(base, 0o755)
    made = []
    base_fd = safe_walk.open_dir(base)
    try:
        found = safe_walk.lstat_at(base_fd, name)
        if found is not None and not stat.S_ISDIR(found.st_mode):
            raise JitCacheError("%s exists and is not a directory; move it away" % path)
        if found is None:
            os.mkdir(name, 0o755, dir_fd=base_fd)
            made.append(path)
        id_fd = safe_walk.open_dir_at(base_fd, name)
        try:
            _fill(id_fd, path, runtime_kind, runtime_id, subdirs, todo, owner, made)
        finally:
            os.close(id_fd)
        if todo["link"]:
            tmp = CURRENT + ".sparkctl-new"
            if safe_walk.lstat_at(base_fd, tmp) is not None:
                os.unlink(tmp, dir_fd=base_fd)
            os.symlink(name, tmp, dir_fd=base_fd)
            os.replace(tmp, CURRENT, src_dir_fd=base_fd, dst_dir_fd=base_fd)
        for old in todo["remove"]:
            safe_walk.remove_at(base_fd, os.path.basename(old))
    finally:
        os.close(base_fd)
    todo["made"] = made
    return todo


def _fill(id_fd, path, runtime_kind, runtime_id, subdirs, todo, owner, made):
    """The marker, the reset and the subdirectories of the identity's open directory id_fd."""
    if todo["create"]:
        # A new file renamed over the marker: a link the service user put there is replaced.
        safe_walk.write_file_at(id_fd, MARKER, marker_text(runtime_kind, runtime_id).encode("utf-8"), 0o644, owner)
        made.append(os.path.join(path, MARKER))
    if todo["reset"]:
        safe_walk.clear_dir(id_fd, keep=(MARKER,))
    for sub in subdirs:
        try:
            # A link to a directory counts, as os.path.isdir says; only stat follows it.
            present = stat.S_ISDIR(os.stat(sub, dir_fd=id_fd).st_mode)
        except FileNotFoundError:
            present = False
        if present:
            continue
        os.mkdir(sub, 0o755, dir_fd=id_fd)
        made.append(os.path.join(path, sub))
        if owner:
            sub_fd = safe_walk.open_dir_at(id_fd, sub)
            try:
                os.fchown(sub_fd, owner[0], owner[1])
            finally:
                os.close(sub_fd)
    if owner and path in made:
        os.fchown(id_fd, owner[0], owner[1])

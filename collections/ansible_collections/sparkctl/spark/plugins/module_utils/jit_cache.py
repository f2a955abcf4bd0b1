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
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil

BASE_DIR = "/var/cache/sparkctl/jit"
CURRENT = "current"
MARKER = ".sparkctl-jit.json"
MARKER_VERSION = 1

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
    """The marker of an identity directory, or None when it has none (not sparkctl's)."""
    try:
        with open(os.path.join(path, MARKER)) as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("made_by") == "sparkctl" else None


def scan(path):
    """Every cache file under path (the marker left out): {rel: (size, mtime seconds)}, symlinks
    as files of their own (not followed)."""
    files = {}
    if not os.path.isdir(path):
        return files
    for root, dirs, names in os.walk(path):
        dirs.sort()
        for name in names:
            full = os.path.join(root, name)
            rel = os.path.relpath(full, path)
            if rel == MARKER:
                continue
            st = os.lstat(full)
            files[rel] = (st.st_size, int(st.st_mtime))
    return files


def foreign_owned(path, uid, gid):
    """Every entry under path (path itself included, symlinks not followed) whose owner is not
    uid:gid, sorted. An image's containers run as root: what a boot compiles there is root's until
    it is handed to the service user, who mirrors the cache to the workers."""
    if not os.path.isdir(path):
        return []
    entries = [path]
    for root, dirs, names in os.walk(path):
        entries.extend(os.path.join(root, name) for name in dirs + names)
    return sorted(entry for entry in entries if _owner(entry) != (uid, gid))


def _owner(path):
    st = os.lstat(path)
    return st.st_uid, st.st_gid


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
    removed = 0
    for name in os.listdir(path):
        if name == MARKER:
            continue
        full = os.path.join(path, name)
        if os.path.isdir(full) and not os.path.islink(full):
            shutil.rmtree(full)
        else:
            os.unlink(full)
        removed += 1
    return removed


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


def prepare(base, runtime_kind, runtime_id, subdirs, reset=False, chown=None):
    """Make base/<identity> (marker, one subdirectory per cache variable) and point current at it;
    remove the other identities' directories that carry sparkctl's marker; with reset, empty the
    identity's directory. chown(path) gives a made path to the service user. Returns plan()'s answer."""
    todo = plan(base, runtime_kind, runtime_id, reset)
    path = todo["path"]
    if not os.path.isdir(base):
        os.makedirs(base, 0o755)
    made = []
    if os.path.lexists(path) and not os.path.isdir(path):
        raise JitCacheError("%s exists and is not a directory; move it away" % path)
    if todo["create"]:
        if not os.path.isdir(path):
            os.mkdir(path, 0o755)
            made.append(path)
        with open(os.path.join(path, MARKER), "w") as handle:
            handle.write(marker_text(runtime_kind, runtime_id))
        made.append(os.path.join(path, MARKER))
    if todo["reset"]:
        _empty_dir(path)
    for sub in subdirs:
        full = os.path.join(path, sub)
        if not os.path.isdir(full):
            os.mkdir(full, 0o755)
            made.append(full)
    if chown:
        for item in made:
            chown(item)
    if todo["link"]:
        link = os.path.join(base, CURRENT)
        tmp = link + ".sparkctl-new"
        if os.path.lexists(tmp):
            os.unlink(tmp)
        os.symlink(todo["name"], tmp)
        os.replace(tmp, link)
    for old in todo["remove"]:
        shutil.rmtree(old)
    return todo

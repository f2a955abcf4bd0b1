# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A checkpoint's manifest: the files it is made of, with their sizes and digests.

normalize_manifest is what the verification accepts (the hub's listing, a stamp, a file on the
node); build_manifest and path_manifest are how the transfer makes one on the head, from the
hub's metadata (checkpoint_hub.py) or by hashing a directory. The transfer keeps the manifest in
the checkpoint directory, where the next run (and checkpoint_store.py, for the teardown) reads
which files are sparkctl's.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import re
import stat
import time
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.sparkctl.spark.plugins.module_utils.checkpoint_errors import CheckpointError, SyncError
from ansible_collections.sparkctl.spark.plugins.module_utils.checkpoint_stamp import (
    is_racy,
    read_stamp,
    render_stamp,
    sha256_file,
    stamp_entry,
    write_if_changed,
)
from ansible_collections.sparkctl.spark.plugins.module_utils.checkpoint_tree import DEFAULT_IGNORE, FileInfo, compile_ignore, scan_tree

MANIFEST_NAME = ".sparkctl-manifest.json"
# Hashes of a `path` source, keyed by size/mtime/ctime/inode, so an unchanged source is not re-hashed.
SOURCE_STAMP_NAME = ".sparkctl-source-stamp.json"
MANIFEST_VERSION = 1
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
GIT_SHA1_RE = re.compile(r"^[0-9a-f]{40}$")


# --- manifest ------------------------------------------------------------------------------------


def _as_size(value):
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def _normalize_rel(name):
    if not isinstance(name, str) or not name.strip():
        raise CheckpointError("manifest file names must be non-empty strings, got %r" % (name,))
    if name.startswith("/") or "\\" in name:
        raise CheckpointError("manifest file names are paths relative to the checkpoint with '/', got %r" % name)
    rel = posixpath.normpath(name)
    if rel in (".", "..") or rel.startswith("../"):
        raise CheckpointError("manifest file name %r points outside the checkpoint" % name)
    return rel


def normalize_manifest(raw):
    """Return {rel: {'size': int, 'sha256': lowercase hex or None[, 'git_blob_sha1': lowercase hex]}}
    from a manifest mapping. Files the hub stores in git (config, index, tokenizer) have no sha256
    but a git blob sha1, which is checked instead, as `hf cache verify` does.

    Accepts the mapping itself or a wrapper {'files': mapping} (so a stamp written by this
    module can serve as another node's manifest). Extra keys per file are ignored. Raises
    CheckpointError naming the first bad entry.
    """
    if not isinstance(raw, dict):
        raise CheckpointError("the manifest must be a mapping of file name to {size, sha256}, got %s" % type(raw).__name__)
    files = raw.get("files")
    if isinstance(files, dict) and "size" not in files:
        raw = files
    if not raw:
        raise CheckpointError("the manifest lists no files")
    manifest = {}
    for name, entry in raw.items():
        rel = _normalize_rel(name)
        if not isinstance(entry, dict):
            raise CheckpointError("manifest entry %r must be a mapping with size and sha256" % name)
        size = _as_size(entry.get("size"))
        if size is None:
            raise CheckpointError("manifest entry %r: size must be a non-negative integer, got %r" % (name, entry.get("size")))
        digest = entry.get("sha256")
        if digest is not None:
            if not isinstance(digest, str):
                raise CheckpointError("manifest entry %r: sha256 must be a hex string or null" % name)
            digest = digest.strip().lower()
            if digest.startswith("sha256:"):
                digest = digest[len("sha256:") :]
            if not SHA256_RE.match(digest):
                raise CheckpointError("manifest entry %r: sha256 %r is not 64 hex digits" % (name, entry.get("sha256")))
        blob = entry.get("git_blob_sha1")
        if blob is not None:
            if not isinstance(blob, str) or not GIT_SHA1_RE.match(blob.strip().lower()):
                raise CheckpointError("manifest entry %r: git_blob_sha1 %r is not 40 hex digits" % (name, blob))
            blob = blob.strip().lower()
        if rel in manifest:
            raise CheckpointError("manifest names %r twice" % rel)
        manifest[rel] = {"size": size, "sha256": digest}
        if blob and not digest:
            manifest[rel]["git_blob_sha1"] = blob
    return manifest


def load_manifest_file(path):
    """Read a JSON manifest from the node; CheckpointError when unreadable or not JSON."""
    try:
        with open(path, "rb") as handle:
            return json.loads(handle.read().decode("utf-8"))
    except OSError as exc:
        raise CheckpointError("cannot read manifest_file %s: %s" % (path, exc.strerror or exc)) from exc
    except ValueError as exc:
        raise CheckpointError("manifest_file %s is not JSON: %s" % (path, exc)) from exc


def manifest_digest(manifest):
    """sha256 of the normalized manifest in canonical JSON; None without a manifest."""
    if manifest is None:
        return None
    canonical = json.dumps(manifest, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


# --- the transfer's manifest ---------------------------------------------------------------------


def build_manifest(files, repo_id=None, revision=None, commit=None, source=None, path=None):
    manifest = {
        "version": MANIFEST_VERSION,
        "source": source,
        "repo_id": repo_id,
        "revision": revision,
        "commit": commit,
        "total_bytes": sum(entry["size"] for entry in files.values()),
        "files": dict(sorted(files.items())),
    }
    if path is not None:
        manifest["path"] = path
    normalize_manifest(manifest)  # proves checkpoint_verify accepts it
    return manifest


def path_manifest(source, source_stamp_file=None, jobs=2, write_stamp=True, racy_window_ns=None, clock_ns=time.time_ns):
    """Walk a directory on the head and hash its files, trusting a previous hash when size, mtime,
    ctime and inode are unchanged. Symlinks to regular files are followed (the served tree gets
    their content); anything else that is not a regular file is refused."""
    source = os.path.abspath(source)
    if not os.path.isdir(source):
        raise SyncError("source path %s is not a directory" % source)
    ignored = compile_ignore(DEFAULT_IGNORE)
    scan = scan_tree(source, ignored)
    if scan.unreadable:
        raise SyncError("cannot read %s under %s" % (", ".join(sorted(scan.unreadable)), source))
    if scan.special:
        raise SyncError("not regular files under %s: %s" % (source, ", ".join(sorted(scan.special))))
    infos = dict(scan.files)
    real = {}
    for rel in scan.symlinks:
        target = os.path.realpath(os.path.join(source, rel))
        try:
            st = os.stat(target)
        except OSError as exc:
            raise SyncError("symlink %s in %s is broken: %s" % (rel, source, exc.strerror or exc)) from exc
        if not stat.S_ISREG(st.st_mode):
            raise SyncError("symlink %s in %s does not point to a regular file" % (rel, source))
        infos[rel] = FileInfo.from_stat(st)
        real[rel] = target
    if scan.partial_dirs:
        raise SyncError("source %s holds transfer leftovers: %s" % (source, ", ".join(scan.partial_dirs)))
    if not infos:
        raise SyncError("source path %s holds no files" % source)

    stamp = read_stamp(source_stamp_file) if source_stamp_file else None
    known = (stamp or {}).get("files", {})
    files, to_hash = {}, []
    for rel, info in sorted(infos.items()):
        entry = known.get(rel)
        recorded = entry and (entry.get("size"), entry.get("mtime_ns"), entry.get("ctime_ns"), entry.get("ino"))
        if entry and recorded == info.key() and entry.get("sha256"):
            files[rel] = {"size": info.size, "sha256": entry["sha256"]}
        else:
            to_hash.append(rel)

    def task(rel):
        started = clock_ns()
        digest, after = sha256_file(real.get(rel, os.path.join(source, rel)))
        return rel, digest, after, started

    stamp_files = dict((rel, known[rel]) for rel in files)
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for rel, digest, after, started in pool.map(task, sorted(to_hash, key=lambda r: -infos[r].size)):
            if after.key() != infos[rel].key():
                raise SyncError("%s changed while it was hashed (is something still writing %s?)" % (rel, source))
            files[rel] = {"size": after.size, "sha256": digest}
            if not is_racy(after.ctime_ns, started, racy_window_ns):
                stamp_files[rel] = stamp_entry(after, digest)
    if source_stamp_file and write_stamp:
        data = render_stamp(dict(sorted(stamp_files.items())), "source:" + source)
        write_if_changed(source_stamp_file, data)
    return build_manifest(files, source="path", path=source), real


def path_sizes_manifest(source):
    """The files of a source directory with their sizes only (sha256 None): what the transfer
    would copy, without hashing. Symlinks to regular files count with their target's size."""
    if not os.path.isdir(source):
        raise SyncError("source path %s is not a directory" % source)
    scan = scan_tree(source, compile_ignore(DEFAULT_IGNORE))
    files = dict((rel, {"size": info.size, "sha256": None}) for rel, info in scan.files.items())
    for rel in scan.symlinks:
        try:
            files[rel] = {"size": os.stat(os.path.join(source, rel)).st_size, "sha256": None}
        except OSError as exc:
            raise SyncError("symlink %s in %s is broken: %s" % (rel, source, exc.strerror or exc)) from exc
    if not files:
        raise SyncError("source path %s holds no files" % source)
    return {"source": "path", "path": source, "commit": None, "files": files, "total_bytes": sum(f["size"] for f in files.values())}


def render_manifest(manifest):
    return (json.dumps(manifest, sort_keys=True, indent=1) + "\n").encode("utf-8")

# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Hashing a checkpoint's files, and the verification stamp that records what was hashed.

A stamp entry ties a file's digest to its size, mtime, ctime and inode: while all four are
unchanged the file is not read again. checkpoint_verify and checkpoint_sync write and read the
same stamp, so a file either of them hashed is not hashed again by the other.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.sparkctl.spark.plugins.module_utils.checkpoint_tree import FileInfo
from ansible_collections.sparkctl.spark.plugins.module_utils.files import write_file_atomic

STAMP_NAME = ".sparkctl-verified.json"
STAMP_VERSION = 1
STAMP_MODE = 0o644
HASH_CHUNK_BYTES = 8 * 1024 * 1024

# A file whose ctime is this close to the moment its hash started is not recorded in the stamp:
# a second write within the same timestamp tick would leave size and times unchanged and the
# stamp would vouch for content it never read ("racy git"). Any later write moves ctime (which,
# unlike mtime, cannot be set back), so a ctime older than one tick is safe. Local Linux
# filesystems tick in jiffies (<= 10 ms); a ctime on a whole second suggests a filesystem with
# 1-2 s granularity, which gets the wider window. Kept small so that a verify right after a
# re-copy still records the file and the next converged run does not hash it again.
RACY_WINDOW_NS = 100_000_000
COARSE_RACY_WINDOW_NS = 2_000_000_000


# --- hashing -------------------------------------------------------------------------------------


def sha256_file(path, chunk_bytes=HASH_CHUNK_BYTES):
    """Stream the file through sha256; return (hexdigest, FileInfo from fstat after the last read)."""
    digest = hashlib.sha256()
    buffer = bytearray(chunk_bytes)
    view = memoryview(buffer)
    # O_NOFOLLOW: a symlink swapped in after the scan is refused, never followed.
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb", buffering=0) as handle:
        if hasattr(os, "posix_fadvise"):
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
            except OSError:
                pass
        while True:
            count = handle.readinto(buffer)
            if not count:
                break
            digest.update(view[:count])
        after = FileInfo.from_stat(os.fstat(fd))
    return digest.hexdigest(), after


def git_blob_sha1_file(path, chunk_bytes=HASH_CHUNK_BYTES):
    """`git hash-object` of a file (sha1 of "blob <size>\\0" + content): what the hub reports as the
    blob id of a file stored in git. Same return as sha256_file."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb", buffering=0) as handle:
        digest = hashlib.sha1(b"blob %d\0" % os.fstat(fd).st_size)
        while True:
            chunk = handle.read(chunk_bytes)
            if not chunk:
                break
            digest.update(chunk)
        after = FileInfo.from_stat(os.fstat(fd))
    return digest.hexdigest(), after


def expected_digest(entry):
    """("sha256", hex) for an LFS file, ("git_blob_sha1", hex) for a file stored in git, else None."""
    if entry.get("sha256"):
        return "sha256", entry["sha256"]
    if entry.get("git_blob_sha1"):
        return "git_blob_sha1", entry["git_blob_sha1"]
    return None


def digest_file(path, algorithm):
    return (git_blob_sha1_file if algorithm == "git_blob_sha1" else sha256_file)(path)


def _hash_task(root, rel, clock_ns, algorithm="sha256"):
    started_ns = clock_ns()
    try:
        hexdigest, after = digest_file(os.path.join(root, rel), algorithm)
    except OSError as exc:
        return rel, None, None, started_ns, exc.strerror or str(exc)
    return rel, hexdigest, after, started_ns, None


def hash_many(root, rels, sizes, jobs, clock_ns=time.time_ns, algorithms=None):
    """Hash rels (largest first, so the pool drains evenly) with jobs threads; hashlib and reads
    release the GIL. algorithms: {rel: "sha256" (default) or "git_blob_sha1"}.
    Returns {rel: (hexdigest or None, FileInfo or None, started_ns, error or None)}."""
    algorithms = algorithms or {}
    order = sorted(rels, key=lambda rel: (-sizes.get(rel, 0), rel))
    results = {}
    if jobs <= 1 or len(order) <= 1:
        for rel in order:
            name, hexdigest, after, started_ns, error = _hash_task(root, rel, clock_ns, algorithms.get(rel, "sha256"))
            results[name] = (hexdigest, after, started_ns, error)
        return results
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        tasks = pool.map(lambda rel: _hash_task(root, rel, clock_ns, algorithms.get(rel, "sha256")), order)
        for name, hexdigest, after, started_ns, error in tasks:
            results[name] = (hexdigest, after, started_ns, error)
    return results


# --- stamp ---------------------------------------------------------------------------------------


def read_stamp(path):
    """Return the stamp as a dict, or None when absent, unreadable, foreign or of another version."""
    try:
        with open(path, "rb") as handle:
            stamp = json.loads(handle.read().decode("utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(stamp, dict) or stamp.get("version") != STAMP_VERSION or not isinstance(stamp.get("files"), dict):
        return None
    return stamp


def is_racy(ctime_ns, hash_started_ns, window_ns=None):
    """Whether a file last changed at ctime_ns may change again unseen after a hash started at hash_started_ns."""
    if window_ns is None:
        window_ns = RACY_WINDOW_NS
    if ctime_ns % 1_000_000_000 == 0:
        window_ns = max(window_ns, COARSE_RACY_WINDOW_NS)
    return ctime_ns >= hash_started_ns - window_ns


def stamp_entry(info, sha256, git_blob_sha1=None):
    entry = {"size": info.size, "mtime_ns": info.mtime_ns, "ctime_ns": info.ctime_ns, "ino": info.ino, "sha256": sha256}
    if git_blob_sha1:
        entry["git_blob_sha1"] = git_blob_sha1
    return entry


def stamp_vouches(stamp, digest, rel, info, expected_sha256, expected_git_blob_sha1=None):
    """True when the stamp recorded rel with this exact size, times and inode against the same manifest."""
    if not stamp or stamp.get("manifest_digest") != digest:
        return False
    entry = stamp["files"].get(rel)
    if not isinstance(entry, dict) or entry.get("sha256") != expected_sha256:
        return False
    if entry.get("git_blob_sha1") != expected_git_blob_sha1:
        return False
    recorded = (entry.get("size"), entry.get("mtime_ns"), entry.get("ctime_ns"), entry.get("ino"))
    return recorded == info.key()


def render_stamp(files, digest):
    """Canonical bytes of a stamp, so that an unchanged verification renders identically (changed=false)."""
    payload = {"version": STAMP_VERSION, "manifest_digest": digest, "files": files}
    return (json.dumps(payload, sort_keys=True, indent=1) + "\n").encode("utf-8")


def write_if_changed(path, data):
    """Write data (atomically, STAMP_MODE) unless the file already holds exactly it, so an
    unchanged run leaves its bookkeeping untouched; returns whether it wrote."""
    try:
        with open(path, "rb") as handle:
            if handle.read() == data:
                return False
    except OSError:
        pass
    write_file_atomic(path, data, STAMP_MODE)
    return True

# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The checkpoints sparkctl keeps on a node, side by side under one directory (one per
profile's checkpoint.dir_name), and which of them a keep policy lets go.

A checkpoint directory is sparkctl's when it holds both the mark the checkpoint stage puts in
a directory it created (CREATED_MARK) and a list of the files it put there (the head's
manifest, or the stamp of what a node verified). Only the files those lists name, their
unfinished copies, sparkctl's own bookkeeping and the hub client's cache are ever removed;
anything else stays, and so does its directory. The order of use is a small record per node
(SERVED_FILE): the checkpoint paths served, most recent first, updated only when the served
checkpoint changes (a converged re-run writes nothing).

The checkpoint_store and node_teardown modules run this as root in directories the service user
owns (the checkpoints, often their parent too): the lists are read, the tree walked and the files
removed through opened directories (module_utils/safe_walk.py), never through a link."""

from __future__ import annotations

import json
import os
import stat

from ansible_collections.sparkctl.spark.plugins.module_utils import safe_walk
from ansible_collections.sparkctl.spark.plugins.module_utils.checkpoint_errors import CheckpointError
from ansible_collections.sparkctl.spark.plugins.module_utils.checkpoint_manifest import MANIFEST_NAME, normalize_manifest
from ansible_collections.sparkctl.spark.plugins.module_utils.checkpoint_stamp import STAMP_NAME
from ansible_collections.sparkctl.spark.plugins.module_utils.checkpoint_tree import owned_leftover
from ansible_collections.sparkctl.spark.plugins.module_utils.teardown import listed_files_to_remove

CREATED_MARK = ".sparkctl-created"
SERVED_FILE = "/var/lib/sparkctl/checkpoints-served.json"
# A manifest lists a checkpoint's files: far below this.
LISTING_LIMIT = 64 << 20


def _load_listing(read, shown):
    """A JSON list of files read by read() (safe_walk); CheckpointError as load_manifest_file's."""
    try:
        return json.loads(read().decode("utf-8"))
    except OSError as exc:
        raise CheckpointError("cannot read manifest_file %s: %s" % (shown, exc.strerror or exc)) from exc
    except ValueError as exc:
        raise CheckpointError("manifest_file %s is not JSON: %s" % (shown, exc)) from exc


def sparkctl_files(path, manifest_path=None):
    """(remove, left, warnings) for the checkpoint directory path: the files (relative paths)
    sparkctl put there, the ones it did not, and a warning per list it could not read. The
    lists are the manifest (manifest_path, default the directory's own) and the node's stamp,
    read as regular files, never through a link the directory's owner put there. Nothing at
    path: nothing to remove; path a link another account could have placed: UnsafePathError."""
    names, warnings = set(), []
    try:
        fd = safe_walk.open_dir(path)
    except FileNotFoundError:
        return [], [], []
    try:
        listings = []
        if manifest_path:
            if os.path.lexists(manifest_path):
                listings.append((manifest_path, lambda: safe_walk.read_file(manifest_path, LISTING_LIMIT)))
        elif safe_walk.lstat_at(fd, MANIFEST_NAME) is not None:
            listings.append((os.path.join(path, MANIFEST_NAME), lambda: safe_walk.read_file_at(fd, MANIFEST_NAME,
                                                                                               LISTING_LIMIT)))
        if safe_walk.lstat_at(fd, STAMP_NAME) is not None:
            listings.append((os.path.join(path, STAMP_NAME), lambda: safe_walk.read_file_at(fd, STAMP_NAME, LISTING_LIMIT)))
        for listing, read in listings:
            try:
                names |= set(normalize_manifest(_load_listing(read, listing)))
            except CheckpointError as exc:
                warnings.append("%s: %s; the files it lists in %s stay" % (listing, exc, path))
        # os.walk's files: everything but directories and links to them.
        rel_files = [entry.rel for entry in safe_walk.walk(fd) if not entry.is_dir() and not entry.is_dir_link()]
    finally:
        os.close(fd)
    remove = listed_files_to_remove(rel_files, names, owned_leftover)
    left = sorted(set(rel_files) - set(remove))
    return remove, left, warnings


def is_sparkctl_checkpoint(path):
    """Whether sparkctl created the directory and keeps a list of what it put in it (regular
    files of the directory itself, not links)."""
    try:
        fd = safe_walk.open_dir(path)
    except OSError:
        return False
    try:
        def regular(name):
            st = safe_walk.lstat_at(fd, name)
            return st is not None and stat.S_ISREG(st.st_mode)

        return regular(CREATED_MARK) and (regular(MANIFEST_NAME) or regular(STAMP_NAME))
    finally:
        os.close(fd)


def directory_bytes(path, rel_files):
    total = 0
    try:
        fd = safe_walk.open_dir(path)
    except OSError:
        return 0
    try:
        for rel in rel_files:
            try:
                total += safe_walk.lstat_rel(fd, rel).st_size
            except OSError:
                pass
    finally:
        os.close(fd)
    return total


def remove_files(path, rel_files):
    """Unlink rel_files under the checkpoint directory path, then the directories left empty and
    path itself when it is, each reached through opened directories: a directory the service
    user swapped for a link meanwhile is never followed (the unlink fails instead)."""
    fd = safe_walk.open_dir(path)
    try:
        for rel in rel_files:
            safe_walk.unlink_rel(fd, rel)
    finally:
        os.close(fd)
    safe_walk.prune_tree(path)

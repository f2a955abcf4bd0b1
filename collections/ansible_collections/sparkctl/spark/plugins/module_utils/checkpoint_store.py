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
checkpoint changes (a converged re-run writes nothing)."""

from __future__ import annotations

import os

from ansible_collections.sparkctl.spark.plugins.module_utils.checkpoint import (
    STAMP_NAME,
    CheckpointError,
    load_manifest_file,
    normalize_manifest,
    owned_leftover,
)
from ansible_collections.sparkctl.spark.plugins.module_utils.teardown import listed_files_to_remove

CREATED_MARK = ".sparkctl-created"
MANIFEST_NAME = ".sparkctl-manifest.json"
SERVED_FILE = "/var/lib/sparkctl/checkpoints-served.json"


def sparkctl_files(path, manifest_path=None):
    """(remove, left, warnings) for the checkpoint directory path: the files (relative paths)
    sparkctl put there, the ones it did not, and a warning per list it could not read. The
    lists are the manifest (manifest_path, default the directory's own) and the node's stamp."""
    names, warnings = set(), []
    for listing in (manifest_path or os.path.join(path, MANIFEST_NAME), os.path.join(path, STAMP_NAME)):
        if not os.path.exists(listing):
            continue
        try:
            names |= set(normalize_manifest(load_manifest_file(listing)))
        except CheckpointError as exc:
            warnings.append("%s: %s; the files it lists in %s stay" % (listing, exc, path))
    rel_files = []
    for top, _dirs, files in os.walk(path):
        rel_files += [os.path.relpath(os.path.join(top, f), path) for f in files]
    remove = listed_files_to_remove(rel_files, names, owned_leftover)
    left = sorted(set(rel_files) - set(remove))
    return remove, left, warnings


def is_sparkctl_checkpoint(path):
    """Whether sparkctl created the directory and keeps a list of what it put in it."""
    return (os.path.isfile(os.path.join(path, CREATED_MARK))
            and (os.path.isfile(os.path.join(path, MANIFEST_NAME)) or os.path.isfile(os.path.join(path, STAMP_NAME))))


def directory_bytes(path, rel_files):
    total = 0
    for rel in rel_files:
        try:
            total += os.lstat(os.path.join(path, rel)).st_size
        except OSError:
            pass
    return total

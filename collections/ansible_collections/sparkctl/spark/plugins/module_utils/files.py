# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Whole-file reads and writes the modules share: what a file holds now, and a write that
leaves either the old file or the new one, never a part, and no temporary file behind."""

from __future__ import annotations

import json
import os
import stat

from ansible_collections.sparkctl.spark.plugins.module_utils import safe_walk

# A JSON document a module reads whole (a record, an estimate, a manifest): far below this.
JSON_LIMIT = 64 << 20


def read_file_state(path):
    """(content bytes, permission bits, (uid, gid)) of path, from one open; (None, None, None)
    when it does not exist. Any other error (a directory, no permission, not a regular file, a
    symlink in a directory another account can write: module_utils/safe_walk.py) is raised: it
    must not read as "missing" and be overwritten."""
    try:
        content, info = safe_walk.read_file_state(path)
    except FileNotFoundError:
        return None, None, None
    return content, stat.S_IMODE(info.st_mode), (info.st_uid, info.st_gid)


def read_bytes_and_mode(path):
    """(content bytes, permission bits) of path, as read_file_state reads them."""
    content, mode, _owner = read_file_state(path)
    return content, mode


def write_file_atomic(path, data, mode, owner=None):
    """Write data to path with the permission bits mode (and owner (uid, gid) when given),
    through a temporary file in the same directory, flushed to disk, given its mode and owner
    through its own descriptor and renamed over path; on any failure the temporary file is removed
    and path is left as it was. The directory is reached as module_utils/safe_walk.py resolves
    it (no symlink another account could have placed is followed) and a link at path is replaced,
    never written through."""
    dir_fd, name = safe_walk.open_parent(path)
    try:
        # <name>.<random>.tmp: the checkpoint's verification knows a stamp's leftover by this name.
        safe_walk.write_file_at(dir_fd, name, data, mode, owner)
        # The rename is durable once the directory is on disk too; a directory that cannot be
        # opened or synced (some file systems) leaves the write done, only less durable.
        try:
            sync_fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY, dir_fd=dir_fd)
        except OSError:
            return
        try:
            os.fsync(sync_fd)
        except OSError:
            pass
        finally:
            os.close(sync_fd)
    finally:
        os.close(dir_fd)


def read_json_object(path):
    """A JSON object from a file; None when it is missing, unreadable (a symlink another account
    could have placed included: module_utils/safe_walk.py), not a regular file or not an object."""
    try:
        data = json.loads(safe_walk.read_file(path, JSON_LIMIT).decode("utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None

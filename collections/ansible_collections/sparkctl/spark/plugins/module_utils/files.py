# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Whole-file reads and writes the modules share: what a file holds now, and a write that
leaves either the old file or the new one, never a part, and no temporary file behind."""

from __future__ import annotations

import json
import os
import stat
import tempfile


def read_file_state(path):
    """(content bytes, permission bits, (uid, gid)) of path, from one open; (None, None, None)
    when it does not exist. Any other error (a directory, no permission) is raised: it must not
    read as "missing" and be overwritten."""
    try:
        with open(path, "rb") as handle:
            info = os.fstat(handle.fileno())
            return handle.read(), stat.S_IMODE(info.st_mode), (info.st_uid, info.st_gid)
    except FileNotFoundError:
        return None, None, None


def read_bytes_and_mode(path):
    """(content bytes, permission bits) of path, as read_file_state reads them."""
    content, mode, _owner = read_file_state(path)
    return content, mode


def write_file_atomic(path, data, mode):
    """Write data to path with the permission bits mode, through a temporary file in the same
    directory, flushed to disk and renamed over path; on any failure the temporary file is removed
    and path is left as it was."""
    directory = os.path.dirname(path) or "."
    # <name>.<random>.tmp: the checkpoint's verification knows a stamp's leftover by this name.
    fd, temp_path = tempfile.mkstemp(prefix=os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
            os.fchmod(handle.fileno(), mode)
        os.replace(temp_path, path)
    except BaseException:
        try:
            os.unlink(temp_path)
        except OSError:
            pass
        raise
    # The rename is durable once the directory is on disk too; a directory that cannot be
    # opened or synced (some file systems) leaves the write done, only less durable.
    try:
        dir_fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


def read_json_object(path):
    """A JSON object from a file; None when it is missing, unreadable or not an object."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None

# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The mesh key's forced command, as the controller side knows it.

On a worker, the head's mesh key runs only roles/ssh_mesh/files/sparkctl-mesh-command, installed
at MESH_COMMAND_PATH (authorized_keys: command="MESH_COMMAND_PATH --root DIR ...", from the
mesh_key_options filter). That program is copied to the node alone, so it holds the judging of
the head's commands itself; this module holds what the head's side needs: where it is installed,
the forced command's text and the relay's command line. The unit tests keep the program's copy
of the path in step with this one, and its relay exit status with checkpoint_rsync.py's
RELAY_HASH_MISMATCH.
"""

from __future__ import annotations

import re
import shlex

MESH_COMMAND_PATH = "/usr/local/libexec/sparkctl-mesh-command"
# A --root directory as it may stand in authorized_keys' command="...": an absolute path of plain
# characters (no quotes, spaces, commas or shell metacharacters), below / and without `..`.
ROOT_PATH = re.compile(r"^/[A-Za-z0-9._/+-]*$")


def bad_root(root):
    """Why root cannot be a --root of the forced command, or None when it can."""
    text = root if isinstance(root, str) else repr(root)
    if not isinstance(root, str) or not ROOT_PATH.match(root):
        return "%s is not an absolute path of letters, digits and . _ / + -" % text
    parts = root.split("/")
    if ".." in parts or "." in parts:
        return "%s holds a . or .. component" % text
    if not root.strip("/"):
        return "%s is the whole file system" % text
    return None


def forced_command(roots):
    """The command= of an authorized mesh key: the program with one --root per directory, in
    the order given, each once. Raises ValueError naming a directory that cannot be one."""
    chosen = []
    for root in roots:
        reason = bad_root(root)
        if reason:
            raise ValueError(reason)
        normal = "/" + "/".join(part for part in root.split("/") if part)
        if normal not in chosen:
            chosen.append(normal)
    return " ".join([MESH_COMMAND_PATH] + ["--root %s" % root for root in chosen])


def relay_command(sha256, path, target, rsync_options):
    """The command line (for ssh) that has a worker send its copy of path to target with
    rsync_options, once the copy hashes to sha256."""
    return shlex.join([MESH_COMMAND_PATH, "relay", sha256, path, target] + list(rsync_options))

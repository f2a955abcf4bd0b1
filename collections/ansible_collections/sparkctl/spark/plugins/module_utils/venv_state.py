# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What the engine_venv role manages on a node, read in one go: the profile's Python, the
apt packages venv support needs, the distributions the venv holds, the uploaded wheel and
plugin directories, the plugin's files in site-packages and the engine's registry.

Reading the installed distributions' metadata replaces a `pip list`, which imports pip and
costs about a second; the directory trees are compared file by file with the controller's
SHA-1s, as ansible.builtin.copy compares them.

Pure except for installed_distributions(), tree_checksums() and tree_differences()."""

from __future__ import annotations

import os
import stat

from ansible_collections.sparkctl.spark.plugins.module_utils.node_state import sha1_of

# What ansible.builtin.copy leaves with mode u=rwX,go=rX: X keeps an executable file executable.
TREE_FILE_MODES = (0o644, 0o755)
TREE_DIR_MODE = 0o755


def installed_distributions(site_packages):
    """[{name, version}] of the distributions installed in site_packages, as `pip list` names them."""
    from importlib import metadata

    found = {}
    for dist in metadata.distributions(path=[site_packages]):
        name = dist.metadata["Name"] if dist.metadata else None
        if name and name.lower() not in found:
            found[name.lower()] = {"name": name, "version": dist.version}
    return sorted(found.values(), key=lambda item: item["name"].lower())


def tree_checksums(root):
    """{relative path: SHA-1} of every file under root (links followed, as copy uploads them)."""
    checksums = {}
    for top, dirs, files in os.walk(root, followlinks=True):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(top, name)
            checksums[os.path.relpath(path, root)] = sha1_of(path)
    return checksums


def _root_owned(info):
    return info.st_uid == 0 and info.st_gid == 0


def _kind_and_mode_problem(problems, path, is_kind, kind, modes, modes_text):
    """Append what keeps path from being a root-owned `kind` with one of `modes`; True when something did."""
    try:
        info = os.stat(path)
    except OSError:
        problems.append(f"{path} missing")
        return True
    if not is_kind(info.st_mode):
        problems.append(f"{path} is not {kind}")
        return True
    if not _root_owned(info) or stat.S_IMODE(info.st_mode) not in modes:
        problems.append(f"{path} not root-owned with mode {modes_text}")
        return True
    return False


def tree_differences(root, wanted):
    """How the directory root on the node differs from what uploading the controller's tree
    ({relative path: SHA-1}) to it, root-owned with mode u=rwX,go=rX, would leave; [] when the
    upload would change nothing. Files on the node the controller lacks are left alone, as copy
    leaves them."""
    problems = []
    dirs = {""} | {os.path.dirname(rel) for rel in wanted}
    for rel in list(dirs):
        while rel:
            rel = os.path.dirname(rel)
            dirs.add(rel)
    for rel in sorted(dirs):
        path = os.path.join(root, rel) if rel else root
        _kind_and_mode_problem(problems, path, stat.S_ISDIR, "a directory", (TREE_DIR_MODE,), "0755")
    for rel, checksum in sorted(wanted.items()):
        path = os.path.join(root, rel)
        if _kind_and_mode_problem(problems, path, stat.S_ISREG, "a file", TREE_FILE_MODES, "0644 or 0755"):
            continue
        try:
            if sha1_of(path) != checksum:
                problems.append(f"{path} content differs")
        except OSError as err:
            problems.append(f"{path} unreadable: {err}")
    return problems

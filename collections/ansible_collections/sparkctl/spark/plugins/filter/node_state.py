# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Build the arguments of the node_state module from what a role writes."""

from __future__ import annotations

import hashlib
import posixpath

from ansible.errors import AnsibleFilterError

DOCUMENTATION = r"""
name: node_state_files
short_description: node_state path entries for files a role writes with copy content
description:
  - "C(node_state_files) takes C({name: content}) and a directory (owner, group and mode as keywords) and returns one
    C(sparkctl.spark.node_state) path entry per file, with the SHA-1 of its content (the comparison the copy module
    makes)."
  - C(node_state_paths) takes paths and returns one entry per distinct path, each with the same C(state) (a keyword,
    C(file) by default) and the C(owner), C(group) and C(mode) keywords given (directories a role creates, files it
    removes).
  - C(node_state_units) takes unit names and returns unit entries (C(enabled) and C(started) as keywords, true by
    default).
  - C(node_state_stale_inputs) takes unit names and the profile's C(inputs) of this host (unit to extra files) and
    returns the O(stale_inputs) of node_state for exactly those units.
"""


def _sha1(text):
    return hashlib.sha1(str(text).encode("utf-8")).hexdigest()


def node_state_files(contents, directory, owner=None, group=None, mode=None):
    if not isinstance(contents, dict):
        raise AnsibleFilterError("node_state_files: expected a mapping of file name to content")
    entries = []
    for name, content in contents.items():
        entry = {"path": posixpath.join(str(directory), str(name)), "checksum": _sha1(content)}
        entry.update({key: value for key, value in (("owner", owner), ("group", group), ("mode", mode))
                      if value is not None})
        entries.append(entry)
    return entries


def node_state_paths(paths, state="file", owner=None, group=None, mode=None):
    if isinstance(paths, (str, dict)) or paths is None:
        raise AnsibleFilterError("node_state_paths: expected a list of paths")
    entries, seen = [], set()
    for path in paths:
        if path in seen:
            continue
        seen.add(path)
        entry = {"path": str(path), "state": state}
        entry.update({key: value for key, value in (("owner", owner), ("group", group), ("mode", mode))
                      if value is not None})
        entries.append(entry)
    return entries


def node_state_units(names, enabled=True, started=True):
    return [{"name": str(name), "enabled": enabled, "started": started} for name in names or []]


def node_state_stale_inputs(names, inputs):
    inputs = inputs or {}
    if not isinstance(inputs, dict):
        raise AnsibleFilterError("node_state_stale_inputs: inputs must map a unit to the files it reads")
    return {str(name): list(inputs.get(name) or []) for name in names or []}


class FilterModule:
    def filters(self):
        return {"node_state_files": node_state_files, "node_state_paths": node_state_paths,
                "node_state_units": node_state_units,
                "node_state_stale_inputs": node_state_stale_inputs}

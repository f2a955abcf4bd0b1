# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The paths option of the modules that read a role's files in the same run as the rest of its state, and the
values it returns (a module's RETURN extends this fragment too)."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  paths:
    description:
      - Files, directories and links to read and compare in the same run; a final symlink is not followed.
      - Returned in C(paths), with the paths that differ in C(drifted) and how they differ beside it.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: Absolute path.
        type: path
        required: true
      state:
        description: What should be there.
        type: str
        choices: [file, directory, link, absent]
        default: file
      checksum:
        description:
          - SHA-1 of the content the file should have (C(lookup('ansible.builtin.template', ...) | hash('sha1')) for a
            template, C(content | hash('sha1')) for a copy). The file is read only when this or O(paths[].get_checksum)
            is given.
        type: str
      get_checksum:
        description:
          - Return the file's SHA-1 without judging it, for content the role can only tell once this run's other
            results are known.
        type: bool
        default: false
      checksum_prefix:
        description:
          - Text hashed before the file's content, so the checksum returned (and compared) is that of a file holding
            this text followed by this file's content, such as a secret another node keeps after a user name. The
            content never leaves the node. Implies O(paths[].get_checksum).
        type: str
      get_entries:
        description: Return a directory's entry names, hidden ones included, as C(entries).
        type: bool
        default: false
      owner:
        description: Owner name or uid.
        type: str
      group:
        description: Group name or gid.
        type: str
      mode:
        description: Octal permission bits (C("0644")); a symbolic mode is not judged.
        type: raw
      src:
        description: The target a link should have, as written in it.
        type: str
"""

    # The values O(paths) adds to a module's return, with assess_paths (module_utils/node_state.py) behind them.
    RETURN = r"""
paths:
  description:
    - Per path of O(paths), C(exists), C(type) (file, directory, link, other, absent), C(owner), C(group), C(uid),
      C(gid), C(mode) (C("0644")), C(target) for a link, C(checksum) for a file whose checksum was asked for,
      C(entries) for a directory whose entries were, and C(error) when those could not be read.
  returned: always
  type: dict
differences:
  description: Per path of O(paths) that differs from what was asked, the differences as sentences.
  returned: always
  type: dict
drifted:
  description: The paths of O(paths) that differ, in the order given.
  returned: always
  type: list
  elements: str
"""

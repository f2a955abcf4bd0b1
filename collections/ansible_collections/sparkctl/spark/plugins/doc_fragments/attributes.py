# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The attribute support the collection's modules share.

A module lists C(ansible.builtin.action_common_attributes) (it describes each attribute), then one variant here:
C(sparkctl.spark.attributes.linux) or C(.posix) for a module that changes the target, C(.info_linux) or
C(.info_posix) for one that only reads, C(.facts_linux) or C(.facts_posix) for one that only reads and returns
ansible_facts (with C(ansible.builtin.action_common_attributes.facts)). A module adds only what is its own, such as
C(check_mode.details): Ansible merges each attribute's keys, the module's winning.
"""

from __future__ import annotations

# Check mode reports the change a real run would make, without making it; no module shows a diff.
_CHANGES = r"""
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
"""

# A module that only reads: check mode is a normal run.
_READ_ONLY = r"""
attributes:
  check_mode:
    support: full
    details:
      - The module only reads; it does the same in check mode.
  diff_mode:
    support: none
"""

# Indented entries that extend the attributes mapping above.
_FACTS = "  facts:\n    support: full\n"
# Linux-only interfaces (/proc, sysfs, systemd, nftables) against no more than a POSIX target.
_LINUX = "  platform:\n    platforms: linux\n"
_POSIX = "  platform:\n    platforms: posix\n"


class ModuleDocFragment:
    DOCUMENTATION = _CHANGES
    LINUX = _CHANGES + _LINUX
    POSIX = _CHANGES + _POSIX
    INFO_LINUX = _READ_ONLY + _LINUX
    INFO_POSIX = _READ_ONLY + _POSIX
    FACTS_LINUX = _READ_ONLY + _FACTS + _LINUX
    FACTS_POSIX = _READ_ONLY + _FACTS + _POSIX

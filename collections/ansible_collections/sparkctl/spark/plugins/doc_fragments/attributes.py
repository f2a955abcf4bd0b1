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

# Each variant is written out whole: ansible-test's documentation checks read a fragment's
# text from the source, so a fragment built from shared pieces cannot be checked.
# Check mode reports the change a real run would make, without making it. Every variant says
# no diff: a module that shows one states its diff_mode support and what the diff holds itself
# (tests/unit/test_module_documentation.py holds each module's claim to what it does). A
# read-only module does the same in check mode. The platform is Linux for modules that
# read /proc, sysfs, systemd or nftables, POSIX for the others.


class ModuleDocFragment:
    DOCUMENTATION = r"""
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
"""

    LINUX = r"""
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: linux
"""

    POSIX = r"""
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

    INFO_LINUX = r"""
attributes:
  check_mode:
    support: full
    details:
      - The module only reads; it does the same in check mode.
  diff_mode:
    support: none
  platform:
    platforms: linux
"""

    INFO_POSIX = r"""
attributes:
  check_mode:
    support: full
    details:
      - The module only reads; it does the same in check mode.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

    FACTS_LINUX = r"""
attributes:
  check_mode:
    support: full
    details:
      - The module only reads; it does the same in check mode.
  diff_mode:
    support: none
  facts:
    support: full
  platform:
    platforms: linux
"""

    FACTS_POSIX = r"""
attributes:
  check_mode:
    support: full
    details:
      - The module only reads; it does the same in check mode.
  diff_mode:
    support: none
  facts:
    support: full
  platform:
    platforms: posix
"""

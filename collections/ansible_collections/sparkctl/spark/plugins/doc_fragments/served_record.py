# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the keep-policy modules (checkpoint_store, venv_store) share: the options
module_utils/served_record.py's store_argument_spec gives them, and their check and diff mode.
Listed before C(sparkctl.spark.attributes.linux): Ansible merges fragments in order, the earlier
ones winning, so this fragment's diff support stands against that one's none."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
attributes:
  check_mode:
    details:
      - Reports what would be recorded and removed, with the diff of the served record; changes nothing.
  diff_mode:
    support: full
    details:
      - The served record's text before and after.
options:
  keep:
    description: How many to keep, O(current) included; V(0) keeps all.
    type: int
    default: 0
  state:
    description: V(present) lists (and records); V(absent) also removes those beyond O(keep).
    type: str
    choices: [present, absent]
    default: present
  record:
    description: Record O(current) as the most recently served.
    type: bool
    default: false
"""

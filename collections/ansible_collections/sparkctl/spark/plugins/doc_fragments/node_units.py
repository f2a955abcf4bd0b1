# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The units option of the modules that read a role's systemd units in the same run as the rest of its state."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  units:
    description:
      - systemd system units to read with one C(systemctl show) and compare; the ones that differ are in RV(drifted).
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: Full unit name (C(foo.service)).
        type: str
        required: true
      enabled:
        description: Whether the unit should be enabled; not judged when omitted.
        type: bool
      started:
        description: Whether the unit should be active (or activating); not judged when omitted.
        type: bool
      masked:
        description: Whether the unit should be masked; not judged when omitted.
        type: bool
"""

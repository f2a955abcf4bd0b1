# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The state of a node's units in one line, from registered systemd_service results."""

from __future__ import annotations

DOCUMENTATION = r"""
name: unit_states
short_description: One line of "unit=state" from the results of a looped systemd_service status query
version_added: 0.1.0
description:
  - Takes the C(results) of C(ansible.builtin.systemd_service) run with only C(name) over several units (a status query)
    and returns C(unit=ActiveState/SubState) for each unit that is installed, in loop order. Units systemd does not know
    are left out.
options:
  _input:
    description: The registered loop results.
    type: list
    elements: dict
    required: true
"""

EXAMPLES = r"""
- name: Show the units
  ansible.builtin.debug:
    msg: "{{ status_unit_states.results | sparkctl.spark.unit_states }}"
"""

RETURN = r"""
_value:
  description: C(unit=active/running, other=failed/failed), or C(none installed).
  type: str
"""


def unit_states(results):
    parts = []
    for result in results or []:
        status = (result or {}).get("status") or {}
        if not status or status.get("LoadState") == "not-found":
            continue
        name = status.get("Id") or result.get("item") or "?"
        parts.append("%s=%s/%s" % (name, status.get("ActiveState", "?"), status.get("SubState", "?")))
    return ", ".join(parts) or "none installed"


class FilterModule:
    def filters(self):
        return {"unit_states": unit_states}

# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Requirement strings for playbooks, read by module_utils/requirement.py (the one reader the
plugins share), so a task compares pins and installed distributions the way the modules do."""

from __future__ import annotations

from ansible_collections.sparkctl.spark.plugins.module_utils.requirement import requirement_pin

DOCUMENTATION = r"""
name: requirement_pin
short_description: A requirement as pip freeze would list it, its name normalised (PEP 503)
version_added: 0.1.0
description:
  - Takes a requirement (C(Ray[default]==2.60.0)), a pip freeze line (C(sparklab_engine==0.2.0)) or a
    C(name-version) of an installed distribution rewritten as C(name==version), and returns the distribution's
    PEP 503 name followed by its version specifier, lower-cased, without extras or markers, e.g. C(ray==2.60.0),
    so pins and installed distributions compare as text.
  - A direct reference (C(x @ url)) becomes its name alone; text that names no distribution (pip freeze's C(-e) lines)
    comes back unchanged.
options:
  _input:
    description: One requirement string.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Every pin of the profile is installed
  ansible.builtin.assert:
    that:
      - pins | difference(installed) | length == 0
  vars:
    pins: "{{ spark_profile | sparkctl.spark.profile_venv_packages | map('sparkctl.spark.requirement_pin') | list }}"
    installed: "{{ pip_freeze.stdout_lines | map('sparkctl.spark.requirement_pin') | list }}"
"""

RETURN = r"""
_value:
  description: C(<PEP 503 name><specifier>), e.g. C(ray==2.60.0).
  type: str
"""


class FilterModule:
    def filters(self):
        return {"requirement_pin": requirement_pin}

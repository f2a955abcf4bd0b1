# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""An apt install that failed in --check only because the package lists are stale."""

from __future__ import annotations

import re

DOCUMENTATION = r"""
name: apt_unresolved_in_check
short_description: An apt result that failed in check mode only because the package lists do not know the package yet
version_added: 0.1.0
description:
  - C(ansible.builtin.apt) does not refresh the package lists in check mode (C(cache_valid_time) and C(update_cache)
    are only honoured by a real run). On a node whose lists are missing or stale (a fresh install, a container image) a
    package that a real run would install after the refresh is reported as C(No package matching 'name' is available).
  - This test is true for exactly that result in check mode, so a task can report it as the change a run would make
    instead of failing the whole --check run. Outside check mode, and for any other failure, it is false.
options:
  _input:
    description: The registered result of an C(ansible.builtin.apt) task.
    type: dict
    required: true
  check_mode:
    description: Whether the run is a check run (pass C(ansible_check_mode)).
    type: bool
    required: true
"""

EXAMPLES = r"""
- name: Install earlyoom
  ansible.builtin.apt:
    name: earlyoom
    cache_valid_time: 86400
  register: install
  changed_when: install is changed or install is sparkctl.spark.apt_unresolved_in_check(ansible_check_mode)
  failed_when: install is failed and install is not sparkctl.spark.apt_unresolved_in_check(ansible_check_mode)
"""

RETURN = r"""
_value:
  description: True when the check run failed only on a package the lists do not know.
  type: bool
"""

_UNKNOWN_PACKAGE = re.compile(r"^No package matching '[^']+' is available$")


def apt_unresolved_in_check(result, check_mode):
    if not check_mode or not isinstance(result, dict) or not result.get("failed"):
        return False
    return bool(_UNKNOWN_PACKAGE.match(str(result.get("msg", "")).strip()))


class TestModule:
    def tests(self):
        return {"apt_unresolved_in_check": apt_unresolved_in_check}

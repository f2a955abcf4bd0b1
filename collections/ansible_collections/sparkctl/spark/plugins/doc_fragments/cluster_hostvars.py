# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The input and first argument of the filters that read every cluster host's variables."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  _input:
    description: The C(hostvars) magic variable.
    type: dict
    required: true
  cluster_hosts:
    description: The cluster, C(groups['spark_head'] + groups['spark_workers']).
    type: list
    elements: str
    required: true
"""

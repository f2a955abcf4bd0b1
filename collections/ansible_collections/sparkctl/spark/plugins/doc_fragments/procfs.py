# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The option of the modules that read processes from procfs."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  proc_root:
    description: Where procfs is mounted.
    type: path
    default: /proc
"""

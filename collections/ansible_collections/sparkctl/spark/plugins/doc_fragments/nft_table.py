# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Options of the modules that work on sparkctl's nftables table."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  family:
    description: The table's family.
    type: str
    default: inet
  table:
    description: The table's name.
    type: str
    default: sparkctl
  nft:
    description: Path of the C(nft) binary.
    type: path
    default: /usr/sbin/nft
"""

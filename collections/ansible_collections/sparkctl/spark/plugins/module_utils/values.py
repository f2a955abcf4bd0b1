# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Reading a value a tool or sysfs printed, where a missing or garbled one is reported as null
rather than failed on: one reading for the readers that share it (gpu.py, sysfs_net.py)."""

from __future__ import annotations


def int_or_none(value):
    """int(value), or None for None or text that is not a whole number."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return None

# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""One readable line from the progress file sparkctl.spark.checkpoint_sync keeps
while it runs in the background."""

from __future__ import annotations

DOCUMENTATION = r"""
name: checkpoint_progress_line
short_description: Summarise a checkpoint transfer's progress file in one line
version_added: 0.1.0
description:
  - Turns the JSON progress file of C(sparkctl.spark.checkpoint_sync) into one line with the phase, elapsed time,
    files and bytes verified on the head, per worker files and bytes mirrored and what is in flight, and the last event.
options:
  _input:
    description: The parsed progress file.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Show the transfer's progress
  ansible.builtin.debug:
    msg: "{{ progress_raw.content | b64decode | from_json | sparkctl.spark.checkpoint_progress_line }}"
"""

RETURN = r"""
_value:
  description: The line.
  type: str
"""


def _size(n_bytes):
    value = float(n_bytes or 0)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.1f} {unit}" if unit != "B" else f"{int(value)} B"
        value /= 1024
    return f"{value:.1f} TiB"  # pragma: no cover - loop always returns


def checkpoint_progress_line(progress):
    progress = progress or {}
    files_total = progress.get("files_total") or 0
    bytes_total = progress.get("bytes_total") or 0
    elapsed = float(progress.get("elapsed_s") or 0.0)
    parts = [
        f"[{progress.get('phase', '?')}] {elapsed:.0f} s",
        f"head {progress.get('files_verified_on_head', 0)}/{files_total} files verified, "
        f"{_size(progress.get('bytes_downloaded'))} downloaded of {_size(bytes_total)}",
    ]
    for name, worker in sorted((progress.get("workers") or {}).items()):
        line = f"{name} {worker.get('files_done', 0)}/{files_total} files, {_size(worker.get('bytes_done'))}"
        in_flight = worker.get("in_flight") or []
        if in_flight:
            line += f" (copying {', '.join(in_flight)})"
        parts.append(line)
    if progress.get("last_event"):
        parts.append(f"last: {progress['last_event']}")
    return " | ".join(parts)


class FilterModule:
    def filters(self):
        return {"checkpoint_progress_line": checkpoint_progress_line}

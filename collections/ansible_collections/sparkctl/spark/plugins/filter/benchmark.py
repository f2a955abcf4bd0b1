# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The benchmark client's progress file as one line, for the stage that waits for it."""

from __future__ import annotations

import json

DOCUMENTATION = r"""
name: bench_progress_line
short_description: The benchmark client's last progress record as one line
version_added: 0.1.0
description:
  - Reads the progress file of C(python -m sparkctl.bench run --progress-file), one JSON line per finished measurement
    point, and returns the last point as one line (which point of how many, its prompt tokens and streams, or the load
    of a rate point, the seconds since the start, the client's message); lines that are not JSON are skipped.
  - Before the first point has finished it says the client is warming up.
options:
  _input:
    description: The progress file's text (or its lines joined).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Show how far the benchmark got
  ansible.builtin.debug:
    msg: "{{ progress_slurp.content | b64decode | sparkctl.spark.bench_progress_line }}"
"""

RETURN = r"""
_value:
  description: The line.
  type: str
"""


def bench_progress_line(text):
    """The last progress record of the benchmark client as one human line."""
    records = []
    for line in str(text or "").splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    if not records:
        return "benchmark: warming up (no measurement point finished yet)"
    last = records[-1]
    # A rate point (a --load with a schedule) has no streams: its load says what it was.
    if last.get("streams") is None and last.get("load"):
        load = "load %s" % last["load"]
    else:
        load = "%s streams" % last.get("streams", "?")
    return "benchmark: point %s of %s done (%s prompt tokens, %s) after %.0f s%s" % (
        last.get("point", "?"), last.get("points", "?"), last.get("prompt_tokens", "?"), load,
        float(last.get("elapsed_s") or 0), (": " + last["message"]) if last.get("message") else "")


class FilterModule:
    def filters(self):
        return {"bench_progress_line": bench_progress_line}

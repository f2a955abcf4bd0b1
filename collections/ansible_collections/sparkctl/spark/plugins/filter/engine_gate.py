# -*- coding: utf-8 -*-
# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The engine's memory gate for roles and playbooks: the files it uses and what status prints of it."""

from __future__ import annotations

import base64

from ansible_collections.sparkctl.spark.plugins.module_utils import engine_gate, rank_guard

DOCUMENTATION = r"""
name: engine_gate_files
short_description: The engine memory gate's program (its text) and the files it reads and writes on a node
version_added: 0.1.0
description:
  - The engine's units run C(/usr/bin/python3 GATE_SCRIPT check UNIT) before every start (C(module_utils/engine_gate.py),
    which is the program itself). The paths are fixed there, once, because the rendered units name them.
  - Companion filter C(engine_gate_lines) (documented in RETURN) turns what C(sparkctl status) read on a node (the gate's
    state file as C(ansible.builtin.slurp) returns it, and the engine units' C(systemd_service) status) into lines.
options:
  _input:
    description: Anything (ignored).
    type: raw
    required: true
"""

EXAMPLES = r"""
- name: Install the gate
  ansible.builtin.copy:
    content: "{{ gate.script_text }}"
    dest: "{{ gate.script }}"
    mode: "0755"
  vars:
    gate: "{{ none | sparkctl.spark.engine_gate_files }}"

- name: Say why the engine is not running
  ansible.builtin.debug:
    msg: "{{ status_gate | sparkctl.spark.engine_gate_lines(status_unit_states.results) }}"
"""

RETURN = r"""
_value:
  description:
    - "C(engine_gate_files): C(script), C(script_dir), C(script_text), C(baseline), C(state), and the rank guard
      (C(module_utils/rank_guard.py), which the units of topology vllm_ranks run) as C(guard_script) and
      C(guard_script_text)."
    - "C(engine_gate_lines): a list of lines: the gate's verdict when it held the engine back
      (C(engine held back: MemAvailable X GiB, baseline Y GiB, margin Z GiB ...)), and for each gated unit that
      is failed or restarted, its result and restart counter (systemd's C(NRestarts))."
  type: raw
"""


def _program_text(module):
    with open(module.__file__, encoding="utf-8") as handle:
        return handle.read()


def engine_gate_files(_ignored=None):
    script_dir = engine_gate.GATE_SCRIPT.rsplit("/", 1)[0]
    # The rank guard (vllm_ranks' units run their engine under it) lives beside the gate.
    if rank_guard.GUARD_SCRIPT.rsplit("/", 1)[0] != script_dir:
        raise AssertionError("the rank guard must live in the memory gate's directory, which the role creates")
    return {"script": engine_gate.GATE_SCRIPT, "script_dir": script_dir,
            "script_text": _program_text(engine_gate), "guard_script": rank_guard.GUARD_SCRIPT,
            "guard_script_text": _program_text(rank_guard), "baseline": engine_gate.BASELINE_FILE,
            "state": engine_gate.STATE_FILE}


def engine_gate_lines(slurped, unit_results=None, gated_units=None):
    """Lines for status: the gate's refusal (from its state file) and the restarts and result of the
    engine units that are failed or were restarted by systemd."""
    lines = []
    content = (slurped or {}).get("content")
    state = None
    if content:
        try:
            state = engine_gate.read_state(base64.b64decode(content).decode("utf-8", "replace"))
        except ValueError:
            state = None
    if state and state.get("held"):
        lines.append("%s (checked %s)" % (state["message"], state.get("checked_at", "?")))
    gated = set(gated_units or [])
    for result in unit_results or []:
        status = (result or {}).get("status") or {}
        name = status.get("Id") or (result or {}).get("item")
        if not status or status.get("LoadState") == "not-found" or (gated and name not in gated):
            continue
        restarts = str(status.get("NRestarts", "0"))
        outcome = status.get("Result", "success")
        if status.get("ActiveState") == "failed" or outcome != "success" or restarts not in ("", "0"):
            # A failed unit whose Restart= would restart it is one systemd gave up on: its start limit
            # (systemd 252 keeps the last try's result, later ones say start-limit-hit).
            limit = ""
            restarting = status.get("Restart", "on-failure") != "no"
            if status.get("ActiveState") == "failed" and (restarting or outcome == "start-limit-hit"):
                limit = " (start limit: at most %s starts in %s, systemd tries no more; a run of the serve stage " \
                        "clears it)" % (status.get("StartLimitBurst", "?"), status.get("StartLimitIntervalUSec", "?"))
            # NRestarts counts the restarts systemd scheduled, the one the start limit refused included.
            lines.append("%s: %s, result %s, restart counter %s%s" % (
                name, status.get("ActiveState", "?"), outcome, restarts or "0", limit))
    return lines


class FilterModule:
    def filters(self):
        return {"engine_gate_files": engine_gate_files, "engine_gate_lines": engine_gate_lines}

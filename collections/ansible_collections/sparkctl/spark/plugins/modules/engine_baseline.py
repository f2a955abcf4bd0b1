#!/usr/bin/python
# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: engine_baseline
short_description: Check the engine's memory gate and record the node's pre-engine MemAvailable baseline
version_added: 0.1.0
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - sparkctl.spark.attributes.linux
attributes:
  check_mode:
    details:
      - Judges the gate and reports whether the baseline would be written, with the diff; writes nothing.
  diff_mode:
    support: full
    details:
      - The baseline file's text before and after.
description:
  - The engine's units run a memory gate before every start and restart (C(engine_gate.py check UNIT), installed by
    the C(engine_service) role). MemAvailable must be at least the baseline minus a margin, or the start fails and the
    units' start limit ends the tries. This module is the same check before a start sparkctl makes itself (one
    computation, C(module_utils/engine_gate.py)), and the only writer of the baseline.
  - Reads MemAvailable and the baseline O(path). When none of O(units) is active on the node (no engine holds
    memory), judges MemAvailable against the recorded baseline and, unless that holds the engine back, records
    MemAvailable as the new baseline (with O(margin_bytes) and O(settle_seconds), which the gate reads from the file),
    root-owned, mode C(0644), written through a temporary file.
  - Fails with the numbers when the gate would hold the engine back, unless O(rebaseline) is set (the node's memory
    use changed for good). While one of O(units) is active nothing is recorded (RV(recorded) false).
author:
  - sparkctl developers (!UNKNOWN)
options:
  path:
    description: The baseline file.
    type: path
    default: /var/lib/sparkctl/engine-baseline.json
  margin_bytes:
    description: How far below the baseline MemAvailable may be when a start is tried.
    type: int
    required: true
  settle_seconds:
    description: How long the gate waits, before it refuses, for memory a process that just ended is giving back.
    type: int
    default: 30
  units:
    description: The units on this node that allocate the engine's memory; while one is active nothing is recorded.
    type: list
    elements: str
    default: []
  settle:
    description:
      - When none of O(units) is active and MemAvailable is below the baseline minus the margin, wait up to the
        baseline's C(settle_seconds) for it to come back before judging, as the gate does before a start (an engine
        this run just stopped is still giving its memory back).
    type: bool
    default: false
  rebaseline:
    description: Record MemAvailable even when it is below the baseline minus the margin.
    type: bool
    default: false
  meminfo_path:
    description: Where C(/proc/meminfo) is read.
    type: path
    default: /proc/meminfo
seealso:
  - module: sparkctl.spark.host_facts
notes:
  - Writing under C(/var/lib/sparkctl) needs root; run it with C(become).
"""

EXAMPLES = r"""
- name: Check the memory gate and record the pre-engine baseline
  sparkctl.spark.engine_baseline:
    margin_bytes: 4294967296
    units: [sparkctl-engine.service]
  become: true
"""

RETURN = r"""
recorded:
  description: Whether MemAvailable is (in check mode, would be) the new baseline.
  type: bool
  returned: always
held:
  description: Whether the gate would hold the engine back now (against the baseline recorded before this run).
  type: bool
  returned: always
available_bytes:
  description: MemAvailable now.
  type: int
  returned: always
  sample: 128849018880
baseline_bytes:
  description: The baseline this run judged against, V(null) without one.
  type: int
  returned: always
margin_bytes:
  description: The margin of that baseline, V(null) without one.
  type: int
  returned: always
floor_bytes:
  description: The least MemAvailable a start needs (baseline minus margin), V(null) without a baseline.
  type: int
  returned: always
message:
  description: The verdict in words, with the numbers.
  type: str
  returned: always
  sample: "memory back: MemAvailable 119.8 GiB, baseline 120.0 GiB, margin 4.0 GiB (needs >= 116.0 GiB)"
active_units:
  description: Those of O(units) found active (then nothing is recorded).
  type: list
  elements: str
  returned: always
problem:
  description: Why the file found at O(path) was not a baseline (it is replaced), V(null) otherwise.
  type: str
  returned: always
"""

import json
import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sparkctl.spark.plugins.module_utils import engine_gate


def _active(module, units):
    if not units:
        return []
    systemctl = module.get_bin_path("systemctl", required=True)
    active = []
    for unit in units:
        rc, out, _err = module.run_command([systemctl, "is-active", unit])
        # "activating" (a boot in progress) and "reloading" hold memory too.
        if out.strip() in ("active", "activating", "reloading", "deactivating"):
            active.append(unit)
    return active


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", default=engine_gate.BASELINE_FILE),
            margin_bytes=dict(type="int", required=True),
            settle_seconds=dict(type="int", default=30),
            units=dict(type="list", elements="str", default=[]),
            rebaseline=dict(type="bool", default=False),
            settle=dict(type="bool", default=False),
            meminfo_path=dict(type="path", default=engine_gate.MEMINFO),
        ),
        supports_check_mode=True,
    )
    params = module.params
    path = params["path"]
    if params["margin_bytes"] < 0 or params["settle_seconds"] < 0:
        module.fail_json(msg="margin_bytes and settle_seconds must not be negative (engine_service_gate_margin_bytes, "
                             "engine_service_gate_settle_seconds).")
    try:
        with open(path, encoding="utf-8") as handle:
            before = handle.read()
    except FileNotFoundError:
        before = None
    except OSError as exc:
        module.fail_json(msg="Cannot read the engine's memory baseline %s: %s" % (path, exc.strerror or exc))
    problem, baseline = None, None
    try:
        baseline = engine_gate.read_baseline(path) if before is not None else None
    except engine_gate.GateError as exc:
        problem = str(exc)
    available = engine_gate.read_mem_available(params["meminfo_path"])
    if available is None:
        module.fail_json(msg="MemAvailable could not be read from %s." % params["meminfo_path"])
    active = _active(module, params["units"])
    if params["settle"] and not active and baseline is not None:
        verdict = engine_gate.settle(lambda: engine_gate.read_mem_available(params["meminfo_path"]), baseline)
        available = verdict["available_bytes"]
        if available is None:
            module.fail_json(msg="MemAvailable could not be read from %s." % params["meminfo_path"])
    else:
        verdict = engine_gate.judge(available, baseline)
    result = dict(changed=False, recorded=False, active_units=active, problem=problem,
                  **{key: verdict[key] for key in ("held", "available_bytes", "baseline_bytes", "margin_bytes",
                                                   "floor_bytes", "message")})
    if active:
        # An engine holds memory now: its MemAvailable is no baseline.
        result["message"] = "%s; not recorded as the baseline while %s runs" % (verdict["message"], ", ".join(active))
        module.exit_json(**result)
    if verdict["held"] and not params["rebaseline"]:
        module.fail_json(msg="%s Or, when the node's memory use changed for good, record the current value as the new "
                             "baseline for one run: -e engine_service_gate_rebaseline=true." % verdict["message"], **result)
    doc = {"mem_available_bytes": available, "margin_bytes": params["margin_bytes"],
           "settle_seconds": params["settle_seconds"],
           "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    after = json.dumps(doc, indent=2, sort_keys=True) + "\n"
    result.update(changed=True, recorded=True)
    if not module.check_mode:
        try:
            engine_gate.write_json_atomic(path, doc)
            if os.geteuid() == 0:
                os.chown(path, 0, 0)
        except OSError as exc:
            module.fail_json(msg="Cannot write the engine's memory baseline %s: %s" % (path, exc.strerror or exc))
    if module._diff:
        result["diff"] = dict(before=before or "", after=after, before_header=path, after_header=path)
    module.exit_json(**result)


if __name__ == "__main__":
    main()

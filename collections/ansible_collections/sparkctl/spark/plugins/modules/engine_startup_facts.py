#!/usr/bin/python
# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: engine_startup_facts
short_description: Read the engine's startup facts from its log and compare them with the profile
version_added: 0.1.0
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - sparkctl.spark.attributes.info_posix
description:
  - Reads the log of the engine unit's current start (its systemd invocation, so lines of an earlier boot are never
    mistaken for this one) and evaluates the profile's C(startup_log) rules against it, e.g. the KV cache size in tokens,
    the maximum concurrency at the configured length, the GiB of weights each rank loaded, the MoE backend in use.
  - Every matching line counts. With Ray each tensor-parallel rank prints its own lines (rank > 0 behind a
    C((RayWorkerWrapper pid=P, ip=IP\)) prefix); a numeric rule passes only when every rank's value passes.
  - Numeric rules (C(min), C(max), C(tolerance) or a numeric C(expect)) read the regex's first group as a number;
    thousands separators (C(1,089,536)) are allowed. A string C(expect) must equal the first group. A rule with
    nothing to compare passes when a line matches.
  - The module reports; it does not fail on a mismatch. RV(failed_rules) and RV(warned_rules) name the rules whose
    C(on_mismatch) is V(fail) or V(warn), and the caller decides. They are not called C(failed) and C(warnings)
    because Ansible reads those keys of a result as the task's own failure and warnings.
  - Reads only; the log is read with C(journalctl _SYSTEMD_INVOCATION_ID=<id>) from the invocation's first line on.
author:
  - sparkctl developers (!UNKNOWN)
options:
  unit:
    description:
      - The engine's systemd unit. It must be running (have a current invocation), else the module fails.
    type: str
    required: true
  rules:
    description:
      - The profile's C(startup_log) list, each C({name, regex, expect | min | max, tolerance, on_mismatch}).
    type: list
    elements: dict
    required: true
  log_lines:
    description:
      - How many lines of the invocation's log are read, from its first line on. The startup lines come first;
        the limit only bounds the work on an engine that has been serving for long.
    type: int
    default: 20000
  lines:
    description:
      - Evaluate these log lines instead of reading the journal (tests, or a log saved elsewhere). O(unit) is then
        not queried.
    type: list
    elements: str
seealso:
  - module: sparkctl.spark.engine_health
notes:
  - Reading another unit's journal needs root or the C(systemd-journal) / C(adm) group; run it with C(become).
"""

EXAMPLES = r"""
- name: Read the engine's startup facts
  sparkctl.spark.engine_startup_facts:
    unit: "{{ spark_units.startup }}"
    rules: "{{ spark_profile.startup_log | default([]) }}"
  become: true
  register: verify_startup

- name: Fail on the rules the profile says must hold
  ansible.builtin.assert:
    that: verify_startup.failed_rules | length == 0
    fail_msg: "{{ verify_startup.startup | selectattr('ok', 'false') | map(attribute='message') | join('; ') }}"
"""

RETURN = r"""
startup:
  description: One result per rule, in the order of O(rules).
  type: list
  elements: dict
  returned: always
  contains:
    name:
      description: The rule's name.
      type: str
      sample: kv_cache_tokens
    found:
      description: How many log lines matched.
      type: int
      sample: 1
    matched_values:
      description: The value of every matching line (numbers for numeric rules, else the first group or the match).
      type: list
      elements: raw
      sample: [1089536.0]
    value:
      description: The first of RV(startup[].matched_values), V(null) when nothing matched.
      type: raw
      sample: 1089536.0
    expect:
      description: The rule's C(expect), V(null) when it has none.
      type: raw
    min:
      description: The rule's C(min), V(null) when it has none.
      type: raw
      sample: 1048576
    max:
      description: The rule's C(max), V(null) when it has none.
      type: raw
    tolerance:
      description: The rule's C(tolerance), V(null) when it has none.
      type: raw
    ok:
      description: Whether the rule holds (found, and every value passes).
      type: bool
    on_mismatch:
      description: V(warn) or V(fail), from the rule.
      type: str
    message:
      description: The result in words.
      type: str
      sample: "kv_cache_tokens: 1089536 tokens >= min 1048576"
    lines:
      description: Up to eight of the matching lines.
      type: list
      elements: str
    folded:
      description: Lines Ray folded into a C([repeated Nx across cluster]) note on a matching line.
      type: int
      sample: 0
failed_rules:
  description: Names of the rules that do not hold and whose C(on_mismatch) is V(fail).
  type: list
  elements: str
  returned: always
  sample: [kv_cache_tokens]
warned_rules:
  description: Names of the rules that do not hold and whose C(on_mismatch) is V(warn).
  type: list
  elements: str
  returned: always
  sample: [moe_backend]
invocation_id:
  description: The unit's current systemd invocation whose log was read; V(null) with O(lines).
  type: str
  returned: always
  sample: 8c1f3a0e5b2d4c6f9a7e1d3b5c7f9a1e
lines_read:
  description: How many log lines were evaluated.
  type: int
  returned: always
  sample: 412
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkctl.spark.plugins.module_utils.engine_startup import (
    StartupLogError,
    read_invocation_lines,
    startup_result,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            unit=dict(type="str", required=True),
            rules=dict(type="list", elements="dict", required=True),
            log_lines=dict(type="int", default=20000),
            lines=dict(type="list", elements="str"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    invocation_id = None
    if params["lines"] is not None:
        lines = params["lines"]
    else:
        try:
            invocation_id, lines = read_invocation_lines(module, params["unit"], params["log_lines"])
        except StartupLogError as exc:
            module.fail_json(msg=exc.msg, **({} if exc.rc is None else {"rc": exc.rc}))
    module.exit_json(changed=False, **startup_result(lines, params["rules"], invocation_id))


if __name__ == "__main__":
    main()

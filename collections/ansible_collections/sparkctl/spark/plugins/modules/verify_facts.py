#!/usr/bin/python
# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: verify_facts
short_description: Read what the verify stage judges on a node with one module run
version_added: 0.1.0
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - sparkctl.spark.attributes.info_linux
  - sparkctl.spark.engine_runtime
description:
  - Reads, with the same code and in one module run, what M(sparkctl.spark.runtime_versions) (the versions that must
    match on every node), M(sparkctl.spark.host_facts) (C(/proc/meminfo)) and, on the head,
    M(ansible.builtin.stat) (the API key file), M(ansible.builtin.systemd_service) (the engine unit's
    C(ActiveState)) and M(sparkctl.spark.engine_startup_facts) (the startup facts) read, with the node's deployment
    record (M(sparkctl.spark.deployment_record)) and, on the head, the checkpoint's manifest. A module run is what a
    no-op run pays for (docs/performance.md).
  - The startup facts are read when O(startup_rules) is not empty. In check mode only from an active unit (a cluster
    not served yet has no engine). A unit without a current invocation, or a log that cannot be read, is not a
    module failure; RV(startup_error) says why, and the caller decides (the verify role stops on it after probing the
    endpoint).
  - A missing C(nvidia-smi), venv, docker or image is not a module failure either; RV(problems) says why, as
    M(sparkctl.spark.runtime_versions) does.
  - What a deployment record takes from this read is data written where the engine's service user may write (the
    checkpoint's manifest, the venv's distributions, an image's labels). The module fails, naming the file (or the
    runtime) and the field, when one of those values is not of its shape (a 40-hex-digit commit, a hub repo id, a
    revision, a version, a digest), so a template or a command in one is never recorded. A node's record whose values
    are not of their shape is returned as no record, with RV(deployment_problem) saying why.
  - Reads only.
author:
  - sparkctl developers (!UNKNOWN)
options:
  api_key_file:
    description: The API key file whose presence RV(api_key_file) reports (the head's). Its content is not read.
    type: path
  startup_unit:
    description: The engine's systemd unit, whose C(ActiveState) RV(unit) reports and whose log holds the startup lines.
    type: str
  units:
    description:
      - The engine's units the profile renders for this node (its ranks, Ray's units, the router), whose C(ActiveState)
        RV(units) reports. The served model is down while any of them is.
    type: list
    elements: str
    default: []
  startup_rules:
    description:
      - The profile's C(startup_log) rules, as O(sparkctl.spark.engine_startup_facts#module:rules). Needs O(startup_unit).
    type: list
    elements: dict
    default: []
  startup_log_lines:
    description: How many lines of the invocation's log are read, as O(sparkctl.spark.engine_startup_facts#module:log_lines).
    type: int
    default: 20000
  deployment_file:
    description: The node's deployment record, returned as RV(deployment).
    type: path
  engine_gate_file:
    description:
      - The engine memory gate's state file (C(module_utils/engine_gate.py) writes it at each start of an engine unit),
        returned as RV(engine_gate).
    type: path
  checkpoint_manifest_file:
    description:
      - The manifest the checkpoint stage keeps on the head (C(<checkpoint dir>/.sparkctl-manifest.json)), whose origin
        RV(checkpoint_manifest) reports, without its file list.
    type: path
  fit_file:
    description:
      - The fit estimate the checkpoint stage keeps on the head (C(<checkpoint dir>/.sparkctl-fit.json)), returned as
        RV(fit_estimate) for the comparison with the engine's startup facts.
    type: path
seealso:
  - module: sparkctl.spark.runtime_versions
  - module: sparkctl.spark.engine_startup_facts
  - module: sparkctl.spark.engine_probe
notes:
  - Reading the engine's journal and the key file's directory needs root; run it with C(become).
"""

EXAMPLES = r"""
- name: Read this node for the verdict (the head's key and engine unit too)
  sparkctl.spark.verify_facts:
    runtime_kind: venv
    venv_path: /opt/sparkctl/venvs/solar-open2
    packages: "{{ spark_profile.runtime.venv.packages + ['torch'] }}"
    api_key_file: "{{ spark_api_key_file if inventory_hostname == spark_cluster.head.name else omit }}"
    startup_unit: "{{ spark_units.startup if inventory_hostname == spark_cluster.head.name else omit }}"
    startup_rules: "{{ spark_profile.startup_log if inventory_hostname == spark_cluster.head.name else [] }}"
  become: true
  register: verify_node
"""

RETURN = r"""
versions:
  description: What must match across nodes, as M(sparkctl.spark.runtime_versions) returns it.
  type: dict
  returned: always
problems:
  description: Why a version could not be read, as M(sparkctl.spark.runtime_versions) returns it.
  type: list
  elements: str
  returned: always
nccl_preload:
  description: The preload as found, as M(sparkctl.spark.runtime_versions) returns it.
  type: dict
  returned: always
meminfo:
  description: Memory counters from C(/proc/meminfo), as RV(sparkctl.spark.host_facts#module:ansible_facts.spark_host_facts.meminfo).
  type: dict
  returned: always
  sample: {mem_total_bytes: 128501256192, mem_available_bytes: 121452777472}
engine_gate:
  description:
    - The engine memory gate's last verdict on this node (C(held), C(message), C(available_bytes), C(baseline_bytes),
      C(margin_bytes), C(floor_bytes), C(unit), C(checked_at)); V(null) without O(engine_gate_file) or without a gate
      state on the node (no engine unit started since boot).
  type: dict
  returned: always
  sample: {held: false, message: "memory back: MemAvailable 119.8 GiB, baseline 120.0 GiB, margin 4.0 GiB (needs >= 116.0 GiB)"}
api_key_file:
  description: The key file's path and whether it exists (a link counts as it stands); V(null) without O(api_key_file).
  type: dict
  returned: always
  sample: {path: /etc/sparkctl/api-key.env, exists: true}
units:
  description: Per unit of O(units), its C(ActiveState) (V(null) when systemctl cannot tell).
  type: dict
  returned: always
  sample: {sparkctl-vllm-rank.service: active}
unit:
  description: The engine unit's name and C(ActiveState) (V(null) when systemctl cannot tell); V(null) without O(startup_unit).
  type: dict
  returned: always
  sample: {name: sparkctl-engine.service, active_state: active}
startup:
  description:
    - The startup facts as M(sparkctl.spark.engine_startup_facts) returns them (C(startup), C(failed_rules),
      C(warned_rules), C(invocation_id), C(lines_read)); empty when they were not read.
  type: dict
  returned: always
startup_error:
  description: Why the startup facts could not be read, V(null) when they were or were not to be read.
  type: str
  returned: always
  sample: null
deployment:
  description: The node's deployment record, V(null) without O(deployment_file), without a record, or when the file is not one.
  type: dict
  returned: always
deployment_problem:
  description: Why the file at O(deployment_file) is not a record (it is replaced by the next one), V(null) otherwise.
  type: str
  returned: always
  sample: null
checkpoint_manifest:
  description:
    - C(source), C(repo_id), C(revision) and C(commit) of the checkpoint's manifest; V(null) without O(checkpoint_manifest_file)
      or a readable manifest.
  type: dict
  returned: always
  sample: {source: hub, repo_id: upstage/Solar-Open2-250B-NVFP4, revision: main, commit: 3f1e0c2a9b8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f}
fit_estimate:
  description:
    - The fit estimate kept at O(fit_file) (C(weights_per_rank_bytes), C(kv_bytes_per_token), C(kv_tokens), ...); V(null)
      without O(fit_file) or a readable one.
  type: dict
  returned: always
  sample: {profile: lab-standin, weights_per_rank_bytes: 537202688, kv_bytes_per_token: 20480, kv_tokens: 52428}
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkctl.spark.plugins.module_utils.deployment import (
    manifest_problems,
    read_record,
    record_problems,
    versions_problems,
)
from ansible_collections.sparkctl.spark.plugins.module_utils.engine_gate import read_state
from ansible_collections.sparkctl.spark.plugins.module_utils.files import read_json_object
from ansible_collections.sparkctl.spark.plugins.module_utils.engine_startup import read_unit_startup, unit_active_state
from ansible_collections.sparkctl.spark.plugins.module_utils.host import parse_meminfo, read_text
from ansible_collections.sparkctl.spark.plugins.module_utils.runtime_versions import (
    RUNTIME_ARGUMENT_SPEC,
    RUNTIME_REQUIRED_IF,
    read_runtime_versions,
)

PROC_ROOT = "/proc"


def main():
    module = AnsibleModule(
        argument_spec=dict(
            RUNTIME_ARGUMENT_SPEC,
            api_key_file=dict(type="path"),
            startup_unit=dict(type="str"),
            units=dict(type="list", elements="str", default=[]),
            startup_rules=dict(type="list", elements="dict", default=[]),
            startup_log_lines=dict(type="int", default=20000),
            deployment_file=dict(type="path"),
            checkpoint_manifest_file=dict(type="path"),
            fit_file=dict(type="path"),
            engine_gate_file=dict(type="path"),
        ),
        required_if=RUNTIME_REQUIRED_IF,
        supports_check_mode=True,
    )
    params = module.params
    if params["startup_rules"] and not params["startup_unit"]:
        module.fail_json(msg="startup_rules needs startup_unit: the rules are read against that unit's log.")
    result = read_runtime_versions(module, **dict((name, params[name]) for name in RUNTIME_ARGUMENT_SPEC))
    result["meminfo"] = parse_meminfo(read_text(os.path.join(PROC_ROOT, "meminfo")))
    key = params["api_key_file"]
    result["api_key_file"] = dict(path=key, exists=os.path.lexists(key)) if key else None
    result.update(unit=None, startup={}, startup_error=None)
    result["units"] = dict((name, unit_active_state(module, name)) for name in params["units"])
    if params["startup_unit"]:
        startup, error, state = read_unit_startup(module, params["startup_unit"], params["startup_rules"],
                                                  params["startup_log_lines"], check_mode=module.check_mode)
        result.update(unit=dict(name=params["startup_unit"], active_state=state), startup=startup, startup_error=error)
    result["deployment"], result["deployment_problem"] = (
        node_record(params["deployment_file"]) if params["deployment_file"] else (None, None))
    result["engine_gate"] = read_state(read_text(params["engine_gate_file"])) if params["engine_gate_file"] else None
    manifest_file = params["checkpoint_manifest_file"]
    result["checkpoint_manifest"] = checkpoint_manifest(manifest_file) if manifest_file else None
    result["fit_estimate"] = read_json_object(params["fit_file"]) if params["fit_file"] else None
    problems = read_problems(result, params)
    if problems:
        module.fail_json(msg="This node holds values sparkctl did not write in that shape (whoever can write these "
                             "files, the engine's service user among them, may have changed them); nothing was "
                             "recorded. Find out who changed them, then run the stage that writes each again: "
                             + "; ".join(problems), problems=problems)
    module.exit_json(changed=False, **result)


def read_problems(result, params):
    """Why a value this read returns, which the verify stage records (or a rollback compares), is not
    of its shape: one line per value, naming the file (or the runtime) and the field."""
    where = params["venv_path"] or params["image"] or params["image_container"] or params["runtime_kind"]
    problems = ["the runtime's versions (%s): %s" % (where, p) for p in versions_problems(result.get("versions"))]
    if result.get("checkpoint_manifest") is not None:
        problems += ["%s: %s" % (params["checkpoint_manifest_file"], p)
                     for p in manifest_problems(result["checkpoint_manifest"])]
    return problems


def node_record(path):
    """(record, problem) of the node's record file, as read_record gives them; a record whose values
    are not of their shape is no record (its first-recorded time and status are not taken over, and
    the next write replaces it)."""
    record, problem = read_record(path)
    if record is not None:
        problems = record_problems(record)
        if problems:
            return None, "%s: not a record of sparkctl's: %s" % (path, "; ".join(problems))
    return record, problem


def checkpoint_manifest(path):
    """Where the checkpoint came from, as the manifest the checkpoint stage kept says (its file list
    is the checkpoint stage's business); None without a readable one."""
    manifest = read_json_object(path)
    if manifest is None:
        return None
    return dict((key, manifest.get(key)) for key in ("source", "repo_id", "revision", "commit"))


if __name__ == "__main__":
    main()

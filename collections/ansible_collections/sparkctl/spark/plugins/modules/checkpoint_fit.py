#!/usr/bin/python
# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: checkpoint_fit
short_description: Estimate whether a model profile fits a node from the checkpoint's real tensors, before the download
version_added: 0.1.0
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - sparkctl.spark.attributes.info_posix
  - sparkctl.spark.hub
description:
  - Runs on the head before the checkpoint stage writes anything. Reads the checkpoint's C(config.json) and every
    shard's safetensors header (from the hub with two range requests per shard, a few kilobytes each, or from a
    directory on the node), and computes the weights each rank holds, the KV bytes per token, the tokens the
    profile's KV pool buys and the memory the node has left after weights, KV pool and overhead (docs/fit.md).
  - The arithmetic is the collection's C(fit) module utility, the same C(sparkctl fit) prints.
  - The token is sent to the hub's own origin only, never over plain C(http://) to a host other than loopback
    (the C(hub_access) module utility's rules); it is never part of the result or a message.
attributes:
  check_mode:
    details:
      - The module only reads; it reads in check mode too.
author:
  - sparkctl developers (!UNKNOWN)
options:
  profile:
    description: The loaded model profile (C(spark_profile)); its topology, memory, engine arguments and checkpoint.
    type: dict
    required: true
  repo_id:
    description: The hub repo, C(org/name). Ignored when O(path) is given.
    type: str
  revision:
    description: The revision to read.
    type: str
    default: main
  path:
    description: A checkpoint directory on the node to read instead of the hub.
    type: path
  guard_bytes:
    description: The OOM guard's line (C(spark_oom_guard_min_available_bytes)).
    type: int
    default: 8589934592
  available_bytes:
    description:
      - Memory a node has for the engine. V(0) reads this node's C(MemAvailable) from C(/proc/meminfo).
    type: int
    default: 0
  context:
    description: The context one sequence must hold; V(0) takes the profile's.
    type: int
    default: 0
  timeout:
    description: Seconds per hub request.
    type: int
    default: 30
  commit:
    description:
      - The commit of the checkpoint the estimate is for (the hub's for O(revision), or the kept manifest's), recorded in
        RV(kept) with the profile's inputs so a later run knows whether the kept estimate still stands. Empty for a path
        source.
    type: str
    default: ''
notes:
  - A checkpoint whose headers cannot be read (the hub out of reach, no safetensors) gives RV(read=false) and
    RV(fits=null) with RV(reason); the caller decides (the checkpoint stage says so and goes on).
"""

EXAMPLES = r"""
---
- name: Estimate the fit from the checkpoint's headers
  sparkctl.spark.checkpoint_fit:
    profile: "{{ spark_profile }}"
    repo_id: nota-ai/Solar-Open2-250B-Nota-NVFP4
    revision: main
    token: "{{ spark_hf_token }}"
  register: fit

- name: Refuse an oversized profile before the download
  ansible.builtin.assert:
    that: fit.fits is not false
    fail_msg: "{{ fit.message }}"
"""

RETURN = r"""
read:
  description: Whether the config and the headers were read.
  type: bool
  returned: always
fits:
  description: The verdict (null when nothing was read).
  type: bool
  returned: always
message:
  description: The refusal with the numbers and the fix, or a one-line summary when it fits.
  type: str
  returned: always
reason:
  description: Why nothing was read (null when it was).
  type: str
  returned: always
shards:
  description: The shard files read.
  type: list
  elements: str
  returned: always
estimate:
  description: The numbers (C(weights_per_rank_bytes), C(kv_bytes_per_token), C(kv_tokens), C(max_context),
    C(concurrency), C(left_bytes), C(guard_bytes), C(problems), C(warnings), ...); null when nothing was read.
  type: dict
  returned: always
kept:
  description:
    - What the checkpoint stage keeps of RV(estimate) for verify, which compares the engine's startup figures with it
      (C(profile), C(weights_per_rank_bytes), C(kv_bytes_per_token), C(kv_tokens), C(kv_pool_bytes), the parallel
      sizes, C(weights_source)); null when nothing was read.
    - Its C(made_for) records what the estimate was made for (the profile's name, parallel sizes, KV pool, KV dtype and
      C(max_num_seqs), and O(commit)); the checkpoint stage and verify make or ask for the estimate again when it
      differs from the current profile's (filter P(sparkctl.spark.checkpoint_fit_due#filter)).
  type: dict
  returned: always
  sample: {profile: lab-standin, weights_per_rank_bytes: 537202688, kv_bytes_per_token: 20480, kv_tokens: 52428,
           made_for: {version: 1, profile: lab-standin, commit: 0123abc, tensor_parallel: 2, kv_pool_bytes: 1073741824}}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkctl.spark.plugins.module_utils import fit
from ansible_collections.sparkctl.spark.plugins.module_utils.hub_access import HUB_ARGUMENT_SPEC, endpoint_problem, hub_options


def mem_available(path="/proc/meminfo"):
    with open(path, encoding="ascii") as handle:
        for line in handle:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return None


def summary(result):
    kv = ("" if result["kv_tokens"] is None else
          f", KV {result['kv_bytes_per_token']:,} B/token -> {result['kv_tokens']:,} tokens"
          + (f" ({result['concurrency']:.2f}x {result['context']:,})" if result["concurrency"] is not None else ""))
    return (f"profile {result['profile']} fits: weights {fit.gib(result['weights_per_rank_bytes'])} per rank{kv}, "
            f"{fit.gib(result['left_bytes'])} left of {fit.gib(result['node_available_bytes'])} "
            f"(OOM guard line {fit.gib(result['guard_bytes'])})")


def main():
    module = AnsibleModule(
        argument_spec=dict(
            HUB_ARGUMENT_SPEC,
            profile=dict(type="dict", required=True),
            repo_id=dict(type="str"),
            revision=dict(type="str", default="main"),
            path=dict(type="path"),
            guard_bytes=dict(type="int", default=fit.GUARD_BYTES),
            available_bytes=dict(type="int", default=0),
            context=dict(type="int", default=0),
            timeout=dict(type="int", default=30),
            commit=dict(type="str", default=""),
        ),
        required_one_of=[("repo_id", "path")],
        supports_check_mode=True,
    )
    p = module.params
    token, endpoint = hub_options(p)
    out = {"changed": False, "read": False, "fits": None, "reason": None, "shards": [], "estimate": None, "kept": None}
    problem = None if p["path"] else endpoint_problem(endpoint, token)
    if problem:
        module.fail_json(msg=problem, **out)
    try:
        if p["path"]:
            config, tensors, shards = fit.read_local_checkpoint(p["path"])
        else:
            config, tensors, shards = fit.read_hub_checkpoint(p["repo_id"], p["revision"], token=token,
                                                              endpoint=endpoint, timeout=p["timeout"])
    except fit.FitError as exc:
        out.update(reason=str(exc), message=f"the fit estimate was not made: {exc}")
        module.exit_json(**out)
    try:
        available = p["available_bytes"] or mem_available()
        result = fit.profile_estimate(p["profile"], config, tensors, context=p["context"] or None,
                                      node_available_bytes=available, guard_bytes=p["guard_bytes"])
    except (fit.FitError, TypeError, ValueError) as exc:
        module.fail_json(msg=f"the fit estimate of profile {p['profile'].get('name', '?')} failed: {exc}", **out)
    result.pop("weights", None)
    kept = fit.kept_estimate(result, fit.made_for(p["profile"], p["commit"]))
    out.update(read=True, fits=result["fits"], shards=shards, estimate=result, kept=kept,
               message=fit.refusal(result) if not result["fits"] else summary(result))
    module.exit_json(**out)


if __name__ == "__main__":
    main()

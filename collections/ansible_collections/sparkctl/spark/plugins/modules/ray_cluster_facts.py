#!/usr/bin/python
# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: ray_cluster_facts
short_description: Read which expected nodes and GPUs a Ray cluster has registered, optionally waiting for them
version_added: 0.1.0
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - sparkctl.spark.attributes.info_linux
description:
  - Asks Ray's state API (C(ray.util.state.list_nodes)) through the GCS at O(address) for every node it knows and
    compares the ALIVE ones with O(expected) (one entry per node, by link address, with the GPUs it must declare).
  - A DEAD record is ignored when the same address also has an ALIVE one (a raylet that restarted keeps its old
    record); an expected address without an ALIVE record is missing; an address with two ALIVE records (the old one
    not yet declared dead) is not settled.
  - With O(wait_timeout) above 0, polls until every expected node and GPU is registered or the time is up.
  - Fails only when O(fail_on_incomplete=true) and the cluster is still incomplete; the message lists the missing
    nodes (name and address) and GPUs, or why the GCS did not answer. Never changes anything.
  - Needs Ray. For a venv runtime run it with the venv's interpreter
    (C(ansible_python_interpreter=/opt/sparkctl/venvs/<profile>/bin/python)); for an image runtime, whose Ray lives
    in a container, give O(python_argv) and it asks from that Python instead.
author:
  - sparkctl developers (!UNKNOWN)
options:
  address:
    description: The GCS address, C(<head link address>:6379).
    type: str
    required: true
  expected:
    description: The nodes the cluster must have.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: Inventory name, for messages.
        type: str
      ip:
        description: The node's link address (C(--node-ip-address)).
        type: str
        required: true
      gpus:
        description: GPUs the node declares (C(--num-gpus)).
        type: float
        default: 1
      node_id:
        description:
          - The node id of the raylet running on the node (C(sparkctl.spark.ray_raylet_facts)); when given, only the
            record with this id counts, and an empty string means no raylet runs there.
        type: str
  wait_timeout:
    description: Seconds to poll until the cluster is complete. V(0) reads once.
    type: int
    default: 0
  interval:
    description: Seconds between polls.
    type: int
    default: 2
  query_timeout:
    description: Seconds one state-API call may take.
    type: int
    default: 10
  fail_on_incomplete:
    description: Fail when the cluster is still incomplete at the end.
    type: bool
    default: false
  python_argv:
    description:
      - A command that runs a Python holding Ray, e.g. V([/usr/bin/docker, exec, sparkctl-ray-head, python3]) for an
        image runtime. When given, the state API is asked from it (a short script on its command line, the nodes as
        JSON on its output) instead of from the module's own interpreter.
    type: list
    elements: str
    default: []
seealso:
  - name: Ray state API
    description: C(ray.util.state.list_nodes).
    link: https://docs.ray.io/en/latest/ray-observability/reference/api.html
"""

EXAMPLES = r"""
---
- name: Wait until both nodes and both GPUs are registered
  sparkctl.spark.ray_cluster_facts:
    address: 192.168.100.10:6379
    expected:
      - {name: spark1, ip: 192.168.100.10, gpus: 1}
      - {name: spark2, ip: 192.168.100.11, gpus: 1}
    wait_timeout: 120
    fail_on_incomplete: true
  vars:
    ansible_python_interpreter: /opt/sparkctl/venvs/lab-standin/bin/python

- name: The same for an image runtime, asked from the Python in the head's Ray container
  sparkctl.spark.ray_cluster_facts:
    address: 192.168.100.10:6379
    expected:
      - {name: spark1, ip: 192.168.100.10, gpus: 1}
      - {name: spark2, ip: 192.168.100.11, gpus: 1}
    python_argv: [/usr/bin/docker, exec, sparkctl-ray-head, python3]
"""

RETURN = r"""
cluster:
  description: The cluster against the expected nodes.
  returned: always
  type: dict
  contains:
    healthy:
      description: Every expected node is ALIVE with its GPUs.
      type: bool
    reachable:
      description: The GCS answered.
      type: bool
    error:
      description: Why the GCS did not answer, else null.
      type: str
    alive:
      description: ALIVE nodes (node_id, ip, state, head, gpus, state_message).
      type: list
      elements: dict
    dead:
      description: DEAD nodes whose address has no ALIVE record.
      type: list
      elements: dict
    missing:
      description: Expected nodes without an ALIVE record (name, ip, gpus).
      type: list
      elements: dict
    short_gpus:
      description: Expected nodes registered with fewer GPUs than expected (name, ip, have, want).
      type: list
      elements: dict
    unexpected:
      description: ALIVE addresses not in O(expected).
      type: list
      elements: str
    duplicated:
      description: Addresses with more than one ALIVE record (a restarted raylet whose old record the GCS has not yet
        declared dead); the cluster is not healthy until they settle.
      type: list
      elements: str
    gpus_total:
      description: GPUs of the ALIVE nodes.
      type: float
      sample: 2.0
    gpus_expected:
      description: GPUs O(expected) adds up to.
      type: float
      sample: 2.0
    nodes_alive:
      description: ALIVE nodes.
      type: int
      sample: 2
    nodes_expected:
      description: Entries of O(expected).
      type: int
      sample: 2
    summary:
      description: One sentence for humans.
      type: str
      sample: 2/2 nodes, 2/2 GPUs registered
waited:
  description: Seconds spent polling.
  returned: always
  type: float
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkctl.spark.plugins.module_utils.link_address import bare_address
from ansible_collections.sparkctl.spark.plugins.module_utils.ray_cluster import assess, query_nodes


def main():
    module = AnsibleModule(
        argument_spec=dict(
            address=dict(type="str", required=True),
            expected=dict(type="list", elements="dict", required=True, options=dict(
                name=dict(type="str"),
                ip=dict(type="str", required=True),
                gpus=dict(type="float", default=1),
                node_id=dict(type="str"),
            )),
            wait_timeout=dict(type="int", default=0),
            interval=dict(type="int", default=2),
            query_timeout=dict(type="int", default=10),
            fail_on_incomplete=dict(type="bool", default=False),
            python_argv=dict(type="list", elements="str", default=[]),
        ),
        supports_check_mode=True,
    )
    params = module.params
    try:
        expected = [{"name": e["name"], "ip": bare_address(e["ip"]), "gpus": e["gpus"], "node_id": e["node_id"]}
                    for e in params["expected"]]
    except ValueError as exc:
        module.fail_json(msg="expected: %s" % exc)
    started = time.monotonic()
    while True:
        nodes, error = query_nodes(params["address"], params["query_timeout"], params["python_argv"],
                                   lambda argv: module.run_command(argv, check_rc=False))
        result = assess(nodes, expected, error)
        waited = round(time.monotonic() - started, 1)
        if result["healthy"] or waited >= params["wait_timeout"]:
            break
        time.sleep(max(1, params["interval"]))
    if params["fail_on_incomplete"] and not result["healthy"]:
        module.fail_json(
            msg=f"The Ray cluster at {params['address']} is not complete after {waited:g} s: {result['summary']}. "
                "Look at `journalctl -u sparkctl-ray-head -u sparkctl-ray-worker` on the nodes named.",
            cluster=result, waited=waited)
    module.exit_json(changed=False, cluster=result, waited=waited)


if __name__ == "__main__":
    main()

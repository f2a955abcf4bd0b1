#!/usr/bin/python
# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: fabric_bandwidth
short_description: Measure every cable half to every peer, one half at a time, against a minimum
version_added: 0.1.0
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - sparkctl.spark.attributes.info_linux
description:
  - Runs the client side of the fabric test on this node (the head) for each item of O(pairs), one after the
    other so that each half is measured alone, with C(ib_write_bw) over the half's RDMA device and RoCE v2 GID index
    (O(method=rdma)) or C(iperf3) between the half's addresses (O(method=tcp)). The peer's server must be
    listening already (the fabric_test role starts it); a refused connection is retried for O(connect_wait)
    seconds while it starts.
  - Returns each half's Gbit/s and verdict in RV(results) and the document the role writes as the report in
    RV(report), whose C(problems) name each half that carried no traffic or less than O(minimum_gbps) and what
    to look at. It does not fail for them; the role writes the report first, then fails with them. Sends traffic
    over the cable only; changes nothing on any node.
author:
  - sparkctl developers (!UNKNOWN)
options:
  method:
    description: C(rdma) (perftest's C(ib_write_bw), what NCCL uses on a Spark) or C(tcp) (C(iperf3)).
    type: str
    choices: [rdma, tcp]
    required: true
  pairs:
    description:
      - The halves to measure, as the C(fabric_test_pairs) filter lists them; each item needs C(peer), C(half),
        C(interface), C(source), C(peer_interface) and C(address), and for O(method=rdma) C(rdma) (this node's
        C(rdma_device), C(port), C(gid_index) of the half).
    type: list
    elements: dict
    required: true
  seconds:
    description: Seconds of traffic per half.
    type: int
    default: 5
  minimum_gbps:
    description: The least Gbit/s each half must carry.
    type: float
    required: true
  port_base:
    description: The servers listen on this port plus the half's index.
    type: int
    default: 18515
  connect_wait:
    description: Seconds to keep retrying a client whose server is not listening yet.
    type: float
    default: 15
  head:
    description: This node's inventory name, for the report.
    type: str
    required: true
requirements:
  - C(ib_write_bw) (Debian/Ubuntu package perftest) for O(method=rdma), C(iperf3) for O(method=tcp), on this node
    and on every peer.
"""

EXAMPLES = r"""
---
- name: Measure both cable halves to every worker over RDMA, 5 s each, at least 80 Gbit/s per half
  sparkctl.spark.fabric_bandwidth:
    method: rdma
    pairs: "{{ hostvars | sparkctl.spark.fabric_test_pairs(groups['spark_head'] + groups['spark_workers'], inventory_hostname, 'rdma') }}"
    seconds: 5
    minimum_gbps: 80
    head: "{{ inventory_hostname }}"
  register: fabric_test_measured
"""

RETURN = r"""
results:
  description: One verdict per half, in the order of O(pairs).
  returned: always
  type: list
  elements: dict
  contains:
    peer: {description: The peer's inventory name., type: str}
    half: {description: Index of the half in C(spark_link)., type: int}
    interface: {description: This node's netdev of the half., type: str}
    source: {description: This node's address on the half., type: str}
    peer_interface: {description: The peer's netdev of the half., type: str}
    address: {description: The peer's address on the half., type: str}
    gbps: {description: The measured Gbit/s; null when no traffic went through., type: float}
    minimum_gbps: {description: O(minimum_gbps)., type: float}
    ok: {description: Whether the half carried at least O(minimum_gbps)., type: bool}
    problem: {description: What is wrong with the half and where to look; null when ok., type: str}
report:
  description: The fabric test's report (method, tool, head, seconds per half, ok, results, problems).
  returned: always
  type: dict
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkctl.spark.plugins.module_utils import fabric_test

# What the clients print while their server is not listening yet: worth another try. iperf3
# says "Connection refused"; ib_write_bw's "Couldn't connect" covers a down half too, which
# is then reported once O(connect_wait) has passed.
_NOT_YET = ("connection refused", "couldn't connect")


def measure(run_command, pair, method, seconds, port_base, connect_wait, sleep=time.sleep, clock=time.monotonic):
    """(Gbit/s, error) of one half; retries while the server is not listening yet."""
    argv = fabric_test.client_argv(method, pair, seconds, port_base)
    deadline = clock() + connect_wait
    while True:
        rc, stdout, stderr = run_command(argv)
        gbps, error = fabric_test.parse(method, stdout)
        if error is None and rc == 0:
            return gbps, None
        error = error or (stderr.strip().splitlines() or ["exit code %d" % rc])[-1]
        text = (error + " " + stderr).lower()
        if clock() >= deadline or not any(marker in text for marker in _NOT_YET):
            return None, error
        sleep(1)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            method=dict(type="str", required=True, choices=list(fabric_test.METHODS)),
            pairs=dict(type="list", elements="dict", required=True),
            seconds=dict(type="int", default=5),
            minimum_gbps=dict(type="float", required=True),
            port_base=dict(type="int", default=18515),
            connect_wait=dict(type="float", default=15),
            head=dict(type="str", required=True),
        ),
        supports_check_mode=True,
    )
    params = module.params
    method = params["method"]
    if not params["pairs"]:
        module.fail_json(msg="no cable half to measure: the inventory lists no worker with a spark_link")
    module.get_bin_path(fabric_test.TOOLS[method], required=True)

    def run_command(argv):
        return module.run_command(argv)

    results = []
    for pair in params["pairs"]:
        gbps, error = measure(run_command, pair, method, params["seconds"], params["port_base"],
                              params["connect_wait"])
        results.append(fabric_test.result(pair, gbps, error, params["minimum_gbps"]))
    module.exit_json(changed=False, results=results,
                     report=fabric_test.report(method, params["head"], results, params["seconds"]))


if __name__ == "__main__":
    main()

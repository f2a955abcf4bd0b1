# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fabric test's plan (which halves, with which RDMA devices), the servers' command lines
and the report as a table (module_utils/fabric_test.py)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.sparkctl.spark.plugins.module_utils import fabric_test
from ansible_collections.sparkctl.spark.plugins.module_utils.link_address import peer_targets

DOCUMENTATION = r"""
name: fabric_test_pairs
short_description: The cable halves the fabric test measures, head to every worker
version_added: 0.1.0
extends_documentation_fragment:
  - sparkctl.spark.cluster_hostvars
description:
  - One item per worker and cable half, as C(link_ping_targets) lists them from the head (the head's interface
    and address of the half, the worker's), so the test runs exactly the paths the cluster's traffic takes.
  - For O(method=rdma) each item also holds C(rdma) and C(peer_rdma) (RDMA device, port, RoCE v2 GID index of the
    half on the head and on the worker), from each node's C(fabric_test_roce) result of the C(roce_gid) module.
  - The same file provides C(fabric_test_server_argv) (the server command of one item, for the worker),
    C(fabric_test_table) (the report as aligned lines) and C(fabric_test_package) (the distribution package of a
    method's tool).
options:
  head:
    description: The head's inventory name (the client side of every pair).
    type: str
    required: true
  method:
    description: C(rdma) or C(tcp).
    type: str
    required: true
  fabric:
    description: C(spark_fabric) as the play resolves it - C(direct) or C(switch).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Measure every half from the head
  sparkctl.spark.fabric_bandwidth:
    method: tcp
    pairs: >-
      {{ hostvars | sparkctl.spark.fabric_test_pairs(groups['spark_head'] + groups['spark_workers'],
         spark_cluster.head.name, 'tcp', spark_fabric) }}
    minimum_gbps: 1
    head: "{{ inventory_hostname }}"
"""

RETURN = r"""
_value:
  description: One pair per worker and cable half, in cluster then cable order.
  type: list
  elements: dict
"""


def fabric_test_pairs(hostvars, cluster_hosts, head, method, fabric):
    if method not in fabric_test.METHODS:
        raise AnsibleFilterError(f"fabric_test_pairs: method {method!r} is not one of {', '.join(fabric_test.METHODS)}")
    try:
        targets = peer_targets(hostvars, cluster_hosts, head, fabric)
        roce = None
        if method == "rdma":
            roce = {host: (hostvars[host].get("fabric_test_roce") or {}).get("roce") or {} for host in cluster_hosts}
        return fabric_test.pairs(targets, roce, head)
    except (KeyError, ValueError) as exc:
        raise AnsibleFilterError(f"fabric_test_pairs: {exc}") from exc


def fabric_test_server_argv(pair, method, seconds, port_base, lifetime):
    return fabric_test.server_argv(method, pair, int(seconds), int(port_base), int(lifetime))


def fabric_test_table(report):
    return fabric_test.table_lines(report)


def fabric_test_package(method):
    try:
        return fabric_test.PACKAGES[method]
    except KeyError:
        raise AnsibleFilterError(f"fabric_test_package: method {method!r} is not one of {', '.join(fabric_test.METHODS)}") from None


class FilterModule:
    def filters(self):
        return {
            "fabric_test_pairs": fabric_test_pairs,
            "fabric_test_server_argv": fabric_test_server_argv,
            "fabric_test_table": fabric_test_table,
            "fabric_test_package": fabric_test_package,
        }

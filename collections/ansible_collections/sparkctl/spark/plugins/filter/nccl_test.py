# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fabric test's NCCL all_gather plan from every node's rendered fabric environment and
link facts, and its result line (module_utils/nccl_test.py)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.sparkctl.spark.plugins.module_utils import nccl_test

DOCUMENTATION = r"""
name: fabric_test_nccl_plan
short_description: The NCCL all_gather_perf test's mpirun command and each rank's environment
version_added: 0.1.0
extends_documentation_fragment:
  - sparkctl.spark.cluster_hostvars
description:
  - One rank per node, the head first, started from the head with Open MPI; each rank sources its own node's rendered
    fabric environment (O(env_path), C(/etc/sparkctl/fabric.env)), so a GID index that differs between nodes reaches
    each rank as its node resolved it. Nothing is written on the nodes.
  - Returns C(argv), C(command), C(env_path), C(env_files) (host to the NCCL, UCX and Open MPI variables its rank
    takes, from the node's file as read into C(fabric_test_nccl_read) by C(sparkctl.spark.node_state)) and C(problems) (a half missing from
    C(NCCL_IB_HCA), a half below MTU 9000, a direct cable with other than two nodes), the MTU from the same read
    (each half's C(class/net/<if>/mtu) under O(sysfs_root)).
  - The same file provides C(fabric_test_nccl_result) (all_gather_perf's output to C({busbw_gbs, out_of_bounds})).
options:
  fabric:
    description: C(spark_fabric), C(direct) or C(switch).
    type: str
    required: true
  binary:
    description: Path of all_gather_perf on every node.
    type: str
    required: true
  env_path:
    description: The fabric environment file on every node (the C(fabric_env) role's C(fabric_env_file)).
    type: str
    required: true
  max_bytes:
    description: The largest message (nccl-tests' C(-e)).
    type: str
    default: 2G
  sysfs_root:
    description: Where the nodes' sysfs was read (C(spark_sysfs_root)).
    type: str
    default: /sys
"""

EXAMPLES = r"""
- name: Plan the NCCL test
  ansible.builtin.set_fact:
    fabric_test_nccl_plan: >-
      {{ hostvars | sparkctl.spark.fabric_test_nccl_plan(groups['spark_head'] + groups['spark_workers'],
         spark_fabric, '/opt/nccl-tests/build/all_gather_perf', '/etc/sparkctl/fabric.env') }}
"""

RETURN = r"""
_value:
  description: The plan (C(argv), C(command), C(env_path), C(env_files), C(problems), C(lines) to show, C(ranks), C(fabric)).
  type: dict
"""


def _node(hostvars, host, sysfs_root, env_path):
    hv = hostvars[host]
    links = hv.get("spark_link") or []
    if not links:
        raise AnsibleFilterError(f"fabric_test_nccl_plan: {host} has no spark_link")
    texts = {t.get("path"): t for t in (hv.get("fabric_test_nccl_read") or {}).get("texts") or []}
    env_read = texts.get(env_path) or {}
    if "content" not in env_read:
        raise AnsibleFilterError(f"fabric_test_nccl_plan: {host}'s fabric environment {env_path} was not read "
                                 "(run the provision stage first: role fabric_env writes it)")
    env = nccl_test.parse_env_file(env_read["content"])

    def mtu(interface):
        text = (texts.get(f"{sysfs_root.rstrip('/')}/class/net/{interface}/mtu") or {}).get("content") or ""
        return int(text.strip()) if text.strip().isdigit() else None

    return {"host": host, "address": links[0]["address"], "env": env,
            "links": [{"interface": link["interface"], "mtu": mtu(link["interface"])} for link in links]}


def fabric_test_nccl_plan(hostvars, cluster_hosts, fabric, binary, env_path, max_bytes="2G", sysfs_root="/sys"):
    try:
        nodes = [_node(hostvars, host, sysfs_root, env_path) for host in cluster_hosts]
        return nccl_test.render(nodes, fabric=fabric, binary=binary, env_path=env_path, max_bytes=max_bytes)
    except (KeyError, ValueError) as exc:
        raise AnsibleFilterError(f"fabric_test_nccl_plan: {exc}") from exc


def fabric_test_nccl_result(stdout):
    busbw, oob = nccl_test.parse_all_gather(stdout)
    return {"busbw_gbs": busbw, "out_of_bounds": oob}


class FilterModule:
    def filters(self):
        return {"fabric_test_nccl_plan": fabric_test_nccl_plan, "fabric_test_nccl_result": fabric_test_nccl_result}

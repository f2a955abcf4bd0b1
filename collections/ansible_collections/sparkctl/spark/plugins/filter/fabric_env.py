# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The environment NCCL, Gloo, UCX, Ray and the engines need on one node,
derived from the node's resolved RoCE facts and the cluster's link plan."""

from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError

from ansible_collections.sparkctl.spark.plugins.module_utils.link_address import bare_address

DOCUMENTATION = r"""
name: fabric_env
short_description: Render the engines' fabric environment for one node
version_added: 0.1.0
description:
  - Builds the ordered environment (name to value) that pins NCCL, Gloo, UCX, Ray and the engines to the direct cable
    of one node, from the RoCE facts of that node (C(sparkctl.spark.roce_gid)) and the head's link address.
  - C(NCCL_IB_HCA) lists the RDMA devices of every cable half; one half alone gives a fraction of the link.
  - When every half resolved to the same RoCE v2 GID index it is pinned with C(NCCL_IB_GID_INDEX); when they differ,
    NCCL is told to pick the IPv4 RoCE v2 GID itself (C(NCCL_IB_ADDR_FAMILY=AF_INET), C(NCCL_IB_ROCE_VERSION_NUM=2)).
  - Values must fit both a systemd C(EnvironmentFile) and C(docker --env-file), so whitespace, quotes, C($) and
    backslashes are refused, naming the variable.
options:
  _input:
    description: The C(roce) return value of C(sparkctl.spark.roce_gid) for this node (C(links) in cable-half order).
    type: dict
    required: true
  head_address:
    description: The head's primary link address (with or without prefix); becomes C(MASTER_ADDR).
    type: str
    required: true
  max_jobs:
    description: C(MAX_JOBS) for JIT compiles (FlashInfer runs one nvcc per job, 3-4 GiB each).
    type: int
    default: 4
  nccl_net:
    description: C(NCCL_NET); C(IB) selects the RoCE transport.
    type: str
    default: IB
  path:
    description: Directories for C(PATH), in order (systemd does not expand C($PATH), so it is spelled out).
    type: list
    elements: str
    default: []
  nccl_preload:
    description: Path of a host NCCL library to C(LD_PRELOAD), or empty for none.
    type: str
    default: ""
  extra:
    description: More variables, or overrides of the derived ones (a model profile's environment); C(null) removes one.
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: Render the fabric environment
  ansible.builtin.set_fact:
    fabric_env_vars: "{{ fabric_env_roce.roce | sparkctl.spark.fabric_env(head_address='192.168.100.10/24', max_jobs=4) }}"
"""

RETURN = r"""
_value:
  description: Environment variable names to values, in a stable order.
  type: dict
"""

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_UNSAFE_RE = re.compile(r"[\s\"'$\\`]")


def fabric_env(roce, head_address, max_jobs=4, nccl_net="IB", path=None, nccl_preload="", extra=None):
    links = (roce or {}).get("links") or []
    if not links:
        raise AnsibleFilterError("fabric_env: the RoCE facts list no link (run sparkctl.spark.roce_gid on the node first).")
    primary = links[0]
    netdev = primary["interface"]
    try:
        node_ip = bare_address(primary["ipv4"])
        head_ip = bare_address(head_address)
    except ValueError as exc:
        raise AnsibleFilterError(f"fabric_env: {exc}") from exc
    hcas = ",".join(link["rdma_device"] for link in links)

    env = {
        "NCCL_SOCKET_IFNAME": netdev,
        "GLOO_SOCKET_IFNAME": netdev,
        "TP_SOCKET_IFNAME": netdev,
        "UCX_NET_DEVICES": netdev,
        "OMPI_MCA_btl_tcp_if_include": netdev,
        "NCCL_IB_HCA": hcas,
        "NCCL_IB_DISABLE": "0",
    }
    gid_index = roce.get("gid_index")
    if gid_index is not None:
        env["NCCL_IB_GID_INDEX"] = str(gid_index)
    else:
        # The halves sit at different GID indexes: one NCCL_IB_GID_INDEX cannot name both.
        env["NCCL_IB_ADDR_FAMILY"] = "AF_INET"
        env["NCCL_IB_ROCE_VERSION_NUM"] = "2"
    env.update(
        {
            "NCCL_NET": str(nccl_net),
            "NCCL_NVLS_ENABLE": "0",
            "NCCL_CUMEM_ENABLE": "0",
            "VLLM_HOST_IP": node_ip,
            "SGLANG_HOST_IP": node_ip,
            "RAY_NODE_IP_ADDRESS": node_ip,
            "RAY_OVERRIDE_NODE_IP_ADDRESS": node_ip,
            "MASTER_ADDR": head_ip,
            "MAX_JOBS": str(int(max_jobs)),
            "RAY_memory_monitor_refresh_ms": "0",
        }
    )
    if path:
        env["PATH"] = ":".join(path)
    if nccl_preload:
        env["LD_PRELOAD"] = str(nccl_preload)
    for name, value in (extra or {}).items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = str(value)

    for name, value in env.items():
        if not _NAME_RE.match(name):
            raise AnsibleFilterError(f"fabric_env: '{name}' is not a valid environment variable name.")
        if _UNSAFE_RE.search(value) or not value:
            raise AnsibleFilterError(
                f"fabric_env: {name}={value!r} is empty or holds whitespace, quotes, '$', '`' or '\\', "
                "which a systemd EnvironmentFile and docker --env-file read differently; fix the value."
            )
    return env


class FilterModule:
    def filters(self):
        return {"fabric_env": fabric_env}

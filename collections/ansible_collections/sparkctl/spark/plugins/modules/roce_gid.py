#!/usr/bin/python
# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: roce_gid
short_description: Resolve the RoCE v2 GID index of each direct-link address (NCCL_IB_GID_INDEX)
version_added: 0.1.0
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - sparkctl.spark.attributes.info_linux
  - sparkctl.spark.sysfs
  - sparkctl.spark.node_paths
description:
  - For each item of O(links) finds the RDMA device behind the netdev (C(class/net/<if>/device/infiniband/<dev>)),
    its port, and the entry of the port's GID table whose type is C(RoCE v2), whose C(ndev) is the netdev and
    whose GID is the IPv4-mapped form of the link address (C(::ffff:a.b.c.d)).
  - A netdev without a device link of its own, such as the bond of a RoCE LAG (device C(mlx5_bond_0) over
    C(bond0)) or a VLAN, is matched to the RDMA device whose GID table names it in C(gid_attrs/ndevs/<n>).
  - That index is what C(NCCL_IB_GID_INDEX) must be. It differs between nodes (3 on one Spark, 5 on another)
    and can move across reboots, so it is resolved on every run and never configured by hand.
  - The kernel adds the IPv4 GID shortly after the address is applied; while the only problem is that the
    address is not in the table yet, the module polls for up to O(wait_timeout) seconds.
  - Reads the files a role manages alongside (O(paths), as M(sparkctl.spark.node_state) reads them), so that one
    module run resolves the GIDs and tells what the role's files hold.
  - Fails with one line per interface that cannot be resolved, each with the likely fix. Never changes anything.
author:
  - sparkctl developers (!UNKNOWN)
options:
  links:
    description:
      - The cable halves of this node, in the order the engines prefer them (the host's C(spark_link)).
    type: list
    elements: dict
    required: true
    suboptions:
      interface:
        description: Link netdev, for example C(enp1s0f1np1).
        type: str
        required: true
      address:
        description: The IPv4 address of the link on this node, with or without prefix length (C(192.168.100.10/24)).
        type: str
        required: true
  wait_timeout:
    description:
      - Seconds to keep polling while the only problem is that a link address has no GID entry yet
        (right after C(netplan apply)). V(0) reads once, and the failure message says so instead of a wait time.
      - Problems that cannot clear by themselves (no RDMA device, RoCE v1 only) fail at once.
    type: int
    default: 10
seealso:
  - module: sparkctl.spark.link_facts
  - name: Linux sysfs ABI for InfiniBand devices
    description: The C(gids) and C(gid_attrs) attributes read by this module.
    link: https://www.kernel.org/doc/Documentation/ABI/stable/sysfs-class-infiniband
notes:
  - When several entries qualify, the lowest index wins.
"""

EXAMPLES = r"""
---
- name: Resolve the GID index of every cable half
  sparkctl.spark.roce_gid:
    links: "{{ spark_link }}"
  register: spark_roce

- name: Render the NCCL environment from it
  ansible.builtin.set_fact:
    spark_nccl_env:
      NCCL_IB_HCA: "{{ spark_roce.roce.rdma_devices | join(',') }}"
      NCCL_IB_GID_INDEX: "{{ spark_roce.roce.gid_index }}"

- name: Resolve in a lab whose RDMA tree is a fixture, reading once
  sparkctl.spark.roce_gid:
    links:
      - {interface: enp1s0f1np1, address: 192.168.100.10}
    rdma_sysfs_root: /opt/sparklab/sysfs
    wait_timeout: 0
"""

RETURN = r"""
extends_documentation_fragment:
  - sparkctl.spark.node_paths
roce:
  description:
    - What NCCL needs to use the cable over RoCE v2 on this node.
    - On failure it holds only the links that did resolve.
  returned: always
  type: dict
  contains:
    links:
      description: One entry per item of O(links), in the same order.
      type: list
      elements: dict
      contains:
        interface:
          description: The link netdev.
          type: str
          sample: enp1s0f1np1
        rdma_device:
          description: The RDMA device behind it.
          type: str
          sample: rocep1s0f1
        port:
          description: The device port that carries the netdev.
          type: int
          sample: 1
        gid_index:
          description: Index of the RoCE v2 GID of the link address.
          type: int
          sample: 3
        gid:
          description: The GID at that index, as sysfs prints it.
          type: str
          sample: "0000:0000:0000:0000:0000:ffff:c0a8:640a"
        ipv4:
          description: The link address, without prefix length.
          type: str
          sample: 192.168.100.10
    rdma_devices:
      description: The RDMA devices of the links in O(links) order, each once (the value for C(NCCL_IB_HCA)).
      type: list
      elements: str
      sample: [rocep1s0f1, roceP2p1s0f1]
    gid_index:
      description:
        - The index when every link resolved to the same one (the value for C(NCCL_IB_GID_INDEX)), else V(null);
          then use RV(roce.gid_indexes) or C(NCCL_IB_ADDR_FAMILY=AF_INET).
      type: int
      sample: 3
    gid_indexes:
      description: The index of each link, by interface.
      type: dict
      sample: {enp1s0f1np1: 3, enP2p1s0f1np1: 3}
errors:
  description: The links that could not be resolved, each with the reason and the fix.
  returned: failure
  type: list
  elements: dict
  contains:
    interface:
      description: The link netdev.
      type: str
    reason:
      description: What was found.
      type: str
    fix:
      description: What to do about it.
      type: str
    transient:
      description:
        - Whether the problem is one that clears by itself once the address is applied.
        - Such problems are polled for up to O(wait_timeout) seconds, unless another link has a problem that
          cannot clear by itself; the message says C(after waiting N s) only when that polling happened.
      type: bool
waited:
  description: Seconds spent reading and polling.
  returned: always
  type: float
  sample: 0.002
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkctl.spark.plugins.module_utils.node_state import PATHS_ARGUMENT, assess_paths
from ansible_collections.sparkctl.spark.plugins.module_utils.sysfs_net import gid_failure_message, resolve_links_gids


def main():
    module = AnsibleModule(
        argument_spec=dict(
            links=dict(
                type="list",
                elements="dict",
                required=True,
                options=dict(
                    interface=dict(type="str", required=True),
                    address=dict(type="str", required=True),
                ),
            ),
            sysfs_root=dict(type="path", default="/sys"),
            rdma_sysfs_root=dict(type="path"),
            wait_timeout=dict(type="int", default=10),
            paths=PATHS_ARGUMENT,
        ),
        supports_check_mode=True,
    )
    if module.params["wait_timeout"] < 0:
        module.fail_json(msg="wait_timeout must be 0 or more seconds, got %d" % module.params["wait_timeout"])

    roce, errors, waited = resolve_links_gids(
        module.params["links"],
        sysfs_root=module.params["sysfs_root"],
        rdma_sysfs_root=module.params["rdma_sysfs_root"],
        wait_timeout=module.params["wait_timeout"],
    )
    if errors:
        module.fail_json(
            msg=gid_failure_message(errors, waited, module.params["wait_timeout"]),
            errors=[exc.as_dict() for exc in errors],
            roce=roce,
            waited=waited,
            changed=False,
        )
    module.exit_json(changed=False, roce=roce, waited=waited, **assess_paths(module.params["paths"]))


if __name__ == "__main__":
    main()

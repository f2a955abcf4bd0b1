#!/usr/bin/python
# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: link_facts
short_description: Gather netdev, RDMA device and RoCE GID table facts for the direct ConnectX-7 link
version_added: 0.1.0
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.facts
  - sparkctl.spark.attributes.facts_linux
  - sparkctl.spark.sysfs
  - sparkctl.spark.node_paths
description:
  - For each interface in O(interfaces) reads C(operstate), C(carrier), C(mtu) and C(address) from
    C(class/net/<if>) under O(sysfs_root), and its addresses from C(ip -j addr show dev <if>).
  - Finds the RDMA device behind the netdev (C(class/net/<if>/device/infiniband/<dev>)) and reads its GID
    table (C(class/infiniband/<dev>/ports/<port>/gids/<n>), C(gid_attrs/types/<n>), C(gid_attrs/ndevs/<n>))
    under O(rdma_sysfs_root). A netdev without that link (the bond of a RoCE LAG, a VLAN) is matched to the
    device whose GID table names it in C(gid_attrs/ndevs/<n>).
  - Lists the RoCE v2 entries with an IPv4-mapped GID on the interface, from which the C(NCCL_IB_GID_INDEX)
    of a link address is taken. That index differs between nodes and can change across reboots, so it is
    read on every run rather than configured.
  - Reads the files a role manages alongside the link (O(paths), as M(sparkctl.spark.node_state) reads them), so
    that one module run tells the role both what the kernel has and what its files hold.
  - An interface that does not exist is reported in RV(ansible_facts.spark_link_facts.missing), not failed on;
    the play decides whether that is fatal.
author:
  - sparkctl developers (!UNKNOWN)
options:
  interfaces:
    description:
      - Netdev names to report, for example both halves of the cable C(enp1s0f1np1) and C(enP2p1s0f1np1).
    type: list
    elements: str
    required: true
seealso:
  - module: sparkctl.spark.gpu_facts
  - module: sparkctl.spark.host_facts
  - name: Linux sysfs ABI for InfiniBand devices
    description: The C(gids) and C(gid_attrs) attributes read by this module.
    link: https://www.kernel.org/doc/Documentation/ABI/stable/sysfs-class-infiniband
requirements:
  - C(ip) from iproute2 with JSON output (C(-j)) on the target, for RV(ansible_facts.spark_link_facts.interfaces.ipv4).
"""

EXAMPLES = r"""
---
- name: Gather facts for both halves of the direct cable
  sparkctl.spark.link_facts:
    interfaces:
      - enp1s0f1np1
      - enP2p1s0f1np1

- name: Stop when a link netdev is missing
  ansible.builtin.assert:
    that: ansible_facts.spark_link_facts.missing | length == 0
    fail_msg: "Missing link interfaces: {{ ansible_facts.spark_link_facts.missing | join(', ') }}"

- name: Take the RoCE v2 GID index of the link address
  ansible.builtin.set_fact:
    spark_nccl_ib_gid_index: >-
      {{ (ansible_facts.spark_link_facts.interfaces['enp1s0f1np1'].roce_v2_ipv4
          | selectattr('ipv4', 'equalto', '192.168.100.10') | first).index }}
"""

RETURN = r"""
extends_documentation_fragment:
  - sparkctl.spark.node_paths
ansible_facts:
  description: Facts to add to C(ansible_facts).
  returned: always
  type: dict
  contains:
    spark_link_facts:
      description: Link facts.
      returned: always
      type: dict
      contains:
        interfaces:
          description:
            - One entry per requested interface, keyed by name, missing ones included with
              RV(ansible_facts.spark_link_facts.interfaces.exists=false).
          returned: always
          type: dict
          contains:
            exists:
              description: Whether C(class/net/<if>) exists under O(sysfs_root).
              type: bool
              sample: true
            operstate:
              description: Kernel operational state, for example C(up), C(down), C(lowerlayerdown).
              type: str
              sample: up
            carrier:
              description: Whether the link has carrier; V(null) when unreadable (the kernel refuses the read while the interface is down).
              type: bool
              sample: true
            mtu:
              description: MTU in bytes.
              type: int
              sample: 9000
            mac:
              description: Hardware address.
              type: str
              sample: "4c:bb:47:2e:11:a3"
            ipv4:
              description: IPv4 addresses with prefix length.
              type: list
              elements: str
              sample: ["192.168.100.10/24"]
            ipv6:
              description: IPv6 addresses with prefix length.
              type: list
              elements: str
              sample: ["fe80::4ebb:47ff:fe2e:11a3/64"]
            address_error:
              description:
                - Why RV(ansible_facts.spark_link_facts.interfaces.ipv4) and RV(ansible_facts.spark_link_facts.interfaces.ipv6)
                  could not be read (C(ip) missing or failing), V(null) when they were read. Empty lists with an error do not
                  mean "no address".
              type: str
              sample: null
            rdma_device:
              description: RDMA device behind the netdev, V(null) when there is none.
              type: str
              sample: rocep1s0f1
            rdma_fw_version:
              description: Firmware version of RV(ansible_facts.spark_link_facts.interfaces.rdma_device) (its C(fw_ver) in sysfs),
                V(null) when there is no RDMA device or the file cannot be read.
              type: str
              sample: 28.43.1014
            rdma_port:
              description: Port of RV(ansible_facts.spark_link_facts.interfaces.rdma_device) that carries the netdev.
              type: int
              sample: 1
            gids:
              description: The non-zero entries of the port's GID table, by index.
              type: list
              elements: dict
              contains:
                index:
                  description: GID index.
                  type: int
                  sample: 3
                gid:
                  description: GID as printed by sysfs.
                  type: str
                  sample: "0000:0000:0000:0000:0000:ffff:c0a8:640a"
                type:
                  description: C(RoCE v2) or C(IB/RoCE v1); V(null) when the type attribute is missing or unreadable.
                  type: str
                  sample: RoCE v2
                ndev:
                  description: Netdev the GID belongs to, V(null) when unknown.
                  type: str
                  sample: enp1s0f1np1
                ipv4:
                  description: The IPv4 address when the GID is IPv4-mapped, else V(null).
                  type: str
                  sample: 192.168.100.10
            roce_v2_ipv4:
              description: GID entries of type C(RoCE v2) on this netdev with an IPv4-mapped GID.
              type: list
              elements: dict
              contains:
                index:
                  description: GID index, the value for C(NCCL_IB_GID_INDEX).
                  type: int
                  sample: 3
                ipv4:
                  description: The IPv4 address of the entry.
                  type: str
                  sample: 192.168.100.10
        missing:
          description: Requested interfaces that do not exist.
          returned: always
          type: list
          elements: str
          sample: []
        rdma_char_devices:
          description:
            - The character devices under C(/dev/infiniband), sorted, what NCCL's IB transport opens (C(uverbs<N>), one per
              RDMA device) and what an image profile's containers are given; empty when the directory is missing (the RDMA
              verbs driver is not loaded).
          returned: always
          type: list
          elements: str
          sample: ["rdma_cm", "uverbs0", "uverbs1", "uverbs2", "uverbs3"]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkctl.spark.plugins.module_utils.node_state import PATHS_ARGUMENT, assess_paths
from ansible_collections.sparkctl.spark.plugins.module_utils.sysfs_net import read_link_facts


def main():
    module = AnsibleModule(
        argument_spec=dict(
            interfaces=dict(type="list", elements="str", required=True),
            sysfs_root=dict(type="path", default="/sys"),
            rdma_sysfs_root=dict(type="path"),
            paths=PATHS_ARGUMENT,
        ),
        supports_check_mode=True,
    )
    facts = read_link_facts(
        module,
        module.params["interfaces"],
        sysfs_root=module.params["sysfs_root"],
        rdma_sysfs_root=module.params["rdma_sysfs_root"],
    )
    module.exit_json(changed=False, ansible_facts=dict(spark_link_facts=facts), **assess_paths(module.params["paths"]))


if __name__ == "__main__":
    main()

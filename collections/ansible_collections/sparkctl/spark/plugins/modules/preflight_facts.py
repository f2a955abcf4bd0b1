#!/usr/bin/python
# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: preflight_facts
short_description: Read everything the serving preflight judges on a node with one module run
version_added: 0.1.0
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.facts
  - sparkctl.spark.attributes.facts_linux
  - sparkctl.spark.sysfs
description:
  - Reads what M(ansible.builtin.setup) (C(min) subset), M(sparkctl.spark.gpu_facts),
    M(sparkctl.spark.link_facts) and M(sparkctl.spark.host_facts) read, with the same code, in one module run.
    A module run costs a Python start and Ansible's module library on the node, and preflight made five of them
    (docs/performance.md).
  - The distribution, its version, the architecture and the service manager come from Ansible's own fact
    collectors, so they mean what C(ansible_facts.distribution) and the others mean.
  - Meant to run with C(become). RV(euid) is then what C(id -u) prints under C(become), the proof that the SSH user
    becomes root, and RV(user) is still the SSH user (C(SUDO_USER), else the session's login uid).
    As root the port owners of every user are found.
  - The kernel release (RV(os.kernel)), the driver and CUDA versions (RV(ansible_facts.spark_gpu_facts)), the cable's
    adapter firmware (RV(ansible_facts.spark_link_facts)) and C(CmaTotal) (RV(ansible_facts.spark_host_facts)) are what
    the preflight role's known-bad platform check matches; pending firmware updates (RV(firmware)) are its warning.
  - A missing C(nvidia-smi), C(fwupdmgr), interface or path is not a module failure; each reader reports it in its fact, and the
    play (the C(sparkctl.spark.preflight_checks) filter) decides.
author:
  - sparkctl developers (!UNKNOWN)
options:
  interfaces:
    description:
      - Netdev names to report in RV(ansible_facts.spark_link_facts), as O(sparkctl.spark.link_facts#module:interfaces).
    type: list
    elements: str
    default: []
  disk_paths:
    description:
      - Paths whose file system RV(ansible_facts.spark_host_facts) reports, as O(sparkctl.spark.host_facts#module:paths);
        a path that does not exist is measured at its nearest existing ancestor.
    type: list
    elements: path
    default: []
  ports:
    description:
      - TCP ports whose holders RV(ansible_facts.spark_host_facts) reports, as O(sparkctl.spark.host_facts#module:ports).
    type: list
    elements: int
    default: []
  nvidia_smi:
    description:
      - Name or absolute path of C(nvidia-smi), as O(sparkctl.spark.gpu_facts#module:nvidia_smi).
    type: str
    default: nvidia-smi
  nvcc:
    description:
      - Candidates for the CUDA compiler, tried in order, as O(sparkctl.spark.gpu_facts#module:nvcc).
    type: list
    elements: str
    default:
      - /usr/local/cuda/bin/nvcc
      - nvcc
  fwupdmgr:
    description:
      - Name or absolute path of fwupd's C(fwupdmgr); C(fwupdmgr get-updates --json) lists the pending firmware updates
        in RV(firmware). Where it is not installed nothing is run and RV(firmware.checked) is V(false).
      - An empty string skips the read.
    type: str
    default: fwupdmgr
seealso:
  - module: sparkctl.spark.gpu_facts
  - module: sparkctl.spark.link_facts
  - module: sparkctl.spark.host_facts
  - module: sparkctl.spark.hub_access
notes:
  - When C(become) fails the task fails before the module runs; the preflight role then reads again without it and
    reports why sudo failed.
"""

EXAMPLES = r"""
---
- name: Read the node preflight judges, as root
  sparkctl.spark.preflight_facts:
    interfaces: [enp1s0f1np1, enP2p1s0f1np1]
    disk_paths: [/data/models/Solar-Open2-250B-Nota-NVFP4]
    ports: [8000, 6379, 8265]
  become: true
  register: preflight_node

- name: Stop when the link is missing
  ansible.builtin.assert:
    that: ansible_facts.spark_link_facts.missing | length == 0
"""

RETURN = r"""
os:
  description: The operating system facts, named as C(ansible.builtin.setup) names them.
  returned: always
  type: dict
  contains:
    distribution:
      description: C(ansible_facts.distribution).
      type: str
      sample: Ubuntu
    distribution_version:
      description: C(ansible_facts.distribution_version).
      type: str
      sample: "24.04"
    architecture:
      description: C(ansible_facts.architecture).
      type: str
      sample: aarch64
    service_mgr:
      description: C(ansible_facts.service_mgr).
      type: str
      sample: systemd
    kernel:
      description: C(ansible_facts.kernel), the release C(uname -r) prints.
      type: str
      sample: 6.17.0-1014-nvidia
firmware:
  description: Pending firmware updates as C(fwupdmgr get-updates --json) lists them.
  returned: always
  type: dict
  contains:
    checked:
      description: Whether C(fwupdmgr) answered; V(false) where it is not installed or failed.
      type: bool
      sample: false
    error:
      description: Why a present C(fwupdmgr) could not be read, else V(null).
      type: str
      sample: null
    fwupdmgr:
      description: The C(fwupdmgr) that was run, V(null) when none was found.
      type: str
      sample: /usr/bin/fwupdmgr
    updates:
      description: One entry per device with a newer release.
      type: list
      elements: dict
      sample: [{name: System Firmware, device_id: 362301da643102b9f38477387e2193e57abaa590, version: "0.1.0",
                update_version: "0.2.0", summary: UEFI firmware}]
user:
  description: The SSH user (not the root a C(become) run became).
  returned: always
  type: str
  sample: nvidia
euid:
  description: The effective uid the module ran as, what C(id -u) prints; V(0) when C(become) made it root.
  returned: always
  type: int
  sample: 0
ansible_facts:
  description: Facts to add to C(ansible_facts).
  returned: always
  type: dict
  contains:
    spark_gpu_facts:
      description: What M(sparkctl.spark.gpu_facts) returns under that name.
      returned: always
      type: dict
    spark_link_facts:
      description: What M(sparkctl.spark.link_facts) returns under that name, for O(interfaces).
      returned: always
      type: dict
    spark_host_facts:
      description: What M(sparkctl.spark.host_facts) returns under that name, for O(disk_paths) and O(ports).
      returned: always
      type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkctl.spark.plugins.module_utils.firmware import read_firmware_facts
from ansible_collections.sparkctl.spark.plugins.module_utils.gpu import read_gpu_facts
from ansible_collections.sparkctl.spark.plugins.module_utils.host import read_host_facts
from ansible_collections.sparkctl.spark.plugins.module_utils.preflight import read_os_facts
from ansible_collections.sparkctl.spark.plugins.module_utils.sysfs_net import read_link_facts

PROC_ROOT = "/proc"


def main():
    module = AnsibleModule(
        argument_spec=dict(
            interfaces=dict(type="list", elements="str", default=[]),
            disk_paths=dict(type="list", elements="path", default=[]),
            ports=dict(type="list", elements="int", default=[]),
            nvidia_smi=dict(type="str", default="nvidia-smi"),
            nvcc=dict(type="list", elements="str", default=["/usr/local/cuda/bin/nvcc", "nvcc"]),
            sysfs_root=dict(type="path", default="/sys"),
            rdma_sysfs_root=dict(type="path"),
            fwupdmgr=dict(type="str", default="fwupdmgr"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    os_facts = read_os_facts(module, proc_root=PROC_ROOT)
    facts = dict(
        spark_gpu_facts=read_gpu_facts(module, params["nvidia_smi"], params["nvcc"]),
        spark_link_facts=read_link_facts(module, params["interfaces"], sysfs_root=params["sysfs_root"],
                                         rdma_sysfs_root=params["rdma_sysfs_root"]),
        spark_host_facts=read_host_facts(module, params["disk_paths"], params["ports"], proc_root=PROC_ROOT),
    )
    module.exit_json(
        changed=False,
        os=dict((key, os_facts[key]) for key in ("distribution", "distribution_version", "architecture", "service_mgr", "kernel")),
        firmware=read_firmware_facts(module, params["fwupdmgr"]),
        user=os_facts["user"],
        euid=os_facts["euid"],
        ansible_facts=facts,
    )


if __name__ == "__main__":
    main()

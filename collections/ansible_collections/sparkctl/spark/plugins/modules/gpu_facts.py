#!/usr/bin/python
# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_facts
short_description: Gather NVIDIA GPU, driver and CUDA facts from a DGX Spark or any NVIDIA host
version_added: 0.1.0
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.facts
  - sparkctl.spark.attributes.facts_posix
description:
  - Runs C(nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,compute_cap,driver_version,memory.total
    --format=csv,noheader,nounits) and returns one entry per GPU.
  - Reads the CUDA version the driver supports from C(nvidia-smi --version), falling back to the banner of
    the plain C(nvidia-smi) table on drivers that do not know C(--version).
  - Reads the CUDA toolkit release from the first C(nvcc) found in O(nvcc).
  - A missing C(nvidia-smi), a driver that does not answer or a host without GPUs is not a module failure.
    The module reports RV(ansible_facts.spark_gpu_facts.present=false) and the tool's own message in
    RV(ansible_facts.spark_gpu_facts.error); the play decides whether that is fatal.
  - On a GB10 (DGX Spark) the GPU has no memory of its own, C(nvidia-smi) reports C([N/A]) for
    C(memory.total), and the module sets RV(ansible_facts.spark_gpu_facts.gpus[].unified_memory=true).
    The memory budget of such a host is C(MemAvailable), see M(sparkctl.spark.host_facts).
author:
  - sparkctl developers (!UNKNOWN)
options:
  nvidia_smi:
    description:
      - Name or absolute path of the C(nvidia-smi) executable.
      - A name is looked up in E(PATH), C(/usr/bin) and C(/usr/local/bin).
    type: str
    default: nvidia-smi
  nvcc:
    description:
      - Candidates for the CUDA compiler, tried in order; the first one that exists is run with C(--version).
      - Names are looked up in E(PATH); absolute paths are used as they are.
      - The toolkit is usually not on the E(PATH) of a non-interactive SSH session, hence the absolute default.
    type: list
    elements: str
    default:
      - /usr/local/cuda/bin/nvcc
      - nvcc
seealso:
  - module: sparkctl.spark.host_facts
  - module: sparkctl.spark.link_facts
notes:
  - The first GPU (index 0) provides the host-level RV(ansible_facts.spark_gpu_facts.driver_version).
"""

EXAMPLES = r"""
---
- name: Gather GPU facts
  sparkctl.spark.gpu_facts:

- name: Require a Blackwell GB10 with a CUDA 13 driver
  ansible.builtin.assert:
    that:
      - ansible_facts.spark_gpu_facts.present
      - ansible_facts.spark_gpu_facts.gpus[0].compute_cap == '12.1'
      - ansible_facts.spark_gpu_facts.cuda_driver_major >= 13
    fail_msg: "{{ ansible_facts.spark_gpu_facts.error | default('unexpected GPU', true) }}"

- name: Use a toolkit outside the default locations
  sparkctl.spark.gpu_facts:
    nvcc:
      - /opt/cuda-13.0/bin/nvcc
      - nvcc
"""

RETURN = r"""
ansible_facts:
  description: Facts to add to C(ansible_facts).
  returned: always
  type: dict
  contains:
    spark_gpu_facts:
      description: GPU, driver and CUDA facts.
      returned: always
      type: dict
      contains:
        present:
          description: Whether C(nvidia-smi) ran and listed at least one GPU.
          type: bool
          returned: always
          sample: true
        error:
          description:
            - Why no GPU is reported, in the words of the tool (first line of its output), or C(nvidia-smi not found).
            - V(null) when RV(ansible_facts.spark_gpu_facts.present=true).
          type: str
          returned: always
          sample: >-
            NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.
            Make sure that the latest NVIDIA driver is installed and running.
        count:
          description: Number of GPUs listed.
          type: int
          returned: always
          sample: 1
        gpus:
          description: One entry per GPU, in the order C(nvidia-smi) lists them.
          type: list
          elements: dict
          returned: always
          contains:
            index:
              description: GPU index as used by C(CUDA_VISIBLE_DEVICES) with PCI bus ordering.
              type: int
              sample: 0
            name:
              description: Product name.
              type: str
              sample: NVIDIA GB10
            uuid:
              description: GPU UUID.
              type: str
              sample: GPU-6a1f0c52-3d2b-8e4f-a9c7-1b2d3e4f5a6b
            pci_bus_id:
              description: PCI bus ID as printed by C(nvidia-smi).
              type: str
              sample: 0000000F:01:00.0
            compute_cap:
              description: Compute capability as printed, C(12.1) is C(sm_121).
              type: str
              sample: "12.1"
            compute_cap_major:
              description: Major part of RV(ansible_facts.spark_gpu_facts.gpus[].compute_cap), V(null) when unparsable.
              type: int
              sample: 12
            compute_cap_minor:
              description: Minor part of RV(ansible_facts.spark_gpu_facts.gpus[].compute_cap), V(null) when unparsable.
              type: int
              sample: 1
            driver_version:
              description: Driver version.
              type: str
              sample: 580.95.05
            driver_major:
              description: Driver branch.
              type: int
              sample: 580
            memory_total_mib:
              description: Dedicated GPU memory in MiB, V(null) when the GPU has none (unified memory) or it is unreadable.
              type: int
              sample: null
            unified_memory:
              description: V(true) when C(nvidia-smi) reports no dedicated memory (C([N/A]), C([Not Supported])).
              type: bool
              sample: true
        driver_version:
          description: Driver version of GPU 0, V(null) without a GPU.
          type: str
          returned: always
          sample: 580.95.05
        driver_major:
          description: Driver branch of GPU 0, V(null) without a GPU.
          type: int
          returned: always
          sample: 580
        cuda_driver_version:
          description: Highest CUDA version the driver supports, V(null) when unknown.
          type: str
          returned: always
          sample: "13.0"
        cuda_driver_major:
          description: Major part of RV(ansible_facts.spark_gpu_facts.cuda_driver_version).
          type: int
          returned: always
          sample: 13
        cuda_toolkit_version:
          description: Release of the CUDA toolkit (C(nvcc)), V(null) when no C(nvcc) was found or it failed.
          type: str
          returned: always
          sample: "13.0"
        cuda_toolkit_major:
          description: Major part of RV(ansible_facts.spark_gpu_facts.cuda_toolkit_version).
          type: int
          returned: always
          sample: 13
        nvcc_path:
          description: The C(nvcc) that was run, V(null) when none of O(nvcc) exists.
          type: str
          returned: always
          sample: /usr/local/cuda/bin/nvcc
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkctl.spark.plugins.module_utils.gpu import read_gpu_facts


def main():
    module = AnsibleModule(
        argument_spec=dict(
            nvidia_smi=dict(type="str", default="nvidia-smi"),
            nvcc=dict(type="list", elements="str", default=["/usr/local/cuda/bin/nvcc", "nvcc"]),
        ),
        supports_check_mode=True,
    )
    facts = read_gpu_facts(module, module.params["nvidia_smi"], module.params["nvcc"])
    module.exit_json(changed=False, ansible_facts=dict(spark_gpu_facts=facts))


if __name__ == "__main__":
    main()

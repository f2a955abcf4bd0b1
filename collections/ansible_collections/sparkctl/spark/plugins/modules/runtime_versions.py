#!/usr/bin/python
# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: runtime_versions
short_description: Report the versions that must be identical on every node of an engine cluster
version_added: 0.1.0
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - sparkctl.spark.attributes.info_posix
  - sparkctl.spark.engine_runtime
description:
  - Reports the driver and the CUDA version it supports (C(nvidia-smi)), the NCCL library the engine loads, torch,
    the Python of the venv, the versions of the named packages, and the identity of the runtime itself (a hash of
    every distribution installed in the venv, or the image's id). The filter C(sparkctl.spark.version_parity)
    compares the results of all nodes.
  - For a venv runtime the venv's own python is run once (C(python -I -c ...)) and lists every installed
    distribution with C(importlib.metadata); nothing from the venv is imported.
  - "NCCL: with O(nccl_preload) and its file present, the preloaded library (C(LD_PRELOAD) in the fabric environment
    loads it before torch's own), its version read from the name the path resolves to (C(libnccl.so.2.30.7)) or else
    the declared one. Otherwise the venv's C(nvidia-nccl-cuXX) wheel, or for an image O(image_nccl_version)."
  - A missing C(nvidia-smi), venv, docker or image is not a module failure. The values it would give stay V(null)
    and RV(problems) says why, so the parity table shows the gap beside the other nodes' values.
  - Reads only.
author:
  - sparkctl developers (!UNKNOWN)
seealso:
  - module: sparkctl.spark.gpu_facts
notes:
  - Images built on each node from the same context (C(build_on=each)) have different ids by design; they carry the
    same C(org.sparkctl.context-hash) label, reported as RV(versions.image_context_hash), and C(version_parity)
    compares that instead of the id when every node has it.
"""

EXAMPLES = r"""
- name: Report the runtime versions of a venv node
  sparkctl.spark.runtime_versions:
    runtime_kind: venv
    venv_path: /opt/sparkctl/venvs/solar-open2
    packages: "{{ spark_profile.runtime.venv.packages + ['torch'] }}"
    nccl_preload: "{{ spark_profile.nccl.preload | default(omit) }}"
  register: verify_versions

- name: Compare all nodes
  ansible.builtin.assert:
    that: parity.ok
    fail_msg: "Versions differ between nodes:\n{{ parity.table }}"
  vars:
    parity: >-
      {{ dict(ansible_play_hosts | zip(ansible_play_hosts | map('extract', hostvars, ['verify_versions', 'versions'])))
         | sparkctl.spark.version_parity }}
  run_once: true
"""

RETURN = r"""
versions:
  description: What must match across nodes. Items not known on this node are V(null).
  type: dict
  returned: always
  contains:
    driver:
      description: NVIDIA driver version.
      type: str
      sample: 580.95.05
    cuda:
      description: Highest CUDA version the driver supports.
      type: str
      sample: "13.0"
    nccl:
      description: The NCCL version the engine loads (see RV(versions.nccl_source)).
      type: str
      sample: 2.30.7
    nccl_source:
      description: Where RV(versions.nccl) comes from, V(preload), V(venv), V(image) or V(none).
      type: str
      sample: preload
    torch:
      description: torch's version in the venv, or in the image's running container (O(image_container)).
      type: str
      sample: 2.11.0+cu130
    python:
      description: The venv's Python version, or the image's C(python3) in its running container (O(image_container)).
      type: str
      sample: 3.12.3
    packages:
      description: Version of each of O(packages) by name, V(null) when not installed (or an image runtime read without O(image_container)).
      type: dict
      sample: {vllm: 0.25.1, torch: 2.11.0+cu130}
    venv_lock_sha256:
      description:
        - sha256 of the sorted C(name==version) lines (names normalized per PEP 503, one per line, each ending in a
          newline) of every distribution installed in the venv.
      type: str
      sample: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
    image_id:
      description: The image's id (C(docker image inspect)).
      type: str
      sample: sha256:4f1d8a6c0b2e9d7f3a5c8e1b0d2f4a6c8e0b2d4f6a8c0e2b4d6f8a0c2e4b6d8f
    image_context_hash:
      description: The image's C(org.sparkctl.context-hash) label, V(null) for an image sparkctl did not build.
      type: str
problems:
  description: Why an item could not be read, or what looks wrong (a missing preload, several NCCL wheels).
  type: list
  elements: str
  returned: always
  sample: ["nvidia-smi: nvidia-smi not found"]
nccl_preload:
  description: The preload as found, V(null) without O(nccl_preload).
  type: dict
  returned: always
  contains:
    path:
      description: The library path.
      type: str
    version:
      description: The declared version.
      type: str
    exists:
      description: Whether the file exists on the node.
      type: bool
    file_version:
      description: The version in the name the path resolves to, V(null) when it does not tell.
      type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkctl.spark.plugins.module_utils.runtime_versions import (
    RUNTIME_ARGUMENT_SPEC,
    RUNTIME_REQUIRED_IF,
    read_runtime_versions,
)


def main():
    module = AnsibleModule(
        argument_spec=RUNTIME_ARGUMENT_SPEC,
        required_if=RUNTIME_REQUIRED_IF,
        supports_check_mode=True,
    )
    module.exit_json(changed=False, **read_runtime_versions(module, **module.params))


if __name__ == "__main__":
    main()

#!/usr/bin/python
# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: ray_raylet_facts
short_description: Read the node id of the Ray raylet running on this node
version_added: 0.1.0
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - sparkctl.spark.attributes.info_linux
  - sparkctl.spark.procfs
description:
  - Reads C(/proc) for processes named C(raylet) and returns the C(--node_id) each was started with.
  - C(sparkctl.spark.ray_cluster_facts) compares it with the GCS's records, so a record left ALIVE by a raylet
    killed a moment ago (the GCS notices only after missed heartbeats) is not taken for the running one.
  - Needs no Ray; never changes anything.
author:
  - sparkctl developers (!UNKNOWN)
"""

EXAMPLES = r"""
---
- name: Read this node's raylet id
  sparkctl.spark.ray_raylet_facts:
  register: raylet
"""

RETURN = r"""
raylets:
  description: The raylets running here (pid, node_id); normally one.
  returned: always
  type: list
  elements: dict
node_id:
  description: The node id of the only raylet, else an empty string.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkctl.spark.plugins.module_utils.ray_cluster import local_raylets, read_processes


def main():
    module = AnsibleModule(argument_spec=dict(proc_root=dict(type="path", default="/proc")), supports_check_mode=True)
    raylets = local_raylets(read_processes(module.params["proc_root"]))
    module.exit_json(changed=False, raylets=raylets, node_id=raylets[0]["node_id"] if len(raylets) == 1 else "")


if __name__ == "__main__":
    main()

#!/usr/bin/python
# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: venv_state
short_description: Read in one run everything the engine_venv role manages on a node
version_added: 0.1.0
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - sparkctl.spark.attributes.info_linux
  - sparkctl.spark.node_paths
description:
  - Reads what installing an engine venv depends on and what it leaves, so that the role runs each writing step only
    for what differs and a node in sync costs one module run.
  - The node's Python for O(python) and the Python of an existing venv (as the probe script of the collection's
    C(venv_plugin) module utility reports them), the apt packages of O(apt_packages) and the profile Python's C(python3.X-venv) that are not
    installed, the distributions the venv holds (read from their metadata, as C(pip list) names them, without
    starting pip) and which pins of O(packages) they do not satisfy.
  - Each directory of O(trees) compared file by file with the SHA-1s of the controller's copy, as an upload with
    M(ansible.builtin.copy) (root-owned, mode C(u=rwX,go=rX)) would compare it.
  - What M(sparkctl.spark.venv_plugin) would do with O(plugin), from its own check-mode plan.
  - With O(registry_probe), runs the venv's Python to ask the engine's registry for the architecture, as the role's
    verification does; run as the connecting user, it also proves the venv readable by that user.
  - Changes nothing.
author:
  - sparkctl developers (!UNKNOWN)
options:
  venv:
    description: The virtual environment.
    type: path
    required: true
  python:
    description: The profile's Python, C(3) for the node's python3 or a minor such as C(3.12).
    type: str
    required: true
  apt_packages:
    description: Packages venv support needs besides the profile Python's C(python3.X-venv).
    type: list
    elements: str
    default: []
  packages:
    description: The pins the venv must satisfy (C(name==version)).
    type: list
    elements: str
    default: []
  trees:
    description: Directories uploaded from the controller.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: The directory on the node.
        type: path
        required: true
      checksums:
        description: The controller's files, relative path to SHA-1 (the C(venv_upload_trees) filter).
        type: dict
        required: true
  plugin:
    description: The out-of-tree plugin as M(sparkctl.spark.venv_plugin) takes it; omitted, not read.
    type: dict
    suboptions:
      src:
        description: The plugin's directory on the node.
        type: path
      files:
        description: The files it installs, relative to site-packages.
        type: list
        elements: str
        default: []
      state:
        description: Whether it should be installed.
        type: str
        choices: [present, absent]
        default: present
      name:
        description: The name recorded in the manifest.
        type: str
        default: ""
  registry_probe:
    description: The engine's registry and the architecture to find in it; omitted, not probed.
    type: dict
    suboptions:
      registry:
        description: C({module, attribute}) listing the architectures (the C(venv_registry) filter).
        type: dict
        required: true
      architecture:
        description: The architecture that must be registered.
        type: str
        required: true
      imports:
        description: Modules that must import as well (the plugin's).
        type: list
        elements: str
        default: []
"""

EXAMPLES = r"""
---
- name: Read the venv and everything it is built from
  sparkctl.spark.venv_state:
    venv: /opt/sparkctl/venvs/qwen3-vllm
    python: "3.12"
    apt_packages: [python3-venv]
    packages: [vllm==0.11.0]
    trees: >-
      {{ [{'controller': 'wheels', 'node': '/opt/sparkctl/venv-sources/qwen3-vllm/find-links/0'}]
         | sparkctl.spark.venv_upload_trees }}
  register: venv_node
"""

RETURN = r"""
extends_documentation_fragment:
  - sparkctl.spark.node_paths
python:
  description: What the Python probe script prints (C(system), C(requested), C(venv)).
  returned: always
  type: dict
change_marker:
  description:
    - The file that says when the venv's contents last changed (C(<venv>/.sparkctl-changed)), which the engine_venv
      role rewrites whenever it changes them and the engine's units list as read at their start.
  returned: always
  type: str
  sample: /opt/sparkctl/venvs/lab-standin/.sparkctl-changed
apt_missing:
  description: The packages of O(apt_packages), and the profile Python's C(python3.X-venv), that are not installed.
  returned: always
  type: list
  elements: str
installed:
  description: The venv's distributions as C({name, version}); V(null) without a venv to read.
  returned: always
  type: list
  elements: dict
missing:
  description: The pins of O(packages) the venv does not satisfy (all of them without a venv).
  returned: always
  type: list
  elements: str
trees:
  description: Per directory of O(trees), what differs, as sentences.
  returned: always
  type: dict
drifted_trees:
  description: The directories of O(trees) that differ.
  returned: always
  type: list
  elements: str
plugin:
  description:
    - C(changed) (whether M(sparkctl.spark.venv_plugin) would change anything; V(null) when it could not tell) and
      C(actions), or C(error).
  returned: when O(plugin) is given
  type: dict
registry_probe:
  description: C(rc), C(stdout) and C(stderr) of the probe, as the C(venv_probe_verdict) filter reads them; V(null)
    without a venv.
  returned: when O(registry_probe) is given
  type: dict
"""

import glob
import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sparkctl.spark.plugins.module_utils import venv_plugin
from ansible_collections.sparkctl.spark.plugins.module_utils.node_state import PATHS_ARGUMENT, assess_paths, missing_packages
from ansible_collections.sparkctl.spark.plugins.module_utils.venv_state import installed_distributions, tree_differences


def main():
    module = AnsibleModule(
        argument_spec=dict(
            venv=dict(type="path", required=True),
            python=dict(type="str", required=True),
            apt_packages=dict(type="list", elements="str", default=[]),
            packages=dict(type="list", elements="str", default=[]),
            trees=dict(type="list", elements="dict", default=[], options=dict(
                path=dict(type="path", required=True),
                checksums=dict(type="dict", required=True),
            )),
            plugin=dict(type="dict", options=dict(
                src=dict(type="path"),
                files=dict(type="list", elements="str", default=[]),
                state=dict(type="str", choices=["present", "absent"], default="present"),
                name=dict(type="str", default=""),
            )),
            registry_probe=dict(type="dict", options=dict(
                registry=dict(type="dict", required=True),
                architecture=dict(type="str", required=True),
                imports=dict(type="list", elements="str", default=[]),
            )),
            paths=PATHS_ARGUMENT,
        ),
        supports_check_mode=True,
    )
    params = module.params
    venv = params["venv"]
    result = dict(changed=False, change_marker=venv_plugin.change_marker(venv), **assess_paths(params["paths"]))

    rc, out, err = module.run_command(venv_plugin.python_probe_argv(params["python"], venv))
    try:
        result["python"] = json.loads(out)
    except ValueError:
        module.fail_json(msg=f"could not probe the node's python3 (rc {rc}): {(err or out).strip()[-600:]}", **result)

    check = venv_plugin.python_check(params["python"], result["python"])
    apt = list(params["apt_packages"]) + ([check["venv_package"]] if check.get("venv_package") else [])
    result["apt_missing"] = missing_packages(apt, module.run_command, module.get_bin_path("dpkg-query"))

    venv_python = os.path.join(venv, "bin", "python")
    site_packages = sorted(glob.glob(os.path.join(venv, "lib", "python3*", "site-packages")))
    result["installed"] = (installed_distributions(site_packages[0])
                           if os.path.exists(venv_python) and len(site_packages) == 1 else None)
    result["missing"] = (list(params["packages"]) if result["installed"] is None
                         else venv_plugin.missing_packages(params["packages"], result["installed"]))

    result["trees"] = {tree["path"]: tree_differences(tree["path"], tree["checksums"]) for tree in params["trees"]}
    result["drifted_trees"] = [tree["path"] for tree in params["trees"] if result["trees"][tree["path"]]]

    plugin = params["plugin"]
    if plugin is not None:
        try:
            planned = venv_plugin.run(venv, src=plugin["src"], files=plugin["files"], state=plugin["state"],
                                      name=plugin["name"], check_mode=True)
            result["plugin"] = {"changed": planned["changed"], "actions": planned["actions"]}
        except (venv_plugin.PluginError, OSError, TypeError) as exc:
            result["plugin"] = {"changed": None, "error": str(exc)}

    probe = params["registry_probe"]
    if probe is not None:
        result["registry_probe"] = None
        if os.path.exists(venv_python):
            rc, out, err = module.run_command(venv_plugin.probe_argv(venv_python, probe["registry"],
                                                                     probe["architecture"], probe["imports"]))
            result["registry_probe"] = {"rc": rc, "stdout": out, "stderr": err}

    module.exit_json(**result)


if __name__ == "__main__":
    main()

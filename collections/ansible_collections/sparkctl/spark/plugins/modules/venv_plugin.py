#!/usr/bin/python
# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: venv_plugin
short_description: Install an engine's out-of-tree plugin into a venv's site-packages, with backups, idempotently
version_added: 0.1.0
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - sparkctl.spark.attributes.posix
description:
  - Some model ports ship as files dropped into the engine's own package (the C(solar_open2) plugin for
    vLLM replaces C(vllm/model_executor/models/registry.py) and adds the model and config modules). This module
    does what the plugin's own C(install.sh) does, so that re-running it is safe and it can be undone.
  - Installs each file of O(files) (paths relative to site-packages) from O(src), a directory on the node whose
    tree mirrors site-packages, into the venv's site-packages. Other files in O(src) are ignored.
  - The first time a file that the engine already has is replaced, a byte-exact copy is kept as C(<file>.orig).
    A backup is never overwritten by a later run (also not after the engine was reinstalled), and an C(.orig)
    already present (for example left by the plugin's own C(install.sh)) is kept as the original.
  - Records the install in a manifest (JSON, C(<venv>/.sparkctl-plugin.json) by default) holding each file's
    sha256 and its backup. A converged re-run hashes and reports RV(ignore:changed=false); a file that drifted (edited by
    hand, or put back by C(pip install --force-reinstall) of the engine) is written again.
  - O(state=absent) moves every backup back, removes the files the plugin added and deletes the manifest. Files
    recorded by an earlier install that are no longer in O(files) are undone the same way on O(state=present).
  - Files are written through a temporary file and a rename (mode C(0644)), and the module's C(__pycache__)
    entries are removed, so the engine never imports half a file or stale bytecode.
  - Checking that the engine now registers the architecture is a separate step (the C(engine_venv) role runs a
    probe with the venv's Python); this module only runs the node's own Python and imports nothing from the venv.
attributes:
  check_mode:
    details:
      - Hashes and reports what would be installed, repaired, restored or removed; writes nothing.
  diff_mode:
    support: full
    details:
      - One line per file before and after (sha256 prefix, whether it is the engine's or the plugin's, its backup).
author:
  - sparkctl developers (!UNKNOWN)
options:
  venv:
    description: The virtual environment holding the engine.
    type: path
    required: true
  src:
    description:
      - Directory on the node holding the plugin, laid out like site-packages (C(<src>/vllm/model_executor/models/registry.py)).
      - Required with O(state=present).
    type: path
  files:
    description:
      - The files the plugin installs, relative to site-packages; an existing one is backed up first.
      - Required with O(state=present). Relative paths only, no C(..), no names ending in C(.orig).
    type: list
    elements: str
    default: []
  state:
    description:
      - V(present) installs (and repairs) the plugin; V(absent) restores the backups and removes the added files.
    type: str
    choices: [present, absent]
    default: present
  site_packages:
    description:
      - The venv's site-packages directory. Default is the single C(lib/python3.X/site-packages) under O(venv).
    type: path
  manifest:
    description: Where the install manifest lives. Default is C(<venv>/.sparkctl-plugin.json).
    type: path
  name:
    description: A label recorded in the manifest (the profile name).
    type: str
    default: ""
seealso:
  - module: ansible.builtin.pip
notes:
  - An unreadable manifest fails the task rather than being treated as a fresh install, which would back up the
    plugin's own files as originals.
"""

EXAMPLES = r"""
---
- name: Install the solar_open2 plugin into the vLLM venv
  sparkctl.spark.venv_plugin:
    venv: /opt/sparkctl/venvs/solar-open2-nvfp4-vllm-venv
    src: /opt/sparkctl/venv-sources/solar-open2-nvfp4-vllm-venv/plugin
    files:
      - vllm/model_executor/models/solar_open2.py
      - vllm/transformers_utils/configs/solar_open2.py
      - vllm/model_executor/models/registry.py
    name: solar-open2-nvfp4-vllm-venv

- name: Uninstall it, putting vLLM's own registry.py back
  sparkctl.spark.venv_plugin:
    venv: /opt/sparkctl/venvs/solar-open2-nvfp4-vllm-venv
    state: absent
"""

RETURN = r"""
actions:
  description:
    - What happened (or, in check mode, would happen) to each file, in order.
    - C(install) (added), C(replace) (engine file backed up and overwritten), C(adopt) (the file already held the
      plugin's content; backed up and recorded), C(repair) (drifted; written again), C(restore) (backup moved back),
      C(remove) (an added file deleted), C(keep) (already right).
  type: list
  elements: dict
  returned: always
  contains:
    path:
      description: Path relative to site-packages.
      type: str
      sample: vllm/model_executor/models/registry.py
    action:
      description: The action taken.
      type: str
      choices: [install, replace, adopt, repair, restore, remove, keep]
      sample: replace
    backup:
      description: The backup of the engine's file, relative to site-packages, or null when the plugin added it.
      type: str
      sample: vllm/model_executor/models/registry.py.orig
site_packages:
  description: The site-packages directory the plugin was installed into.
  type: str
  returned: always
  sample: /opt/sparkctl/venvs/solar-open2-nvfp4-vllm-venv/lib/python3.12/site-packages
manifest:
  description: Path of the install manifest.
  type: str
  returned: always
  sample: /opt/sparkctl/venvs/solar-open2-nvfp4-vllm-venv/.sparkctl-plugin.json
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sparkctl.spark.plugins.module_utils import venv_plugin


def main():
    module = AnsibleModule(
        argument_spec={
            "venv": {"type": "path", "required": True},
            "src": {"type": "path"},
            "files": {"type": "list", "elements": "str", "default": []},
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "site_packages": {"type": "path"},
            "manifest": {"type": "path"},
            "name": {"type": "str", "default": ""},
        },
        required_if=[("state", "present", ("src", "files"))],
        supports_check_mode=True,
    )
    params = module.params
    try:
        result = venv_plugin.run(
            params["venv"], src=params["src"], files=params["files"], state=params["state"],
            site_packages=params["site_packages"], manifest_path=params["manifest"], name=params["name"],
            check_mode=module.check_mode,
        )
    except (venv_plugin.PluginError, OSError) as exc:
        module.fail_json(msg=str(exc))
    diff = result.pop("diff")
    if module._diff and result["changed"]:
        result["diff"] = diff
    module.exit_json(**result)


if __name__ == "__main__":
    main()

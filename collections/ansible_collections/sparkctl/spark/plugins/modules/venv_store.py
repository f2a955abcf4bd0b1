#!/usr/bin/python
# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: venv_store
short_description: Record which engine venv is served and remove the profile's per-lock venvs beyond a count
version_added: 0.1.0
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - sparkctl.spark.served_record
  - sparkctl.spark.attributes.linux
description:
  - With one venv per runtime lock (C(spark_engine_venv_per_lock)), each new lock of a profile is built beside the
    serving venv, in C(<root>/<profile>-<12 hex digits>); the old ones stay for a rollback.
  - With O(record), puts O(current) first in the served record O(served_file) (most recently served first); a node
    that serves the same venv as last time writes nothing.
  - Lists the profile's per-lock venvs other than O(current) that sparkctl created (the node's record
    O(baseline_file) says the path was not there before sparkctl), most recently served first, those never served
    last.
  - With O(keep) above 0 and O(state=absent), removes those beyond the O(keep) most recently served (O(current) counts
    and is never removed). A venv under another name (a venv per profile, one of the user's) or one sparkctl did not
    create is never listed nor removed.
author:
  - sparkctl developers (!UNKNOWN)
options:
  root:
    description: The directory that holds the venvs (the parent of O(current)).
    type: path
    required: true
  profile:
    description: The profile whose per-lock venvs (C(<profile>-<12 hex digits>)) are listed.
    type: str
    required: true
  current:
    description: The served venv; never removed.
    type: path
    required: true
  served_file:
    description: The served record (JSON, root-owned, mode C(0644)).
    type: path
    default: /var/lib/sparkctl/venvs-served.json
  baseline_file:
    description: The node's record of what was there before sparkctl (roles/teardown); without it nothing is removed.
    type: path
    default: /var/lib/sparkctl/baseline.json
seealso:
  - module: sparkctl.spark.checkpoint_store
  - module: sparkctl.spark.node_baseline
notes:
  - Removing root's venvs needs root; run it with C(become).
"""

EXAMPLES = r"""
- name: Keep the two most recently served venvs of the profile
  sparkctl.spark.venv_store:
    root: /opt/sparkctl/venvs
    profile: solar-open2-nvfp4-vllm-venv
    current: /opt/sparkctl/venvs/solar-open2-nvfp4-vllm-venv-3f9a1c07be42
    keep: 2
    record: true
    state: absent
  become: true
"""

RETURN = r"""
venvs:
  description: The profile's per-lock venvs sparkctl created other than O(current), most recently served first.
  returned: always
  type: list
  elements: str
removed:
  description: The venvs removed (or that would be, in check mode).
  returned: always
  type: list
  elements: str
served:
  description: The served record after this run, most recent first.
  returned: always
  type: list
  elements: str
message:
  description: One line naming what was removed and what stays.
  returned: always
  type: str
"""

import os
import shutil

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sparkctl.spark.plugins.module_utils import venv_store as store
from ansible_collections.sparkctl.spark.plugins.module_utils import served_record
from ansible_collections.sparkctl.spark.plugins.module_utils.files import read_json_object


def main():
    module = AnsibleModule(
        argument_spec=served_record.store_argument_spec(
            store.SERVED_FILE, profile=dict(type="str", required=True),
            baseline_file=dict(type="path", default=store.BASELINE_FILE)),
        supports_check_mode=True,
    )
    p = module.params
    root, current = served_record.store_params(module, "venvs", "engine_venv_keep")
    names = []
    if os.path.isdir(root):
        names = [n for n in os.listdir(root) if os.path.isdir(os.path.join(root, n)) and not os.path.islink(os.path.join(root, n))]
    found = store.candidates(names, root, p["profile"], current, read_json_object(p["baseline_file"]))
    served = served_record.read_served(p["served_file"])
    ranked, to_remove = served_record.plan(found, current, p["keep"], served)
    removed = to_remove if p["state"] == "absent" else []
    if not module.check_mode:
        for path in removed:
            try:
                shutil.rmtree(path)
            except OSError as exc:
                module.fail_json(msg="Cannot remove the venv %s: %s" % (path, exc.strerror or exc))
    after_served = served_record.record_after(served, current, removed, p["record"])
    recorded, diff = served_record.update_record(module, p["served_file"], served, after_served)
    changed = bool(removed) or recorded
    remaining = [path for path in ranked if path not in removed]
    message = "serving %s" % current
    if removed:
        message += "; removed %s (beyond engine_venv_keep=%d)" % (", ".join(removed), p["keep"])
    if remaining:
        message += "; kept for a rollback: %s" % ", ".join(remaining)
    result = dict(changed=changed, venvs=ranked, removed=removed, served=after_served, message=message)
    if diff:
        result["diff"] = diff
    module.exit_json(**result)


if __name__ == "__main__":
    main()

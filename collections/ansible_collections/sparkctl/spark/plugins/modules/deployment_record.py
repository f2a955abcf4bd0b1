#!/usr/bin/python
# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: deployment_record
short_description: Keep a node's record of the deployment it serves
version_added: 0.1.0
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - sparkctl.spark.attributes.linux
attributes:
  check_mode:
    details:
      - Reports whether the record would be written, with the diff, and writes nothing.
  diff_mode:
    support: full
    details:
      - The record's text before and after.
description:
  - Writes O(record), as P(sparkctl.spark.deployment#filter) builds it, to O(path) as indented JSON, root-owned,
    mode C(0644) (it holds no secret), through a temporary file renamed over the old one, so a reader never sees a
    part of it.
  - A record of the same deployment (the same C(deployment_id)) keeps its C(recorded_at) and C(verify_status), so a
    re-verify of an unchanged cluster writes nothing. A record of another deployment replaces it (RV(new_deployment)).
  - A file that is not a record (not JSON, no C(deployment_id)) is replaced, and RV(problem) says why.
author:
  - sparkctl developers (!UNKNOWN)
options:
  path:
    description: The node's record.
    type: path
    default: /etc/sparkctl/deployment.json
  record:
    description:
      - The deployment as the verify stage found it, with its C(deployment_id) (the digest of its identity fields,
        which the module checks).
    type: dict
    required: true
seealso:
  - module: sparkctl.spark.verify_facts
notes:
  - Writing under C(/etc/sparkctl) needs root; run it with C(become).
"""

EXAMPLES = r"""
- name: Record the deployment on this node
  sparkctl.spark.deployment_record:
    record: "{{ verify_deployment }}"
  become: true
"""

RETURN = r"""
path:
  description: The node's record.
  type: str
  returned: always
  sample: /etc/sparkctl/deployment.json
record:
  description: The record as it is now kept (in check mode, as it would be).
  type: dict
  returned: always
  sample:
    deployment_id: sha256:1b6f0c3e2d4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c
    recorded_at: "2026-05-04T10:11:12Z"
    verify_status: passed
    profile: {name: solar-open2-nvfp4-vllm-venv, sha256: "sha256:5d1e..."}
previous:
  description: The record the file held before, V(null) without one.
  type: dict
  returned: always
new_deployment:
  description: Whether the record is of another deployment than the one the file held (or the file held none).
  type: bool
  returned: always
problem:
  description: Why the file found there was not a record (it is replaced), V(null) otherwise.
  type: str
  returned: always
  sample: null
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_bytes
from ansible_collections.sparkctl.spark.plugins.module_utils.deployment import (
    NODE_RECORD_MODE,
    NODE_RECORD_PATH,
    deployment_id,
    record_of,
    record_text,
    settle,
)
from ansible_collections.sparkctl.spark.plugins.module_utils.files import read_file_state, write_file_atomic

DIRECTORY_MODE = 0o755


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", default=NODE_RECORD_PATH),
            record=dict(type="dict", required=True),
        ),
        supports_check_mode=True,
    )
    path = module.params["path"]
    wanted = module.params["record"]
    if wanted.get("deployment_id") != deployment_id(wanted):
        module.fail_json(msg="record's deployment_id %r is not the digest of its identity (%s): build it with the "
                             "sparkctl.spark.deployment filter." % (wanted.get("deployment_id"), deployment_id(wanted)))
    try:
        content, mode, owner = read_file_state(path)
    except OSError as exc:
        module.fail_json(msg="Cannot read the deployment record %s: %s" % (path, exc.strerror or exc), path=path)
    previous, problem = record_of(path, content)
    kept = settle(wanted, [previous] if previous else [])
    text = to_bytes(record_text(kept))
    # Root owns what sparkctl keeps under /etc/sparkctl; a module run as another user cannot give it away.
    owner_wanted = (0, 0) if os.geteuid() == 0 else owner
    changed = content != text or mode != NODE_RECORD_MODE or owner != owner_wanted
    if changed and not module.check_mode:
        try:
            directory = os.path.dirname(path)
            if directory and not os.path.isdir(directory):
                os.makedirs(directory, DIRECTORY_MODE)
            if content != text:
                write_file_atomic(path, text, NODE_RECORD_MODE)
            else:
                os.chmod(path, NODE_RECORD_MODE)
            if os.geteuid() == 0:
                os.chown(path, 0, 0)
        except OSError as exc:
            module.fail_json(msg="Cannot write the deployment record %s: %s" % (path, exc.strerror or exc), path=path)
    result = dict(changed=changed, path=path, record=kept, previous=previous, problem=problem,
                  new_deployment=previous is None or previous.get("deployment_id") != kept["deployment_id"])
    if module._diff and changed:
        result["diff"] = dict(before=(content or b"").decode("utf-8", "replace"), after=text.decode("utf-8"),
                              before_header=path, after_header=path)
    module.exit_json(**result)


if __name__ == "__main__":
    main()

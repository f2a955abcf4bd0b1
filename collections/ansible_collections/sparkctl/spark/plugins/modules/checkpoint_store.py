#!/usr/bin/python
# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: checkpoint_store
short_description: List the checkpoints sparkctl keeps beside the served one, record which is served, prune beyond a count
version_added: 0.1.0
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - sparkctl.spark.served_record
  - sparkctl.spark.attributes.linux
description:
  - Each model profile's checkpoint has a directory of its own under one directory (O(root)); switching the served
    model puts the new one beside the old ones, which stay.
  - Lists the directories under O(root) that are sparkctl's (it created them, a C(.sparkctl-created) mark, and keeps a
    list of the files it put there, the manifest or the verified stamp) other than O(current), with the bytes of the
    files sparkctl put there (RV(freeable_bytes)).
  - With O(record), puts O(current) first in the served record O(served_file) (most recently served first); a node
    that serves the same checkpoint as last time writes nothing.
  - With O(keep) above 0 and O(state=absent), removes the checkpoints beyond the O(keep) most recently served
    (O(current) counts and is never removed). Only the files sparkctl's lists name, their unfinished copies, its own
    bookkeeping and the hub client's cache are removed; a directory that still holds anything else stays, named in
    RV(kept).
author:
  - sparkctl developers (!UNKNOWN)
options:
  root:
    description: The directory that holds the checkpoints' directories (the parent of the served one).
    type: path
    required: true
  current:
    description: The served checkpoint's directory; never removed.
    type: path
    required: true
  served_file:
    description: The served record (JSON, root-owned, mode C(0644)).
    type: path
    default: /var/lib/sparkctl/checkpoints-served.json
seealso:
  - module: sparkctl.spark.checkpoint_verify
notes:
  - Removing another user's files needs root; run it with C(become).
"""

EXAMPLES = r"""
- name: Keep the two most recently served checkpoints
  sparkctl.spark.checkpoint_store:
    root: /srv/sparkctl/models
    current: /srv/sparkctl/models/lab-standin-b
    keep: 2
    record: true
    state: absent
  become: true

- name: What other checkpoints could free
  sparkctl.spark.checkpoint_store:
    root: /srv/sparkctl/models
    current: /srv/sparkctl/models/lab-standin
  register: others
"""

RETURN = r"""
checkpoints:
  description: sparkctl's checkpoints other than O(current), most recently served first, each C(path) and C(bytes).
  returned: always
  type: list
  elements: dict
freeable_bytes:
  description: The bytes of the files sparkctl put in those checkpoints (what removing them would free).
  returned: always
  type: int
removed:
  description: The checkpoints whose sparkctl files were removed (or would be, in check mode).
  returned: always
  type: list
  elements: str
kept:
  description: Checkpoints beyond O(keep) that stay because they hold files sparkctl did not put there, with a few names.
  returned: always
  type: list
  elements: str
served:
  description: The served record after this run, most recent first.
  returned: always
  type: list
  elements: str
message:
  description: One line for the disk check and the prune, naming what could be freed and how.
  returned: always
  type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sparkctl.spark.plugins.module_utils import checkpoint_store as store
from ansible_collections.sparkctl.spark.plugins.module_utils.engine_gate import gib
from ansible_collections.sparkctl.spark.plugins.module_utils import served_record


def main():
    module = AnsibleModule(argument_spec=served_record.store_argument_spec(store.SERVED_FILE), supports_check_mode=True)
    p = module.params
    root, current = served_record.store_params(module, "checkpoints", "checkpoint_keep")
    found = {}
    if os.path.isdir(root):
        for name in sorted(os.listdir(root)):
            path = os.path.join(root, name)
            if os.path.isdir(path) and not os.path.islink(path) and path != current and store.is_sparkctl_checkpoint(path):
                # As root in directories the service user owns: read and walked through opened
                # directories; one swapped for a link meanwhile is left alone.
                try:
                    remove, left, warnings = store.sparkctl_files(path)
                except OSError as exc:
                    module.warn("%s: %s; left alone" % (path, exc))
                    continue
                for warning in warnings:
                    module.warn(warning)
                found[path] = {"remove": remove, "left": left, "bytes": store.directory_bytes(path, remove)}
    served = served_record.read_served(p["served_file"])
    ranked, to_remove = served_record.plan(found, current, p["keep"], served)
    removed, kept = [], []
    if p["state"] == "absent":
        for path in to_remove:
            entry = found[path]
            if entry["left"]:
                kept.append("%s (%d files sparkctl did not put there: %s)" % (path, len(entry["left"]), ", ".join(entry["left"][:5])))
            if entry["remove"]:
                removed.append(path)
                if not module.check_mode:
                    try:
                        store.remove_files(path, entry["remove"])
                    except OSError as exc:
                        module.fail_json(msg="Cannot remove the checkpoint %s: %s" % (path, exc.strerror or exc))
    gone = [path for path in removed if not found[path]["left"]]
    after_served = served_record.record_after(served, current, gone, p["record"])
    recorded, diff = served_record.update_record(module, p["served_file"], served, after_served)
    changed = bool(removed) or recorded
    remaining = [path for path in ranked if path not in removed]
    freeable = sum(found[path]["bytes"] for path in remaining)
    if remaining:
        message = ("%s in %d other checkpoint%s sparkctl downloaded could be freed: %s (set checkpoint_keep to keep "
                   "only the most recently served, or sparkctl teardown --purge-checkpoints)" % (
                       gib(freeable), len(remaining), "" if len(remaining) == 1 else "s",
                       ", ".join("%s (%s)" % (path, gib(found[path]["bytes"])) for path in remaining)))
    else:
        message = "no other checkpoint sparkctl downloaded is on this node"
    if removed:
        message = "removed %s; %s" % (", ".join(removed), message)
    result = dict(changed=changed, checkpoints=[{"path": path, "bytes": found[path]["bytes"]} for path in ranked],
                  freeable_bytes=freeable, removed=removed, kept=kept, served=after_served, message=message)
    if diff:
        result["diff"] = diff
    module.exit_json(**result)


if __name__ == "__main__":
    main()

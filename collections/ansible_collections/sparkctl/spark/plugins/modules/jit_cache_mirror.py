#!/usr/bin/python
# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: jit_cache_mirror
short_description: Mirror the head's kernel and JIT caches to every worker over the cable
version_added: 0.1.0
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - sparkctl.spark.attributes.posix
description:
  - Runs on the head as the service user. For each worker whose runtime identity is the head's and whose cache
    digest differs from the head's, makes the worker's cache directory hold exactly the head's files with the
    checkpoint mirror's rsync (the collection's C(checkpoint_rsync) module utility, over SSH on the cable); the
    head's files are sent, the worker's files the head does not hold are deleted, nothing outside the identity's
    directory is touched.
  - A worker of another identity is skipped (its runtime differs, as verify's parity check says); a worker
    already holding the head's digest costs nothing, so a re-run changes nothing.
  - In check mode, reports which workers would be mirrored without contacting them.
author:
  - sparkctl developers (!UNKNOWN)
options:
  source:
    description: The head's identity directory (M(sparkctl.spark.jit_cache)'s RV(sparkctl.spark.jit_cache#module:path)).
    type: path
    required: true
  identity:
    description: The head's identity directory name.
    type: str
    required: true
  digest:
    description: The digest of the head's cache.
    type: str
    required: true
  names:
    description: The head's cache files, relative to O(source).
    type: list
    elements: str
    required: true
  workers:
    description: One entry per worker.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: The worker's inventory name.
        type: str
        required: true
      target:
        description: rsync's destination, C(user@link-address:/var/cache/sparkctl/jit/<identity>/).
        type: str
        required: true
      identity:
        description: The worker's identity directory name.
        type: str
        required: true
      digest:
        description: The digest of the worker's cache.
        type: str
        required: true
      names:
        description: The worker's cache files.
        type: list
        elements: str
        default: []
  rsh:
    description: rsync's remote shell.
    type: str
    default: ssh -o BatchMode=yes
seealso:
  - module: sparkctl.spark.jit_cache
  - module: sparkctl.spark.checkpoint_sync
"""

EXAMPLES = r"""
- name: Mirror the head's kernel caches to the workers
  sparkctl.spark.jit_cache_mirror:
    source: "{{ jit_cache_node.path }}"
    identity: "{{ jit_cache_node.identity }}"
    digest: "{{ jit_cache_node.cache.digest }}"
    names: "{{ jit_cache_node.cache.names }}"
    workers: "{{ jit_cache_worker_specs }}"
  become: true
  become_user: sparkctl
"""

RETURN = r"""
workers:
  description: Per worker, C(action) (C(mirrored), C(in_step), C(skipped)), C(copied) and C(deleted) file counts and,
    when skipped, C(reason).
  type: dict
  returned: always
  sample: {spark2: {action: mirrored, copied: 12, deleted: 0}}
"""

import posixpath

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sparkctl.spark.plugins.module_utils import jit_cache
from ansible_collections.sparkctl.spark.plugins.module_utils.checkpoint_rsync import Rsync, RsyncFailure


def plan_worker(head_identity, head_digest, head_names, worker):
    """(action, delete, reason) for one worker: whether its cache must become the head's."""
    if worker["identity"] != head_identity:
        return "skipped", [], "its runtime is %s, the head's %s" % (worker["identity"], head_identity)
    if worker["digest"] == head_digest:
        return "in_step", [], None
    if not head_names:
        # An empty head cache (a reset, or an engine that compiles nothing) is no reason to empty a worker's.
        return "skipped", [], "the head's cache is empty"
    return "mirror", jit_cache.deletions(worker.get("names") or [], head_names), None


def mirror(params, check_mode, rsync):
    results, changed, failed = {}, False, []
    for worker in params["workers"]:
        action, delete, reason = plan_worker(params["identity"], params["digest"], params["names"], worker)
        if action != "mirror":
            results[worker["name"]] = dict(action=action, copied=0, deleted=0, **({"reason": reason} if reason else {}))
            continue
        changed = True
        if check_mode:
            results[worker["name"]] = {"action": "mirrored", "copied": None, "deleted": len(delete)}
            continue
        try:
            copied, deleted = rsync.tree(params["source"], worker["target"], params["names"])
            # One deleting pass per directory, each naming its entries at the top: rsync 3.2.7 (the
            # one Ubuntu 24.04 and Debian 12 ship) fails any nested name under --delete-missing-args
            # ("invalid file mode 00", a protocol error), and jit_cache.deletions names directories
            # the head does have, or the cache's own top.
            for parent, names in jit_cache.deletions_by_directory(delete):
                deleted += [posixpath.join(parent, name) for name in rsync.tree(
                    params["source"], worker["target"], [], delete=names, whole_directories=True, within=parent)[1]]
        except RsyncFailure as exc:
            failed.append("%s: %s" % (worker["name"], exc))
            results[worker["name"]] = {"action": "failed", "copied": 0, "deleted": 0, "reason": str(exc)}
            continue
        results[worker["name"]] = {"action": "mirrored", "copied": len(copied), "deleted": len(deleted)}
    return results, changed, failed


def main():
    module = AnsibleModule(
        argument_spec=dict(
            source=dict(type="path", required=True),
            identity=dict(type="str", required=True),
            digest=dict(type="str", required=True),
            names=dict(type="list", elements="str", required=True),
            workers=dict(type="list", elements="dict", required=True, options=dict(
                name=dict(type="str", required=True),
                target=dict(type="str", required=True),
                identity=dict(type="str", required=True),
                digest=dict(type="str", required=True),
                names=dict(type="list", elements="str", default=[]),
            )),
            rsh=dict(type="str", default="ssh -o BatchMode=yes"),
        ),
        supports_check_mode=True,
    )
    results, changed, failed = mirror(module.params, module.check_mode, Rsync(rsh=module.params["rsh"]))
    if failed:
        module.fail_json(msg="Mirroring the kernel cache failed: %s" % "; ".join(failed), workers=results, changed=changed)
    module.exit_json(changed=changed, workers=results)


if __name__ == "__main__":
    main()

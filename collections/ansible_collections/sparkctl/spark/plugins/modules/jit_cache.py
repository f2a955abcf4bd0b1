#!/usr/bin/python
# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: jit_cache
short_description: Keep the engine's kernel and JIT caches in one directory per runtime identity
version_added: 0.1.0
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - sparkctl.spark.attributes.linux
attributes:
  diff_mode:
    support: full
    details:
      - Where C(current) pointed before and after.
description:
  - Reads the node's runtime identity (the venv's lock hash or the image's id, as M(sparkctl.spark.runtime_versions)
    reads them) unless O(runtime_id) gives it, and with O(state=present) makes
    C(/var/cache/sparkctl/jit/<kind>-<hash>) (owned by O(owner), with a marker file saying sparkctl made it and one
    subdirectory per cache variable engine.env names) and points C(/var/cache/sparkctl/jit/current) at it.
  - A runtime change moves the link to a new, empty directory and removes the directories of other identities
    that carry sparkctl's marker; a directory without it is reported in RV(foreign) and left alone.
  - O(reset=true) empties the identity's directory (for ranks whose compiled kernels disagree).
  - With O(state=read) changes nothing and reports what the current cache holds; O(since) (the engine's start, epoch
    seconds) adds how many cache files were written at or after it, which tells a boot that compiled from one
    that did not.
author:
  - sparkctl developers (!UNKNOWN)
options:
  state:
    description: C(present) to make the directory and link, C(read) to only report.
    type: str
    choices: [present, read]
    default: present
  runtime_kind:
    description: The profile's runtime.
    type: str
    choices: [venv, image]
    required: true
  venv_path:
    description: The engine's venv (O(runtime_kind=venv)).
    type: path
  image:
    description: The engine's image reference (O(runtime_kind=image)).
    type: str
  runtime_id:
    description: The identity, when the caller already read it (C(sha256:<hex>) or C(<hex>)).
    type: str
  owner:
    description:
      - The service user that runs the engine and owns the cache (required with O(state=present)).
      - What the engine wrote under the identity's directory as another user is given to it (an image's
        containers run as root), so the cache can be mirrored to the workers as it.
      - The tree is walked and given through opened directories, never through a link; a file with other hard links
        and a device node are never given (a warning names them).
    type: str
  reset:
    description: Empty the identity's cache directory.
    type: bool
    default: false
  since:
    description: The engine's start, epoch seconds (O(state=read)); a worker is given the head's.
    type: float
  since_unit:
    description: Read the engine's start from this systemd unit's main process start on this node instead of
      O(since) (O(state=read); the head's API unit).
    type: str
seealso:
  - module: sparkctl.spark.jit_cache_mirror
"""

EXAMPLES = r"""
- name: Keep the kernel caches of this runtime
  sparkctl.spark.jit_cache:
    runtime_kind: venv
    venv_path: /opt/sparkctl/venvs/solar-open2
    owner: sparkctl
    reset: "{{ jit_cache_reset }}"
  become: true
"""

RETURN = r"""
identity:
  description: The runtime's directory name under C(/var/cache/sparkctl/jit).
  type: str
  returned: success
  sample: venv-3f0c9e1a2b4d5e6f
path:
  description: The identity's cache directory.
  type: str
  returned: success
  sample: /var/cache/sparkctl/jit/venv-3f0c9e1a2b4d5e6f
removed:
  description: Directories of other identities removed (or that check mode would remove).
  type: list
  elements: str
  returned: success
foreign:
  description: Directories under the cache root without sparkctl's marker, left alone.
  type: list
  elements: str
  returned: success
reset:
  description: Whether the cache was emptied.
  type: bool
  returned: success
given:
  description: What O(owner) was given under the identity's directory (written there as another user), sorted; in
    check mode what it would be given.
  type: list
  elements: str
  returned: success
relinked:
  description: Whether C(current) moved from another identity (the runtime changed), which the engine's restart counts.
  type: bool
  returned: success
since:
  description: The engine's start used for C(written_since) in RV(cache), epoch seconds, or null when it is not known
    (no O(since), or O(since_unit) not started).
  type: float
  returned: success
boot:
  description: With O(state=read), how this node's engine boot went, judged by the cache alone (any engine)
    C(cold) (the boot wrote cache files, it compiled), C(warm) (the cache held files and the boot wrote none),
    C(empty) (nothing cached), C(unknown) (no engine start known).
  type: str
  returned: success
cache:
  description: What the cache holds after the run (C(files), C(bytes), C(digest), C(written_since) with O(since)),
    and C(names), the files' paths under RV(path).
  type: dict
  returned: success
"""

import pwd

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sparkctl.spark.plugins.module_utils import jit_cache
from ansible_collections.sparkctl.spark.plugins.module_utils.runtime_versions import read_runtime_versions


def runtime_identity(module):
    if module.params["runtime_id"]:
        return module.params["runtime_id"]
    kind = module.params["runtime_kind"]
    read = read_runtime_versions(module, kind, venv_path=module.params["venv_path"], image=module.params["image"])
    versions = read["versions"]
    runtime_id = versions.get("venv_lock_sha256" if kind == "venv" else "image_id")
    if not runtime_id and module.check_mode:
        # --check before the runtime is installed: nothing to read yet, the real run makes it.
        return None
    if not runtime_id:
        module.fail_json(msg="Cannot read the %s's identity for its kernel cache: %s" % (
            kind, "; ".join(read["problems"]) or "nothing reported"))
    return runtime_id


def owner_account(module, owner):
    try:
        return pwd.getpwnam(owner)
    except KeyError:
        module.fail_json(msg="The cache owner %s does not exist on this node (spark_service_user)." % owner)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", choices=["present", "read"], default="present"),
            runtime_kind=dict(type="str", choices=["venv", "image"], required=True),
            venv_path=dict(type="path"),
            image=dict(type="str"),
            runtime_id=dict(type="str"),
            owner=dict(type="str"),
            reset=dict(type="bool", default=False),
            since=dict(type="float"),
            since_unit=dict(type="str"),
        ),
        mutually_exclusive=[("since", "since_unit")],
        required_if=[("state", "present", ["owner"])],
        supports_check_mode=True,
    )
    params = module.params
    if not params["runtime_id"] and not params["venv_path" if params["runtime_kind"] == "venv" else "image"]:
        module.fail_json(msg="runtime_id, or venv_path (venv) / image (image), is required")
    base = jit_cache.BASE_DIR
    runtime_id = runtime_identity(module)
    since = params["since"]
    if params["since_unit"]:
        rc, out, _err = module.run_command(jit_cache.unit_start_argv(module.get_bin_path("systemctl", required=True),
                                                                     params["since_unit"]))
        since = jit_cache.parse_unit_start(out) if rc == 0 else None
    if runtime_id is None:
        module.exit_json(changed=params["state"] == "present", identity=None, path=None, removed=[], foreign=[],
                         reset=False, relinked=False, since=since, boot="unknown",
                         cache={"files": 0, "bytes": 0, "digest": None, "names": []})
    account = owner_account(module, params["owner"]) if params["owner"] else None
    owner = (account.pw_uid, account.pw_gid) if account else None
    try:
        if params["state"] == "present" and not module.check_mode:
            todo = jit_cache.prepare(base, params["runtime_kind"], runtime_id,
                                     [sub for _n, sub in jit_cache.CACHE_VARIABLES], reset=params["reset"],
                                     owner=owner)
        else:
            todo = jit_cache.plan(base, params["runtime_kind"], runtime_id, params["reset"])
        # Walked and given through opened directories (module_utils/safe_walk.py): the service user
        # writes this tree, and a link or hard link it plants is never followed or given.
        given, refused = jit_cache.give(todo["path"], owner[0], owner[1], apply=not module.check_mode) if owner else ([], [])
    except (jit_cache.JitCacheError, OSError) as exc:
        module.fail_json(msg="Kernel cache under %s: %s" % (base, exc))
    for path, why in refused:
        module.warn("Kernel cache: %s is not given to %s: %s." % (path, params["owner"], why))
    files = jit_cache.scan(todo["path"])
    cache = jit_cache.summary(files, since)
    cache["names"] = sorted(files)
    changed = (params["state"] == "present" and bool(todo["create"] or todo["link"] or todo["remove"] or todo["reset"])
               or bool(given))
    module.exit_json(changed=changed, identity=todo["name"], path=todo["path"], removed=todo["remove"], given=given,
                     foreign=todo["foreign"], reset=todo["reset"], cache=cache, since=since,
                     relinked=params["state"] == "present" and bool(todo["link"] and todo["link_was"]),
                     boot=jit_cache.boot_state(cache, since) if params["state"] == "read" else "unknown",
                     **({"diff": {"before": {"current": todo["link_was"]}, "after": {"current": todo["name"]}}}
                        if module._diff else {}))


if __name__ == "__main__":
    main()

#!/usr/bin/python
# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: image_context
short_description: Hash an image build context staged on a node
version_added: 0.1.0
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - sparkctl.spark.attributes.info_posix
description:
  - Computes the same hash as the C(sparkctl.spark.image_context) filter does on the control node, over a build context
    staged on the node, namely the base image reference and each entry's relative path, type, permission bits and sha256, in a
    canonical encoding (symlinks followed; modification times, owners and the directory's location left out).
  - The image built from the context is labelled with this hash (C(org.sparkctl.context-hash)), so a node can tell
    whether the image it holds was built from exactly this context.
  - With O(expect), fails when the staged copy hashes differently (a file was changed on the node after staging).
  - Read-only; never reports a change.
author:
  - sparkctl developers (!UNKNOWN)
options:
  path:
    description: The staged build context (a directory holding the C(Dockerfile)).
    type: path
    required: true
  base:
    description: The base image reference the context builds FROM; part of the hash.
    type: str
    default: ""
  expect:
    description: The hash the control node computed; the module fails naming both when they differ.
    type: str
seealso:
  - module: sparkctl.spark.image_archive_info
"""

EXAMPLES = r"""
- name: Check the staged context is the profile's
  sparkctl.spark.image_context:
    path: /var/lib/sparkctl/image-context/qwen38-flash-next-nvfp4-sglang
    base: lmsysorg/sglang:qwen38flashnext
    expect: "sha256:5c1f0e6b8a2d4c7e9f1a3b5d7c9e0f2a4b6c8d0e1f3a5b7c9d0e2f4a6b8c0d1e"
"""

RETURN = r"""
hash:
  description: C(sha256:<hex>) of the context and base.
  type: str
  returned: always
  sample: "sha256:5c1f0e6b8a2d4c7e9f1a3b5d7c9e0f2a4b6c8d0e1f3a5b7c9d0e2f4a6b8c0d1e"
files:
  description: Relative paths of the context's files, sorted.
  type: list
  elements: str
  returned: always
  sample: [Dockerfile, patch_qsa_backend.py]
dirs:
  description: Relative paths of the context's directories, sorted.
  type: list
  elements: str
  returned: always
  sample: []
bytes:
  description: Total size of the files.
  type: int
  returned: always
  sample: 7342
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkctl.spark.plugins.module_utils.engine_image import ContextError, context_hash


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            base=dict(type="str", default=""),
            expect=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    try:
        result = context_hash(module.params["path"], module.params["base"])
    except ContextError as exc:
        module.fail_json(msg=str(exc), changed=False)
    expect = module.params["expect"]
    if expect and result["hash"] != expect:
        module.fail_json(
            msg="the build context staged at %s hashes to %s, the control node's to %s: a staged file was changed "
            "or is still being copied; re-run to stage it again" % (module.params["path"], result["hash"], expect),
            changed=False, **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()

#!/usr/bin/python
# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: image_archive_info
short_description: List the images a docker-save archive holds, without loading it
version_added: 0.1.0
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - sparkctl.spark.attributes.info_posix
description:
  - Reads only the C(manifest.json) member of a C(docker save) archive (plain or compressed tar) and returns each
    image's ID and tags.
  - The ID is the digest of the image's config blob, in the classic layout (C(<hex>.json)) and the OCI layout Docker 25+
    writes (C(blobs/sha256/<hex>)) alike, so it compares directly with the C(Id) of
    M(community.docker.docker_image_info). A role loads the archive only when the image it holds is not already there.
  - Read-only; never reports a change.
author:
  - sparkctl developers (!UNKNOWN)
options:
  path:
    description: The archive on the node.
    type: path
    required: true
seealso:
  - module: community.docker.docker_image_info
  - module: community.docker.docker_image_load
"""

EXAMPLES = r"""
- name: Read which image the tarball holds
  sparkctl.spark.image_archive_info:
    path: /srv/images/vllm-solar-open.tar
  register: archive
"""

RETURN = r"""
images:
  description: One item per image in the archive, in the archive's order.
  type: list
  elements: dict
  returned: always
  contains:
    id:
      description: The image ID, C(sha256:<hex>).
      type: str
      sample: "sha256:99c042f9cfbd5e0a8d1b6c3f2e4a7d9b0c1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a"
    repo_tags:
      description: The tags the image is loaded under (empty for an untagged image).
      type: list
      elements: str
      sample: ["upstage/vllm-solar-open:latest"]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkctl.spark.plugins.module_utils.engine_image import ContextError, archive_images


def main():
    module = AnsibleModule(argument_spec=dict(path=dict(type="path", required=True)), supports_check_mode=True)
    try:
        images = archive_images(module.params["path"])
    except ContextError as exc:
        module.fail_json(msg=str(exc), changed=False)
    module.exit_json(changed=False, images=images)


if __name__ == "__main__":
    main()

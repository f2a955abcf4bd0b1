# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The container-image runtime on the control node: hash a profile's build context, list what a
staged copy of it holds too many, and render docker's daemon.json."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.sparkctl.spark.plugins.module_utils import engine_image, teardown

DOCUMENTATION = r"""
name: image_context
short_description: Hash an image build context on the control node
version_added: 0.1.0
description:
  - Walks the build context directory (symlinks followed) and hashes, in a canonical encoding, the base image
    reference and each entry's relative path, type, permission bits and sha256. Modification times, owners and the
    directory's own location are not part of it, so the same context hashes the same on the control node and on a node.
  - The result labels the built image (C(org.sparkctl.context-hash)); a re-run rebuilds only when the label differs.
  - Like C(profile_load), it reads the control node's filesystem (the profile and its context live there).
  - Companion filters in this file, documented in RETURN, are C(image_context_stale), C(docker_daemon_json) and
    C(apt_set_up).
options:
  _input:
    description: The context directory on the control node.
    type: path
    required: true
  base:
    description: The base image reference the Dockerfile builds FROM (passed as the C(BASE_IMAGE) build argument).
    type: str
    default: ""
"""

EXAMPLES = r"""
- name: Hash the profile's patch context
  ansible.builtin.set_fact:
    engine_image_context: "{{ '/path/to/profiles/contexts/lab-image' | sparkctl.spark.image_context('sparklab/base:1') }}"

- name: Remove what the staged copy holds that the context does not
  ansible.builtin.file:
    path: "{{ item }}"
    state: absent
  loop: "{{ found.files | map(attribute='path') | sparkctl.spark.image_context_stale(stage_dir, engine_image_context) }}"

- name: Render daemon.json with the NVIDIA runtime registered
  ansible.builtin.copy:
    content: "{{ current_text | sparkctl.spark.docker_daemon_json('/usr/bin/nvidia-container-runtime') }}"
    dest: /etc/docker/daemon.json
    mode: "0644"
"""

RETURN = r"""
_value:
  description:
    - C(image_context) returns C(hash) (C(sha256:<hex>)), C(files) and C(dirs) (relative paths, sorted) and C(bytes).
    - C(image_context_stale) (input the absolute paths found under a staged copy, arguments the copy's root and an
      C(image_context) result) returns the paths that are not part of the context, deepest first.
    - C(docker_daemon_json) (input the current text of daemon.json, empty when absent; arguments
      C(nvidia_runtime_path), C(set_default_runtime), C(settings)) returns the text dockerd should read, keys sorted,
      keys sparkctl does not manage kept. The NVIDIA runtime is registered as C(nvidia-ctk runtime configure
      --runtime=docker) does; C(settings) replace top-level keys, C(null) removes one.
    - C(apt_set_up) (input the output lines of an C(ansible.builtin.apt) install, argument the packages it was asked
      for) returns those that install set up (C(Setting up NAME ...)) in the order asked, which is what it put on the node.
  type: raw
"""


def image_context(path, base=""):
    try:
        return engine_image.context_hash(path, base)
    except engine_image.ContextError as exc:
        raise AnsibleFilterError(f"image_context: {exc}") from exc


def image_context_stale(found, root, context):
    paths = [item["path"] if isinstance(item, dict) else item for item in (found or [])]
    return engine_image.stale_entries(paths, root, context.get("files", []), context.get("dirs", []))


def docker_daemon_json(current_text="", nvidia_runtime_path="", set_default_runtime=False, settings=None):
    try:
        config = engine_image.daemon_config(current_text, nvidia_runtime_path, bool(set_default_runtime), settings)
    except engine_image.ContextError as exc:
        raise AnsibleFilterError(f"docker_daemon_json: {exc}") from exc
    return engine_image.daemon_json_text(config)


def apt_set_up(apt_output_lines, candidates):
    return teardown.packages_set_up(apt_output_lines, candidates)


class FilterModule:
    def filters(self):
        return {
            "image_context": image_context,
            "image_context_stale": image_context_stale,
            "docker_daemon_json": docker_daemon_json,
            "apt_set_up": apt_set_up,
        }

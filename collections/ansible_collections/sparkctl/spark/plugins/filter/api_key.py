# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The API key files' text, the state node_state compares them with, and the key read back out of a file."""

from __future__ import annotations

import hashlib

from ansible.errors import AnsibleFilterError

from ansible_collections.sparkctl.spark.plugins.module_utils.api_key import api_key_from_text, key_file_text

DOCUMENTATION = r"""
name: api_key_file_text
short_description: The text of an API key file
description:
  - "Input one entry of C(profile_render)'s C(secret_files) (C(format), C(key)); argument the key. Returns
    C(NAME=key) for an environment file, C(name: key) for a YAML one, with its newline."
  - C(api_key_file_states) takes the C(secret_files) mapping, the chosen key (empty when sparkctl generates one) and
    the owner, and returns one C(sparkctl.spark.node_state) path entry per file (owner, group, mode, and the checksum of
    the text only for a chosen key; a generated one is kept whatever it is).
  - "C(api_key_value) takes the text of the engine's key file and returns the key, read from C(VLLM_API_KEY=KEY)
    (vLLM's environment file) or C(api-key: KEY) (SGLang's C(--config) YAML). It fails without echoing the text when
    the text holds no key; use it only in C(no_log) tasks."
"""


def api_key_file_text(entry, key):
    try:
        return key_file_text(entry["format"], entry["key"], key)
    except (KeyError, TypeError) as exc:
        raise AnsibleFilterError(f"api_key_file_text: not a secret_files entry ({exc})") from exc


def api_key_file_states(secret_files, chosen_key, owner):
    if not isinstance(secret_files, dict):
        raise AnsibleFilterError("api_key_file_states: expected the secret_files mapping of profile_render")
    states = []
    for path, entry in secret_files.items():
        state = {"path": path, "owner": owner, "group": owner, "mode": entry["mode"]}
        if chosen_key:
            state["checksum"] = hashlib.sha1(api_key_file_text(entry, chosen_key).encode("utf-8")).hexdigest()
        states.append(state)
    return states


def api_key_value(text):
    key = api_key_from_text(text)
    if not key:
        raise AnsibleFilterError("the API key file holds no VLLM_API_KEY= or api-key: line; run the serve stage to write it")
    return key


class FilterModule:
    def filters(self):
        return {"api_key_file_text": api_key_file_text, "api_key_file_states": api_key_file_states, "api_key_value": api_key_value}

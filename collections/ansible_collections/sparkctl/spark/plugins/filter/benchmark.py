# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Small pieces the benchmark stage needs around its client: the key out of the head's
key file, and the client's progress file as one line."""

from __future__ import annotations

import json

from ansible.errors import AnsibleFilterError
from ansible_collections.sparkctl.spark.plugins.module_utils.api_key import api_key_from_text

DOCUMENTATION = r"""
name: api_key_value
short_description: The API key out of the text of the engine's key file
version_added: 0.1.0
description:
  - Reads C(VLLM_API_KEY=KEY) (vLLM's environment file) or C(api-key: KEY) (SGLang's C(--config) YAML).
  - Fails without echoing the text when it holds no key. Use it only in C(no_log) tasks.
options:
  _input:
    description: The file's text.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Run the client with the key in its environment
  ansible.builtin.command: python -m sparkctl.bench run --url http://head:8000 --model m --out /tmp/b
  environment:
    SPARKCTL_API_KEY: "{{ key_file.content | b64decode | sparkctl.spark.api_key_value }}"
  no_log: true
"""

RETURN = r"""
_value:
  description: The key.
  type: str
"""


def api_key_value(text):
    key = api_key_from_text(text)
    if not key:
        raise AnsibleFilterError("the API key file holds no VLLM_API_KEY= or api-key: line; run the serve stage to write it")
    return key


def bench_progress_line(text):
    """The last progress record of the benchmark client as one human line."""
    records = []
    for line in str(text or "").splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    if not records:
        return "benchmark: warming up (no measurement point finished yet)"
    last = records[-1]
    return "benchmark: point %s of %s done (%s prompt tokens, %s streams) after %.0f s%s" % (
        last.get("point", "?"), last.get("points", "?"), last.get("prompt_tokens", "?"), last.get("streams", "?"),
        float(last.get("elapsed_s") or 0), (": " + last["message"]) if last.get("message") else "")


class FilterModule:
    def filters(self):
        return {"api_key_value": api_key_value, "bench_progress_line": bench_progress_line}

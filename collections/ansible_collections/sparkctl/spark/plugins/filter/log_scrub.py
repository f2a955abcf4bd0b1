# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Log lines without secrets, for the plays that print the engine's journal."""

from __future__ import annotations

from ansible_collections.sparkctl.spark.plugins.module_utils.api_key import api_key_from_text
from ansible_collections.sparkctl.spark.plugins.module_utils.log_scrub import scrub_lines

DOCUMENTATION = r"""
name: log_scrub
short_description: Journal lines without the API key or URL credentials
version_added: 0.1.0
description:
  - Replaces the known spellings of an API key in a log line (an C(api_key='...') field or dict entry as
    SGLang prints its server arguments, C(--api-key VALUE), C(VLLM_API_KEY=), C(api-key:), a C(Bearer) header), a
    Hugging Face token (C(hf_...)), credentials inside URLs, and every exact secret given, with C(<redacted by sparkctl>).
  - The same code scrubs the lines C(sparkctl.spark.engine_health) returns.
options:
  _input:
    description: The log lines.
    type: list
    elements: str
    required: true
  secrets:
    description: Exact strings to remove wherever they appear (the API key read from its file); shorter than 8
      characters are ignored.
    type: raw
    default: []
  key_file_text:
    description: The text of the engine's API key file (a C(VLLM_API_KEY=) line or an C(api-key) entry); the key in it is
      removed like O(secrets). A text without a key adds nothing.
    type: str
"""

EXAMPLES = r"""
- name: Print the journal without the key
  ansible.builtin.debug:
    msg: "{{ journal.stdout_lines | sparkctl.spark.log_scrub(key_file_text=key_file.content | b64decode) }}"
"""

RETURN = r"""
_value:
  description: The lines, scrubbed, in order.
  type: list
  elements: str
"""


def log_scrub(lines, secrets=None, key_file_text=None):
    secrets = [secrets] if isinstance(secrets, str) else list(secrets or [])
    key = api_key_from_text(key_file_text) if key_file_text else None
    return scrub_lines(lines, secrets + ([key] if key else []))


class FilterModule:
    def filters(self):
        return {"log_scrub": log_scrub}

# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The API key out of the file the engine reads it from: vLLM's environment file
(`VLLM_API_KEY=...`) or SGLang's --config YAML (`api-key: ...`)."""

from __future__ import annotations

import re

_LINE = re.compile(r"^\s*(?:export\s+)?(VLLM_API_KEY|api-key|api_key)\s*(?:=|:)\s*(.*?)\s*$")


def api_key_from_text(text):
    """The key, or None when the text holds none. Quotes around the value are removed."""
    for line in str(text or "").splitlines():
        match = _LINE.match(line)
        if not match:
            continue
        value = match.group(2)
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        return value or None
    return None


def key_file_text(fmt, name, value):
    """The whole text of a key file: `NAME=value` for an environment file (format env),
    `name: value` for SGLang's YAML --config (format yaml), one line."""
    return f"{name}{'=' if fmt == 'env' else ': '}{value}\n"

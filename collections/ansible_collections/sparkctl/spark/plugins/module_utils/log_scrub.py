# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Secrets out of the engine's log lines before sparkctl prints them.

Engines log their own arguments: SGLang prints its parsed server arguments at every start,
`server_args=ServerArgs(... api_key='...')` (0.5.4, the dataclass's repr) or
`server_args={... 'api_key': '...'}` (later 0.5 releases, a dict), whether the key came from
argv or from its --config file (merged into argv before parsing), and has no other way to take
the key. Behind the API proxy SGLang is given no key (profile_render.engine_takes_key); without
the proxy it is, and its journal holds it. Every journal line sparkctl shows (the logs stage, a
failed boot's context, the progress line) goes through scrub_lines: the known spellings of a key
(an `api_key=` field or `'api_key':` entry, `--api-key`, `VLLM_API_KEY=`, `api-key:`, a Bearer
header, a Hugging Face token), credentials inside URLs, and every exact secret given (the key
read from its file) are replaced."""

from __future__ import annotations

import re

REDACTED = "<redacted by sparkctl>"
# Shorter strings would take ordinary words with them.
MIN_SECRET_LENGTH = 8

# The words that make a mapping's entry a secret (api_key, spark_hf_token, url_password,
# Authorization), so api_key_file, tokenizer or max_tokens keep their values.
SECRET_FIELD_WORDS = r"(?:api[_-]?key|token|secret|password|passphrase|credentials?|authorization)"
# api_key='VALUE' / api_key: "VALUE" (SGLang's ServerArgs repr, YAML).
_QUOTED_FIELD = re.compile(r"(\b\w*api_key\s*[=:]\s*)(['\"])(?:(?!\2).)+\2", re.IGNORECASE)
# 'api_key': 'VALUE', "token": "VALUE", and the same inside a JSON string (\"token\": \"VALUE\"):
# a dict's repr (SGLang's server_args dict) or a module's arguments as -vvv prints them.
_QUOTED_ENTRY = re.compile(r"((\\?['\"])(?:[\w-]*[_-])?" + SECRET_FIELD_WORDS + r"\2\s*:\s*)(\\?['\"])(?!<redacted)(.+?)\3",
                           re.IGNORECASE)
_PATTERNS = (
    # --api-key VALUE, --api-key=VALUE (an engine echoing its argv)
    re.compile(r"(--(?:admin-)?api-key(?:=|\s+))(?!<redacted)([^\s'\",)\\]+)", re.IGNORECASE),
    # VLLM_API_KEY=VALUE, api-key: VALUE, api_key=VALUE unquoted (but not None)
    re.compile(r"(\b(?:\w*_)?API[_-]KEY\s*[=:]\s*)(?!None\b|<redacted)([^\s'\",)\\]+)", re.IGNORECASE),
    # Authorization: Bearer VALUE
    re.compile(r"(\bBearer\s+)(?!<redacted)([A-Za-z0-9._~+/=-]+)"),
    # A Hugging Face access token (hf_ and 30 or more letters and digits), however it is spelled.
    re.compile(r"()\bhf_[A-Za-z0-9]{30,}\b"),
)
_URL_USERINFO = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.\-]*://)[^/?#\s\"'<>@]+(?:@[^/?#\s\"'<>@]+)*@"
                           r"(?=[^/?#\s\"'<>@]*(?:[/?#\s\"'<>]|$))")


def scrub_text(text, secrets=()):
    """text without the key's known spellings, URL credentials or any of the exact secrets."""
    text = str(text)
    for secret in sorted({str(s) for s in secrets or () if s and len(str(s)) >= MIN_SECRET_LENGTH}, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    text = _QUOTED_FIELD.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}{m.group(2)}", text)
    text = _QUOTED_ENTRY.sub(lambda m: f"{m.group(1)}{m.group(3)}{REDACTED}{m.group(3)}", text)
    for pattern in _PATTERNS:
        text = pattern.sub(lambda m: f"{m.group(1)}{REDACTED}", text)
    return _URL_USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)


def scrub_lines(lines, secrets=()):
    """scrub_text over a list of log lines."""
    return [scrub_text(line, secrets) for line in lines or []]

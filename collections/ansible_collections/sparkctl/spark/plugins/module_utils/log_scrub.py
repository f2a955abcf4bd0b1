# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Secrets out of the engine's log lines before sparkctl prints them.

Engines log their own arguments: SGLang prints `server_args=ServerArgs(... api_key='...')`
at every start, whether the key came from argv or from its --config file, and has no other
way to take the key. Every journal line sparkctl shows (the logs stage, a failed boot's
context, the progress line) goes through scrub_lines: the known spellings of a key (an
`api_key=` field, `--api-key`, `VLLM_API_KEY=`, `api-key:`, a Bearer header), credentials
inside URLs, and every exact secret given (the key read from its file) are replaced."""

from __future__ import annotations

import re

REDACTED = "<redacted by sparkctl>"
# Shorter strings would take ordinary words with them.
MIN_SECRET_LENGTH = 8

_QUOTED_FIELD = re.compile(r"(\b\w*api_key\s*[=:]\s*)(['\"])(?:(?!\2).)+\2", re.IGNORECASE)
_PATTERNS = (
    # --api-key VALUE, --api-key=VALUE (an engine echoing its argv)
    re.compile(r"(--(?:admin-)?api-key(?:=|\s+))(?!<redacted)([^\s'\",)]+)", re.IGNORECASE),
    # VLLM_API_KEY=VALUE, api-key: VALUE, api_key=VALUE unquoted (but not None)
    re.compile(r"(\b(?:\w*_)?API[_-]KEY\s*[=:]\s*)(?!None\b|<redacted)([^\s'\",)]+)", re.IGNORECASE),
    # Authorization: Bearer VALUE
    re.compile(r"(\bBearer\s+)(?!<redacted)([A-Za-z0-9._~+/=-]+)"),
)
_URL_USERINFO = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.\-]*://)[^/?#\s\"'<>@]+(?:@[^/?#\s\"'<>@]+)*@"
                           r"(?=[^/?#\s\"'<>@]*(?:[/?#\s\"'<>]|$))")


def scrub_text(text, secrets=()):
    """text without the key's known spellings, URL credentials or any of the exact secrets."""
    text = str(text)
    for secret in sorted({str(s) for s in secrets or () if s and len(str(s)) >= MIN_SECRET_LENGTH}, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    text = _QUOTED_FIELD.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}{m.group(2)}", text)
    for pattern in _PATTERNS:
        text = pattern.sub(lambda m: f"{m.group(1)}{REDACTED}", text)
    return _URL_USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)


def scrub_lines(lines, secrets=()):
    """scrub_text over a list of log lines."""
    return [scrub_text(line, secrets) for line in lines or []]

"""Secrets out of everything the wrapper prints or keeps: values of variables named like a
secret, and credentials written into a URL (`scheme://user:password@host`, as
PIP_INDEX_URL, HTTPS_PROXY or HF_ENDPOINT carry them) wherever they appear. Pure."""

from __future__ import annotations

import re

SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|PASSPHRASE|API_?KEY|PRIVATE|CREDENTIAL|AUTH", re.IGNORECASE)
REDACTED = "<redacted by sparkctl>"
# The userinfo of a URL: after the scheme, up to the last '@' before the host's end ('/',
# '?', '#', whitespace or a quote); a password holding a raw '@' is taken whole.
_URL_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^/?#\s\"'<>@]+(?:@[^/?#\s\"'<>@]+)*)@"
                           r"(?=[^/?#\s\"'<>@]*(?:[/?#\s\"'<>]|$))")


def redact_text(text: str) -> str:
    """text with every URL's user and password replaced."""
    if "@" not in text or "://" not in text:
        return text
    return _URL_USERINFO.sub(lambda m: f"{m.group('scheme')}{REDACTED}@", text)


def redact_value(value):
    """redact_text through strings, lists and mappings (what a task's `msg` can be)."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, list):
        return [redact_value(item) for item in value]
    if isinstance(value, dict):
        return {key: redact_value(item) for key, item in value.items()}
    return value


def redact_env(env: dict) -> dict:
    """Secret-named variables' values replaced, URL credentials removed from the others."""
    return {key: (REDACTED if SECRET_NAME.search(key) else redact_value(value)) for key, value in env.items()}

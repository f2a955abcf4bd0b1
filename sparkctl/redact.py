"""Secrets out of everything the wrapper prints or keeps: values of variables named like a
secret, credentials written into a URL (`scheme://user:password@host`, as PIP_INDEX_URL,
HTTPS_PROXY or HF_ENDPOINT carry them), and the spellings of a key that a task's result or an
engine's log line carries (SGLang logs its parsed server arguments, API key included, at every
start; `-vvv` records every module's arguments) wherever they appear. Pure.

The spellings are the collection's: its module_utils/log_scrub.py owns them, removes them from
the journal lines the plays print, and is what the wrapper applies to whole task results."""

from __future__ import annotations

import functools
import re

SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|PASSPHRASE|API_?KEY|PRIVATE|CREDENTIAL|AUTH", re.IGNORECASE)
REDACTED = "<redacted by sparkctl>"


@functools.cache
def _log_scrub():
    """The collection's module_utils/log_scrub.py (from the installed collection, else from the
    project's)."""
    try:
        from ansible_collections.sparkctl.spark.plugins.module_utils import log_scrub
    except ImportError:
        from .project import collection_importable, project_dir

        collection_importable(project_dir())
        from ansible_collections.sparkctl.spark.plugins.module_utils import log_scrub
    return log_scrub


@functools.cache
def _secret_field():
    """A mapping's entry whose value is a secret: its name ends with one of the collection's
    secret words (api_key, spark_hf_token, url_password, Authorization), so api_key_file,
    tokenizer or max_tokens keep their values."""
    return re.compile(r"(?:^|[_-])" + _log_scrub().SECRET_FIELD_WORDS + "$", re.IGNORECASE)


def redact_text(text: str, secrets=()) -> str:
    """text without any of the exact `secrets`, the known spellings of a key or token, or any
    URL's user and password."""
    return _log_scrub().scrub_text(text, secrets)


def redact_value(value, secrets=()):
    """redact_text through strings, lists and mappings (what a task's `msg` can be)."""
    if isinstance(value, str):
        return redact_text(value, secrets)
    if isinstance(value, list):
        return [redact_value(item, secrets) for item in value]
    if isinstance(value, dict):
        return {key: redact_value(item, secrets) for key, item in value.items()}
    return value


def redact_record(value, secrets=()):
    """redact_value, and every string held under a secret's name (_secret_field) replaced
    whole: a recorded event's module arguments and results (`invocation.module_args.token`)."""
    if isinstance(value, dict):
        return {key: (REDACTED if isinstance(item, str) and item and isinstance(key, str) and _secret_field().search(key)
                      else redact_record(item, secrets)) for key, item in value.items()}
    if isinstance(value, list):
        return [redact_record(item, secrets) for item in value]
    return redact_value(value, secrets)


def env_secrets(env) -> list[str]:
    """The values of the secret-named variables of an environment (the wrapper's own, which the
    play inherits: HF_TOKEN), to remove wherever a task printed one. Paths are not secrets
    (SSH_AUTH_SOCK, XAUTHORITY), and short values would take ordinary words with them."""
    return [value for key, value in env.items() if SECRET_NAME.search(key) and isinstance(value, str)
            and len(value) >= _log_scrub().MIN_SECRET_LENGTH and not value.startswith("/")]


def redact_env(env: dict) -> dict:
    """Secret-named variables' values replaced, URL credentials removed from the others."""
    return {key: (REDACTED if SECRET_NAME.search(key) else redact_value(value)) for key, value in env.items()}

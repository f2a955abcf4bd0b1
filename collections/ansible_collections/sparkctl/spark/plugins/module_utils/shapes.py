# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The shapes of the values sparkctl reads from nodes and files and then records or passes on.

Whatever a node holds may have been written by the engine's service user, which runs a model's
remote code: such a value is data, and one with a known shape (a commit, a digest, a version) is
checked against that shape where it is read, before it is recorded, so that text meant for a
template engine, a shell or a terminal never travels further as if it were the value. Each check
gives a problem naming the field, or None.
"""

from __future__ import annotations

import re

# A git commit as the hub resolves a revision to it.
COMMIT = re.compile(r"^[0-9a-f]{40}$")
# A hub repository id, 'org/name' (huggingface_hub's own check allows letters, digits, '.', '_'
# and '-' in each part).
REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
# A revision to download: a branch, a tag, refs/pr/N or a commit (git's ref names, without the
# characters git refuses in them, '..' and '@{').
REVISION = re.compile(r"^(?!.*\.\.)(?!.*@\{)[A-Za-z0-9][A-Za-z0-9._/+-]{0,254}$")
# sparkctl's content digests (profile, engine configuration, image context, record id) and
# docker's image ids.
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
# The venv lock's hash (module_utils/runtime_versions.py, lock_sha256): bare hex.
HEX_SHA256 = re.compile(r"^[0-9a-f]{64}$")
# A distribution's version (PEP 440, with a local part such as +cpu) or a tool's.
VERSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+!_-]{0,63}$")
# A distribution's name (PEP 508).
DISTRIBUTION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
# An engine kind, a runtime kind, a checkpoint source.
WORD = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
# A profile's name (its file name without .yml).
PROFILE_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,127}$")
# An image reference: [registry[:port]/]name[:tag][@sha256:...].
IMAGE_REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}$")
# When a record was first made (UTC).
TIMESTAMP = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$")
# An absolute path without control characters (a newline would start a new line in a unit file).
ABSOLUTE_PATH = re.compile(r"^/[^\x00-\x1f\x7f]*$")

SHAPE_WORDS = {
    COMMIT: "a 40-hex-digit git commit",
    REPO_ID: "a hub repo id like 'org/name'",
    REVISION: "a branch, tag or commit",
    DIGEST: "sha256:<64 hex digits>",
    HEX_SHA256: "64 hex digits",
    VERSION: "a version string",
    DISTRIBUTION: "a distribution name",
    WORD: "a lowercase word",
    PROFILE_NAME: "a profile name (lowercase, digits, '.', '_', '-')",
    IMAGE_REF: "an image reference",
    TIMESTAMP: "YYYY-MM-DDTHH:MM:SSZ",
    ABSOLUTE_PATH: "an absolute path without control characters",
}

# What starts a Jinja expression, statement or comment: text holding one is never a value of any
# shape above, and is refused wherever it would reach Ansible.
TEMPLATE_MARKERS = ("{{", "{%", "{#")


def has_template(text):
    """Whether text holds a Jinja delimiter."""
    return isinstance(text, str) and any(marker in text for marker in TEMPLATE_MARKERS)


def shown(value, limit=80):
    """value for a message: its repr, cut at limit characters (a hostile value can be long)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "...'"


def shape_problem(field, value, shape, optional=False):
    """Why value (at field) is not of shape, or None; optional: None is allowed."""
    if value is None and optional:
        return None
    if isinstance(value, str) and shape.match(value) and not has_template(value):
        return None
    return "%s: %s is not %s" % (field, shown(value), SHAPE_WORDS[shape])


def template_problems(value, field=""):
    """One problem per string in value (a mapping, a list or a scalar, walked whole; keys too) that
    holds a Jinja delimiter, naming where it is (dotted keys, [index] for list items)."""
    problems = []
    if isinstance(value, dict):
        for key in sorted(value, key=str):
            where = "%s.%s" % (field, key) if field else str(key)
            if has_template(key):
                problems.append("%s: the key holds a template delimiter" % where)
            problems.extend(template_problems(value[key], where))
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            problems.extend(template_problems(item, "%s[%d]" % (field, index)))
    elif has_template(value):
        markers = ", ".join(TEMPLATE_MARKERS)
        problems.append("%s: %s holds a template delimiter (%s)" % (field or "value", shown(value), markers))
    return problems

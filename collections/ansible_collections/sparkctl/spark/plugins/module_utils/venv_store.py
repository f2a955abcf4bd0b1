# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The engine venvs sparkctl keeps on a node, one per runtime lock of a profile, side by side
(spark_engine_venv_per_lock: <venvs>/<profile>-<12 hex digits of the venv digest>), and which of
them a keep policy lets go.

A venv is a candidate only when its directory's name is the profile's name, a dash and twelve
lowercase hex digits (the per-lock name roles/spark gives it) and the node's record
(roles/teardown, /var/lib/sparkctl/baseline.json) says the path was not there before sparkctl:
sparkctl created it. The venv a run serves is never one, nor is any other path (a venv per
profile, someone's own venv). The order of use is a small record per node (SERVED_FILE): the
venv paths served, most recent first, written by the verify stage once the endpoint verified,
so the venvs of the most recent recorded deployments are the ones kept."""

from __future__ import annotations

import os
import re


SERVED_FILE = "/var/lib/sparkctl/venvs-served.json"
BASELINE_FILE = "/var/lib/sparkctl/baseline.json"
LOCK_DIGITS = 12


def lock_venv_pattern(profile_name):
    """The per-lock venv names of a profile: '<name>-' and LOCK_DIGITS lowercase hex digits."""
    return re.compile(r"\A%s-[0-9a-f]{%d}\Z" % (re.escape(profile_name), LOCK_DIGITS))


def created_by_sparkctl(baseline, path):
    """Whether the node's record (the parsed baseline) says path was absent before sparkctl's
    first change, or before the step that created it learned it: only then did sparkctl make it."""
    paths = (baseline or {}).get("paths") if isinstance(baseline, dict) else None
    return isinstance(paths, dict) and paths.get(path.rstrip("/")) is False


def candidates(names, root, profile_name, current, baseline):
    """The venvs under root (names: the entries of root that are directories, not links) a keep
    policy may remove: the profile's per-lock venvs sparkctl created, other than current."""
    pattern = lock_venv_pattern(profile_name)
    current = current.rstrip("/")
    found = []
    for name in sorted(names):
        path = os.path.join(root, name)
        if pattern.match(name) and path != current and created_by_sparkctl(baseline, path):
            found.append(path)
    return found

# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The served record a keep policy ranks by: one small JSON document per node and kind of thing
kept side by side (checkpoints, per-lock venvs), {"served": [paths]}, the paths served most
recent first. A run that serves the same path as the last one leaves it as it is, so a converged
re-run writes nothing; the keep policy removes the least recently served first and those never
served (built by a run whose verify failed) before them."""

from __future__ import annotations

import json
import os

from ansible_collections.sparkctl.spark.plugins.module_utils.files import read_json_object, write_file_atomic


def read_served(path):
    """The served order (absolute paths, most recent first); [] when absent or unreadable."""
    served = (read_json_object(path) or {}).get("served")
    return [p for p in served if isinstance(p, str)] if isinstance(served, list) else []


def served_after(served, current, removed=()):
    """The served order once current is served: current first, the others after it in their
    order, the removed ones gone."""
    current = current.rstrip("/")
    return [current] + [p for p in served if p != current and p not in removed]


def record_after(served, current, removed, record):
    """The record a run leaves: current made the most recent when it records, the removed
    paths gone either way."""
    return served_after(served, current, removed) if record else [p for p in served if p not in removed]


def store_argument_spec(served_file, **own):
    """The options every keep-policy module takes (the directory, the served path, how many to
    keep, list or remove, record or not, the record's path), with the module's own."""
    spec = dict(
        root=dict(type="path", required=True),
        current=dict(type="path", required=True),
        keep=dict(type="int", default=0),
        state=dict(type="str", choices=["present", "absent"], default="present"),
        record=dict(type="bool", default=False),
        served_file=dict(type="path", default=served_file),
    )
    spec.update(own)
    return spec


def store_params(module, things, variable):
    """(root, current) without a trailing slash; a negative keep fails the module, naming the
    inventory variable that set it."""
    p = module.params
    if p["keep"] < 0:
        module.fail_json(msg="keep is %d: a number of %s to keep, 0 for all (%s)." % (p["keep"], things, variable))
    return p["root"].rstrip("/") or "/", p["current"].rstrip("/")


def plan(paths, current, keep, served):
    """Which of paths (the candidates beside current; current itself is never removed) a keep
    policy removes. keep: how many to keep, current included (0 keeps all); served: the served
    order. The others rank by the served order, those never recorded last (by path, for a stable
    order). Returns (ranked, remove): every path but current in rank order, and the ones beyond
    keep."""
    current = current.rstrip("/")
    others = [p for p in paths if p != current]
    position = {p: i for i, p in enumerate(served)}
    ranked = sorted(others, key=lambda p: (position.get(p, len(served)), p))
    if not keep or keep < 0:
        return ranked, []
    return ranked, ranked[max(keep - 1, 0):]


def record_text(served):
    return json.dumps({"served": served}, indent=2, sort_keys=True) + "\n"


def update_record(module, path, served, after_served):
    """Write after_served to the record at path (root-owned, 0644) when it differs from served,
    not in check mode; a write that fails fails the module. Returns (changed, diff): diff is the
    record's text before and after when the module runs with --diff and it changed, else None."""
    if after_served == served:
        return False, None
    try:
        with open(path, encoding="utf-8") as handle:
            before = handle.read()
    except (OSError, ValueError):
        before = ""
    after = record_text(after_served)
    if not module.check_mode:
        try:
            os.makedirs(os.path.dirname(path) or ".", mode=0o755, exist_ok=True)
            # Root-owned when root writes it, given through the new file's descriptor (no chown by path).
            write_file_atomic(path, after.encode("utf-8"), 0o644, (0, 0) if os.geteuid() == 0 else None)
        except OSError as exc:
            module.fail_json(msg="Cannot write the served record %s: %s" % (path, exc.strerror or exc))
    diff = dict(before=before, after=after, before_header=path, after_header=path) if module._diff else None
    return True, diff

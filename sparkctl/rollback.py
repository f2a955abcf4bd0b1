"""`sparkctl rollback [WHICH]` and `sparkctl up`'s automatic rollback: which recorded deployment
to return to, and the variables that give it back to a run.

The verify stage keeps, per inventory, one JSON file per deployment it proved (sparkctl/history.py),
and beside each record the variables that reproduce it (its `reproduce` mapping; the collection's
module_utils/deployment.py, REPRODUCE_VARS, which owns the record's shape). Everything here is
decided on the control node, before any host is touched; playbooks/rollback.yml then reads the
nodes and refuses when the record's checkpoint or runtime is gone from one of them.

A history file is data its user (or anything running as its user) can edit: a record whose values
are not of their shape, or that holds a template delimiter anywhere, is refused here with the field
named, and what a rollback gives the run reaches Ansible as data only (sparkctl/runner.py writes it
marked unsafe, never templated)."""

from __future__ import annotations

import re

from .history import HISTORY_FILE_KEY

# The variable playbooks/rollback.yml reads for the record to return to.
DEPLOYMENT_VAR = "sparkctl_rollback_deployment"
# An id prefix long enough to name one deployment (history shows 8 hex digits).
MIN_ID_PREFIX = 4
_HEX = re.compile(r"^[0-9a-f]+$")


class RollbackError(Exception):
    """Why no rollback is possible; the message names the record and the fix."""


def _records():
    """The collection's deployment record module (the caller made the collection importable:
    project.collection_importable)."""
    from ansible_collections.sparkctl.spark.plugins.module_utils import deployment

    return deployment


def _id(record: dict) -> str:
    return str(record.get("deployment_id") or "").split(":", 1)[-1]


def select(records: list[dict], which: str | None = None) -> dict:
    """The record to return to, from records newest first (history.load_history).

    which None: the previous distinct deployment, the newest record of another deployment than
    the newest record (the one the cluster serves, unless a run changed it since without a
    passing verify). which N (1 = newest, as `sparkctl history` numbers them) or an id prefix
    (at least 4 hex digits): that record."""
    if not records:
        raise RollbackError("no deployment recorded for this inventory: a passing `sparkctl verify` (or `up`) "
                            "records one; there is nothing to return to.")
    if which is None:
        current = _id(records[0])
        for record in records[1:]:
            if _id(record) != current:
                return record
        raise RollbackError(f"every recorded deployment is the current one ({current[:8]}): there is no earlier "
                            "deployment to return to.")
    text = str(which).strip().lower()
    if text.isdigit():
        index = int(text)
        if not 1 <= index <= len(records):
            raise RollbackError(f"no record {index}: the history holds {len(records)} (1 = newest; "
                                "`sparkctl history` numbers them).")
        return records[index - 1]
    text = text.split(":", 1)[-1]
    if len(text) < MIN_ID_PREFIX or not _HEX.match(text):
        raise RollbackError(f"{which!r} is neither a record number nor a deployment id prefix of at least "
                            f"{MIN_ID_PREFIX} hex digits.")
    found = {_id(r): r for r in records if _id(r).startswith(text)}
    if not found:
        raise RollbackError(f"no recorded deployment's id starts with {text}.")
    if len(found) > 1:
        raise RollbackError(f"{text} names {len(found)} deployments ({', '.join(sorted(i[:12] for i in found))}): "
                            "give more digits.")
    return next(r for r in records if _id(r) in found)


def rollback_vars(record: dict) -> dict:
    """The extra variables of a run that serves record's deployment again: the variables recorded
    beside it, and the record itself (without them) for playbooks/rollback.yml's checks."""
    records = _records()
    reproduce = record.get("reproduce")
    missing = [name for name in records.REPRODUCE_VARS if not isinstance(reproduce, dict) or name not in reproduce]
    if missing:
        raise RollbackError(f"deployment {shown_id(record)} (recorded {record.get('recorded_at')}) was recorded without "
                            f"what reproduces it ({', '.join(missing)}): it was recorded by a sparkctl before "
                            "rollback existed; deploy it with `sparkctl up` and its variables instead.")
    data = {key: value for key, value in record.items() if key != HISTORY_FILE_KEY}
    problems = records.record_problems(data)
    if problems:
        where = record.get(HISTORY_FILE_KEY) or "the history"
        raise RollbackError(f"deployment {shown_id(record)} in {where} is not a record sparkctl wrote: "
                            + "; ".join(problems) + ". It was edited since it was recorded; nothing was run. "
                            "Restore the file (or remove it and return to another deployment).")
    extravars = {name: reproduce[name] for name in records.REPRODUCE_VARS}
    extravars[DEPLOYMENT_VAR] = {key: value for key, value in data.items() if key != "reproduce"}
    return extravars


def shown_id(record: dict) -> str:
    """The record's id for a message: its first 8 hex digits, or its repr when it is not hex."""
    ident = _id(record)
    return ident[:8] if _HEX.match(ident[:8] or "-") else repr(ident[:40])


def changed_deployment(verify_doc: dict | None, records: list[dict]) -> dict | None:
    """The record `sparkctl up` returns to after its verify failed: the newest record, when the
    run deployed something else than it (another profile content, engine configuration or
    reproducing variables, as the failed verify's `intended` says). None when the failed run
    deployed the recorded deployment itself (a drift or a fault, not a change: rolling back to
    the same deployment would not help), when verify.json says nothing of the run (an older one),
    or when nothing is recorded."""
    if not records or not isinstance(verify_doc, dict) or verify_doc.get("status") != "failed":
        return None
    intended = verify_doc.get("intended")
    if not isinstance(intended, dict):
        return None
    last = records[0]
    same = (((intended.get("profile") or {}).get("sha256") == (last.get("profile") or {}).get("sha256"))
            and intended.get("engine_config_sha256") == (last.get("engine") or {}).get("config_sha256")
            and (not isinstance(last.get("reproduce"), dict) or intended.get("reproduce") == last.get("reproduce")))
    return None if same else last

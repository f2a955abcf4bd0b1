"""`sparkctl history`: the deployments a passing verify recorded, newest first.

The verify role writes one JSON file per deployment into the history directory of the
inventory (spark_deployment_dir: <base>/<inventory key>; the record's shape is the
collection's sparkctl.spark.deployment filter's). This only reads them."""

from __future__ import annotations

import json
from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

# The key each loaded record gets for the file it was read from (for messages; not part of the record).
HISTORY_FILE_KEY = "_history_file"
# Enough of a sha256 or a commit to tell deployments apart in a table that fits 80 columns.
SHORT = 8


def inventory_history(base: Path, inventory: Path) -> Path:
    """The history directory of one inventory (-i: the inventory directory or its hosts file) under
    the deployments base directory. Its name is the collection's (module_utils/deployment.py,
    inventory_key, behind the deployment_inventory_key filter the playbooks give their
    inventory_dir, the directory holding the hosts file). The caller made the collection
    importable (project.collection_importable)."""
    from ansible_collections.sparkctl.spark.plugins.module_utils.deployment import inventory_key

    return base / inventory_key(inventory if inventory.is_dir() else inventory.parent)


def load_history(directory: Path) -> tuple[list[dict], list[str]]:
    """(records newest first, one line per file that is not a record)."""
    records, problems = [], []
    if not directory.is_dir():
        return records, problems
    for path in sorted(directory.glob("*.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            problems.append(f"{path}: {exc}")
            continue
        if not isinstance(record, dict) or not record.get("deployment_id"):
            problems.append(f"{path}: not a deployment record")
            continue
        record[HISTORY_FILE_KEY] = str(path)
        records.append(record)
    records.sort(key=lambda r: str(r.get("recorded_at") or ""), reverse=True)
    return records, problems


def short(value) -> str:
    """A digest or commit shortened for a table: the hex part's first characters; '-' for none."""
    if not value:
        return "-"
    text = str(value).split(":", 1)[-1]
    return text[:SHORT]


def when(recorded_at) -> str:
    """2026-05-04T10:11:12Z as 2026-05-04 10:11 (the table's title says UTC)."""
    text = str(recorded_at or "-")
    return text[:16].replace("T", " ") if len(text) >= 16 else text


def history_rows(records: list[dict]) -> list[tuple[str, ...]]:
    """(number (1 = newest, what `sparkctl rollback N` takes), when, deployment id,
    profile, runtime id (the venv's lock hash or the image id), checkpoint revision (the
    commit it resolved to, short), verify status, sparkctl version) per record:
    the id tells apart two deployments of the same profile, runtime and checkpoint (other engine arguments)."""
    rows = []
    for number, record in enumerate(records, 1):
        runtime = record.get("runtime") or {}
        checkpoint = record.get("checkpoint") or {}
        if checkpoint.get("source", "hub") == "hub":
            revision = short(checkpoint.get("commit")) if checkpoint.get("commit") else str(checkpoint.get("revision") or "-")
        else:
            revision = str(checkpoint.get("path") or "-")
        rows.append((
            str(number),
            when(record.get("recorded_at")),
            short(record.get("deployment_id")),
            str((record.get("profile") or {}).get("name") or "-"),
            short(runtime.get("id")),
            revision,
            str(record.get("verify_status") or "-"),
            str(record.get("sparkctl_version") or "-"),
        ))
    return rows


def show_history(directory: Path, console: Console | None = None) -> int:
    """The table; 1 when there is nothing to show."""
    console = console or Console()
    records, problems = load_history(directory)
    for line in problems:
        console.print(Text.assemble(("skipped", "yellow"), " ", line), highlight=False)
    if not records:
        console.print(f"no deployment recorded in {directory}; a passing `sparkctl verify` (or `up`) records one.")
        return 1
    # No vertical rules and one space of padding: the eight columns fit a terminal of 80.
    table = Table(title=f"Deployments ({len(records)}, newest first, UTC)", box=box.SIMPLE_HEAD, pad_edge=False,
                  collapse_padding=True, show_edge=False)
    for column in ("#", "when", "id", "profile", "runtime", "revision", "verify", "sparkctl"):
        # Times and digests stay whole; a long profile name or status folds.
        table.add_column(column, no_wrap=column not in ("profile", "verify"), overflow="fold")
    for row in history_rows(records):
        # As plain text: a record is a file anyone with the user's rights can edit, never console markup.
        table.add_row(*(Text(cell) for cell in row))
    console.print(table)
    console.print(f"history: {directory}")
    return 0

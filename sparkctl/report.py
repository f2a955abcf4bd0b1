"""Render the JSON reports the stages write, for people."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

STATUS_STYLE = {"pass": "green", "fail": "bold red", "warn": "yellow", "skip": "dim"}


def load(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise SystemExit(f"sparkctl: no report at {path}; run `sparkctl doctor` or `sparkctl up` first.") from None
    except json.JSONDecodeError as exc:
        raise SystemExit(f"sparkctl: {path} is not valid JSON ({exc}).") from None


def preflight_table(report: dict) -> Table:
    hosts = list(report.get("hosts", {}))
    verdict = "OK" if report.get("ok") else "FAILED"
    table = Table(title=f"Preflight: {verdict}", show_lines=False)
    table.add_column("check")
    for host in hosts:
        table.add_column(host)
    rows: dict[str, dict[str, dict]] = {}
    for host in hosts:
        for check in report["hosts"][host].get("checks", []):
            rows.setdefault(check["id"], {})[host] = check
    for check_id, per_host in rows.items():
        cells = []
        for host in hosts:
            check = per_host.get(host)
            if check is None:
                cells.append("-")
                continue
            style = STATUS_STYLE.get(check["status"], "")
            cells.append(f"[{style}]{check['status']}[/] {check['detail']}")
        table.add_row(check_id, *cells)
    for host in hosts:
        if not report["hosts"][host].get("judged", True):
            table.add_row("(host)", *[("[bold red]not judged: failed before the checks[/]" if h == host else "") for h in hosts])
    return table


def failures(report: dict) -> list[str]:
    lines = []
    for host, body in report.get("hosts", {}).items():
        for check in body.get("checks", []):
            if check["status"] == "fail":
                lines.append(f"{host}: {check['id']}: {check['detail']} Fix: {check['fix']}")
    return lines


def show_preflight(path: Path, console: Console | None = None) -> bool:
    console = console or Console()
    report = load(path)
    console.print(preflight_table(report))
    for line in failures(report):
        console.print(f"[bold red]x[/] {line}")
    console.print(f"report: {path}")
    return bool(report.get("ok"))

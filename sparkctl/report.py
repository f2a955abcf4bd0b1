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


# --- verify and benchmark ----------------------------------------------------------------

# Each report and where its stage writes it, relative to the report directory.
REPORT_FILES = {"preflight": "preflight.json", "verify": "verify.json", "benchmark": "benchmark/benchmark.json",
                "fabric-test": "fabric-test.json"}
REPORT_NAMES = tuple(REPORT_FILES)
VERIFY_MARK_STYLE = {"PASS": "green", "FAIL": "bold red", "warn": "yellow", "skip": "dim", "idle": "dim"}


def report_path(directory: Path, name: str) -> Path:
    return directory / REPORT_FILES[name]


def verify_rows(report: dict) -> list[tuple[str, str, str]]:
    """(mark, what, detail) per piece of evidence, as the verify stage rendered them into the report (its
    `rows`, schema 2); a report without them was written by an older sparkctl."""
    if "rows" not in report:
        return [("skip", "report", "written by an older sparkctl without rows: run `sparkctl verify` again")]
    return [(row.get("mark", "?"), row.get("what", "?"), row.get("detail", "")) for row in report["rows"]]


def show_verify(path: Path, console: Console | None = None) -> bool:
    console = console or Console()
    report = load(path)
    status = report.get("status", "?")
    table = Table(title=f"Verify: {status.replace('_', ' ').upper()}")
    for column in ("", "check", "detail"):
        table.add_column(column)
    for mark, what, detail in verify_rows(report):
        table.add_row(f"[{VERIFY_MARK_STYLE.get(mark, '')}]{mark}[/]", what, detail)
    console.print(table)
    for line in report.get("failures") or []:
        console.print(f"[bold red]x[/] {line}")
    console.print(f"report: {path}")
    return bool(report.get("ok"))


def show_benchmark(path: Path, console: Console | None = None) -> bool:
    """The benchmark's Markdown summary, as written beside its JSON."""
    console = console or Console()
    report = load(path)
    summary = path.with_suffix(".md")
    console.print(summary.read_text() if summary.is_file() else json.dumps(report.get("summary", {}), indent=2),
                  markup=False, highlight=False)
    console.print(f"report: {path} (plots beside it)")
    return bool(report.get("ok"))


def show_fabric_test(path: Path, console: Console | None = None) -> bool:
    """Per cable half: both ends, the Gbit/s measured alone and the minimum (roles/fabric_test)."""
    console = console or Console()
    report = load(path)
    verdict = "OK" if report.get("ok") else "FAILED"
    table = Table(title=f"Fabric test ({report.get('tool', '?')}, {report.get('seconds_per_half', '?')} s per half): {verdict}")
    for column in ("", "peer", "half", f"{report.get('head', 'head')} side", "peer side", "Gbit/s", "minimum"):
        table.add_column(column)
    for row in report.get("results") or []:
        mark = "PASS" if row.get("ok") else "FAIL"
        gbps = row.get("gbps")
        table.add_row(f"[{VERIFY_MARK_STYLE[mark]}]{mark}[/]", str(row.get("peer", "?")), str(row.get("half", "?")),
                      f"{row.get('interface', '?')} {row.get('source', '?')}",
                      f"{row.get('peer_interface', '?')} {row.get('address', '?')}",
                      "-" if gbps is None else f"{gbps:.2f}", f"{row.get('minimum_gbps', '?')}")
    console.print(table)
    for line in report.get("problems") or []:
        console.print(f"[bold red]x[/] {line}")
    console.print(f"report: {path}")
    return bool(report.get("ok"))


def show_report(directory: Path, name: str, console: Console | None = None) -> bool:
    show = {"preflight": show_preflight, "verify": show_verify, "benchmark": show_benchmark,
            "fabric-test": show_fabric_test}[name]
    return show(report_path(directory, name), console)

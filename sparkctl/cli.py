"""`sparkctl up | doctor | report`: run the project's playbooks through ansible-runner."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from . import __version__
from .project import project_dir, report_dir
from .report import show_preflight

STAGES = {"up": None, "doctor": "preflight"}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sparkctl", description=__doc__)
    parser.add_argument("--version", action="version", version=f"sparkctl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in (("up", "run every stage of site.yml (re-run to repair drift)"),
                            ("doctor", "run only the preflight checks and print the report")):
        cmd = sub.add_parser(name, help=help_text)
        cmd.add_argument("-i", "--inventory", default="inventories/spark",
                         help="inventory directory or file (default: inventories/spark)")
        cmd.add_argument("-t", "--tags", default="", help="only these site.yml stages (comma separated)")
        cmd.add_argument("-l", "--limit", default="", help="limit to these hosts")
        cmd.add_argument("--check", action="store_true", help="dry run: report what would change")
        cmd.add_argument("extra", nargs="*", help="more ansible-playbook arguments after --")
    rep = sub.add_parser("report", help="print the last preflight report")
    rep.add_argument("--json", action="store_true", help="print the raw JSON")
    return parser


def runner_kwargs(args: argparse.Namespace, root: Path) -> dict:
    """The ansible_runner.run() arguments for a command; kept pure so it is tested."""
    inventory = Path(args.inventory)
    if not inventory.is_absolute():
        inventory = (Path.cwd() / inventory) if (Path.cwd() / inventory).exists() else root / inventory
    tags = args.tags or (STAGES.get(args.command) or "")
    cmdline = []
    if args.check:
        cmdline.append("--check")
    cmdline.extend(args.extra)
    kwargs = {
        "private_data_dir": str(root / ".sparkctl" / "runner"),
        "project_dir": str(root),
        "playbook": "site.yml",
        "inventory": str(inventory),
        "envvars": {"ANSIBLE_CONFIG": str(root / "ansible.cfg")},
        "cmdline": " ".join(cmdline) or None,
    }
    if tags:
        kwargs["tags"] = tags
    if args.limit:
        kwargs["limit"] = args.limit
    return kwargs


def run_playbook(kwargs: dict) -> int:
    import ansible_runner  # imported late: `sparkctl report` must not need it

    os.makedirs(kwargs["private_data_dir"], exist_ok=True)
    result = ansible_runner.run(**kwargs)
    return 0 if result.status == "successful" and result.rc == 0 else (result.rc or 1)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    root = project_dir()
    preflight_report = report_dir(root) / "preflight.json"
    if args.command == "report":
        if args.json:
            sys.stdout.write(preflight_report.read_text() if preflight_report.exists() else "{}\n")
            return 0
        return 0 if show_preflight(preflight_report) else 1
    started = time.time()
    rc = run_playbook(runner_kwargs(args, root))
    # Show the report only if this run wrote it: a stale one would mislead.
    if preflight_report.exists() and preflight_report.stat().st_mtime >= started:
        show_preflight(preflight_report)
    return rc


if __name__ == "__main__":
    sys.exit(main())

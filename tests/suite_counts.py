#!/usr/bin/env python3
"""Print what each pytest stage of the suite ran (from the JUnit files tests/suite.sh asks
pytest for) and how many catalogue entries exist, so a test lost between two runs shows.

Usage: python3 tests/suite_counts.py <dir of <stage>.xml> <catalogue dir>"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path


# The JUnit files tests/suite.sh has its pytest stages write, in the order they are reported
# (tests/unit/test_suite_counts.py keeps the two lists in step).
STAGES = ("timing", "unit", "real-server", "fresh-check", "integration", "day-two", "observe", "integration-twin",
          "day-two-twin", "teardown-twin", "teardown-twin-after")


def stage_counts(path: Path) -> dict[str, int]:
    """tests, failures (errors included), skipped and passed of one JUnit file."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    total = {"tests": 0, "failures": 0, "skipped": 0}
    for suite in suites:
        total["tests"] += int(suite.get("tests", 0))
        total["failures"] += int(suite.get("failures", 0)) + int(suite.get("errors", 0))
        total["skipped"] += int(suite.get("skipped", 0))
    total["passed"] = total["tests"] - total["failures"] - total["skipped"]
    return total


def catalogue_entries(catalogue_dir: Path) -> dict[str, int]:
    """Top-level list items of each catalogue file (counted without a YAML parser: the
    report must print even where PyYAML is missing)."""
    counts = {}
    for path in sorted(catalogue_dir.glob("*.yml")):
        counts[path.stem] = sum(1 for line in path.read_text().splitlines()
                                if line.startswith("- id:") or line.startswith("  - id:"))
    return counts


def scenario_line(path: Path) -> str:
    """One line for the role scenarios tests/suite.sh ran ("<name> <rc> <seconds>" per line)."""
    if not path.exists():
        return f"{'scenarios':<14} (stage not reached)"
    runs = [line.split() for line in path.read_text().splitlines() if line.strip()]
    failed = [name for name, rc, _ in runs if rc != "0"]
    seconds = sum(int(s) for _, _, s in runs)
    line = f"{'scenarios':<14} {len(runs):5} role scenarios: {len(runs) - len(failed)} passed, {len(failed)} failed, {seconds} s"
    return line + (f" (failed: {', '.join(failed)})" if failed else "")


def main(argv: list[str]) -> int:
    counts_dir, catalogue_dir = Path(argv[1]), Path(argv[2])
    print("\n===== tests run =====")
    for name in STAGES:
        path = counts_dir / f"{name}.xml"
        if not path.exists():
            print(f"{name:<14} (stage not reached)")
            continue
        c = stage_counts(path)
        print(f"{name:<14} {c['tests']:5} tests: {c['passed']} passed, {c['failures']} failed, {c['skipped']} skipped")
    print(scenario_line(counts_dir / "scenarios.txt"))
    print(", ".join(f"{name}: {count} entries" for name, count in catalogue_entries(catalogue_dir).items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

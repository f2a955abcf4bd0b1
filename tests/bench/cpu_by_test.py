"""The control node's CPU of a suite's lab test stages, per test file, from the suite's own records.

tests/suite.sh leaves process accounting (.lab/suite.acct, tests/bench/cpu_census.py), each
stage's start and end (.lab/stage-spans.txt) and a JUnit file per pytest stage
(.lab/suite-counts/). For each lab test stage this finds its pytest process (started with the
stage, on the control node), lays its test cases end to end after the collection (JUnit gives
each case's setup + call + teardown, in the order they ran) and charges every process the
tests started (ansible-playbook and its workers, sparkctl, ssh, docker) to the test case
during which its top-most ancestor below pytest started. What ran on the lab's nodes is not
in this count: their processes have no parent on the control node, and both labs run at once.

    .venv/bin/python tests/bench/cpu_by_test.py [LAB_DIR] [--cases N]
"""

from __future__ import annotations

import argparse
import collections
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from cpu_census import SHIM, ancestries, read_records  # noqa: E402
from suite_cpu import parse_spans  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
# Process accounting keeps whole seconds of a process's start, and the stage's pytest process is placed
# by its own whole second: a run a test's setup starts in the first moment of its case may show up to
# this much before the case's computed start.
START_SLACK_S = 1.5
# stage name in stage-spans.txt (the twin's chain writes its own) -> its JUnit file
STAGES = {"fresh-check": "fresh-check.xml", "integration": "integration.xml",
          "twin-integration": "integration-twin.xml"}


def cases(junit: Path) -> list[tuple[str, str, float]]:
    root = ET.parse(junit).getroot()
    return [(c.get("classname", "").split(".")[-1], c.get("name", ""), float(c.get("time") or 0))
            for c in root.iter("testcase")]


def windows(start: float, elapsed: float, ran: list[tuple[str, str, float]]) -> list[tuple[float, str, str]]:
    """(start time, file, case) per case; the time JUnit does not account for goes first (collection)."""
    at = start + max(0.0, elapsed - sum(t for _f, _c, t in ran))
    out = []
    for test_file, case, seconds in ran:
        out.append((at, test_file, case))
        at += seconds
    return out


def charge(records, chains, stage_span, ran) -> tuple[dict, dict, float]:
    start, end = stage_span
    pytest = [r for r in records if r["comm"] == "python" and abs(r["start"] - start) <= 2
              and r["elapsed"] >= 0.8 * (end - start)]
    if not pytest:
        raise SystemExit(f"no pytest process found for the stage that started at {start}")
    runner = max(pytest, key=lambda r: r["elapsed"])
    slots = windows(runner["start"], runner["elapsed"], ran)
    by_file, by_case = collections.Counter(), collections.Counter()
    own = runner["cpu"]
    for record, chain in zip(records, chains, strict=True):
        indexes = [r["index"] for r in chain]
        if runner["index"] not in indexes[1:] or any(r["comm"] == SHIM for r in chain):
            continue
        top = chain[indexes.index(runner["index"]) - 1]  # the ancestor pytest started
        slot = max((s for s in slots if s[0] <= top["start"] + START_SLACK_S), key=lambda s: s[0], default=slots[0])
        by_file[slot[1]] += record["cpu"]
        by_case[(slot[1], slot[2])] += record["cpu"]
    return by_file, by_case, own


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("lab", nargs="?", type=Path, default=REPO / ".lab")
    parser.add_argument("--cases", type=int, default=12, help="list the N costliest test cases of each stage")
    args = parser.parse_args()
    records = read_records(args.lab / "suite.acct")
    chains = ancestries(records)
    stage_spans = {name: (start, end) for name, start, end in parse_spans((args.lab / "stage-spans.txt").read_text())}
    for stage, junit in STAGES.items():
        path = args.lab / "suite-counts" / junit
        if stage not in stage_spans or not path.exists():
            continue
        ran = cases(path)
        by_file, by_case, own = charge(records, chains, stage_spans[stage], ran)
        seconds = collections.Counter()
        for test_file, _case, time_s in ran:
            seconds[test_file] += time_s
        total = sum(by_file.values())
        print(f"===== {stage}: {total:.0f} CPU-s on the control node started by its tests, "
              f"{own:.0f} in pytest itself =====")
        print(f"{'CPU-s':>8} {'wall s':>8}  test file")
        for test_file, cpu in by_file.most_common():
            print(f"{cpu:8.1f} {seconds[test_file]:8.1f}  {test_file}")
        print(f"--- the {args.cases} costliest cases")
        for (test_file, case), cpu in by_case.most_common(args.cases):
            print(f"{cpu:8.1f}  {test_file}::{case[:90]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Provision stage on the lab: first converge vs no-op re-run, timed in one run.

Recreates the two lab nodes (so the first converge starts from bare nodes, as
on fresh Sparks), runs playbooks/provision.yml once to converge, then N times
more with nothing to do, and prints the times, the ratio and the changed
counts. Target: the no-op re-run takes <= 15% of the first converge and
reports changed=0. The machines are shared and noisy: read the ratio, not the
seconds, and compare only numbers from the same run.

Usage: .venv/bin/python tests/bench/provision_bench.py [--reruns 3] [--keep-lab]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration"))

from labrun import LAB_INVENTORY, SPARKLAB, parse_recap  # noqa: E402

TARGET_RATIO = 0.15


def sh(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=False)


def timed_provision() -> tuple[float, dict]:
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    playbook = str(Path(sys.executable).with_name("ansible-playbook"))
    start = time.perf_counter()
    proc = subprocess.run([playbook, "playbooks/provision.yml", "-i", str(LAB_INVENTORY)],
                          cwd=REPO, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"provision failed (rc={proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}")
    return elapsed, parse_recap(proc.stdout)


def changed_total(recap: dict) -> int:
    return sum(counters["changed"] for host, counters in recap.items() if host != "localhost")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reruns", type=int, default=3, help="no-op re-runs to time (median is reported)")
    parser.add_argument("--keep-lab", action="store_true",
                        help="do not recreate the nodes first (first run is then not a converge from bare nodes)")
    args = parser.parse_args()

    if not args.keep_lab:
        for step in ("down", "up"):
            proc = sh(sys.executable, str(SPARKLAB), step)
            if proc.returncode != 0:
                sys.exit(f"sparklab {step} failed:\n{proc.stdout}\n{proc.stderr}")

    first, first_recap = timed_provision()
    reruns = [timed_provision() for _ in range(args.reruns)]
    rerun_times = [t for t, _ in reruns]
    rerun_changed = [changed_total(r) for _, r in reruns]
    median = statistics.median(rerun_times)
    ratio = median / first

    print("provision stage on the two-node lab (playbooks/provision.yml)")
    print(f"  first converge     {first:7.1f} s   changed={changed_total(first_recap)}")
    print(f"  no-op re-run       {median:7.1f} s   median of {args.reruns}: {', '.join(f'{t:.1f}' for t in rerun_times)} s; "
          f"changed={rerun_changed}")
    print(f"  ratio re-run/first {ratio:7.2f}    target <= {TARGET_RATIO:.2f}: {'met' if ratio <= TARGET_RATIO else 'NOT met'}")
    print("  (2-core shared machine: compare ratios from one run, not seconds across runs)")
    return 0 if all(c == 0 for c in rerun_changed) else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""How many module runs a no-op re-run of site.yml makes on the nodes, per role.

Runs site.yml (or --tags) once on the converged lab with the module_census callback
(tests/bench/callback_plugins) and prints, per role, the module runs on each node (loop
items counted one by one), the tasks the control node settles alone and the skipped ones,
with the run's time. A module run costs about a third of a second on the lab machine
(tests/bench/module_call_bench.py), so the remote column is where a no-op run's time goes.

Usage: .venv/bin/python tests/bench/module_census.py [--tags provision]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration"))

from labrun import LAB_INVENTORY, parse_recap  # noqa: E402

PLAYBOOK = Path(sys.executable).with_name("ansible-playbook")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tags", default="")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        census = Path(workdir) / "census.json"
        env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), SPARKCTL_CENSUS_FILE=str(census),
                   ANSIBLE_CALLBACK_PLUGINS=str(REPO / "tests" / "bench" / "callback_plugins"),
                   ANSIBLE_CALLBACKS_ENABLED="sparkctl.spark.plugin_preload,module_census")
        argv = [str(PLAYBOOK), "site.yml", "-i", str(LAB_INVENTORY)] + (["--tags", args.tags] if args.tags else [])
        started = time.monotonic()
        proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=1200)
        run_seconds = time.monotonic() - started
        if proc.returncode != 0:
            print(proc.stdout[-3000:], proc.stderr[-2000:])
            return 1
        counts = json.loads(census.read_text())
    seconds = counts.pop("_seconds", {})
    recap = parse_recap(proc.stdout)
    hosts = sorted({host for per_host in counts.values() for host in per_host if host != "localhost"})
    print(f"site.yml{' --tags ' + args.tags if args.tags else ''}: {run_seconds:.1f} s, changed "
          + ", ".join(f"{h}={recap.get(h, {}).get('changed')}" for h in hosts))
    header = (f"{'role':<16}" + "".join(f"{h + ' remote':>15}{'controller':>11}{'skipped':>9}" for h in hosts)
              + f"{'s remote':>10}{'s local':>9}")
    print(header)
    totals = {h: [0, 0, 0] for h in hosts}
    for role in sorted(counts, key=lambda r: -max(counts[r].get(h, {}).get("remote", 0) for h in hosts)):
        row = f"{role:<16}"
        for h in hosts:
            slot = counts[role].get(h, {"remote": 0, "controller": 0, "skipped": 0})
            row += f"{slot['remote']:>15}{slot['controller']:>11}{slot['skipped']:>9}"
            for i, key in enumerate(("remote", "controller", "skipped")):
                totals[h][i] += slot[key]
        split = seconds.get(role, {"remote": 0.0, "local": 0.0})
        print(row + f"{split['remote']:>10.1f}{split['local']:>9.1f}")
    print(f"{'total':<16}" + "".join(f"{t[0]:>15}{t[1]:>11}{t[2]:>9}" for t in totals.values())
          + f"{sum(s['remote'] for s in seconds.values()):>10.1f}{sum(s['local'] for s in seconds.values()):>9.1f}")
    print("s remote: wall time of the tasks in which some node ran a module; s local: of the others"
          " (controller-only and skipped), each task timed from its start to the next task's")
    return 0


if __name__ == "__main__":
    sys.exit(main())

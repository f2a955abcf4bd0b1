#!/usr/bin/env python3
"""The derived values pinned once per run against rendered on every read, on the converged lab.

The spark role pins the values worked out from the profile and the inventory (spark_profile,
spark_cluster, ...) with one set_fact per host and run (roles/spark/tasks/validate.yml). This
bench times no-op re-runs of the whole site.yml and of `--tags serve` with the role as it is
("pinned") and with a copy of it whose set_fact keeps only its flag ("rendered": every read
renders the default again, as before the pins), the two alternating so that both see the same
machine load. The copy sits in a temporary directory named first in ANSIBLE_ROLES_PATH; nothing
in the checkout is changed.

Prints per variant the median wall time and the median CPU time of the control node (user + sys
of ansible-playbook and its workers), and the pinned/rendered ratios. Every run must report
changed=0 (else exit 1).

The machines are shared and noisy: read the ratios, and compare only numbers from the same run.

Usage: .venv/bin/python tests/bench/pin_bench.py [--reruns 3]
"""

from __future__ import annotations

import argparse
import resource
import shutil
import sys
import tempfile
from pathlib import Path

import yaml
from noop_bench import REPO, changed_verdict, configured_callbacks, print_medians, record_sample
from noop_bench import run_playbook as timed_run

PIN_TASK_FILE = Path("tasks") / "validate.yml"
FLAG = "spark_settings_checked"
RUNS = (("site.yml", None), ("--tags serve", "serve"))


def unpinned_role(destination: Path) -> list[str]:
    """Copy roles/spark under destination with the pins taken out of its set_fact; the names taken out."""
    role = destination / "spark"
    shutil.copytree(REPO / "roles" / "spark", role)
    tasks = yaml.safe_load((role / PIN_TASK_FILE).read_text(encoding="utf-8"))
    removed: list[str] = []
    for task in tasks:
        facts = task.get("ansible.builtin.set_fact")
        if isinstance(facts, dict) and FLAG in facts:
            removed = [name for name in facts if name != FLAG]
            task["ansible.builtin.set_fact"] = {FLAG: facts[FLAG]}
    if not removed:
        sys.exit(f"no pinned value found in roles/spark/{PIN_TASK_FILE}: nothing to compare")
    (role / PIN_TASK_FILE).write_text(yaml.safe_dump(tasks, sort_keys=False), encoding="utf-8")
    return removed


def run_playbook(tags: str | None, roles_path: str | None) -> tuple[float, float, dict]:
    """One no-op run (noop_bench's, with ansible.cfg's callbacks): wall seconds, control-node CPU
    seconds, recap. Exits on a failed run."""
    extra_env = {"ANSIBLE_ROLES_PATH": roles_path} if roles_path else None
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall, recap, _ = timed_run(tags, configured_callbacks(), extra_env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, recap


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reruns", type=int, default=3, help="runs of each variant and run kind")
    args = parser.parse_args()
    changed = 0
    with tempfile.TemporaryDirectory(prefix="sparkctl-pin-bench-") as scratch:
        removed = unpinned_role(Path(scratch))
        print(f"rendered variant: roles/spark without the pins of {', '.join(removed)}")
        variants = (("pinned", None), ("rendered", f"{scratch}:{REPO / 'roles'}"))
        samples: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for label, tags in RUNS:
            for _ in range(args.reruns):
                for variant, roles_path in variants:
                    wall, cpu, recap = run_playbook(tags, roles_path)
                    changed += record_sample(samples, label, variant, wall, cpu, recap, "CPU")
        print_medians([label for label, _ in RUNS], ("pinned", "rendered"), samples, "CPU (s)")
    return changed_verdict(changed)


if __name__ == "__main__":
    sys.exit(main())

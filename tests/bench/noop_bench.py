#!/usr/bin/env python3
"""No-op re-runs of site.yml on the converged lab, timed in one run.

Times N no-op re-runs of the whole site.yml and N tagged no-op runs of each
stage, each with the plugin_preload callback on (ansible.cfg's
callbacks_enabled) and off (ANSIBLE_CALLBACKS_ENABLED=ansible.builtin.default,
the stdout callback only), on and off
alternating so both see the same machine load; then one full re-run with the
profile_tasks callback for the 15 slowest tasks. Prints the times, the on/off
ratio, the changed counts (all must be 0, else exit 1) and the absolute
targets: a full-site no-op re-run <= 30 s, a single-stage one <= 10 s (printed
as met / NOT met; the exit code reports only the changed counts and failures).

With --fresh the two lab nodes are recreated first (sparklab down, up) and the
first converge is timed too, so the old re-run/first ratio (<= 0.15) is
printed as well. The lab is shared: --fresh tears down whatever others run on
it, so it is off by default and the nodes must already be converged.

The machines are shared and noisy: read the ratios, and compare only numbers
from the same run.

Usage: .venv/bin/python tests/bench/noop_bench.py [--reruns 3] [--stages provision,serve] [--fresh]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration"))

from labrun import LAB_INVENTORY, SPARKLAB, configured_callbacks, parse_recap  # noqa: E402

FULL_TARGET_S = 30.0
STAGE_TARGET_S = 10.0
OLD_TARGET_RATIO = 0.15
# Ansible refuses an empty callbacks_enabled (''): naming the stdout callback, which it drops
# from the list since it is loaded anyway, turns every other callback off.
OFF_CALLBACKS = "ansible.builtin.default"
STAGES = ("provision", "checkpoint", "runtime", "serve", "verify")
SLOWEST = 15
PROFILE_CALLBACKS = "ansible.posix.profile_tasks,sparkctl.spark.plugin_preload"
# profile_tasks' recap line: "<role> : <task> ------- 1.23s"
TASK_TIME = re.compile(r"^(?P<name>.+?) -*\s+(?P<seconds>\d+\.\d+)s$")


def run_playbook(tags: str | None, callbacks: str, extra_env: dict | None = None) -> tuple[float, dict, str]:
    """One site.yml run; its wall time, recap counters and output. Exits on a failed run."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_CALLBACKS_ENABLED=callbacks, **(extra_env or {}))
    playbook = str(Path(sys.executable).with_name("ansible-playbook"))
    cmd = [playbook, "site.yml", "-i", str(LAB_INVENTORY)] + (["--tags", tags] if tags else [])
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        what = f"--tags {tags}" if tags else "site.yml"
        sys.exit(f"{what} failed (rc={proc.returncode}, callbacks={callbacks!r}):\n"
                 f"{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}")
    return elapsed, parse_recap(proc.stdout), proc.stdout


def print_medians(labels: list[str], variants: tuple[str, str], samples: dict, cpu_header: str) -> None:
    """The median wall and CPU seconds of each (label, variant)'s samples [(wall, cpu), ...], and per
    label the first variant's over the second's."""
    width = max(len("no-op run"), *(len(label) for label in labels))
    print(f"\n{'no-op run':{width}} {'variant':8} {'wall (s)':>9} {cpu_header:>13}")
    for label in labels:
        medians = {}
        for variant in variants:
            walls, cpus = zip(*samples[(label, variant)], strict=True)
            medians[variant] = (statistics.median(walls), statistics.median(cpus))
            print(f"{label:{width}} {variant:8} {medians[variant][0]:9.1f} {medians[variant][1]:13.1f}")
        first, second = (medians[variant] for variant in variants)
        print(f"{label:{width}} {'ratio':8} {first[0] / second[0]:9.2f} {first[1] / second[1]:13.2f}")


def record_sample(samples: dict, label: str, variant: str, wall: float, cpu: float, recap: dict, cpu_what: str) -> int:
    """Keep one run's (wall, cpu) under (label, variant), print it; the run's changed count."""
    changed = changed_total(recap)
    samples.setdefault((label, variant), []).append((wall, cpu))
    print(f"  {label:17} {variant:8} {wall:6.1f} s wall {cpu:6.1f} s {cpu_what}  changed={changed}", flush=True)
    return changed


def changed_verdict(changed: int) -> int:
    """The bench's exit code: no-op runs must change nothing."""
    if changed:
        print(f"\nchanged={changed} on no-op runs: the lab was not converged, or a run repaired drift")
        return 1
    return 0


def changed_total(recap: dict) -> int:
    return sum(counters.get("changed", 0) for counters in recap.values())


def slowest_tasks(output: str, limit: int) -> list[tuple[str, float]]:
    """The task lines of profile_tasks' TASKS RECAP, slowest first."""
    tail = output.rsplit("TASKS RECAP", 1)[-1] if "TASKS RECAP" in output else ""
    tasks = []
    for line in tail.splitlines():
        match = TASK_TIME.match(line.strip())
        if match:
            tasks.append((match["name"], float(match["seconds"])))
    return sorted(tasks, key=lambda task: task[1], reverse=True)[:limit]


def fmt_times(times: list[float]) -> str:
    return ", ".join(f"{t:.1f}" for t in times)


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reruns", type=int, default=3, help="no-op runs per measurement, preload on and off each (median reported)")
    parser.add_argument("--stages", default=",".join(STAGES), help="comma-separated stage tags to time alone ('' for none)")
    parser.add_argument("--fresh", action="store_true",
                        help="recreate the lab nodes first (sparklab down, up) and time the first converge; tears down the shared lab")
    args = parser.parse_args()
    if args.reruns < 1:
        parser.error("--reruns must be at least 1")
    stages = [stage for stage in args.stages.split(",") if stage]
    on_callbacks = configured_callbacks()
    if "sparkctl.spark.plugin_preload" not in on_callbacks:
        sys.exit(f"ansible.cfg's callbacks_enabled ({on_callbacks!r}) does not enable sparkctl.spark.plugin_preload: nothing to compare")
    sides = {"on": on_callbacks, "off": OFF_CALLBACKS}

    first = None
    if args.fresh:
        for step in ("down", "up"):
            proc = subprocess.run([sys.executable, str(SPARKLAB), step], cwd=REPO, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                sys.exit(f"sparklab {step} failed:\n{proc.stdout}\n{proc.stderr}")
        first_time, first_recap, _ = run_playbook(None, on_callbacks)
        first = (first_time, changed_total(first_recap))

    # (tags or None) -> side -> list of (seconds, changed)
    results: dict[str | None, dict[str, list[tuple[float, int]]]] = {}
    for tags in [None, *stages]:
        results[tags] = {side: [] for side in sides}
        for _ in range(args.reruns):
            for side, callbacks in sides.items():
                elapsed, recap, _ = run_playbook(tags, callbacks)
                results[tags][side].append((elapsed, changed_total(recap)))

    _, profile_recap, profile_out = run_playbook(None, PROFILE_CALLBACKS, {
        "PROFILE_TASKS_TASK_OUTPUT_LIMIT": str(SLOWEST), "PROFILE_TASKS_SUMMARY_ONLY": "true", "COLUMNS": "160"})
    profile_changed = changed_total(profile_recap)

    all_changed = [changed for runs in results.values() for side in runs.values() for _, changed in side] + [profile_changed]
    print(f"no-op re-runs of site.yml on the converged two-node lab, {args.reruns} per line, preload on/off alternating")
    print(f"  preload on = ANSIBLE_CALLBACKS_ENABLED={on_callbacks!r}, off = {OFF_CALLBACKS!r}")
    if first is not None:
        print(f"  first converge (fresh nodes)  {first[0]:7.1f} s   changed={first[1]}")
    print(f"  {'run':<22} {'on (s)':>8} {'off (s)':>8} {'on/off':>7}  target   changed on/off   runs on | off (s)")
    failed_targets = []
    for tags, runs in results.items():
        label = "site.yml (full)" if tags is None else f"--tags {tags}"
        on = statistics.median(t for t, _ in runs["on"])
        off = statistics.median(t for t, _ in runs["off"])
        target = FULL_TARGET_S if tags is None else STAGE_TARGET_S
        ok = on <= target
        if not ok:
            failed_targets.append(label)
        changed = f"{[c for _, c in runs['on']]}/{[c for _, c in runs['off']]}"
        print(f"  {label:<22} {on:8.1f} {off:8.1f} {on / off:7.2f}  <= {target:4.0f}s  {changed:<15}  "
              f"{fmt_times([t for t, _ in runs['on']])} | {fmt_times([t for t, _ in runs['off']])}")
    print()
    full_on = statistics.median(t for t, _ in results[None]["on"])
    print(f"  target full-site no-op re-run <= {FULL_TARGET_S:.0f} s (preload on): {full_on:.1f} s, {verdict(full_on <= FULL_TARGET_S)}")
    for stage in stages:
        stage_on = statistics.median(t for t, _ in results[stage]["on"])
        print(f"  target --tags {stage} no-op <= {STAGE_TARGET_S:.0f} s (preload on): {stage_on:.1f} s,"
              f" {verdict(stage_on <= STAGE_TARGET_S)}")
    if first is not None:
        ratio = full_on / first[0]
        print(f"  old target re-run/first converge <= {OLD_TARGET_RATIO:.2f}: {ratio:.2f}, {verdict(ratio <= OLD_TARGET_RATIO)}")
    else:
        print(f"  old target re-run/first converge <= {OLD_TARGET_RATIO:.2f}: not measured (needs --fresh)")
    print(f"  changed=0 on every run: {'yes' if all(c == 0 for c in all_changed) else 'NO'}")
    print()
    print(f"{SLOWEST} slowest tasks of one full no-op re-run (ANSIBLE_CALLBACKS_ENABLED={PROFILE_CALLBACKS}; changed={profile_changed}):")
    for name, seconds in slowest_tasks(profile_out, SLOWEST):
        print(f"  {seconds:6.2f} s  {name}")
    print("  (2-core shared machine: compare ratios from one run, not seconds across runs)")
    return 0 if all(c == 0 for c in all_changed) else 1


if __name__ == "__main__":
    sys.exit(main())

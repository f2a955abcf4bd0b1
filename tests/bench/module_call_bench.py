#!/usr/bin/env python3
"""What one task that reaches a node costs, on the lab, in one run.

A no-op re-run of a stage is bounded below by the tasks that run a module on a node: this
times, per call and host, a bare SSH command (`raw`, the connection alone), the `ping`
module (the connection plus Ansible's module wrapper on the node), `ping` under `become`
(sudo on top), `stat` as root (a typical read-only check) and a task skipped by `when`
(the controller alone). Each variant is a loop of N items in one play over every lab node,
and the variants alternate over R rounds so they see the same machine load. The same
wrapper is then timed on the control node alone: `python3 AnsiballZ_ping.py` kept on
disk, next to `python3 -c pass`, which shows what importing Ansible's module library costs
(the node does the same for every module call: the modules arrive as zip files, so nothing
is byte-compiled between calls).

Prints the per-call milliseconds (median over rounds) and the ratios to `raw`. Read the
ratios: the machine is shared and noisy.

Usage: .venv/bin/python tests/bench/module_call_bench.py [--calls 20] [--rounds 3]
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration"))

from labrun import LAB_INVENTORY  # noqa: E402

VARIANTS = {
    "raw (SSH only)": "ansible.builtin.raw: 'true'",
    "ping module": "ansible.builtin.ping:",
    "ping module, become": "ansible.builtin.ping:\n      become: true",
    "stat as root": "ansible.builtin.stat:\n        path: /etc/hostname\n      become: true",
    "skipped by when": "ansible.builtin.ping:\n      when: false",
}
PLAY = """- name: One task, {calls} calls per node
  hosts: sparklab
  gather_facts: false
  tasks:
    - name: The call
      loop: "{{{{ range({calls}) | list }}}}"
      {task}
"""
TASK_TIME = re.compile(r"^The call -+ (?P<seconds>\d+\.\d+)s$", re.M)
ANSIBLE = Path(sys.executable).with_name("ansible")
PLAYBOOK = Path(sys.executable).with_name("ansible-playbook")


def time_variant(task: str, calls: int, workdir: Path) -> float:
    """Seconds per call and host of one variant (the task's own time, from profile_tasks)."""
    playbook = workdir / "variant.yml"
    playbook.write_text(PLAY.format(calls=calls, task=task))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
               ANSIBLE_CALLBACKS_ENABLED="ansible.posix.profile_tasks,sparkctl.spark.plugin_preload")
    proc = subprocess.run([str(PLAYBOOK), str(playbook), "-i", str(LAB_INVENTORY)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    match = TASK_TIME.search(proc.stdout)
    if proc.returncode != 0 or not match:
        raise SystemExit(f"the variant failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}")
    return float(match.group("seconds")) / calls


def time_wrapper_locally(rounds: int) -> tuple[float, float]:
    """(seconds of one kept AnsiballZ ping run, seconds of `python3 -c pass`) on the control node."""
    with tempfile.TemporaryDirectory() as keep:
        env = dict(os.environ, ANSIBLE_KEEP_REMOTE_FILES="1", ANSIBLE_PIPELINING="0", ANSIBLE_REMOTE_TMP=keep)
        subprocess.run([str(ANSIBLE), "localhost", "-m", "ansible.builtin.ping", "-e",
                        "ansible_python_interpreter=/usr/bin/python3"], env=env, capture_output=True, check=True,
                       timeout=120)
        wrapper = glob.glob(os.path.join(keep, "*", "AnsiballZ_ping.py"))[0]

        def best(argv):
            times = []
            for _ in range(rounds * 3):
                started = time.perf_counter()
                subprocess.run(argv, capture_output=True, check=True)
                times.append(time.perf_counter() - started)
            return min(times)

        return best(["/usr/bin/python3", wrapper]), best(["/usr/bin/python3", "-c", "pass"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    seconds: dict[str, list[float]] = {name: [] for name in VARIANTS}
    with tempfile.TemporaryDirectory() as workdir:
        for _ in range(args.rounds):
            for name, task in VARIANTS.items():
                seconds[name].append(time_variant(task, args.calls, Path(workdir)))
    raw = statistics.median(seconds["raw (SSH only)"])
    print(f"{'per call and host':<24} {'ms':>8} {'x raw':>7}")
    for name, values in seconds.items():
        median = statistics.median(values)
        print(f"{name:<24} {median * 1000:8.0f} {median / raw:7.1f}")
    wrapper, bare = time_wrapper_locally(args.rounds)
    print(f"\non the control node: AnsiballZ ping {wrapper * 1000:.0f} ms, python3 -c pass {bare * 1000:.0f} ms "
          f"({(wrapper - bare) * 1000:.0f} ms the module wrapper and library imports)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The lab nodes' bytecode cache for Ansible's zipped module payloads, on and off, on the converged lab.

The lab's node image puts tests/lab/node/sparklab_zipcache.py and its .pth in the system
Python's dist-packages: every module run then takes the bytecode of the module library it
imports from its zip payload from a per-user cache instead of compiling it again. This bench
times no-op re-runs of the whole site.yml and of `--tags provision` with the .pth in place
("cached") and moved aside on every node ("compiled": Python as shipped), the two alternating
so that both see the same machine load; the .pth is put back at the end, whatever happened.

Prints per variant the median wall time and the median CPU time the lab's node containers
spent during the run (their cgroups: the module runs, and whatever else the nodes did in that
time, Ray's idle work included), and the cached/compiled ratios. Every run must report
changed=0 (else exit 1).

The machines are shared and noisy: read the ratios, and compare only numbers from the same run.

Usage: .venv/bin/python tests/bench/zipcache_bench.py [--reruns 3]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from noop_bench import changed_verdict, configured_callbacks, print_medians, record_sample, run_playbook

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
from labrun import container, lab_plan, node_exec  # noqa: E402
from sparklab import docker  # noqa: E402  (tests/lab, on sys.path through labrun)

PTH = "/usr/lib/python3/dist-packages/sparklab_zipcache.pth"
RUNS = (("site.yml", None), ("--tags provision", "provision"))


def cgroup_usage_seconds(container_id: str) -> float:
    """CPU seconds a container has used (cgroup v1 cpuacct, or v2 cpu.stat)."""
    v1 = Path(f"/sys/fs/cgroup/cpuacct/docker/{container_id}/cpuacct.usage")
    if v1.exists():
        return int(v1.read_text()) / 1e9
    for v2 in (Path(f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope/cpu.stat"),
               Path(f"/sys/fs/cgroup/docker/{container_id}/cpu.stat")):
        if v2.exists():
            usage = dict(line.split() for line in v2.read_text().splitlines())
            return int(usage["usage_usec"]) / 1e6
    sys.exit(f"no cgroup CPU counter found for container {container_id[:12]}")


def set_cache(nodes: list[str], on: bool) -> None:
    for node in nodes:
        source, target = (f"{PTH}.off", PTH) if on else (PTH, f"{PTH}.off")
        node_exec(node, "sh", "-c", f"if [ -e {source} ]; then mv {source} {target}; fi")
        if node_exec(node, "test", "-e", PTH, check=False).returncode != (0 if on else 1):
            sys.exit(f"{node}: could not turn the cache {'on' if on else 'off'} ({PTH})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reruns", type=int, default=3, help="runs of each variant and run kind")
    args = parser.parse_args()
    nodes = [node.name for node in lab_plan().nodes]
    ids = [docker("container", "inspect", "--format", "{{.Id}}", container(node)).stdout.strip() for node in nodes]
    if node_exec(nodes[0], "test", "-e", PTH, check=False).returncode != 0:
        sys.exit(f"{PTH} is not on {nodes[0]}: the lab's node image predates the cache (sparklab down, up)")
    changed = 0
    samples: dict[tuple[str, str], list[tuple[float, float]]] = {}
    try:
        for label, tags in RUNS:
            for _ in range(args.reruns):
                for variant, on in (("cached", True), ("compiled", False)):
                    set_cache(nodes, on)
                    before = sum(cgroup_usage_seconds(i) for i in ids)
                    wall, recap, _ = run_playbook(tags, configured_callbacks())
                    cpu = sum(cgroup_usage_seconds(i) for i in ids) - before
                    changed += record_sample(samples, label, variant, wall, cpu, recap, "node CPU")
    finally:
        set_cache(nodes, True)
    print_medians([label for label, _ in RUNS], ("cached", "compiled"), samples, "node CPU (s)")
    return changed_verdict(changed)


if __name__ == "__main__":
    sys.exit(main())

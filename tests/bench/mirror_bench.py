#!/usr/bin/env python3
"""Checkpoint mirror throughput on the lab, the methods side by side in one run.

Copies the lab checkpoint (served by the checkpoint stage on the head) from
spark1 to a fresh directory on spark2 over the direct cable, as the service user:

  project      sparkctl.spark.checkpoint_sync as the checkpoint role runs it
               (checkpoint_transport: rsyncd): rsync --whole-file to an rsync
               daemon on the worker's cable addresses, the streams spread over
               both cable halves, no ssh
  project-ssh  the same module with checkpoint_transport: ssh (rsync through the
               SSH mesh's client config: aes128-gcm, no compression)
  seed004      rsync -a --partial --inplace -e 'ssh -c aes128-gcm@openssh.com -o Compression=no'
               (the published recipe's mirror: docs/field-notes.md, "Checkpoint mirroring")
  raw          tar -c | ssh peer tar -x   (the ceiling for an ssh transport)

The bench's daemons are configured from the role's own file on spark2
(/etc/sparkctl/checkpoint-rsyncd.conf, same secret, same options) with the
module path moved to the bench directory, and run as transient units for the
length of the run. Each method runs --rounds times, interleaved, into a new
directory; the median is reported. Targets: project >= 0.90 x raw and >= 3 x
seed004. Both lab nodes share this machine's cores, so the CPU (ssh
encryption, rsync), not the link, sets these numbers: read the ratios.

Needs: the lab up and converged through the checkpoint stage (site.yml).
Usage: .venv/bin/python tests/bench/mirror_bench.py [--rounds 3] [--streams 2,4]
(several stream counts: the project's methods run once per count; the ratios use
the best count, which is what checkpoint_streams should be set to)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration"))

from labrun import node_exec  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlab import (  # noqa: E402
    USER,
    WORKER_LINKS,
    daemon_worker_args,
    fresh_dir,
    run_checkpoint_sync,
    start_bench_daemons,
    stop_bench_daemons,
)

CKPT = "/srv/sparkctl/models/lab-standin"
BENCH_ROOT = "/srv/sparkctl/mirror-bench"


def size_of_checkpoint() -> int:
    out = node_exec("spark1", "du", "-sb", "--exclude=.sparkctl-*", CKPT).stdout
    return int(out.split()[0])


def fresh_target(name: str) -> str:
    return fresh_dir("spark2", BENCH_ROOT, name)


def as_head_user(script: str) -> float:
    start = time.perf_counter()
    proc = node_exec("spark1", "runuser", "-u", USER, "--", "sh", "-c", script, check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {script}\n{proc.stdout}\n{proc.stderr}")
    return elapsed


def run_seed004(target: str) -> float:
    return as_head_user(
        f"rsync -a --partial --inplace -e 'ssh -c aes128-gcm@openssh.com -o Compression=no' "
        f"--exclude='.sparkctl-*' {CKPT}/ {USER}@{WORKER_LINKS[0]}:{target}/")


def run_raw(target: str) -> float:
    return as_head_user(
        f"tar -C {CKPT} --exclude='./.sparkctl-*' -cf - . | ssh -c aes128-gcm@openssh.com -o Compression=no "
        f"{USER}@{WORKER_LINKS[0]} 'tar -C {target} -xf -'")


def run_project(target: str, streams: int, transport: str) -> float:
    if transport == "rsyncd":
        workers = daemon_worker_args(target[len(BENCH_ROOT) + 1:])
    else:
        urls = [f"{USER}@{ip}:{target}/" for ip in WORKER_LINKS]
        workers = {"workers": [{"name": "spark2", "target": urls[0], "alternate_targets": urls[1:]}]}
    args = {
        "source": {"type": "path", "path": CKPT},
        "dest": CKPT,
        "streams": streams,
        "manifest_file": "/tmp/sparkctl-mirror-bench-manifest.json",
        "progress_file": "/tmp/sparkctl-mirror-bench-progress.json",
        **workers,
    }
    result = run_checkpoint_sync(args, f"checkpoint_sync ({transport})")
    # The module's own clock for the mirror phase: the same span the others measure,
    # without Ansible's start-up.
    return float(result["timings"]["mirror_s"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--streams", default="2,4", help="stream counts for the project's methods, comma-separated")
    args = parser.parse_args()

    total = size_of_checkpoint()
    # Warm the head's page cache once, so every method reads from memory.
    node_exec("spark1", "sh", "-c", f"cat {CKPT}/* > /dev/null")
    counts = [int(n) for n in args.streams.split(",")]
    units = start_bench_daemons(BENCH_ROOT)
    methods = {}
    for count in counts:
        methods[f"project x{count}"] = lambda t, n=count: run_project(t, n, "rsyncd")
        methods[f"project-ssh x{count}"] = lambda t, n=count: run_project(t, n, "ssh")
    methods["seed004"] = run_seed004
    methods["raw"] = run_raw
    seconds: dict[str, list[float]] = {name: [] for name in methods}
    try:
        for rnd in range(args.rounds):
            for name, method in methods.items():
                seconds[name].append(method(fresh_target(f"{name.replace(' ', '-')}-{rnd}")))
    finally:
        stop_bench_daemons(units)
        node_exec("spark2", "rm", "-rf", BENCH_ROOT)

    rate = {name: total / statistics.median(times) / 1e6 for name, times in seconds.items()}
    print(f"checkpoint mirror spark1 -> spark2 over the lab cable, {total / 1e9:.2f} GB, median of {args.rounds}")
    for name, times in seconds.items():
        print(f"  {name:16} {rate[name]:7.1f} MB/s   runs: {', '.join(f'{t:.1f}' for t in times)} s")
    best = max((name for name in rate if name.startswith("project x")), key=rate.get)
    best_ssh = max((name for name in rate if name.startswith("project-ssh x")), key=rate.get)
    vs_raw = rate[best] / rate["raw"]
    vs_seed = rate[best] / rate["seed004"]
    print(f"  best: {best}")
    print(f"  {best} / raw       {vs_raw:5.2f}   target >= 0.90: {'met' if vs_raw >= 0.9 else 'NOT met'}")
    print(f"  {best} / seed004   {vs_seed:5.2f}   target >= 3.00: {'met' if vs_seed >= 3 else 'NOT met'}")
    print(f"  {best} / {best_ssh} {rate[best] / rate[best_ssh]:5.2f}")
    print(f"  ({os.cpu_count()} cores shared by both lab nodes: ssh encryption and rsync, not the link, set the rates)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

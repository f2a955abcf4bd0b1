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

Needs: the lab up and converged through the checkpoint stage (site.yml). It leaves
the head's checkpoint as it found it (head_bookkeeping_kept): the next site.yml run
reports changed=0.
Usage: .venv/bin/python tests/bench/mirror_bench.py [--rounds 3] [--streams 2,4]
(several stream counts: the project's methods run once per count; the ratios use
the best count, which is what checkpoint_streams should be set to)

--nodes N (N >= 3, a lab on a switch: SPARKLAB_INVENTORY=inventories/lab-switch)
compares instead, in one run, the head sending to every worker (head-only) with the
relay (checkpoint_sync relay: true, a worker sends each verified file on to the
next): the lab checkpoint from spark1 to a fresh directory on every worker, each
worker's rsync daemons as above (their hosts allow widened to every node's cable
addresses), every node's cable ports shaped to --rate (tc tbf) so the link, not
the lab's shared CPU, sets the time, as on real Sparks. It prints each method's
time, rate and the bytes the head's ports sent.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration"))

import subprocess  # noqa: E402

from labrun import LAB_INVENTORY, container, lab_plan, node_exec  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlab import (  # noqa: E402
    BENCH_CONF,
    BENCH_PORT,
    DAEMON_CONF,
    DAEMON_USER,
    PASSWORD_FILE,
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


BOOKKEEPING = ".sparkctl-*"
BOOKKEEPING_TAR = "/run/sparkctl-mirror-bench-bookkeeping.tar"


@contextmanager
def head_bookkeeping_kept(head: str = "spark1"):
    """Leave the head's checkpoint as the checkpoint stage left it. The project's methods run
    checkpoint_sync with the served checkpoint as both source and destination (no copy on the
    head), and the module keeps its bookkeeping there: it rewrites the verification stamp for the
    bench's own manifest, adds a source stamp and takes the transfer lock. With the stamp no longer
    the role's, the next site.yml run hashes the checkpoint again and reports a change. So the
    .sparkctl-* files are saved first (tar keeps owner, mode and times) and put back afterwards,
    byte for byte, and the ones the bench added are removed; the checkpoint's own files are only read."""
    before = set(node_exec(head, "sh", "-c", f"cd {CKPT} && ls -1d {BOOKKEEPING} 2>/dev/null || true").stdout.split())
    node_exec(head, "sh", "-c", f"cd {CKPT} && tar -cpf {BOOKKEEPING_TAR} {' '.join(sorted(before))}" if before
              else f"rm -f {BOOKKEEPING_TAR}")
    try:
        yield
    finally:
        after = set(node_exec(head, "sh", "-c", f"cd {CKPT} && ls -1d {BOOKKEEPING} 2>/dev/null || true").stdout.split())
        added = sorted(after - before)
        if added:
            node_exec(head, "sh", "-c", f"cd {CKPT} && rm -f -- {' '.join(added)}")
        if before:
            node_exec(head, "sh", "-c", f"cd {CKPT} && tar -xpf {BOOKKEEPING_TAR} && rm -f {BOOKKEEPING_TAR}")


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


RELAY_PASSWORD = "/run/sparkctl-bench-relay.password"


def plan_nodes(count: int):
    plan = lab_plan()
    if plan.topology != "switch" or len(plan.nodes) < count:
        sys.exit(f"--nodes {count} needs a lab of {count} nodes on a switch (SPARKLAB_INVENTORY={LAB_INVENTORY} "
                 f"is {len(plan.nodes)} nodes, {plan.topology}): sparklab up --nodes {count} --topology switch")
    return plan.nodes[:count]


def shape(nodes, rate: str) -> None:
    """tbf on every cable port of every node: each port sends at most `rate`."""
    for node in nodes:
        for link in node.links:
            node_exec(node.name, "tc", "qdisc", "replace", "dev", link.interface, "root", "tbf", "rate", rate,
                      "burst", "256kb", "latency", "100ms")


def unshape(nodes) -> None:
    for node in nodes:
        for link in node.links:
            node_exec(node.name, "tc", "qdisc", "del", "dev", link.interface, "root", check=False)


def sent_bytes(node) -> int:
    """Bytes the node's cable ports have sent (tc's counters, reset when shape() replaces the qdisc)."""
    total = 0
    for link in node.links:
        out = node_exec(node.name, "tc", "-s", "qdisc", "show", "dev", link.interface).stdout
        total += int(out.split(" Sent ", 1)[1].split()[0])
    return total


def start_worker_daemons(worker, addresses: list[str]) -> list[str]:
    """The role's daemon configuration on this worker, module path moved to BENCH_ROOT, hosts allow
    widened to every node's cable addresses (the relay's feeders are workers), one daemon per address."""
    node_exec(worker.name, "sh", "-c", f"mkdir -p {BENCH_ROOT} && chown {USER}: {BENCH_ROOT} && "
              f"sed -e 's#^path = .*#path = {BENCH_ROOT}#' -e 's#^hosts allow = .*#hosts allow = {' '.join(addresses)}#' "
              f"{DAEMON_CONF} > {BENCH_CONF}")
    units = []
    for index, link in enumerate(worker.links):
        unit = f"sparkctl-bench-rsyncd-{index}"
        node_exec(worker.name, "systemd-run", f"--unit={unit}", "--collect", "rsync", "--daemon", "--no-detach",
                  f"--config={BENCH_CONF}", f"--address={link.ip}", f"--port={BENCH_PORT}")
        units.append(unit)
    deadline = time.monotonic() + 10
    listening = f"ss -ltn 'sport = :{BENCH_PORT}' | grep -c LISTEN"
    while node_exec(worker.name, "sh", "-c", listening, check=False).stdout.strip() != str(len(worker.links)):
        if time.monotonic() > deadline:
            sys.exit(f"the bench rsync daemons did not start on {worker.name}")
        time.sleep(0.2)
    return units


def copy_secret(head, worker) -> None:
    """The daemon's secret for the relay's feeders, 0600 and the service user's, never through this
    process's output: streamed from the head's file into the worker's, both inside the lab."""
    script = (f"docker exec {container(head.name)} cat {PASSWORD_FILE} | docker exec -i {container(worker.name)} "
              f"sh -c 'umask 077 && cat > {RELAY_PASSWORD} && chown {USER}: {RELAY_PASSWORD}'")
    subprocess.run(["sh", "-c", script], check=True, capture_output=True)


def fanout_round(head, workers, sub: str, relay: bool, streams: int) -> tuple[float, int]:
    """One copy of the checkpoint to a fresh BENCH_ROOT/sub on every worker: (mirror seconds, bytes the head sent)."""
    specs = []
    for worker in workers:
        node_exec(worker.name, "sh", "-c", f"rm -rf {BENCH_ROOT}/{sub} && mkdir -p {BENCH_ROOT}/{sub} && chown -R {USER}: {BENCH_ROOT}")
        urls = [f"rsync://{DAEMON_USER}@{link.ip}:{BENCH_PORT}/checkpoint/{sub}/" for link in worker.links]
        specs.append({"name": worker.name, "target": urls[0], "alternate_targets": urls[1:],
                      "relay_source": f"{USER}@{worker.links[0].ip}:{BENCH_ROOT}/{sub}/"})
    args = {
        "source": {"type": "path", "path": CKPT}, "dest": CKPT, "workers": specs, "streams": streams,
        "rsync_password_file": PASSWORD_FILE, "relay": relay, "relay_password_file": RELAY_PASSWORD,
        "manifest_file": "/tmp/sparkctl-mirror-bench-manifest.json",
        "progress_file": "/tmp/sparkctl-mirror-bench-progress.json",
    }
    before = sent_bytes(head)
    result = run_checkpoint_sync(args, f"checkpoint_sync (relay {relay})")
    sent = sent_bytes(head) - before
    for worker in workers:  # every worker's copy is the head's, byte for byte
        check = node_exec(worker.name, "sh", "-c", f"cd {BENCH_ROOT}/{sub} && sha256sum $(ls | sort)").stdout
        if check != node_exec(head.name, "sh", "-c", f"cd {CKPT} && sha256sum $(ls | sort)").stdout:
            sys.exit(f"{worker.name}: the copy in {BENCH_ROOT}/{sub} differs from the head's")
        node_exec(worker.name, "rm", "-rf", f"{BENCH_ROOT}/{sub}")
    return float(result["timings"]["mirror_s"]), sent


def fanout(count: int, rounds: int, rate: str, streams: int) -> int:
    nodes = plan_nodes(count)
    head, workers = nodes[0], nodes[1:]
    addresses = [link.ip for node in nodes for link in node.links]
    total = size_of_checkpoint()
    node_exec(head.name, "sh", "-c", f"cat {CKPT}/* > /dev/null")
    units = {}
    seconds: dict[str, list[float]] = {"head-only": [], "relay": []}
    sent: dict[str, list[int]] = {"head-only": [], "relay": []}
    try:
        for worker in workers:
            units[worker.name] = start_worker_daemons(worker, addresses)
            copy_secret(head, worker)
        shape(nodes, rate)
        for rnd in range(rounds):
            for name in seconds:
                took, head_sent = fanout_round(head, workers, f"{name}-{rnd}", name == "relay", streams)
                seconds[name].append(took)
                sent[name].append(head_sent)
    finally:
        unshape(nodes)
        for worker in workers:
            for unit in units.get(worker.name, []):
                node_exec(worker.name, "systemctl", "stop", unit, check=False)
            node_exec(worker.name, "rm", "-rf", BENCH_ROOT, BENCH_CONF, RELAY_PASSWORD, check=False)

    print(f"checkpoint mirror {head.name} -> {len(workers)} workers on the lab switch, {total / 1e9:.2f} GB each, "
          f"every cable port shaped to {rate}, {streams} streams per worker, median of {rounds}")
    median = {name: statistics.median(times) for name, times in seconds.items()}
    for name, times in seconds.items():
        rate_mb = total * len(workers) / median[name] / 1e6
        print(f"  {name:10} {median[name]:7.1f} s  {rate_mb:7.1f} MB/s delivered   head sent "
              f"{statistics.median(sent[name]) / total:4.2f} x the checkpoint   runs: {', '.join(f'{t:.1f}' for t in times)} s")
    print(f"  relay / head-only time {median['relay'] / median['head-only']:5.2f}  "
          f"(the relay {'faster' if median['relay'] < median['head-only'] else 'NOT faster'}, "
          f"{(1 - median['relay'] / median['head-only']) * 100:.0f} % less time)")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--streams", default="2,4", help="stream counts for the project's methods, comma-separated")
    parser.add_argument("--nodes", type=int, default=2, help="3 or more: head-only fan-out against the relay (a lab on a switch)")
    parser.add_argument("--rate", default="200mbit", help="with --nodes: every cable port's tc tbf rate")
    args = parser.parse_args()
    with head_bookkeeping_kept():
        if args.nodes > 2:
            return fanout(args.nodes, args.rounds, args.rate, int(args.streams.split(",")[0]))
        return pair(args)


def pair(args) -> int:
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

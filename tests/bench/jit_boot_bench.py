#!/usr/bin/env python3
"""The kernel caches' worth on the real vLLM: a boot that compiles against a boot from the caches,
side by side in one run on the lab.

Needs the lab converged with the real vLLM (tests/lab/vllm/README.md):
    ansible-playbook site.yml -i inventories/lab -e spark_model_profile=lab-vllm
The profile runs vLLM's CPU build on vLLM's own ranks (the head's sparkctl-engine.service, each
worker's sparkctl-vllm-rank.service). Its first request after a boot has torch's Inductor compile
CPU kernels into TORCHINDUCTOR_CACHE_DIR, one of the per-runtime cache directories the jit_cache
stage points the engine at and mirrors from the head to every worker (docs/jit-cache.md).

Each round restarts every rank with the caches in one of three states, the states interleaved:

  mirrored     as the converge left them: the head's caches, and their mirror on every worker
               (verify mirrors what the first requests compiled; docs/jit-cache.md)
  worker-cold  the head's caches kept, every worker's emptied (a cluster without the mirror)
  cold         every node's caches emptied (a fresh runtime)

and measures, from the units' start: the seconds until the API proxy answers /health, then the
first completion (4 tokens: the boot's compile lands in it) and a second one (the steady state).
It prints each state's median over the rounds and the ratio of each to `mirrored`.

The caches are copied aside before the first round (cp -a on each node) and put back as they were
after the last, so a site.yml run after the bench reports changed=0. The restarts reset the units'
start-rate counters (systemctl reset-failed), which the bench's own restarts would otherwise use up.

Usage: .venv/bin/python tests/bench/jit_boot_bench.py [--rounds 2] [--workers spark2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "integration"))

from labrun import API_KEY_FILE, JIT_CACHE_ROOT, JIT_ENGINE_UNIT, VLLM_RANK_UNIT, node_exec, unit_command  # noqa: E402

HEAD = "spark1"
STATES = ("mirrored", "worker-cold", "cold")
ASIDE = "/var/tmp/sparkctl-jit-bench"
CURRENT = f"{JIT_CACHE_ROOT}/current"
# Run on the head, through the API proxy with the key, as a user's client would reach the engine.
PROBE = r"""
import json, sys, time, urllib.request
key = open(%(key)r).read().strip().split('=', 1)[1]
t0, model = float(sys.argv[1]), sys.argv[2]
def call(path, body=None, timeout=5):
    req = urllib.request.Request('http://127.0.0.1:8000' + path, data=body,
                                 headers={'Authorization': 'Bearer ' + key, 'Content-Type': 'application/json'})
    with urllib.request.urlopen(req, timeout=timeout) as answer:
        return answer.status, answer.read()
deadline = t0 + 900
while True:
    try:
        if call('/health')[0] == 200:
            break
    except Exception:
        pass
    if time.time() > deadline:
        sys.exit('no /health within 900 s')
    time.sleep(0.25)
health = time.time() - t0
body = json.dumps({'model': model, 'prompt': 'The capital of Japan is', 'max_tokens': 4}).encode()
times = []
for _ in range(2):
    t1 = time.time()
    call('/v1/completions', body, timeout=900)
    times.append(time.time() - t1)
print(json.dumps({'health_s': health, 'first_request_s': times[0], 'second_request_s': times[1]}))
""" % {"key": API_KEY_FILE}


def sh(node: str, script: str) -> str:
    return node_exec(node, "sh", "-c", script).stdout


def served_model() -> str:
    words = unit_command(HEAD, JIT_ENGINE_UNIT)
    return words[words.index("--served-model-name") + 1]


def stop_ranks(workers: list[str]) -> None:
    node_exec(HEAD, "systemctl", "stop", JIT_ENGINE_UNIT)
    for worker in workers:
        node_exec(worker, "systemctl", "stop", VLLM_RANK_UNIT)


def start_ranks(workers: list[str]) -> float:
    for node, unit in [(HEAD, JIT_ENGINE_UNIT)] + [(worker, VLLM_RANK_UNIT) for worker in workers]:
        node_exec(node, "systemctl", "reset-failed", unit, check=False)
    t0 = time.time()
    for worker in workers:
        node_exec(worker, "systemctl", "start", "--no-block", VLLM_RANK_UNIT)
    node_exec(HEAD, "systemctl", "start", "--no-block", JIT_ENGINE_UNIT)
    return t0


def restore(node: str) -> None:
    """The node's caches exactly as they were set aside (owners, modes and times kept)."""
    sh(node, f'c=$(readlink -f {CURRENT}) && rm -rf "$c" && cp -a {ASIDE}/cache "$c"')


def empty(node: str) -> None:
    """Every cache directory of the runtime emptied; the directories and the stage's record kept."""
    sh(node, f'c=$(readlink -f {CURRENT}) && for d in "$c"/*/; do find "$d" -mindepth 1 -delete; done')


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workers", default="spark2", help="the lab's workers, comma-separated (default %(default)s)")
    args = parser.parse_args()
    workers = [w for w in args.workers.split(",") if w]
    nodes = [HEAD] + workers
    model = served_model()
    node_exec(HEAD, "python3", "-c", f"open({ASIDE + '-probe.py'!r}, 'w').write({PROBE!r})")
    for node in nodes:
        sh(node, f'rm -rf {ASIDE} && mkdir -p {ASIDE} && cp -a "$(readlink -f {CURRENT})" {ASIDE}/cache')
    results: dict[str, list[dict]] = {state: [] for state in STATES}
    try:
        for round_number in range(1, args.rounds + 1):
            for state in STATES:
                stop_ranks(workers)
                for node in nodes:
                    restore(node)
                if state in ("worker-cold", "cold"):
                    for node in workers:
                        empty(node)
                if state == "cold":
                    empty(HEAD)
                t0 = start_ranks(workers)
                measured = json.loads(node_exec(HEAD, "python3", f"{ASIDE}-probe.py", str(t0), model).stdout)
                results[state].append(measured)
                print(f"round {round_number} {state:<12} health {measured['health_s']:6.1f} s  first request "
                      f"{measured['first_request_s']:6.2f} s  second {measured['second_request_s']:5.2f} s", flush=True)
    finally:
        stop_ranks(workers)
        for node in nodes:
            restore(node)
            sh(node, f"rm -rf {ASIDE}")
        node_exec(HEAD, "rm", "-f", f"{ASIDE}-probe.py")
        start_ranks(workers)
    base = {key: statistics.median(r[key] for r in results["mirrored"]) for key in results["mirrored"][0]}
    print(f"\n{'state':<12} | {'health s':>8} | {'first request s':>15} | {'second s':>8} | first request / mirrored")
    for state in STATES:
        median = {key: statistics.median(r[key] for r in results[state]) for key in results[state][0]}
        print(f"{state:<12} | {median['health_s']:8.1f} | {median['first_request_s']:15.2f} | "
              f"{median['second_request_s']:8.2f} | {median['first_request_s'] / base['first_request_s']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Download + mirror end to end vs download alone, with the hub throttled to a WAN-like rate.

The checkpoint stage streams each verified file to the workers while the next
files are still downloading, so on a link far faster than the WAN the mirror
should add little more than the copy of the last file. Both methods run the
project's engine (sparkctl.spark.checkpoint_sync on spark1, as the role runs
it) against the hub stand-in inside spark1, throttled for the length of the run:

  download         hub -> a fresh directory on the head, no workers
  download+mirror  hub -> a fresh directory on the head, each file mirrored to
                   spark2 (rsync daemon on both cable halves) as it lands

Each method runs --rounds times, interleaved; the median total time is reported
(for download+mirror that includes the final pass on the worker). Target:
download+mirror <= 1.1 x download alone.

Needs: the lab up, the hub stand-in started (`sparklab hub start`) and the
checkpoint stage converged (site.yml), for the tools venv and the daemon config.
Usage: .venv/bin/python tests/bench/pipeline_bench.py [--rounds 2] [--rate-mb-s 50]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlab import (  # noqa: E402
    daemon_worker_args,
    fresh_dir,
    node_exec,
    run_checkpoint_sync,
    start_bench_daemons,
    stop_bench_daemons,
)

HUB = "http://127.0.0.1:8765"
REPO_ID = "sparklab/lab-standin-nvfp4"
HEAD_ROOT = "/srv/sparkctl/pipeline-bench"
WORKER_ROOT = "/srv/sparkctl/pipeline-bench-worker"


def set_throttle(rate_bytes_per_s: float | None) -> None:
    body = json.dumps({"throttle_bytes_per_s": rate_bytes_per_s})
    script = (
        "import sys, urllib.request\n"
        f"req = urllib.request.Request('{HUB}/_stub/faults', data=sys.argv[1].encode(), method='POST',"
        " headers={'Content-Type': 'application/json'})\n"
        "print(urllib.request.urlopen(req, timeout=10).read().decode())\n"
    )
    node_exec("spark1", "python3", "-c", script, body)


def run(name: str, mirror: bool, streams: int) -> dict:
    dest = fresh_dir("spark1", HEAD_ROOT, name)
    args = {
        "source": {"type": "hub", "repo_id": REPO_ID, "revision": "main", "endpoint": HUB},
        "dest": dest,
        "streams": streams,
        "workers": [],
    }
    if mirror:
        fresh_dir("spark2", WORKER_ROOT, name)
        args.update(daemon_worker_args(name))
    result = run_checkpoint_sync(args, name)
    node_exec("spark1", "rm", "-rf", dest)  # the next round downloads everything again
    return result["timings"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rate-mb-s", type=float, default=50.0, help="the hub's total rate, MB/s (WAN-like)")
    parser.add_argument("--streams", type=int, default=4)
    args = parser.parse_args()

    units = start_bench_daemons(WORKER_ROOT)
    set_throttle(args.rate_mb_s * 1e6)
    timings: dict[str, list[dict]] = {"download": [], "download+mirror": []}
    try:
        for rnd in range(args.rounds):
            timings["download"].append(run(f"download-{rnd}", False, args.streams))
            timings["download+mirror"].append(run(f"download-mirror-{rnd}", True, args.streams))
    finally:
        set_throttle(None)
        stop_bench_daemons(units)
        node_exec("spark1", "rm", "-rf", HEAD_ROOT)
        node_exec("spark2", "rm", "-rf", WORKER_ROOT)

    total = {name: statistics.median(t["total_s"] for t in runs) for name, runs in timings.items()}
    print(f"checkpoint {REPO_ID} from the hub stand-in throttled to {args.rate_mb_s:.0f} MB/s, "
          f"median of {args.rounds}")
    for name, runs in timings.items():
        detail = ", ".join(f"{t['total_s']:.1f} (mirror {t['mirror_s']:.1f}, overlap {t['overlap_s']:.1f})" for t in runs)
        print(f"  {name:16} {total[name]:6.1f} s   runs: {detail}")
    ratio = total["download+mirror"] / total["download"]
    print(f"  download+mirror / download   {ratio:5.2f}   target <= 1.10: {'met' if ratio <= 1.1 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

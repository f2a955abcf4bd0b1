#!/usr/bin/env python3
"""Where the CPU of a command goes, the lab nodes' processes included, from process accounting.

Runs COMMAND with the kernel's process accounting (acct(2), BSD v3 records) on, then sums every
process that ended meanwhile by where it ran and what started it:

- on the control node, by the tool a process descends from (ansible-playbook, molecule,
  ansible-lint, ansible-test, pytest, pip; anything else under its own name);
- on a lab node (a process below a container's shim), by the node's service it descends from
  (its child of the node's PID 1), a process under sshd counted as "ssh sessions" (Ansible's
  module runs, pip and apt run by tasks).

Long-lived processes (Ray, the engine) are counted when they end, so let COMMAND take the lab
down (as tests/suite.sh does) or read their share as a lower bound. Needs root and a kernel with
BSD process accounting; the machine's whole load is counted, not only COMMAND's.

Usage: sudo .venv/bin/python tests/bench/cpu_census.py [--keep FILE] -- COMMAND [ARGS...]
       .venv/bin/python tests/bench/cpu_census.py --read FILE
       .venv/bin/python tests/bench/cpu_census.py --start FILE | --stop
--start and --stop bracket a longer job (tests/suite.sh); they never fail it: without root or
accounting they say so and exit 0.
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import os
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

# struct acct_v3 (linux/acct.h): flag, version, tty, exitcode, uid, gid, pid, ppid, btime,
# etime (float), then utime, stime, mem, io, rw, minflt, majflt, swaps as comp_t, comm[16].
RECORD = struct.Struct("<BBHIIIIIIf8H16s")
ACCT_VERSION = 3
AHZ = 100
CONTROL_TOOLS = ("ansible-playboo", "molecule", "ansible-lint", "ansible-test", "pytest", "pip", "pip3")
SHIM = "containerd-shim"


def comp_t(value: int) -> float:
    """A comp_t (13-bit mantissa, 3-bit base-8 exponent) in seconds."""
    return ((value & 0x1FFF) << (3 * ((value >> 13) & 7))) / AHZ


def read_records(path: Path) -> list[dict]:
    data = path.read_bytes()
    records = []
    for offset in range(0, len(data) - RECORD.size + 1, RECORD.size):
        fields = RECORD.unpack_from(data, offset)
        if fields[1] != ACCT_VERSION:
            continue
        records.append({"pid": fields[6], "ppid": fields[7], "start": fields[8], "elapsed": fields[9] / AHZ,
                        "cpu": comp_t(fields[10]) + comp_t(fields[11]),
                        "comm": fields[18].split(b"\0")[0].decode(errors="replace")})
    return records


def live_processes() -> list[dict]:
    """The processes still running, as records without CPU: the ancestors (a node's shim, its PID 1,
    an sshd) of what ended while accounting was on."""
    boot = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime "))
    ticks = os.sysconf("SC_CLK_TCK")
    live = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        live.append({"pid": int(entry.name), "ppid": int(fields[1]), "start": boot + int(fields[19]) // ticks,
                     "elapsed": float("inf"), "cpu": 0.0, "comm": comm[:15], "live": True})
    return live


def ancestries(records: list[dict]) -> list[list[dict]]:
    """Each record with its ancestors, nearest first. PIDs are reused, so a parent is the record
    of that PID alive when the child started."""
    by_pid = collections.defaultdict(list)
    for index, record in enumerate(records):
        record["index"] = index
        by_pid[record["pid"]].append(record)

    def parent(record):
        alive = [p for p in by_pid.get(record["ppid"], ())
                 if p["start"] <= record["start"] + 1 and p["start"] + p["elapsed"] + 2 >= record["start"]]
        return max(alive, key=lambda p: p["start"], default=None)

    chains = []
    for record in records:
        chain, seen, current = [], set(), record
        while current is not None and current["index"] not in seen:
            seen.add(current["index"])
            chain.append(current)
            current = parent(current)
        chains.append(chain)
    return chains


def where(chain: list[dict]) -> tuple[str, str]:
    names = [r["comm"] for r in chain]
    if SHIM in names:
        inside = names[:names.index(SHIM)]  # the node's processes, its PID 1 last
        if "sshd" in inside:
            return "lab node", "ssh sessions (module runs, pip, apt)"
        return "lab node", inside[-2] if len(inside) >= 2 else (inside[-1] if inside else SHIM)
    tools = [name for name in names if name in CONTROL_TOOLS]
    return "control node", tools[-1] if tools else names[-1]


def report(path: Path, live: list[dict] | None = None) -> None:
    ended = read_records(path)
    records = ended + (live or [])
    totals, counts = collections.Counter(), collections.Counter()
    commands = collections.defaultdict(collections.Counter)
    for record, chain in zip(records, ancestries(records), strict=True):
        if record.get("live"):
            continue
        key = where(chain)
        totals[key] += record["cpu"]
        counts[key] += 1
        commands[key][record["comm"]] += record["cpu"]
    total = sum(totals.values()) or 1.0
    print(f"{len(ended)} processes, {total:.0f} CPU-s")
    for side in ("control node", "lab node"):
        side_total = sum(v for k, v in totals.items() if k[0] == side)
        print(f"\n{side}: {side_total:.0f} CPU-s ({100 * side_total / total:.0f} %)")
        for key, seconds in totals.most_common():
            if key[0] != side or seconds < 0.005 * total:
                continue
            top = ", ".join(f"{name} {cpu:.0f}" for name, cpu in commands[key].most_common(4))
            print(f"  {seconds:8.1f} {100 * seconds / total:5.1f} % {counts[key]:6d}  {key[1]:38} {top}")


def accounting(libc: ctypes.CDLL, path: Path | None) -> str | None:
    """Turn accounting on into path (None: off); the error, if any."""
    if path is not None:
        path.write_bytes(b"")
    if libc.acct(str(path).encode() if path is not None else None) != 0:
        return f"acct({path or 'off'}) failed: {os.strerror(ctypes.get_errno())} (root and BSD process accounting needed)"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--read", type=Path, help="report an existing accounting file")
    parser.add_argument("--start", type=Path, help="turn accounting on into this file and return")
    parser.add_argument("--stop", action="store_true", help="turn accounting off")
    parser.add_argument("--keep", type=Path, help="write the accounting records here (default: a temporary file)")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    if args.read:
        if not args.read.is_file() or args.read.stat().st_size == 0:
            print(f"no process accounting records in {args.read}")
            return 0
        report(args.read)
        return 0
    libc = ctypes.CDLL(None, use_errno=True)
    if args.start or args.stop:
        error = accounting(libc, args.start)
        print(error or (f"process accounting on, into {args.start}" if args.start else "process accounting off"))
        return 0
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give a COMMAND after --, --read FILE, --start FILE or --stop")
    with tempfile.TemporaryDirectory(prefix="sparkctl-cpu-census-") as scratch:
        path = args.keep or Path(scratch) / "acct"
        if error := accounting(libc, path):
            sys.exit(error)
        try:
            rc = subprocess.run(command, check=False).returncode
        finally:
            live = live_processes()
            accounting(libc, None)
        report(path, live)
    return rc


if __name__ == "__main__":
    sys.exit(main())

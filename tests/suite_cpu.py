#!/usr/bin/env python3
"""How busy the machine's CPUs were while each stage of the suite ran: tells whether a stage
waits on its nodes (room for another chain beside it) or on the CPUs (only less work makes
it shorter).

    python3 tests/suite_cpu.py sample <log>            # appends "<epoch> <busy> <total>" every 5 s
    python3 tests/suite_cpu.py report <log> <spans>    # one line per stage ("<name> <start> <end>")

`sample` runs in the background for the whole suite (tests/suite.sh ends it by PID); busy and
total are the jiffies of the first line of /proc/stat, busy being everything but idle and
iowait."""

from __future__ import annotations

import sys
import time
from pathlib import Path

INTERVAL = 5.0


def cpu_jiffies(stat_text: str) -> tuple[int, int]:
    """(busy, total) from /proc/stat's aggregate "cpu" line; guest time is already counted in
    user and nice, so it is left out of the total."""
    for line in stat_text.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            values = [int(v) for v in fields[1:9]]  # user nice system idle iowait irq softirq steal
            total = sum(values)
            return total - values[3] - values[4], total
    raise ValueError("no aggregate cpu line in /proc/stat")


def parse_samples(text: str) -> list[tuple[float, int, int]]:
    """The samples of the log; a line the sampler did not finish (ended mid-write) is left out."""
    samples = []
    for line in text.splitlines():
        try:
            stamp, busy, total = line.split()
            samples.append((float(stamp), int(busy), int(total)))
        except ValueError:
            continue
    return samples


def busy_share(samples: list[tuple[float, int, int]], start: float, end: float) -> float | None:
    """Share of CPU time busy between start and end (epoch seconds), from the samples that
    bracket the span; None when fewer than two samples fall inside it or at its edges."""
    inside = [s for s in samples if start - INTERVAL <= s[0] <= end + INTERVAL]
    if len(inside) < 2:
        return None
    first, last = inside[0], inside[-1]
    total = last[2] - first[2]
    return (last[1] - first[1]) / total if total > 0 else None


def report(samples: list[tuple[float, int, int]], spans: list[tuple[str, float, float]]) -> list[str]:
    lines = ["===== CPU busy while each stage ran (all cores; 100% = every core busy) ====="]
    for name, start, end in spans:
        share = busy_share(samples, start, end)
        shown = "-" if share is None else f"{share * 100:5.1f}%"
        lines.append(f"{name:<18} {int(end - start):5d}s  {shown}")
    if samples:
        whole = busy_share(samples, samples[0][0], samples[-1][0])
        if whole is not None:
            lines.append(f"{'whole run':<18} {int(samples[-1][0] - samples[0][0]):5d}s  {whole * 100:5.1f}%")
    return lines


def parse_spans(text: str) -> list[tuple[str, float, float]]:
    spans = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3:
            spans.append((parts[0], float(parts[1]), float(parts[2])))
    return spans


def sample(log: Path) -> None:
    with log.open("a") as out:
        while True:
            busy, total = cpu_jiffies(Path("/proc/stat").read_text())
            out.write(f"{time.time():.1f} {busy} {total}\n")
            out.flush()
            time.sleep(INTERVAL)


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "sample":
        sample(Path(argv[1]))
        return 0
    if len(argv) == 3 and argv[0] == "report":
        log, spans = Path(argv[1]), Path(argv[2])
        samples = parse_samples(log.read_text()) if log.exists() else []
        print("\n".join(report(samples, parse_spans(spans.read_text()) if spans.exists() else [])))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The engine's memory gate: before every start and restart of a unit that allocates the
node's unified memory, MemAvailable must be back within a margin of the node's pre-engine
baseline.

On a GB10 the GPU allocates from the same memory as the OS (docs/field-notes.md). An engine
that dies during its boot can leave part of what it allocated behind; a restart loop then
stacks one leak on the next until the node wedges. The start limit on the engine's units
bounds the number of tries; this gate refuses a try whose memory is not back.

One file, standard library only, so that it is both:
- the program the engine's units run as ExecStartPre (installed by roles/engine_service at
  GATE_SCRIPT, run by the node's /usr/bin/python3: `engine_gate.py check UNIT`), which on a
  refusal exits 1 with the numbers (the unit's journal) and writes STATE_FILE, which
  `sparkctl status` and verify read; and
- the module_utils of the `engine_baseline` module, through which roles/engine_service
  checks the same thing before its own start and records the baseline while no engine runs.

The baseline file (BASELINE_FILE, JSON) holds `mem_available_bytes` (MemAvailable while no
engine ran), `margin_bytes`, `settle_seconds` and `recorded_at`; the role writes it, the
gate only reads it."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

GATE_SCRIPT = "/usr/local/lib/sparkctl/engine_gate.py"
BASELINE_FILE = "/var/lib/sparkctl/engine-baseline.json"
STATE_FILE = "/run/sparkctl/engine-gate.json"
PYTHON = "/usr/bin/python3"
MEMINFO = "/proc/meminfo"
GIB = 1024 ** 3
STATE_SCHEMA = 1


class GateError(Exception):
    """A baseline or meminfo the gate cannot read; the message names the file and the fix."""


def gib(n_bytes):
    return "%.1f GiB" % (n_bytes / GIB)


def parse_mem_available(text):
    """MemAvailable in bytes from /proc/meminfo text, None when absent."""
    for line in str(text or "").splitlines():
        key, separator, rest = line.partition(":")
        if separator and key.strip() == "MemAvailable":
            words = rest.split()
            if not words or not words[0].isdigit():
                return None
            unit = words[1].lower() if len(words) > 1 else ""
            return int(words[0]) * (1024 if unit == "kb" else 1)
    return None


def validate_baseline(doc, path=BASELINE_FILE):
    """The baseline document as {mem_available_bytes, margin_bytes, settle_seconds, recorded_at};
    GateError naming the file when a field is missing or not a number."""
    if not isinstance(doc, dict):
        raise GateError("%s is not a JSON object; a run of the serve stage writes it again." % path)
    out = {}
    for key in ("mem_available_bytes", "margin_bytes"):
        value = doc.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise GateError("%s: %s is %r, not a byte count; a run of the serve stage writes it again." % (path, key, value))
        out[key] = value
    settle = doc.get("settle_seconds", 0)
    if isinstance(settle, bool) or not isinstance(settle, (int, float)) or settle < 0:
        raise GateError("%s: settle_seconds is %r, not a number of seconds." % (path, settle))
    out["settle_seconds"] = settle
    out["recorded_at"] = doc.get("recorded_at")
    return out


def read_baseline(path=BASELINE_FILE):
    """The validated baseline, or None when the file does not exist (no engine ever started here)."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        return None
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise GateError("%s is not JSON (%s); a run of the serve stage writes it again." % (path, exc)) from None
    return validate_baseline(doc, path)


def judge(available, baseline, unit=None):
    """The verdict for one start: {held, available_bytes, baseline_bytes, margin_bytes, floor_bytes, message}.

    Held when MemAvailable is below baseline - margin. Without a baseline (no engine ever
    started on the node) there is nothing to come back to: not held."""
    what = unit or "The engine"
    if available is None:
        return {"held": True, "available_bytes": None, "baseline_bytes": None, "margin_bytes": None,
                "floor_bytes": None, "unit": unit,
                "message": "engine held back: MemAvailable could not be read from /proc/meminfo (%s not started)" % (unit or "the engine")}
    if baseline is None:
        return {"held": False, "available_bytes": available, "baseline_bytes": None, "margin_bytes": None,
                "floor_bytes": None, "unit": unit,
                "message": "MemAvailable %s; no pre-engine baseline recorded yet, nothing to compare" % gib(available)}
    base, margin = baseline["mem_available_bytes"], baseline["margin_bytes"]
    floor = max(base - margin, 0)
    numbers = "MemAvailable %s, baseline %s, margin %s" % (gib(available), gib(base), gib(margin))
    result = {"held": available < floor, "available_bytes": available, "baseline_bytes": base, "margin_bytes": margin,
              "floor_bytes": floor, "unit": unit, "baseline_recorded_at": baseline.get("recorded_at")}
    if result["held"]:
        result["message"] = (
            "engine held back: %s (%s short of the %s a start needs): memory an earlier engine held is not back. "
            "%s was not started. Find what holds it (a leftover engine process, another workload); when "
            "unified memory stays lost after every engine process is gone, reboot the node. Then re-run the "
            "serve stage." % (numbers, gib(floor - available), gib(floor), what))
    else:
        result["message"] = "memory back: %s (needs >= %s)" % (numbers, gib(floor))
    return result


def write_json_atomic(path, doc, mode=0o644, directory_mode=0o755):
    """Write doc as JSON to path through a temporary file in its directory (a reader never
    sees half a file), the directory created with directory_mode when missing."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=directory_mode, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".engine-gate-", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(doc, handle, indent=2, sort_keys=True)
            handle.write("\n")
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def read_mem_available(meminfo_path=MEMINFO):
    try:
        with open(meminfo_path, encoding="ascii", errors="replace") as handle:
            return parse_mem_available(handle.read())
    except OSError:
        return None


def settle(read, baseline, unit=None, clock=time.time, sleep=time.sleep, poll_seconds=2.0):
    """The verdict after waiting up to the baseline's settle_seconds for memory a process that
    just ended is still giving back: judge(read(), ...) again every poll_seconds while held.
    The one wait both the gate (check) and a stop before another engine's start use."""
    deadline = clock() + (baseline or {}).get("settle_seconds", 0)
    while True:
        verdict = judge(read(), baseline, unit)
        if not verdict["held"] or clock() >= deadline:
            return verdict
        sleep(poll_seconds)


def check(unit, baseline_path=BASELINE_FILE, state_path=STATE_FILE, meminfo_path=MEMINFO,
          clock=time.time, sleep=time.sleep, poll_seconds=2.0):
    """The ExecStartPre check: (exit status, verdict). Waits up to the baseline's
    settle_seconds for memory a process that just died is still giving back, then judges;
    the verdict goes to state_path either way (a pass replaces an earlier refusal)."""
    try:
        baseline = read_baseline(baseline_path)
    except GateError as exc:
        verdict = judge(read_mem_available(meminfo_path), None, unit)
        verdict.update(held=True, message="engine held back: %s" % exc)
    else:
        verdict = settle(lambda: read_mem_available(meminfo_path), baseline, unit, clock, sleep, poll_seconds)
    verdict["schema"] = STATE_SCHEMA
    verdict["checked_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(clock()))
    # /run/sparkctl is root's only (the firewall keeps its candidate rule sets there too); the
    # gate may be the first to create it after a boot.
    write_json_atomic(state_path, verdict, directory_mode=0o700)
    return (1 if verdict["held"] else 0), verdict


def read_state(text):
    """The gate's state file (text) as a dict, or None when empty or not the gate's JSON."""
    try:
        doc = json.loads(text) if text else None
    except ValueError:
        return None
    if not isinstance(doc, dict) or "held" not in doc or "message" not in doc:
        return None
    return doc


def exec_start_pre(unit, script=GATE_SCRIPT, python=PYTHON):
    """The ExecStartPre= value of the gate: run as root ("+": it writes STATE_FILE under /run,
    whatever User= the unit runs as); unit names and paths need no systemd escaping."""
    return "+%s %s check %s" % (python, script, unit)


def main(argv=None):
    """`engine_gate.py check UNIT [--baseline FILE] [--state FILE] [--meminfo FILE]`: exit 0 when
    the start may go on, 1 when it is held back (the numbers on stderr), 2 on a usage error."""
    parser = argparse.ArgumentParser(prog="engine_gate.py")
    parser.add_argument("command", choices=["check"])
    parser.add_argument("unit")
    parser.add_argument("--baseline", default=BASELINE_FILE)
    parser.add_argument("--state", default=STATE_FILE)
    parser.add_argument("--meminfo", default=MEMINFO)
    args = parser.parse_args(argv)
    status, verdict = check(args.unit, args.baseline, args.state, args.meminfo)
    # The unit's journal keeps this line: the numbers of a refused start.
    stream = sys.stderr if status else sys.stdout
    stream.write("sparkctl: %s\n" % verdict["message"])
    return status


if __name__ == "__main__":
    # Run by systemd as a program (ExecStartPre), not by Ansible: its exit status is the verdict.
    sys.exit(main())  # pylint: disable=ansible-bad-function

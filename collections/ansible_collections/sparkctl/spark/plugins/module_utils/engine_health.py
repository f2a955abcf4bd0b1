# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Is the engine up, still booting, or dead? From its /health answer, its unit's state and
its log.

A first boot of a 150 GB NVFP4 model takes ~11 minutes (JIT compiles, weight load), so the
serve stage waits in rounds and prints where the boot stands; but a boot that has already
failed (out of memory, weights the engine does not know, an NCCL error, a crash loop that hit
the unit's start limit) must end the wait at once, with the log lines that say why.
"""

from __future__ import annotations

import re
import time

from ansible_collections.sparkctl.spark.plugins.module_utils.log_scrub import scrub_lines
from ansible_collections.sparkctl.spark.plugins.module_utils.node_state import RESTART_PENDING_SUBSTATES

from urllib.error import HTTPError, URLError

from ansible.module_utils.urls import open_url

# (kind, pattern): the first matching line of each kind is reported. Ordered from the most
# specific cause to the most generic, and matched case-sensitively on purpose: these are the
# engines' own spellings (vLLM, SGLang, PyTorch, NCCL, systemd, the OOM guard).
FATAL_PATTERNS = (
    ("oom", re.compile(r"CUDA out of memory|torch\.OutOfMemoryError|OutOfMemoryError|Cannot allocate memory")),
    ("oom", re.compile(r"killed by the OOM killer|oom-kill|Out of memory: Killed process")),
    ("oom", re.compile(r"TRIP: MemAvailable|earlyoom.*sending SIG(TERM|KILL) to process")),
    ("unknown_weights", re.compile(r"There is no module or parameter named|Unexpected key\(s\) in state_dict|"
                                   r"KeyError: '(model|lm_head)\.")),
    ("unknown_architecture", re.compile(r"Model architectures? \[.*\] (are|is) not supported|"
                                        r"No model architecture .* found|not supported for now")),
    ("nccl", re.compile(r"NCCL error|ncclSystemError|ncclInternalError|ncclRemoteError|ncclUnhandledCudaError|"
                        r"NCCL WARN .*(failed|error)")),
    ("placement", re.compile(r"(fewer|not enough) (nodes|GPUs)|placement group .* (failed|infeasible)|"
                             r"Cannot satisfy|Ray cluster has \d+ GPUs?, \d+ needed")),
    ("engine_failed", re.compile(r"Engine core initialization failed|EngineCore failed to start|"
                                 r"RuntimeError: Engine process failed to start|Scheduler hit an exception")),
)

# Unit results that mean systemd gave up (start limit) or the process keeps dying.
DEAD_RESULTS = {"start-limit-hit", "exit-code", "signal", "core-dump", "oom-kill", "timeout"}


def fatal_lines(lines):
    """[{kind, line}] for the first log line of each fatal kind, in log order."""
    found, seen = [], set()
    for line in lines:
        for kind, pattern in FATAL_PATTERNS:
            if kind not in seen and pattern.search(line):
                seen.add(kind)
                found.append({"kind": kind, "line": line.strip()})
                break
    return found


def last_meaningful_line(lines):
    """The last non-empty log line, for the progress display."""
    for line in reversed(lines):
        if line.strip():
            return line.strip()
    return None


def parse_systemctl_show(text):
    """`systemctl show -p A -p B UNIT` output -> dict."""
    props = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            props[key.strip()] = value.strip()
    return props


def unit_verdict(props):
    """(state, detail) from systemctl show properties: 'running', 'starting', 'dead' or 'stopped'."""
    active, sub = props.get("ActiveState", ""), props.get("SubState", "")
    result = props.get("Result", "success")
    restarts = props.get("NRestarts", "0")
    if active == "active" and sub == "running":
        return "running", "active (running), %s restarts" % restarts
    # Between a main process that died and systemd's restart of it, a unit first ends the rest of
    # its processes (deactivating, e.g. final-sigterm), then waits RestartSec with a restart
    # pending. Its Result names the death (signal, exit-code) all that time: the unit is not dead
    # yet; systemd decides next whether to restart it or give up (failed, e.g. at its start limit).
    if sub in RESTART_PENDING_SUBSTATES or active == "deactivating":
        return "starting", "%s (%s), result %s after %s restarts: systemd restarts it or gives up next" % (
            active, sub, result, restarts)
    if active in ("activating", "reloading") or (active == "active" and sub != "running"):
        return "starting", "%s (%s), %s restarts" % (active, sub, restarts)
    if active == "failed" or result in DEAD_RESULTS:
        return "dead", "%s (%s), result %s after %s restarts" % (active or "inactive", sub or "dead", result, restarts)
    return "stopped", "%s (%s)" % (active or "inactive", sub or "dead")


def probe_health(url, timeout=5.0):
    """(http status or None, error text or None) of GET url."""
    try:
        response = open_url(url, method="GET", timeout=timeout)
        try:
            return response.status, None
        finally:
            response.close()
    except HTTPError as exc:
        return exc.code, None
    except (URLError, OSError) as exc:
        return None, str(getattr(exc, "reason", exc))


def decide(status, unit_state, fatal):
    """The round's outcome: 'healthy', 'failed' or 'booting'."""
    if fatal or unit_state in ("dead", "stopped"):
        return "failed"
    if status == 200 and unit_state == "running":
        return "healthy"
    return "booting"


def wait_round(url, read_unit, read_log, round_seconds, poll_seconds=2.0, clock=time.monotonic, sleep=time.sleep,
               probe=probe_health, secrets=()):
    """Poll until healthy, failed, or round_seconds pass. read_unit() -> systemctl show props;
    read_log() -> recent log lines of the current boot, scrubbed of secrets (and of the key's
    known spellings) before anything is matched or returned. Returns the result dict of the module."""
    started = clock()
    while True:
        status, error = probe(url)
        unit_state, unit_detail = unit_verdict(read_unit())
        lines = scrub_lines(read_log(), secrets)
        fatal = fatal_lines(lines)
        outcome = decide(status, unit_state, fatal)
        if outcome != "booting" or clock() - started >= round_seconds:
            return {
                "outcome": outcome,
                "healthy": outcome == "healthy",
                "http_status": status,
                "http_error": error,
                "unit_state": unit_state,
                "unit_detail": unit_detail,
                "last_log_line": last_meaningful_line(lines),
                "fatal": fatal,
                "fatal_context": _context(lines, fatal),
                "waited_s": round(clock() - started, 1),
            }
        sleep(poll_seconds)


def _context(lines, fatal, before=3, after=2):
    """A few lines around each fatal line, so the message shows the cause, not just the symptom."""
    out = []
    stripped = [line.rstrip() for line in lines]
    for item in fatal:
        try:
            index = stripped.index(item["line"]) if item["line"] in stripped else [s.strip() for s in stripped].index(item["line"])
        except ValueError:
            continue
        out.extend(stripped[max(0, index - before):index + after + 1])
    return out

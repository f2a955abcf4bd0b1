# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Ray cluster as sparkctl sees it: which expected nodes are alive with their GPUs
(from Ray's state API), why a cluster is degraded, and which engine processes outlived
the engine service (found by exact name or argv, ended by PID, never by a pattern).

The judging functions are pure so they are unit-tested with recorded state-API output;
only query_nodes() imports Ray (the module runs with the venv's python on the head), or runs
STATE_QUERY_SCRIPT in the Python that holds it (an image's, inside its container)."""

from __future__ import annotations

import json
import os
import signal
import socket
import time


# --------------------------------------------------------------------------------------------
# Ray's state API
# --------------------------------------------------------------------------------------------


def _as_dict(node):
    if isinstance(node, dict):
        return node
    if hasattr(node, "__dataclass_fields__"):
        import dataclasses

        return dataclasses.asdict(node)
    return dict(vars(node))


def normalize_nodes(raw_nodes):
    """The state API's NodeState records reduced to what the judge reads."""
    nodes = []
    for raw in raw_nodes or []:
        node = _as_dict(raw)
        resources = node.get("resources_total") or {}
        nodes.append({
            "node_id": node.get("node_id"),
            "ip": node.get("node_ip"),
            "state": str(node.get("state") or "").upper(),
            "head": bool(node.get("is_head_node")),
            "gpus": float(resources.get("GPU", 0) or 0),
            "state_message": node.get("state_message"),
        })
    return nodes


# The fields of a NodeState normalize_nodes reads.
STATE_FIELDS = ("node_id", "node_ip", "state", "is_head_node", "resources_total", "state_message")

# Run by a Python that holds Ray but not this module (an image's, in the head's Ray container:
# the node's own Python has no Ray): the GCS's nodes as JSON, STATE_FIELDS only.
STATE_QUERY_SCRIPT = (
    "import dataclasses, json, sys\n"
    "from ray.util.state import list_nodes\n"
    "fields = %r\n"
    "def plain(node):\n"
    "    if isinstance(node, dict):\n"
    "        return node\n"
    "    return dataclasses.asdict(node) if dataclasses.is_dataclass(node) else dict(vars(node))\n"
    "nodes = list_nodes(address=sys.argv[1], limit=1000, timeout=int(sys.argv[2]), raise_on_missing_output=False)\n"
    "print(json.dumps([dict((key, plain(node).get(key)) for key in fields) for node in nodes], default=str))\n"
) % (STATE_FIELDS,)


def query_nodes(address, timeout=10, python_argv=None, run_command=None):
    """(nodes, error): every node the GCS knows (ALIVE and DEAD), or the reason it could not
    be asked. Needs Ray: in this process (the module runs with the venv's python), or, with
    python_argv, in that Python (e.g. docker exec <container> python3) through run_command(argv)
    -> (rc, stdout, stderr)."""
    # Ray's own client waits ~40 s for a GCS that is not there; a plain TCP connect says so at once.
    host, _sep, port = str(address).rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=min(3, timeout)).close()
    except (OSError, ValueError) as exc:
        return [], f"cannot connect to the GCS at {address}: {exc}"
    if python_argv:
        return _query_nodes_in(list(python_argv), address, timeout, run_command)
    try:
        from ray.util.state import list_nodes  # pylint: disable=import-outside-toplevel
    except ImportError as exc:  # the module runs with the wrong interpreter
        return [], f"cannot import ray ({exc}); run the module with the venv's python as interpreter"
    try:
        raw = list_nodes(address=address, limit=1000, timeout=timeout, raise_on_missing_output=False)
    except Exception as exc:  # pylint: disable=broad-except  # Ray raises many types for "unreachable"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return [], f"{type(exc).__name__}: {first}"
    return normalize_nodes(raw), None


def _query_nodes_in(python_argv, address, timeout, run_command):
    rc, out, err = run_command(python_argv + ["-I", "-c", STATE_QUERY_SCRIPT, str(address), str(int(timeout))])
    who = " ".join(python_argv)
    if rc != 0:
        # A traceback ends with the line that says what went wrong.
        lines = [line.strip() for line in (err or out or "").splitlines() if line.strip()]
        return [], f"{who}: {lines[-1] if lines else 'exit code %d' % rc}"
    try:
        raw = json.loads(out)
    except ValueError:
        raw = None
    if not isinstance(raw, list):
        return [], f"{who} printed no node list: {(out or '').strip()[:200]!r}"
    return normalize_nodes(raw), None


def assess(nodes, expected, error=None):
    """Judge the cluster against the expected nodes ([{name, ip, gpus}]).

    A DEAD record whose IP also has an ALIVE one is history (a raylet that restarted keeps
    its old record), not a problem; an expected IP with no ALIVE record is missing."""
    alive = [n for n in nodes if n["state"] == "ALIVE"]
    # When the node's own raylet id is known, only its record counts: a record left by a
    # raylet killed a moment ago stays ALIVE until the GCS misses its heartbeats (~30 s).
    current = {w["ip"]: w.get("node_id") for w in expected if w.get("node_id") is not None}
    ghosts = [n for n in alive if n["ip"] in current and n["node_id"] != current[n["ip"]]]
    alive = [n for n in alive if n not in ghosts]
    alive_ips = {n["ip"] for n in alive}
    gpus_by_ip = {}
    for node in alive:
        gpus_by_ip[node["ip"]] = gpus_by_ip.get(node["ip"], 0.0) + node["gpus"]
    missing, short = [], []
    for want in expected:
        if want["ip"] not in alive_ips:
            missing.append({"name": want.get("name"), "ip": want["ip"], "gpus": float(want.get("gpus", 1))})
        elif gpus_by_ip[want["ip"]] < float(want.get("gpus", 1)):
            short.append({"name": want.get("name"), "ip": want["ip"], "have": gpus_by_ip[want["ip"]],
                          "want": float(want.get("gpus", 1))})
    expected_ips = {w["ip"] for w in expected}
    dead = [n for n in nodes if n["state"] != "ALIVE" and n["ip"] not in alive_ips]
    # A raylet killed and restarted at once registers anew while its old record is still
    # ALIVE until the GCS misses its heartbeats (~30 s): the GPUs count twice and a
    # placement group may land on the ghost, so the cluster is not settled yet.
    per_ip = {}
    for node in alive:
        per_ip[node["ip"]] = per_ip.get(node["ip"], 0) + 1
    duplicated = sorted({ip for ip, count in per_ip.items() if count > 1} | {n["ip"] for n in ghosts})
    result = {
        "reachable": error is None,
        "error": error,
        "alive": alive,
        "dead": dead,
        "missing": missing,
        "short_gpus": short,
        "unexpected": sorted(alive_ips - expected_ips),
        "duplicated": duplicated,
        "gpus_total": sum(n["gpus"] for n in alive),
        "gpus_expected": sum(float(w.get("gpus", 1)) for w in expected),
        "nodes_alive": len(alive),
        "nodes_expected": len(expected),
    }
    result["healthy"] = error is None and not missing and not short and not duplicated
    result["summary"] = summary(result)
    return result


def local_raylets(processes):
    """[{pid, node_id}] of the raylets on this node (their argv carries --node_id=)."""
    found = []
    for proc in processes:
        if proc["comm"] != "raylet":
            continue
        ids = [a.split("=", 1)[1] for a in proc["argv"] if a.startswith("--node_id=")]
        if ids:
            found.append({"pid": proc["pid"], "node_id": ids[0]})
    return found


def _who(entry):
    return f"{entry['name']} ({entry['ip']})" if entry.get("name") else entry["ip"]


def summary(result):
    """One sentence: healthy, or everything that is missing."""
    if not result["reachable"]:
        return f"the Ray GCS did not answer: {result['error']}"
    counts = (f"{result['nodes_alive']}/{result['nodes_expected']} nodes, "
              f"{result['gpus_total']:g}/{result['gpus_expected']:g} GPUs registered")
    if result["healthy"]:
        return counts
    parts = [counts]
    if result["missing"]:
        parts.append("missing node(s) " + ", ".join(
            f"{_who(m)} with {m['gpus']:g} GPU" for m in result["missing"]))
    for entry in result["short_gpus"]:
        parts.append(f"{_who(entry)} registered {entry['have']:g} of {entry['want']:g} GPUs")
    for ip in result["duplicated"]:
        parts.append(f"{ip} is registered more than once (a restarted raylet's old record is not dead yet)")
    return "; ".join(parts)


def degraded_reasons(assessment, units, leftovers, engine_active=False):
    """Why the running cluster needs the full recovery (stop all, clean, start head then
    workers); empty when it does not.

    units: {host: {"unit": name, "state": running|stopped|failed|..., "ip": link ip}}.
    A cluster whose units are all stopped is not degraded, just not started."""
    reasons = []
    running = {h: u for h, u in units.items() if u.get("state") == "running"}
    if running and assessment is not None:
        if not assessment["reachable"]:
            reasons.append(f"GCS unreachable: {assessment['error']}")
        else:
            missing_ips = {m["ip"] for m in assessment["missing"]}
            for host, unit in sorted(running.items()):
                if unit.get("ip") in missing_ips:
                    reasons.append(f"{host}: {unit['unit']} is active but its node {unit['ip']} is not registered alive")
            for entry in assessment["short_gpus"]:
                reasons.append(f"{_who(entry)} registered {entry['have']:g} of {entry['want']:g} GPUs")
    for host, unit in sorted(units.items()):
        if unit.get("state") == "failed":
            reasons.append(f"{host}: {unit['unit']} failed (start limit or crash)")
    if not engine_active:
        for host, procs in sorted((leftovers or {}).items()):
            for proc in procs:
                reasons.append(f"{host}: leftover engine process {proc['pid']} ({proc['title']}) with the engine stopped")
    return reasons


# --------------------------------------------------------------------------------------------
# Leftover engine processes
# --------------------------------------------------------------------------------------------


def _read(path, mode="r"):
    try:
        with open(path, mode) as handle:
            return handle.read()
    except OSError:
        return None


def read_processes(proc_root="/proc"):
    """[{pid, comm, argv, start}] for every process readable under proc_root."""
    procs = []
    for entry in os.listdir(proc_root):
        if not entry.isdigit():
            continue
        base = os.path.join(proc_root, entry)
        raw = _read(os.path.join(base, "cmdline"), "rb")
        comm = _read(os.path.join(base, "comm"))
        stat = _read(os.path.join(base, "stat"))
        if raw is None or comm is None:
            continue
        argv = [a.decode("utf-8", "replace") for a in raw.split(b"\0")]
        if argv and argv[-1] == "":
            argv.pop()
        procs.append({"pid": int(entry), "comm": comm.strip(), "argv": argv, "start": start_time(stat)})
    return procs


def start_time(stat):
    """Field 22 of /proc/PID/stat (start time in clock ticks): a PID reused by another
    process has another start time, so a kill never hits the wrong process."""
    if not stat:
        return None
    try:
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (IndexError, ValueError):
        return None


def _title(argv):
    """What `ps` shows: a process that set its title (setproctitle) may pack it into argv[0]
    with spaces; its first word is the title."""
    return (argv[0].split(" ", 1)[0] if argv else "")


def find_leftovers(processes, names=(), argv_prefixes=(), own_pid=None):
    """Processes that are the engine: the comm (15 bytes, as the kernel keeps it) or the
    title exactly one of names, or argv starting with one of argv_prefixes word for word.
    Exact comparisons only: a shell, an editor or a grep mentioning the engine never
    matches."""
    comms = {n[:15] for n in names}
    titles = set(names)
    prefixes = [list(p) for p in argv_prefixes if p]
    found = []
    for proc in processes:
        if proc["pid"] in (own_pid, 1) or not proc["argv"]:
            continue
        title = _title(proc["argv"])
        by_name = proc["comm"] in comms or title in titles
        by_argv = any(proc["argv"][:len(p)] == p for p in prefixes)
        if by_name or by_argv:
            found.append({"pid": proc["pid"], "title": title or proc["comm"], "comm": proc["comm"],
                          "argv": proc["argv"], "start": proc["start"], "matched": "name" if by_name else "argv"})
    return found


def end_processes(found, proc_root="/proc", term_timeout=10.0, kill=os.kill, sleep=time.sleep):
    """SIGTERM each process by PID, SIGKILL what is still there after term_timeout.
    A PID whose start time changed is another process by now and is left alone.
    Returns [{pid, signal}] of what was sent."""
    sent = []

    def same(proc):
        stat = _read(os.path.join(proc_root, str(proc["pid"]), "stat"))
        # A zombie has ended; only its parent's wait() is missing.
        if not stat or stat.rsplit(")", 1)[1].split()[0] == "Z":
            return False
        return start_time(stat) == proc["start"]

    alive = [p for p in found if same(p)]
    for proc in alive:
        try:
            kill(proc["pid"], signal.SIGTERM)
            sent.append({"pid": proc["pid"], "signal": "TERM"})
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + term_timeout
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if same(p)]
        if alive:
            sleep(0.2)
    for proc in [p for p in alive if same(p)]:
        try:
            kill(proc["pid"], signal.SIGKILL)
            sent.append({"pid": proc["pid"], "signal": "KILL"})
        except ProcessLookupError:
            pass
    return sent

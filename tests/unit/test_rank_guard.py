"""The rank guard of topology vllm_ranks (module_utils/rank_guard.py): its beacon's replies, read
as data, and the program itself run as the units run it (its own file, the standard library only,
`python -I`), with a stand-in engine: a worker rank that dies takes the head down, a head that
restarts takes the worker rank down, a worker waits for its head, and a stop is a clean stop."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from ansible_collections.sparkctl.spark.plugins.filter import engine_gate as gate_filters
from ansible_collections.sparkctl.spark.plugins.module_utils import rank_guard as R

GEN = "0123456789abcdef"
# How long a condition a guard brings about may take on a loaded machine: a bound, not a measure.
WAIT_S = 60


def test_a_reply_round_trips():
    assert R.parse_reply(R.beacon_reply("head", 0, GEN, True)) == {
        "role": "head", "rank": 0, "generation": GEN, "running": True}
    assert R.parse_reply(R.beacon_reply("worker", 2, None, False))["generation"] is None


@pytest.mark.parametrize("data", [
    b"", b"HTTP/1.1 400 Bad Request\r\n\r\n", b"\xff\xfe", b"[]",
    json.dumps({"sparkctl_rank_guard": 2, "role": "head", "rank": 0, "generation": GEN, "running": True}).encode(),
    json.dumps({"sparkctl_rank_guard": 1, "role": "head", "rank": 1, "generation": GEN, "running": True}).encode(),
    json.dumps({"sparkctl_rank_guard": 1, "role": "head", "rank": 0, "generation": None, "running": True}).encode(),
    json.dumps({"sparkctl_rank_guard": 1, "role": "worker", "rank": True, "generation": GEN, "running": True}).encode(),
    json.dumps({"sparkctl_rank_guard": 1, "role": "worker", "rank": 1, "generation": "{{ x }}", "running": True}).encode(),
    json.dumps({"sparkctl_rank_guard": 1, "role": "worker", "rank": 1, "generation": GEN, "running": "yes"}).encode(),
    json.dumps({"sparkctl_rank_guard": 1, "role": "root", "rank": 1, "generation": GEN, "running": True}).encode(),
    json.dumps({"sparkctl_rank_guard": 1, "role": "worker", "rank": 1, "generation": GEN, "running": True,
                "extra": "x"}).encode(),
    R.beacon_reply("worker", 1, GEN, True) + b" " * R.MAX_REPLY_BYTES,
], ids=range(13))
def test_anything_but_the_guards_own_reply_is_no_answer(data):
    assert R.parse_reply(data) is None


def test_verdicts():
    worker = R.parse_reply(R.beacon_reply("worker", 1, GEN, True))
    assert R.head_verdict(worker, GEN) == "joined"
    assert R.head_verdict(worker, "f" * 16) == "left"
    assert R.head_verdict(R.parse_reply(R.beacon_reply("worker", 1, GEN, False)), GEN) == "left"
    assert R.head_verdict(None, GEN) == "silent"
    head = R.parse_reply(R.beacon_reply("head", 0, GEN, True))
    assert R.worker_verdict(head, GEN) == "same"
    assert R.worker_verdict(head, "f" * 16) == "restarted"
    assert R.worker_verdict(None, GEN) == "silent"
    # A worker's beacon where the head's should be is no head.
    assert R.worker_verdict(worker, GEN) == "silent"


def test_exec_argv_and_bad_usage():
    argv = R.exec_argv("worker", 1, "10.0.0.2:29590", ["10.0.0.1:29590"], ["vllm", "serve", "m"])
    assert argv == ["/usr/bin/python3", R.GUARD_SCRIPT, "worker", "--rank", "1", "--listen", "10.0.0.2:29590",
                    "--head", "10.0.0.1:29590", "--", "vllm", "serve", "m"]
    assert R.parse_endpoint("[fd00::1]:29590") == ("fd00::1", 29590)
    for bad in (["head", "--listen", "127.0.0.1:1", "--", "x"],
                ["worker", "--rank", "0", "--listen", "127.0.0.1:1", "--head", "127.0.0.1:2", "--", "x"],
                ["worker", "--rank", "1", "--listen", "127.0.0.1:99999", "--head", "127.0.0.1:2", "--", "x"],
                ["head", "--listen", "127.0.0.1:1", "--worker", "127.0.0.1:2"]):
        with pytest.raises(SystemExit) as err:
            R.main(bad)
        assert err.value.code == 2, bad


# --- the program, run as a unit runs it, with a stand-in engine that writes its pid and sleeps ---

# The stand-in engine, like vLLM's API server, starts a process of its own (vLLM's engine core and
# its workers) and writes both pids: "<engine> <its child>".
ENGINE = ("import os, subprocess, sys, time\n"
          "helper = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
          "open(sys.argv[1] + '.tmp', 'w').write('%d %d' % (os.getpid(), helper.pid))\n"
          "os.rename(sys.argv[1] + '.tmp', sys.argv[1])\n"
          "time.sleep(600)\n")


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Rank:
    """One guard process and its stand-in engine, with its stderr collected."""

    def __init__(self, tmp_path, script, role, rank, listen, peers, grace=5):
        self.pidfile = tmp_path / f"engine-{role}-{rank}-{time.monotonic_ns()}.pid"
        argv = [sys.executable, "-I", str(script)] + R.exec_argv(
            role, rank, f"127.0.0.1:{listen}", [f"127.0.0.1:{p}" for p in peers],
            [sys.executable, "-c", ENGINE, str(self.pidfile)], script=str(script), python="")[2:]
        argv[argv.index("--"):argv.index("--")] = ["--poll", "0.1", "--grace", str(grace), "--stop-seconds", "5"]
        self.lines = []
        self.proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)  # pylint: disable=consider-using-with
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stderr:
            self.lines.append(line)

    def log(self):
        return "".join(self.lines)

    def engine_pids(self):
        return [int(pid) for pid in self.pidfile.read_text().split()] if self.pidfile.exists() else []

    def engine_pid(self):
        return (self.engine_pids() or [None])[0]

    def wait_for(self, condition, what):
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            if condition():
                return
            if self.proc.poll() is not None and self.proc.returncode == 2:
                break
            time.sleep(0.05)
        raise AssertionError(f"{what}: not within {WAIT_S} s\n{self.log()}")

    def end(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=WAIT_S)
        finally:
            for pid in self.engine_pids():
                if _alive(pid):
                    os.kill(pid, signal.SIGKILL)


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie of a guard that has not been reaped yet counts as gone.
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "rank_guard.py"
    path.write_text(gate_filters.engine_gate_files()["guard_script_text"])
    return path


@pytest.fixture
def ranks():
    started = []
    yield started
    for rank in started:
        rank.end()


def _joined(head):
    return lambda: "joined generation" in head.log()


def _engines_up(*ranks_):
    """Each rank's stand-in engine and its child wrote their pids: a guard counts its engine as running
    from its start, before the engine's Python (slow on a loaded machine) wrote anything."""
    for rank in ranks_:
        rank.wait_for(lambda rank=rank: len(rank.engine_pids()) == 2, "the stand-in engine wrote its pids")


def _joined_pair(tmp_path, script, ranks):
    """A head and a worker guard on loopback, once the worker joined the head's generation and both
    engines wrote their pids."""
    head_port, worker_port = _free_port(), _free_port()
    head = Rank(tmp_path, script, "head", 0, head_port, [worker_port])
    worker = Rank(tmp_path, script, "worker", 1, worker_port, [head_port])
    ranks += [head, worker]
    head.wait_for(_joined(head), "the worker joined the head's generation")
    _engines_up(head, worker)
    return head, worker


def test_a_worker_rank_that_dies_takes_the_head_down(tmp_path, script, ranks):
    head, worker = _joined_pair(tmp_path, script, ranks)
    head_engine = head.engine_pids()
    worker_engine = worker.engine_pids()
    # The engine's main process alone is killed: the guard ends what it started (vLLM's engine core
    # and workers would otherwise hold the master port and the memory).
    os.kill(worker_engine[0], signal.SIGKILL)
    worker.wait_for(lambda: worker.proc.poll() is not None, "the worker's guard ended with its engine")
    assert worker.proc.returncode == 128 + signal.SIGKILL
    head.wait_for(lambda: head.proc.poll() is not None, "the head's guard ended")
    assert head.proc.returncode == R.EXIT_REJOIN, head.log()
    # Whichever the head saw first: the worker's guard saying its engine stopped, or its silence.
    assert "left generation" in head.log() or "has not answered" in head.log()
    assert not any(_alive(pid) for pid in head_engine + worker_engine)


def test_a_restarted_head_takes_the_worker_rank_down(tmp_path, script, ranks):
    head_port, worker_port = _free_port(), _free_port()
    # A grace long enough that the new head's other generation, not silence, is what ends the worker.
    worker = Rank(tmp_path, script, "worker", 1, worker_port, [head_port], grace=600)
    ranks.append(worker)
    # The worker waits for its head: no engine before the head's guard answers.
    time.sleep(0.5)
    assert worker.engine_pid() is None and worker.proc.poll() is None
    first = Rank(tmp_path, script, "head", 0, head_port, [worker_port])
    ranks.append(first)
    first.wait_for(_joined(first), "the worker joined the first head")
    _engines_up(first, worker)
    worker_engine = worker.engine_pids()
    first_engine = first.engine_pids()
    first.proc.send_signal(signal.SIGTERM)
    first.wait_for(lambda: first.proc.poll() is not None, "the first head stopped")
    assert first.proc.returncode == 0, first.log()
    assert not any(_alive(pid) for pid in first_engine)
    second = Rank(tmp_path, script, "head", 0, head_port, [worker_port])
    ranks.append(second)
    worker.wait_for(lambda: worker.proc.poll() is not None, "the worker's guard ended")
    assert worker.proc.returncode == R.EXIT_REJOIN
    assert "restarted" in worker.log()
    assert not any(_alive(pid) for pid in worker_engine)
    # The second head never saw the old worker join its generation: it waits, engine running.
    assert second.proc.poll() is None and "joined" not in second.log()


def test_a_stop_is_clean_and_ends_the_engine(tmp_path, script, ranks):
    _head, worker = _joined_pair(tmp_path, script, ranks)
    engine = worker.engine_pids()
    worker.proc.send_signal(signal.SIGTERM)
    worker.wait_for(lambda: worker.proc.poll() is not None, "the worker's guard stopped")
    assert worker.proc.returncode == 0 and not any(_alive(pid) for pid in engine)


def test_a_port_that_answers_something_else_is_no_head(tmp_path, script, ranks):
    """Another program on the head's port (or a forged reply) does not start the worker's engine."""
    with socket.socket() as impostor:
        impostor.bind(("127.0.0.1", 0))
        impostor.listen(8)
        port = impostor.getsockname()[1]

        def answer():
            while True:
                try:
                    conn, _ = impostor.accept()
                except OSError:
                    return
                with conn:
                    conn.sendall(R.beacon_reply("worker", 0, GEN, True))

        threading.Thread(target=answer, daemon=True).start()
        worker = Rank(tmp_path, script, "worker", 1, _free_port(), [port])
        ranks.append(worker)
        time.sleep(1.0)
        assert worker.engine_pid() is None and worker.proc.poll() is None

"""tests/bench/cpu_census.py: process accounting records decoded and each process placed on the
control node or a lab node by its ancestry (PIDs reused, parents still running)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "tests" / "bench" / "cpu_census.py"
_spec = importlib.util.spec_from_file_location("cpu_census", BENCH)
census = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(census)


def _record(pid, ppid, start, comm, ticks=0, elapsed=10.0):
    return census.RECORD.pack(0, census.ACCT_VERSION, 0, 0, 0, 0, pid, ppid, start, elapsed * census.AHZ,
                              ticks, 0, 0, 0, 0, 0, 0, 0, comm.encode())


def test_comp_t_mantissa_and_base_8_exponent():
    assert census.comp_t(250) == 2.5
    assert census.comp_t((1 << 13) | 100) == 8.0  # 100 << 3 ticks


def test_records_of_another_version_are_skipped(tmp_path):
    other = bytearray(_record(1, 0, 100, "init"))
    other[1] = 2
    path = tmp_path / "acct"
    path.write_bytes(bytes(other) + _record(2, 1, 100, "bash", ticks=50))
    assert [(r["pid"], r["comm"], r["cpu"]) for r in census.read_records(path)] == [(2, "bash", 0.5)]


def test_a_reused_pid_is_the_parent_that_was_alive_when_the_child_started():
    records = [
        {"pid": 7, "ppid": 1, "start": 100, "elapsed": 5.0, "cpu": 0.0, "comm": "molecule"},
        {"pid": 7, "ppid": 1, "start": 200, "elapsed": 50.0, "cpu": 0.0, "comm": "pytest"},
        {"pid": 9, "ppid": 7, "start": 210, "elapsed": 1.0, "cpu": 1.0, "comm": "ansible-playboo"},
    ]
    chain = census.ancestries(records)[2]
    assert [r["comm"] for r in chain] == ["ansible-playboo", "pytest"]


def test_places_by_the_container_shim_and_the_nodes_service():
    def chain(*names):
        return [{"comm": name} for name in names]

    shim, init = census.SHIM, "systemd"
    assert census.where(chain("python3", "sh", "sudo", "sshd", "sshd", init, shim)) == \
        ("lab node", "ssh sessions (module runs, pip, apt)")
    assert census.where(chain("raylet", "ray", init, shim)) == ("lab node", "ray")
    assert census.where(chain("ansible-playboo", "ansible-playboo", "python", "pytest", "bash")) == \
        ("control node", "pytest")
    assert census.where(chain("ansible-playboo", "molecule", "bash")) == ("control node", "molecule")
    assert census.where(chain("ruff", "bash")) == ("control node", "bash")


def test_the_report_counts_only_what_ended(tmp_path, capsys):
    path = tmp_path / "acct"
    path.write_bytes(_record(20, 10, 100, "python3", ticks=300) + _record(21, 5, 100, "ansible-playboo", ticks=100))
    live = [{"pid": 10, "ppid": 4, "start": 90, "elapsed": float("inf"), "cpu": 0.0, "comm": "sshd", "live": True},
            {"pid": 4, "ppid": 3, "start": 80, "elapsed": float("inf"), "cpu": 0.0, "comm": "systemd", "live": True},
            {"pid": 3, "ppid": 1, "start": 80, "elapsed": float("inf"), "cpu": 0.0, "comm": census.SHIM, "live": True}]
    census.report(path, live)
    out = capsys.readouterr().out
    assert out.startswith("2 processes, 4 CPU-s")
    assert "control node: 1 CPU-s (25 %)" in out
    assert "lab node: 3 CPU-s (75 %)" in out

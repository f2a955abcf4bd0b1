"""tests/bench/cpu_by_test.py: the control node's CPU of a lab test stage charged to the test case
during which each run the tests started began, its workers with it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "tests" / "bench"
sys.path.insert(0, str(BENCH))
_spec = importlib.util.spec_from_file_location("cpu_by_test", BENCH / "cpu_by_test.py")
by_test = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(by_test)


def _rec(pid, ppid, start, comm, cpu=0.0, elapsed=1.0):
    return {"pid": pid, "ppid": ppid, "start": start, "elapsed": elapsed, "cpu": cpu, "comm": comm}


def test_the_time_junit_does_not_count_goes_first_then_the_cases_end_to_end():
    ran = [("test_a", "x", 10.0), ("test_b", "y", 20.0)]
    assert by_test.windows(100, 50.0, ran) == [(120.0, "test_a", "x"), (130.0, "test_b", "y")]


def test_a_run_and_its_workers_go_to_the_case_it_started_in_and_nothing_else_counts():
    records = [
        _rec(5, 1, 100, "python", cpu=3.0, elapsed=50.0),           # the stage's pytest
        _rec(11, 5, 121, "ansible-playboo", cpu=2.0, elapsed=12.0),  # started in test_a's case
        _rec(12, 11, 131, "ansible-playboo", cpu=1.0),              # its worker, forked in test_b's time
        _rec(13, 5, 135, "ansible-playboo", cpu=4.0),               # started in test_b's case
        _rec(17, 5, 129, "python", cpu=0.5),                        # test_b's first moment, in whole seconds
        _rec(14, 1, 121, "ansible-playboo", cpu=9.0),               # another chain's run at the same time
        _rec(15, 99, 122, by_test.SHIM, cpu=0.0, elapsed=60.0),
        _rec(16, 15, 122, "python3", cpu=7.0),                      # on a node
    ]
    chains = by_test.ancestries(records)
    ran = [("test_a", "x", 10.0), ("test_b", "y", 20.0)]
    by_file, by_case, own = by_test.charge(records, chains, (100, 150), ran)
    assert dict(by_file) == {"test_a": 3.0, "test_b": 4.5}
    assert dict(by_case) == {("test_a", "x"): 3.0, ("test_b", "y"): 4.5}
    assert own == 3.0

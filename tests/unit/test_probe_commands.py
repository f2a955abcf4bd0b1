"""probe_commands runs every probe in order in one module run, retries a failing one as a
loop's until/retries would, and returns outcomes shaped like a command loop's results."""

from __future__ import annotations

import sys

from module_runner import run_module

from ansible_collections.sparkctl.spark.plugins.modules import probe_commands as module


def test_each_probe_runs_in_order_and_a_failing_one_is_retried():
    outcomes = {"a": [(0, "", "")], "b": [(255, "", "refused"), (255, "", "refused"), (0, "", "ok")], "c": [(1, "", "no")]}
    calls, sleeps = [], []

    def run(argv):
        calls.append(argv[0])
        return outcomes[argv[0]].pop(0)

    probes = [{"argv": ["a"], "item": {"peer": "p", "address": "1"}},
              {"argv": ["b"], "item": 2, "retries": 2, "delay": 3},
              {"argv": ["c"], "retries": 0}]
    results = module.run_probes(probes, run, sleep=sleeps.append)
    assert calls == ["a", "b", "b", "b", "c"] and sleeps == [3, 3]
    assert [(r["item"], r["rc"], r["attempts"]) for r in results] == [({"peer": "p", "address": "1"}, 0, 1), (2, 0, 3), (None, 1, 1)]
    assert results[1]["stderr"] == "ok" and results[2]["cmd"] == ["c"]


def test_retries_stop_at_the_bound():
    sleeps = []
    results = module.run_probes([{"argv": ["x"], "retries": 1, "delay": 0}], lambda argv: (255, "", "down"), sleep=sleeps.append)
    assert results[0]["attempts"] == 2 and results[0]["rc"] == 255 and sleeps == [0]


def test_the_module_runs_the_commands_and_changes_nothing(capsys):
    probes = [{"argv": [sys.executable, "-c", "import sys; sys.stderr.write('debug1: hi'); sys.exit(3)"], "item": "x"}]
    rc, result = run_module(module.main, {"probes": probes, "_ansible_check_mode": True}, capsys)
    assert rc == 0 and result["changed"] is False
    assert result["results"][0]["rc"] == 3 and result["results"][0]["stderr"] == "debug1: hi"
    assert result["results"][0]["item"] == "x"

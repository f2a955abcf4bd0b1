"""The fabric test on the two-node lab (roles/fabric_test, `sparkctl fabric-test`): iperf3 for real
over both veth cable halves, each alone, against the lab's minimum (inventories/lab: 1 Gbit/s).
Healthy, every half passes: the role's scenario shows it (molecule/fabric_test, on the twin
lab). Here, with one half shaped below the minimum (tc tbf on the head's side) and the other
taken down on the worker, one run of the wrapper fails and names each half with what is wrong
with it; the lab is put back as found (qdisc removed, link up, a ping over the half), and verify
with the fabric check on passes every half."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from labrun import LAB_INVENTORY_DIR, REPO, node_exec

pytestmark = pytest.mark.lab

HEAD, WORKER = "spark1", "spark2"
HALF0, HALF1 = "enp1s0f1np1", "enP2p1s0f1np1"


def _fabric_test(report_dir):
    env = dict(os.environ, SPARKCTL_REPORT_DIR=str(report_dir), ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
    proc = subprocess.run([sys.executable, "-m", "sparkctl", "fabric-test", "-i", str(LAB_INVENTORY_DIR), "--json"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    report = json.loads((report_dir / "fabric-test.json").read_text())
    return proc, json.loads(proc.stdout), report


def test_a_slow_and_a_down_half_are_named(lab_up, report_dir):
    (report_dir / "fabric-test.json").unlink(missing_ok=True)
    # The head sends: shaping its side of half 0 slows what the worker receives there.
    node_exec(HEAD, "tc", "qdisc", "add", "dev", HALF0, "root", "tbf", "rate", "200mbit", "burst", "64kb",
              "latency", "100ms")
    try:
        node_exec(WORKER, "ip", "link", "set", HALF1, "down")
        try:
            proc, doc, report = _fabric_test(report_dir)
        finally:
            node_exec(WORKER, "ip", "link", "set", HALF1, "up")
    finally:
        node_exec(HEAD, "tc", "qdisc", "del", "dev", HALF0, "root")
    # The other tests find the cable as it was: the half answers again.
    node_exec(HEAD, "ping", "-c", "1", "-W", "5", "-I", HALF1, "192.168.101.11")

    assert doc["exit_code"] == 1
    slow, down = sorted(report["results"], key=lambda r: r["half"])
    assert not report["ok"] and not slow["ok"] and not down["ok"]
    assert 0 < slow["gbps"] < 1
    assert slow["problem"].startswith(f"half 0 {HALF0} 192.168.100.10 -> {WORKER} {HALF0} 192.168.100.11: ")
    assert "below the minimum 1 Gbit/s (fabric_test_min_gbps)" in slow["problem"]
    assert down["gbps"] is None
    assert down["problem"].startswith(f"half 1 {HALF1} 192.168.101.10 -> {WORKER} {HALF1} 192.168.101.11: no traffic (")
    # The run's failure says the same, naming both halves.
    failures = " ".join(str(f) for stage in doc["stages"] for f in stage.get("failures") or [])
    assert "half 0" in failures and "half 1" in failures, failures


def test_verify_with_the_fabric_check_on_reports_every_half(lab_up, run_site, report_dir):
    run = run_site("-e", "verify_fabric_test=true", playbook="playbooks/verify.yml")
    assert run.rc == 0, run.output[-4000:]
    report = json.loads((report_dir / "verify.json").read_text())
    rows = [row for row in report["rows"] if row["what"].startswith("fabric ")]
    assert [(row["mark"], row["what"]) for row in rows] == [("PASS", f"fabric {WORKER} half 0"),
                                                             ("PASS", f"fabric {WORKER} half 1")]
    assert report["fabric"]["tool"] == "iperf3" and report["fabric"]["ok"] is True
    assert f"PASS fabric {WORKER} half 1: " in run.output

"""The verify stage on the two-node lab: it passes on the healthy cluster (every
probe check incl. the parsers, the startup facts, memory, version parity) without
changing anything, and fails with the right message when the stand-in is told to
hang after /health (the wedge), to answer the smoke prompt wrongly, when one
node's (stand-in) nvidia-smi reports a different driver version, or when a node's
firewall table was emptied or its unit stopped by hand."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from labrun import LAB_INVENTORY_DIR, REPO, node_exec, standin

pytestmark = pytest.mark.lab

HOSTS = ("spark1", "spark2")
GPU_JSON = "/etc/sparklab/gpu.json"
DEPLOYMENT = "/etc/sparkctl/deployment.json"


def _records():
    return {host: json.loads(node_exec(host, "cat", DEPLOYMENT).stdout) for host in HOSTS}


@pytest.fixture(scope="module")
def served(site_converged, run_site):
    # Every stage, end to end, ran once for the session (conftest.py: site.yml ends with
    # verify); the serve stage again brings back whatever a module before this one stopped.
    run = run_site(playbook="playbooks/serve.yml")
    assert run.rc == 0, run.output[-6000:]
    return run


def _verify(run_site, *extra):
    return run_site(*extra, playbook="playbooks/verify.yml")


def _report(report_dir):
    return json.loads((report_dir / "verify.json").read_text())


def test_verify_passes_on_the_healthy_lab_and_changes_nothing(served, run_site, report_dir):
    run = _verify(run_site)
    assert run.rc == 0, run.output[-5000:]
    assert all(run.changed(host) == 0 for host in HOSTS), run.changed_tasks("spark1") + run.changed_tasks("spark2")
    report = _report(report_dir)
    assert report["status"] == "passed", report["failures"] + report["warnings"]
    checks = {c["name"]: c for c in report["checks"]}
    assert set(checks) == {"health", "auth", "smoke", "chat", "generation", "reasoning", "tools"}
    assert all(c["ok"] for c in checks.values()), checks
    startup = {f["name"]: f for f in report["startup"]}
    # The stand-in sizes its KV cache from the checkpoint's config as vLLM does: 1 GiB // (16-token page x
    # 512 B x 40 layers) = 3,276 blocks.
    assert startup["kv_cache_tokens"]["value"] == 52416 and startup["kv_cache_tokens"]["ok"]
    assert startup["max_concurrency"]["value"] == pytest.approx(1.28)
    # The fit estimate the checkpoint stage kept, against the engine's own figures: each rank's weights and
    # the KV tokens agree within 10 % (two computations of the same checkpoint, not one copied from the other).
    fit_rows = {(row["item"], row["where"]): row for row in report["fit"]["rows"]}
    assert set(fit_rows) == {("weights_per_rank", "head"), ("weights_per_rank", "192.168.100.11"), ("kv_tokens", "head")}
    assert all(row["status"] == "ok" for row in fit_rows.values()), fit_rows
    # One "Model loading took" line per rank: the head's and the worker's (Ray-forwarded).
    assert len(startup["model_loading_gib"]["matched_values"]) == 2
    assert {row["host"] for row in report["memory"]["rows"]} == set(HOSTS)
    items = {row["item"] for row in report["parity"]["rows"]}
    assert {"driver", "cuda", "venv_lock_sha256", "packages.sparklab-engine", "packages.ray"} <= items
    assert report["parity"]["mismatches"] == []
    assert {row["host"]: row["status"] for row in report["firewall"]["rows"]} == {"spark1": "ok", "spark2": "ok"}
    # Every engine unit the profile renders on each serving node runs (Ray's head and the engine, Ray's worker).
    assert {row["host"]: row["status"] for row in report["units"]["rows"]} == {"spark1": "ok", "spark2": "ok"}
    assert "verify PASSED" in run.output
    # The deployment the session's converge recorded, verified again: the same record on every node.
    records = _records()
    assert records["spark1"] == records["spark2"] == report["deployment"]


def test_a_wedged_engine_fails_verify_though_health_answers(served, run_site, report_dir):
    standin("faults", {"hang_after_health": True})
    try:
        run = _verify(run_site, "-e", "verify_generation_deadline=5")
    finally:
        standin("faults", {"reset": True})
    assert run.rc != 0
    checks = {c["name"]: c for c in _report(report_dir)["checks"]}
    assert checks["health"]["ok"] is True
    assert checks["generation"]["ok"] is False
    assert "wedged" in checks["generation"]["message"]
    assert "wedged" in run.output


def test_a_wrong_smoke_answer_fails_verify(served, run_site, report_dir):
    recorded = _records()
    standin("faults", {"wrong_answer": True})
    try:
        # Another profile content is another deployment: a failed verify must not record it.
        run = _verify(run_site, "-e", json.dumps({"spark_profile_overrides": {"description": "not recorded"}}))
    finally:
        standin("faults", {"reset": True})
    assert run.rc != 0
    assert _records() == recorded
    report = _report(report_dir)
    assert report["deployment"] is None
    smoke = next(c for c in report["checks"] if c["name"] == "smoke")
    assert smoke["ok"] is False and "Kyoto" in smoke["message"] and "Tokyo" in smoke["message"]
    assert any("Kyoto" in line for line in report["failures"])


def test_a_node_with_another_driver_fails_parity_with_a_table(served, run_site, report_dir):
    node_exec("spark2", "sh", "-c", f"mkdir -p /etc/sparklab && echo '{{\"driver_version\": \"580.82.09\"}}' > {GPU_JSON}")
    try:
        run = _verify(run_site)
    finally:
        node_exec("spark2", "rm", "-f", GPU_JSON)
    assert run.rc != 0
    report = _report(report_dir)
    assert "driver" in report["parity"]["mismatches"]
    row = next(r for r in report["parity"]["rows"] if r["item"] == "driver")
    assert row["values"] == {"spark1": "580.95.05", "spark2": "580.82.09"}
    # The failure carries the table: the item and both hosts' values.
    assert "580.82.09" in run.output and "580.95.05" in run.output
    again = _verify(run_site)
    assert again.rc == 0, again.output[-3000:]


def test_a_firewall_table_emptied_or_its_unit_stopped_by_hand_fails_verify(served, run_site, report_dir):
    # Rules deleted from the table (the firewall's watcher loads the file again only when the
    # whole table is deleted), and the firewall unit stopped (its stop deletes the table).
    node_exec("spark2", "nft", "flush", "chain", "inet", "sparkctl", "input")
    node_exec("spark1", "systemctl", "stop", "sparkctl-firewall.service")
    try:
        run = _verify(run_site)
        report = _report(report_dir)
    finally:
        repair = run_site("--tags", "firewall")
    assert run.rc != 0
    rows = {row["host"]: row for row in report["firewall"]["rows"]}
    assert rows["spark1"]["status"] == rows["spark2"]["status"] == "fail", rows
    assert "table inet sparkctl is not loaded" in rows["spark1"]["message"]
    assert "differs from /etc/sparkctl/firewall.nft" in rows["spark2"]["message"]
    assert all("--tags firewall" in row["message"] for row in rows.values())
    assert any(line.startswith("firewall spark2:") for line in report["failures"])
    assert repair.rc == 0, repair.output[-3000:]
    again = _verify(run_site)
    assert again.rc == 0, again.output[-3000:]
    assert {row["status"] for row in _report(report_dir)["firewall"]["rows"]} == {"ok"}


def test_sparkctl_verify_prints_the_table_and_a_json_document(served, report_dir):
    env = dict(os.environ, SPARKCTL_REPORT_DIR=str(report_dir), ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
    sparkctl = [str(sys.executable), "-m", "sparkctl"]
    proc = subprocess.run([*sparkctl, "verify", "-i", str(LAB_INVENTORY_DIR), "--json"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    doc = json.loads(proc.stdout)
    assert proc.returncode == 0 and doc["exit_code"] == 0, proc.stderr[-3000:]
    assert doc["reports"]["verify"]["status"] == "passed"
    shown = subprocess.run([*sparkctl, "report", "verify"], cwd=REPO, env=env, capture_output=True, text=True,
                           timeout=60)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "PASS" in shown.stdout and "generation" in shown.stdout

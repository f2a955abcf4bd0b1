"""`sparkctl` against the two-node lab, as a user types it. Only read-only stages
run here (doctor / preflight, `--check`): the wrapper never changes the lab."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import labrun
from labrun import LAB_INVENTORY_DIR, REPO, management_network, node_exec
from sparkctl.stages import up_stages

pytestmark = pytest.mark.lab

SCHEMA = json.loads((REPO / "sparkctl" / "schema" / "run.schema.json").read_text())
SPARKCTL = Path(sys.executable).with_name("sparkctl")
# On the lab's management network (172.30.77.99 in the default lab), assigned to no node:
# nothing answers there.
UNUSED_MGMT_ADDRESS = str(management_network()[99])
# The lab the session runs against (labrun: $SPARKLAB_INVENTORY, else inventories/lab).
INVENTORY = str(LAB_INVENTORY_DIR)


@pytest.fixture
def sparkctl(report_dir):
    """Run the installed console script; returns (exit code, stdout, stderr)."""

    def _run(*argv: str) -> subprocess.CompletedProcess:
        env = dict(os.environ, SPARKCTL_REPORT_DIR=str(report_dir), COLUMNS="200", NO_COLOR="1")
        env.pop("HF_TOKEN", None)
        return subprocess.run([str(SPARKCTL), *argv], cwd=REPO, env=env, capture_output=True, text=True, timeout=900)

    return _run


def json_run(sparkctl, *argv: str) -> dict:
    proc = sparkctl("--json", *argv)
    doc = json.loads(proc.stdout)
    jsonschema.validate(doc, SCHEMA)
    assert doc["exit_code"] == proc.returncode, proc.stderr
    return doc


def write_inventory(tmp_path: Path, mutate) -> Path:
    """A copy of the lab inventory, changed by mutate, that still finds the lab's key and profiles."""
    return labrun.write_inventory(tmp_path / "inv", mutate).parent


def spark2(children) -> dict:
    return children["spark_workers"]["hosts"]["spark2"]


def test_the_console_script_is_installed():
    assert SPARKCTL.is_file(), f"{SPARKCTL} missing: pip install -e . (tests/bootstrap.sh does)"


def test_doctor_passes_with_both_tables(lab_up, sparkctl):
    proc = sparkctl("doctor", "-i", INVENTORY)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line.replace("│", " ").split() for line in proc.stdout.splitlines()]
    assert "preflight: ok in" in proc.stdout
    for host in ("localhost", "spark1", "spark2"):
        row = next(r for r in rows if r and r[0] == host)
        assert row[2:5] == ["0", "0", "0"], row  # changed, failed, unreachable
    assert "Preflight: OK" in proc.stdout
    assert any(r[:3] == ["gpu.driver", "pass", "580.95.05"] for r in rows)


def test_doctor_json_validates_against_the_schema(lab_up, sparkctl):
    doc = json_run(sparkctl, "doctor", "-i", INVENTORY)
    assert doc["exit_code"] == 0
    [stage] = doc["stages"]
    assert (stage["name"], stage["status"], stage["failures"]) == ("preflight", "successful", [])
    assert set(stage["stats"]) == {"localhost", "spark1", "spark2"}
    assert Path(stage["log"]).is_file()
    assert doc["reports"]["preflight"]["ok"] is True
    assert set(doc["reports"]["preflight"]["hosts"]) == {"spark1", "spark2"}


def test_bad_inventory_exits_2_with_the_problem(lab_up, sparkctl, tmp_path):
    inventory = write_inventory(tmp_path, lambda c: spark2(c)["spark_link"][0].update(address="192.168.100.10/24"))
    proc = sparkctl("doctor", "-i", str(inventory))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "localhost failed at task Check groups, link plan" in proc.stdout
    assert "spark2: spark_link[0].address 192.168.100.10 is already used by spark1" in proc.stdout
    doc = json_run(sparkctl, "doctor", "-i", str(inventory))
    # Refused on the control node: no lab node was touched.
    assert set(doc["stages"][0]["stats"]) == {"localhost"}
    assert doc["stages"][0]["exit_code"] == 2


def test_unreachable_host_exits_3(lab_up, sparkctl, tmp_path):
    inventory = write_inventory(tmp_path, lambda c: spark2(c).update(ansible_host=UNUSED_MGMT_ADDRESS))
    doc = json_run(sparkctl, "doctor", "-i", str(inventory))
    assert doc["exit_code"] == 3
    [stage] = doc["stages"]
    assert stage["stats"]["spark2"]["unreachable"] == 1
    [failure] = stage["failures"]
    assert (failure["host"], failure["kind"]) == ("spark2", "unreachable")
    assert UNUSED_MGMT_ADDRESS in failure["msg"]


def test_a_failing_stage_stops_up(lab_up, sparkctl):
    # --check: even if preflight passed by mistake, no later stage would change the lab.
    argv = ("up", "--check", "-i", INVENTORY, "-e", "preflight_driver_min_major=999")
    doc = json_run(sparkctl, *argv)
    assert doc["exit_code"] == 1
    preflight, *later = doc["stages"]
    assert (preflight["name"], preflight["status"], preflight["exit_code"]) == ("preflight", "failed", 1)
    assert {f["host"] for f in preflight["failures"]} == {"spark1", "spark2"}
    assert all("gpu.driver: driver 580.95.05 is older than 999" in f["msg"] for f in preflight["failures"])
    # Every stage site.yml imports after preflight, none of them run.
    present = list(up_stages(REPO)[1:])
    assert [s["name"] for s in later] == present
    assert all(s["status"] == "not_run" and s["artifact_dir"] is None for s in later)
    assert doc["reports"]["preflight"]["ok"] is False

    proc = sparkctl(*argv)
    assert proc.returncode == 1
    assert "spark2 failed at task" in proc.stdout
    assert "full log: " in proc.stdout
    assert f"stopped: not run: {', '.join(present)}" in proc.stdout


def test_provision_check_on_the_converged_lab_changes_nothing(lab_up, sparkctl):
    doc = json_run(sparkctl, "provision", "--check", "-i", INVENTORY)
    assert doc["exit_code"] == 0, doc["stages"][0]["failures"]
    stats = doc["stages"][0]["stats"]
    assert {host: counts["changed"] for host, counts in stats.items()} == {"localhost": 0, "spark1": 0, "spark2": 0}


def test_api_key_is_shown_on_request_and_only_on_stdout(lab_up, sparkctl):
    proc = sparkctl("api-key", "-i", INVENTORY)
    assert proc.returncode == 0, proc.stderr[-3000:]
    key = proc.stdout.strip()
    assert len(key) >= 32 and proc.stdout.count("\n") == 1
    on_head = node_exec("spark1", "cat", "/etc/sparkctl/api-key.env").stdout.strip()
    assert on_head == f"VLLM_API_KEY={key}"
    assert key not in proc.stderr
    # Not in this run's artifacts either (the newest api_key run).
    runs = sorted((REPO / ".sparkctl" / "runner" / "artifacts").glob("api_key-*"), key=lambda p: p.stat().st_mtime)
    assert runs, "no artifacts of the api_key stage"
    for path in runs[-1].rglob("*"):
        if path.is_file():
            assert key.encode() not in path.read_bytes(), path

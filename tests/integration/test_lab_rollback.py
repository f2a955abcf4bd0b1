"""Deployment history and rollback on the two-node lab, through `sparkctl` as a user types it.

The records are made by engine-argument changes (spark_profile_overrides): each is a new
deployment (another engine configuration and profile digest) that costs an engine restart, not
a venv install or a download. From the served lab-standin (record A):
  1. a good change (one more line in engine.env, nothing else) is verified and recorded (B), with
     one boot of the engine;
  2. a broken change (the stand-in's KV cache shrunk below the profile's kv_cache_tokens minimum:
     the engine serves, verify fails) makes `sparkctl up` roll back to B by itself, say so and
     exit 1;
  3. a broken runtime upgrade (the engine pinned to sparklab-engine 0.3.2, a release whose every
     boot dies after loading): the runtime stage builds its venv beside the serving one, the serve
     stage fails, and `sparkctl up` verifies the cluster after it and rolls back to B by itself:
     B's venv serves again, the new one stays built;
  4. `sparkctl rollback` (the previous distinct deployment) returns to A;
  5. a record whose runtime is gone from the nodes is refused before any change.
Around them, what a node or a history file holds is data: a template in the head's checkpoint
manifest fails verify (nothing recorded, nothing run), and a history record edited to hold one is
refused by `sparkctl rollback` before any playbook runs.
Each step's time goes in the session's report table. The history is the test's own directory
($SPARKCTL_DEPLOYMENT_DIR), so the steps' records are the only ones.

Its own marker (`rollback`): five engine restarts that change the lab, placed by the suite's
chain."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from labrun import LAB_INVENTORY_DIR, REPO, VENV_ROOT, node_exec, serving_venv, standin_version

pytestmark = [pytest.mark.lab, pytest.mark.rollback]

HOSTS = ("spark1", "spark2")
RECORD = "/etc/sparkctl/deployment.json"
# Only engine.env changes: Ray restarts (its raylets read the file) and the engine unit, PartOf
# Ray's head unit, with it; engine_service must not boot it a second time.
GOOD = {"spark_profile_overrides": {"engine": {"env": {"SPARKLAB_ENGINE_TTFT_S": "0.1"}}}}
# 1 MiB of KV per token: the stand-in's 1 GiB pool holds 1024 tokens, under the profile's
# kv_cache_tokens minimum (4096, on_mismatch: fail); max_model_len 1024 still fits, so the
# engine starts and answers, and only verify sees the fault.
BROKEN = {"spark_profile_overrides": {"engine": {"args": {"max_num_seqs": 3, "max_model_len": 1024},
                                                 "env": {"SPARKLAB_ENGINE_KV_BYTES_PER_TOKEN": "1048576"}}}}
# A release of the stand-in whose every boot dies after loading (tests/lab/engine/_build/sparklab_build.py,
# RELEASE_DEFECTS): the serve stage's health wait fails (systemd's start limit).
BROKEN_RELEASE = "0.3.2"
BROKEN_UPGRADE = {"spark_profile_overrides": {"runtime": {"venv": {"packages": [f"sparklab-engine=={BROKEN_RELEASE}"]}}}}


@pytest.fixture(scope="module")
def sparkctl(report_dir, tmp_path_factory, result_table):
    """`python -m sparkctl` of this checkout against the lab, the history in a directory of the
    module's own; each call's time goes in the report table. Returns (CompletedProcess, seconds)."""
    history = tmp_path_factory.mktemp("deployments")
    table = result_table("rollback (tests/integration/test_lab_rollback.py)", ["step", "rc", "seconds"])

    def _run(step: str, *argv: str) -> subprocess.CompletedProcess:
        env = dict(os.environ, SPARKCTL_REPORT_DIR=str(report_dir), SPARKCTL_DEPLOYMENT_DIR=str(history),
                   COLUMNS="200", NO_COLOR="1")
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "sparkctl", *argv, "-i", str(LAB_INVENTORY_DIR)], cwd=REPO,
                              env=env, capture_output=True, text=True, timeout=1800)
        table.append({"step": step, "rc": proc.returncode, "seconds": f"{time.monotonic() - t0:.0f}"})
        return proc

    _run.history = history
    return _run


def node_records() -> list[dict]:
    return [json.loads(node_exec(host, "cat", RECORD).stdout) for host in HOSTS]


def served_id() -> str:
    ids = {record["deployment_id"] for record in node_records()}
    assert len(ids) == 1, ids
    return ids.pop()


def history(sparkctl) -> list[dict]:
    proc = sparkctl("history", "history", "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def node_write(host: str, path: str, text: str) -> None:
    """Replace the content of path on host in place (its owner and mode stay)."""
    node_exec(host, "python3", "-c", "import sys; open(sys.argv[1], 'w').write(sys.argv[2])", path, text)


def engine_started_at() -> str:
    return node_exec("spark1", "systemctl", "show", "-p", "ActiveEnterTimestampMonotonic", "--value",
                     "sparkctl-engine.service").stdout.strip()


def test_a_broken_change_rolls_back_by_itself_and_rollback_returns_to_an_older_record(site_converged, sparkctl,
                                                                                      report_dir):
    proc = sparkctl("verify (records A)", "verify")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    first = served_id()

    # The head's checkpoint manifest is written where the engine's service user writes: a template
    # in its commit fails verify, naming the file and the field, records nothing and runs nothing.
    manifest = f"{history(sparkctl)[0]['reproduce']['spark_checkpoint_dir']}/.sparkctl-manifest.json"
    original = node_exec("spark1", "cat", manifest).stdout
    marker = sparkctl.history / "ran-on-the-control-node"
    hostile = "{{ lookup('pipe', 'touch %s') }}" % marker
    node_write("spark1", manifest, json.dumps(dict(json.loads(original), commit=hostile)))
    try:
        proc = sparkctl("verify refuses a template in the manifest", "verify")
    finally:
        node_write("spark1", manifest, original)
    said = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 1, said[-4000:]
    assert f"{manifest}: commit: " in said and "is not a 40-hex-digit git commit" in said, said[-4000:]
    assert not marker.exists()
    assert [r["deployment_id"] for r in history(sparkctl)] == [first]

    since = node_exec("spark1", "date", "+%Y-%m-%d %H:%M:%S").stdout.strip()
    proc = sparkctl("good change (B)", "up", "--tags", "serve,verify", "-e", json.dumps(GOOD))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    journal = node_exec("spark1", "journalctl", "-u", "sparkctl-engine.service", "--since", since, "--no-pager",
                        "-o", "cat").stdout
    assert journal.count("(lab stand-in, NOT vLLM): serving") == 1, journal[-3000:]
    second = served_id()
    assert second != first
    assert [r["deployment_id"] for r in history(sparkctl)] == [second, first]

    proc = sparkctl("broken change, rolled back by itself", "up", "--tags", "serve,verify", "-e", json.dumps(BROKEN))
    said = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 1, said[-4000:]
    assert f"ROLLING BACK to deployment {second[7:15]}" in said and "ROLLED BACK: the cluster serves deployment" in said
    # The nodes serve B again, the broken configuration is gone from the engine's environment, and
    # the failed verify's report stays, naming the fault.
    assert served_id() == second
    environ = node_exec("spark1", "sh", "-c", "cat /proc/$(systemctl show -p MainPID --value "
                        "sparkctl-engine.service)/environ | tr '\\0' '\\n'").stdout
    assert "SPARKLAB_ENGINE_ROLE=standin" in environ and "SPARKLAB_ENGINE_KV_BYTES_PER_TOKEN" not in environ
    failed = json.loads((report_dir / "verify-failed.json").read_text())
    assert failed["status"] == "failed" and any("kv_cache_tokens" in f for f in failed["failures"]), failed["failures"]
    assert [r["deployment_id"] for r in history(sparkctl)] == [second, first]  # the broken one was never recorded

    # A runtime upgrade whose engine never comes up: its venv is built beside B's, serve fails, `up`
    # verifies the cluster and rolls back to B by itself, B's venv serving again.
    serving = {host: serving_venv(host) for host in HOSTS}
    since = node_exec("spark1", "date", "+%Y-%m-%d %H:%M:%S").stdout.strip()
    proc = sparkctl(f"broken upgrade (engine {BROKEN_RELEASE}), rolled back by itself", "up", "--tags", "runtime,serve,verify",
                    "-e", json.dumps(BROKEN_UPGRADE))
    said = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 1, said[-4000:]
    assert "serve failed after the serve stage started: verifying the cluster" in said, said[-4000:]
    assert f"ROLLING BACK to deployment {second[7:15]}" in said and "ROLLED BACK: the cluster serves deployment" in said
    journal = node_exec("spark1", "journalctl", "-u", "sparkctl-engine.service", "--since", since, "--no-pager",
                        "-o", "cat").stdout
    assert f"release {BROKEN_RELEASE} carries the defect 'crash-during-boot'" in journal, journal[-3000:]
    assert served_id() == second
    for host in HOSTS:
        assert serving_venv(host) == serving[host], host
        assert standin_version(host, serving[host]) == "0.3.0", host
        built = [venv for venv in node_exec(host, "ls", VENV_ROOT).stdout.split() if f"{VENV_ROOT}/{venv}" != serving[host]
                 and standin_version(host, f"{VENV_ROOT}/{venv}", check=False) == BROKEN_RELEASE]
        assert len(built) == 1, (host, built)  # beside, kept for a retry
    failed = json.loads((report_dir / "verify-failed.json").read_text())
    assert failed["status"] == "failed" and failed["intended"]["profile"]["sha256"] != \
        history(sparkctl)[0]["profile"]["sha256"], failed
    assert [r["deployment_id"] for r in history(sparkctl)] == [second, first]

    proc = sparkctl("rollback to A", "rollback")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert served_id() == first

    # A record whose runtime is gone from the nodes: refused before any change.
    gone = dict(history(sparkctl)[-1])
    # An id of the record's shape (a venv's lock hash is bare hex, an image's id a digest).
    gone["runtime"] = dict(gone["runtime"], id=("" if gone["runtime"]["kind"] == "venv" else "sha256:") + "0" * 64)
    gone["recorded_at"] = "2000-01-01T00:00:00Z"
    sys.path.insert(0, str(REPO / "collections"))
    from ansible_collections.sparkctl.spark.plugins.module_utils.deployment import deployment_id, history_name

    gone["deployment_id"] = deployment_id(gone)
    directory = next(sparkctl.history.iterdir())
    (directory / history_name(gone)).write_text(json.dumps(gone))
    before = engine_started_at()
    proc = sparkctl("rollback refused (runtime gone)", "rollback", gone["deployment_id"][7:19])
    said = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 1, said[-4000:]
    assert "the venv of the recorded runtime is not the recorded one" in said and "nothing was changed" in said
    assert engine_started_at() == before and served_id() == first

    # A history record edited to hold a template (its id made again, so it names a deployment of its
    # own): refused by the wrapper with the field named, before any playbook runs.
    edited = dict(history(sparkctl)[-1], recorded_at="2000-01-02T00:00:00Z")
    edited["checkpoint"] = dict(edited["checkpoint"], commit=hostile)
    edited["deployment_id"] = deployment_id(edited)
    (directory / history_name(edited)).write_text(json.dumps(edited))
    proc = sparkctl("rollback refused (a template in the record)", "rollback", edited["deployment_id"][7:19])
    said = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 2, said[-4000:]
    assert "checkpoint.commit: " in said and "nothing was run" in said and history_name(edited) in said
    assert not marker.exists()
    assert engine_started_at() == before and served_id() == first

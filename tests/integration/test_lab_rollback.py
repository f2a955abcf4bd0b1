"""Deployment history, runtime upgrades and rollback on the two-node lab, through `sparkctl` as a
user types it.

From the served lab-standin (record A, the stand-in engine 0.3.0 in the venv of its runtime lock):
  1. a pin bump (sparklab-engine 0.3.1, the stand-in's second wheel, through spark_profile_overrides
     so the lab profile stays as it is) is built by the runtime stage in a new venv beside the
     serving one while the engine keeps serving (the API, polled throughout, never down); the serve
     stage then restarts the engine and Ray from the new venv, the engine booting once and the API
     down only for that restart (one window, its length in the report table); verify records it (B);
  2. a broken change (the stand-in's KV cache shrunk below the profile's kv_cache_tokens minimum:
     the engine serves, verify fails) makes `sparkctl up` roll back to B by itself, say so and
     exit 1;
  3. a broken runtime upgrade (the engine pinned to sparklab-engine 0.3.2, a release whose every
     boot dies after loading): the runtime stage builds its venv beside the serving one, the serve
     stage fails, and `sparkctl up` verifies the cluster after it and rolls back to B by itself:
     B's venv serves again, and the broken one, which never passed verify, is the venv that
     engine_venv_keep (2: B's and A's) removes;
  4. `sparkctl rollback` (the previous distinct deployment) returns to A: A's venv serves again with
     nothing installed, the API down once, and B's venv stays for another switch (engine_venv_keep);
  5. a record whose runtime is gone from the nodes is refused before any change.
Around them, what a node or a history file holds is data: a template in the head's checkpoint
manifest fails verify (nothing recorded, nothing run), and a history record edited to hold one is
refused by `sparkctl rollback` before any playbook runs.
Each step's time (and the API's down windows where the step watches them) goes in the session's
report table. The history is the test's own directory ($SPARKCTL_DEPLOYMENT_DIR), so the steps'
records are the only ones.

Its own marker (`rollback`): venv installs and engine restarts that change the lab, placed by the
suite's chain."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest
from labrun import (LAB_INVENTORY_DIR, REPO, VENV_ROOT, HealthWatch, node_exec, served_standin_version, serving_venv,
                    standin_version, unit_started)

pytestmark = [pytest.mark.lab, pytest.mark.rollback]

HOSTS = ("spark1", "spark2")
RECORD = "/etc/sparkctl/deployment.json"
OLD, NEW = "0.3.0", "0.3.1"
ENGINE_UNIT = "sparkctl-engine.service"
RAY_UNITS = {"spark1": "sparkctl-ray-head.service", "spark2": "sparkctl-ray-worker.service"}
# roles/ray_cluster's recovery of a degraded cluster, as the wrapper lists the task: a planned
# restart from a new runtime is not one.
RECOVERY = "Say why the cluster is being recovered"


def pinned(version: str, **overrides) -> dict:
    """Extra vars serving the stand-in release `version` (its own runtime lock), with further profile overrides."""
    return {"spark_profile_overrides": {"runtime": {"venv": {"packages": [f"sparklab-engine=={version}"]}}, **overrides}}


# 1 MiB of KV per token: the stand-in's 1 GiB pool holds 1024 tokens, under the profile's
# kv_cache_tokens minimum (4096, on_mismatch: fail); max_model_len 1024 still fits, so the
# engine starts and answers, and only verify sees the fault. B's pin stays: only the engine changes.
BROKEN = pinned(NEW, engine={"args": {"max_num_seqs": 3, "max_model_len": 1024},
                             "env": {"SPARKLAB_ENGINE_KV_BYTES_PER_TOKEN": "1048576"}})
# A release of the stand-in whose every boot dies after loading (tests/lab/engine/_build/sparklab_build.py,
# RELEASE_DEFECTS): the serve stage's health wait fails (systemd's start limit).
BROKEN_RELEASE = "0.3.2"
BROKEN_UPGRADE = pinned(BROKEN_RELEASE)


@pytest.fixture(scope="module")
def sparkctl(report_dir, tmp_path_factory, result_table):
    """`python -m sparkctl` of this checkout against the lab, the history in a directory of the
    module's own; each call's time goes in the report table. Returns (CompletedProcess, seconds)."""
    history = tmp_path_factory.mktemp("deployments")
    table = result_table("rollback (tests/integration/test_lab_rollback.py)", ["step", "rc", "seconds", "API down"])

    def _run(step: str, *argv: str, watch: HealthWatch | None = None) -> subprocess.CompletedProcess:
        """One wrapper call; with `watch`, the API is polled while it runs (its windows in the table)."""
        env = dict(os.environ, SPARKCTL_REPORT_DIR=str(report_dir), SPARKCTL_DEPLOYMENT_DIR=str(history),
                   COLUMNS="200", NO_COLOR="1")
        t0 = time.monotonic()
        argv = [sys.executable, "-m", "sparkctl", *argv, "-i", str(LAB_INVENTORY_DIR)]
        if watch is None:
            proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
        else:
            with watch:
                proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
        table.append({"step": step, "rc": proc.returncode, "seconds": f"{time.monotonic() - t0:.0f}",
                      "API down": watch.summary() if watch else "-"})
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
                     ENGINE_UNIT).stdout.strip()


def lock_venvs(host: str) -> list[str]:
    """The lab profile's per-lock venvs on host (roles/spark: <profile>-<12 hex digits>)."""
    names = node_exec(host, "ls", VENV_ROOT).stdout.split()
    return sorted(f"{VENV_ROOT}/{n}" for n in names if re.fullmatch(r"lab-standin-[0-9a-f]{12}", n))


def marks(host: str, venvs: list[str]) -> list[str]:
    """Each venv's change marker's mtime (roles/engine_venv rewrites it whenever it changes the venv's contents)."""
    return node_exec(host, "stat", "-c", "%Y", *[f"{v}/.sparkctl-changed" for v in venvs]).stdout.split()


def engine_boots_since(since: str) -> int:
    """How often the head's engine came to serve since `since` (the stand-in's line at each boot)."""
    journal = node_exec("spark1", "journalctl", "-u", ENGINE_UNIT, "--since", since, "--no-pager", "-o", "cat").stdout
    return journal.count("(lab stand-in, NOT vLLM): serving")


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

    # B: the pin bump. The runtime stage builds the new lock's venv beside the serving one; nothing
    # serving moves. (A run of this test by hand on the same lab may have left it built already.)
    old = serving_venv("spark1")
    assert re.fullmatch(rf"{VENV_ROOT}/lab-standin-[0-9a-f]{{12}}", old), old
    assert served_standin_version() == OLD
    engine_before = unit_started("spark1", ENGINE_UNIT)
    ray_before = {host: unit_started(host, RAY_UNITS[host]) for host in HOSTS}
    watch = HealthWatch()
    proc = sparkctl(f"pin {NEW}: runtime (beside the serving venv)", "up", "--tags", "runtime",
                    "-e", json.dumps(pinned(NEW)), watch=watch)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert watch.down_windows() == [], watch.summary()
    built = {host: [v for v in lock_venvs(host) if standin_version(host, v, check=False) == NEW] for host in HOSTS}
    assert built["spark1"] == built["spark2"] and len(built["spark1"]) == 1, built
    new = built["spark1"][0]
    for host in HOSTS:
        assert standin_version(host, old) == OLD, host
        assert serving_venv(host) == old, host
    assert unit_started("spark1", ENGINE_UNIT) == engine_before and served_standin_version() == OLD

    # The serve stage switches: the engine and Ray restart from the new venv, the engine boots
    # once (engine_service does not boot again what Ray's restart started), the API down once.
    since = node_exec("spark1", "date", "+%Y-%m-%d %H:%M:%S").stdout.strip()
    watch = HealthWatch()
    proc = sparkctl(f"pin {NEW}: serve + verify (switch, records B)", "up", "--tags", "serve,verify",
                    "-e", json.dumps(pinned(NEW)), watch=watch)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert len(watch.down_windows()) == 1, watch.summary()
    # Ray restarts from the new venv as planned: no wait for raylets the run itself stopped, no recovery.
    assert RECOVERY not in proc.stdout + proc.stderr, proc.stdout[-6000:]
    assert engine_boots_since(since) == 1
    assert served_standin_version() == NEW
    for host in HOSTS:
        assert serving_venv(host) == new, host
        assert unit_started(host, RAY_UNITS[host]) != ray_before[host], host
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
        assert serving_venv(host) == serving[host] == new, host
        assert standin_version(host, serving[host]) == NEW, host
        # Once B verified again, engine_venv_keep (2) keeps B's venv and A's, the one `sparkctl rollback`
        # returns to; the broken release's, which never passed verify, goes first.
        assert lock_venvs(host) == sorted([old, new]), host
    failed = json.loads((report_dir / "verify-failed.json").read_text())
    assert failed["status"] == "failed" and failed["intended"]["profile"]["sha256"] != \
        history(sparkctl)[0]["profile"]["sha256"], failed
    assert [r["deployment_id"] for r in history(sparkctl)] == [second, first]

    # Back to A's lock: nothing installed, A's venv serves, B's stays for another switch.
    before = {host: marks(host, [old, new]) for host in HOSTS}
    watch = HealthWatch()
    proc = sparkctl("rollback to A (its venv)", "rollback", watch=watch)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert RECOVERY not in proc.stdout + proc.stderr, proc.stdout[-6000:]
    assert len(watch.down_windows()) == 1, watch.summary()
    assert {host: marks(host, [old, new]) for host in HOSTS} == before
    assert served_standin_version() == OLD and served_id() == first
    for host in HOSTS:
        assert serving_venv(host) == old, host
        assert {old, new} <= set(lock_venvs(host)), host
        served = json.loads(node_exec(host, "cat", "/var/lib/sparkctl/venvs-served.json").stdout)["served"]
        assert served[0] == old and new in served, (host, served)

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

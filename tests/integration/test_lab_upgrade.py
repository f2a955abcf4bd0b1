"""Upgrading the runtime of a serving lab cluster, as a user bumps a pin and re-runs.

The venv runtime with its default path (one venv per profile): a pin bump (sparklab-engine
0.3.0 -> 0.3.1, the stand-in's two wheels, through spark_profile_overrides so the lab profile
stays as it is) is installed into the venv the engine runs from, and the engine and its Ray
cluster must then run the new code. The first run installs the new pin and fails in the serve
stage before the engine's restart (a bad ray_cluster_wait_timeout, refused when the Ray role
starts, after the kernel caches moved to the new runtime's directory), as a run that fails there on
a loaded machine does; the next serve run must restart the engine and Ray on the new code: the
engine's units list the venv's change marker as read at their start (roles/engine_venv,
write.yml), so the restart is decided from the node, whatever an earlier run did. Then the
profile's own pin again, in one run: the old version serves.

Its own marker (`upgrade`): venv installs and engine restarts that change the lab; each step's
time goes in the session's report table."""

from __future__ import annotations

import json
import time

import pytest
from labrun import node_exec

pytestmark = [pytest.mark.lab, pytest.mark.upgrade]

HOSTS = ("spark1", "spark2")
VENV = "/opt/sparkctl/venvs/lab-standin"
OLD, NEW = "0.3.0", "0.3.1"
ENGINE_UNIT = "sparkctl-engine.service"
RAY_UNITS = {"spark1": "sparkctl-ray-head.service", "spark2": "sparkctl-ray-worker.service"}


def _pin(version: str) -> str:
    return json.dumps({"spark_profile_overrides": {"runtime": {"venv": {"packages": [f"sparklab-engine=={version}"]}}}})


def served_version() -> str:
    """What the running engine says it is (the stand-in's /version on its own port, no key needed), from the head."""
    code = ("import json, urllib.request\n"
            "print(json.load(urllib.request.urlopen('http://127.0.0.1:8001/version', timeout=30))['version'])\n")
    return node_exec("spark1", "python3", "-c", code).stdout.strip()


def installed_version(host: str) -> str:
    return node_exec(host, f"{VENV}/bin/python", "-c",
                     "import importlib.metadata as m; print(m.version('sparklab-engine'))").stdout.strip()


def started(host: str, unit: str) -> str:
    return node_exec(host, "systemctl", "show", "-p", "ExecMainStartTimestampMonotonic", "--value", unit).stdout.strip()


@pytest.fixture(scope="module")
def step(run_site, result_table):
    """run_site with the step's time in the report table; asserts the run's exit code (0 unless told)."""
    table = result_table("runtime upgrade (tests/integration/test_lab_upgrade.py)", ["step", "rc", "seconds"])

    def _run(name: str, *extra: str, rc: int = 0):
        t0 = time.monotonic()
        run = run_site(*extra)
        table.append({"step": name, "rc": run.rc, "seconds": f"{time.monotonic() - t0:.0f}"})
        assert run.rc == rc, run.output[-6000:]
        return run

    return _run


def test_a_pin_bumped_in_place_restarts_the_engine_on_the_new_code(site_converged, step):
    assert served_version() == OLD
    ray_before = {host: started(host, RAY_UNITS[host]) for host in HOSTS}
    engine_before = started("spark1", ENGINE_UNIT)
    failed = step(f"pin {NEW}: runtime + serve, failing before the restart", "-e", _pin(NEW), "-e",
                  "ray_cluster_wait_timeout=soon", "--tags", "runtime,serve", rc=2)
    assert "ray_cluster_wait_timeout" in failed.output, failed.output[-3000:]
    assert all(installed_version(host) == NEW for host in HOSTS)
    assert started("spark1", ENGINE_UNIT) == engine_before and served_version() == OLD

    step(f"pin {NEW}: serve again", "-e", _pin(NEW), "--tags", "serve")
    assert served_version() == NEW
    for host in HOSTS:
        # Ray's processes run the venv's code too: the cluster restarted under it.
        assert started(host, RAY_UNITS[host]) != ray_before[host], host

    ray_before = {host: started(host, RAY_UNITS[host]) for host in HOSTS}
    step(f"the profile's pin {OLD} again: runtime + serve", "--tags", "runtime,serve")
    assert all(installed_version(host) == OLD for host in HOSTS)
    assert served_version() == OLD
    assert all(started(host, RAY_UNITS[host]) != ray_before[host] for host in HOSTS)

"""Switching the served model on the two-node lab: lab-standin -> lab-standin-b -> back,
each one site.yml run, as a user changes spark_model_profile and re-runs.

lab-standin-b (tests/lab/profiles) differs in its runtime version (sparklab-engine 0.3.1 in
a venv of its own) and its checkpoint (the hub stand-in's second repo, a directory of its
own). Each run stops the running engine on every node before anything of the new one is
written (roles/engine_service/tasks/replace.yml), finds the node's memory back within the
gate's margin before the new engine starts (memory_check.yml), and ends served and verified
(site.yml's verify stage); the old venv and checkpoint stay beside the new ones, until the way
back sets checkpoint_keep=1 and the other checkpoint goes (roles/checkpoint/tasks/keep.yml).
Each switch is a runtime change for the kernel caches too (docs/jit-cache.md): every node's
cache moves to the new runtime's directory, the old one is removed, and the new engine's ranks
compile (the stand-in's `JIT cache cold` lines) and end with the head's cache on the worker.

Its own marker (`switch`): two whole-site runs that change the lab, so the suite's chain
places it (measured times in the report table)."""

from __future__ import annotations

import json
import time

import pytest
from labrun import JIT_CACHE_ROOT, VENV_ROOT, jit_boots, jit_identity, jit_kernel, node_exec, serving_venv, standin_version

pytestmark = [pytest.mark.lab, pytest.mark.model_switch]

HOSTS = ("spark1", "spark2")
KEY_FILE = "/etc/sparkctl/api-key.env"
STAMP = ".sparkctl-verified.json"
PROFILES = {
    "lab-standin": {"checkpoint": "/srv/sparkctl/models/lab-standin", "version": "0.3.0"},
    "lab-standin-b": {"checkpoint": "/srv/sparkctl/models/lab-standin-b", "version": "0.3.1"},
}
# Each profile's venv as its units named it while it served (its path follows the run's settings).
VENVS: dict[str, str] = {}


def _served_model() -> str:
    code = (
        "import json, urllib.request\n"
        f"key = open('{KEY_FILE}').read().strip().split('=', 1)[1]\n"
        "req = urllib.request.Request('http://127.0.0.1:8000/v1/models', headers={'Authorization': 'Bearer ' + key})\n"
        "print(json.load(urllib.request.urlopen(req, timeout=30))['data'][0]['id'])\n"
    )
    return node_exec("spark1", "python3", "-c", code).stdout.strip()


def _switch(run_site, result_table, profile: str, *extra: str):
    caches = {host: jit_identity(host) for host in HOSTS}
    t0 = time.monotonic()
    run = run_site("-e", f"spark_model_profile={profile}", *extra)
    seconds = time.monotonic() - t0
    result_table("switching the served model", ["to", "rc", "seconds"]).append(
        {"to": profile, "rc": run.rc, "seconds": f"{seconds:.0f}"})
    assert run.rc == 0, run.output[-6000:]
    # The old engine was stopped by the switch itself, before the new one's files.
    assert "Stop the engine being replaced on every node" in run.output
    assert "changed: [spark1] => (item=sparkctl-engine.service)" in run.output, run.output[-6000:]
    # Ray restarts from the new runtime as planned: no wait for raylets the run itself stopped, no recovery.
    assert "Recovering the Ray cluster" not in run.output, run.output[-6000:]
    assert _served_model() == profile
    want = PROFILES[profile]
    VENVS[profile] = serving_venv("spark1")
    assert VENVS[profile].startswith(f"{VENV_ROOT}/{profile}"), VENVS
    for host in HOSTS:
        assert serving_venv(host) == VENVS[profile], host
        assert standin_version(host, VENVS[profile]) == want["version"]
        # What every node verified (the head also keeps the hub's manifest).
        assert json.loads(node_exec(host, "cat", f"{want['checkpoint']}/{STAMP}").stdout), host
    assert json.loads(node_exec("spark1", "cat", f"{want['checkpoint']}/.sparkctl-manifest.json").stdout)
    # The kernel caches: the old runtime's directory gone on every node, the new one's boot compiled.
    for host in HOSTS:
        assert jit_identity(host) not in ("", caches[host]), host
        node_exec(host, "test", "!", "-e", f"{JIT_CACHE_ROOT}/{caches[host]}")
    assert jit_boots() == {"spark1": "cold", "spark2": "cold"}
    assert jit_kernel("spark2") == jit_kernel("spark1") != ("", "")
    return run


def test_switch_to_the_second_profile_and_back(site_converged, run_site, result_table):
    VENVS["lab-standin"] = serving_venv("spark1")
    _switch(run_site, result_table, "lab-standin-b")
    # Beside, not instead: the first profile's venv and checkpoint stay on every node.
    for host in HOSTS:
        for name, want in PROFILES.items():
            node_exec(host, "test", "-x", f"{VENVS[name]}/bin/python")
            node_exec(host, "test", "-s", f"{want['checkpoint']}/{STAMP}")
    # Back, keeping one checkpoint: once verify passed, every node records lab-standin as served
    # and removes what sparkctl put in lab-standin-b's directory (the venv stays).
    _switch(run_site, result_table, "lab-standin", "-e", "checkpoint_keep=1")
    for host in HOSTS:
        served = json.loads(node_exec(host, "cat", "/var/lib/sparkctl/checkpoints-served.json").stdout)["served"]
        assert served == [PROFILES["lab-standin"]["checkpoint"]], (host, served)
        node_exec(host, "test", "!", "-e", PROFILES["lab-standin-b"]["checkpoint"])
        node_exec(host, "test", "-x", f"{VENVS['lab-standin-b']}/bin/python")

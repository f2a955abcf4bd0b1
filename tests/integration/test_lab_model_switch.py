"""Switching the served model on the two-node lab: lab-standin -> lab-standin-b -> back,
each one site.yml run, as a user changes spark_model_profile and re-runs.

lab-standin-b also runs the other vLLM topology, vLLM's own ranks (vllm_ranks, no Ray): the switch
moves the cluster off Ray (no Ray unit runs or is enabled after it) and back (the worker's rank
unit stopped and disabled), and while it serves, a worker rank killed brings every rank back
through the rank guards (both units restart, the API serves again).

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
ENGINE_UNIT = "sparkctl-engine.service"
RANK_UNIT = "sparkctl-vllm-rank.service"
RAY_UNITS = ("sparkctl-ray-head.service", "sparkctl-ray-worker.service")
# A bound, not a measure: the guards' polls, RestartSec (10 s) and the stand-in's boot on a loaded machine.
RECOVERY_DEADLINE_S = 240
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


def _completion() -> str:
    """A completion through the API proxy, as a user asks one ('' when it fails)."""
    code = (
        "import json, urllib.request\n"
        f"key = open('{KEY_FILE}').read().strip().split('=', 1)[1]\n"
        "body = json.dumps({'model': 'lab-standin-b', 'prompt': 'The capital of Japan is', 'max_tokens': 4}).encode()\n"
        "req = urllib.request.Request('http://127.0.0.1:8000/v1/completions', data=body,\n"
        "    headers={'Authorization': 'Bearer ' + key, 'Content-Type': 'application/json'})\n"
        "print(json.load(urllib.request.urlopen(req, timeout=30))['choices'][0]['text'])\n"
    )
    return node_exec("spark1", "python3", "-c", code, check=False).stdout.strip()


def _unit(host: str, unit: str, *props: str) -> dict[str, str]:
    out = node_exec(host, "systemctl", "show", unit, *[f"--property={p}" for p in props]).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def _ranks_restart_together(result_table):
    """vllm_ranks (lab-standin-b): a worker rank killed takes the served model down and the rank guards
    bring every rank back (module_utils/rank_guard.py): the head's unit and the worker's restart, and the
    API serves again. The stand-in's head, like vLLM's, would otherwise stay healthy without its rank."""
    before = {"spark1": _unit("spark1", ENGINE_UNIT, "NRestarts")["NRestarts"],
              "spark2": _unit("spark2", RANK_UNIT, "NRestarts")["NRestarts"]}
    guard = _unit("spark2", RANK_UNIT, "MainPID")["MainPID"]
    engine = node_exec("spark2", "pgrep", "-P", guard).stdout.split()
    assert len(engine) == 1, (guard, engine)
    t0 = time.monotonic()
    node_exec("spark2", "kill", "-9", engine[0])
    deadline = t0 + RECOVERY_DEADLINE_S
    while time.monotonic() < deadline:
        restarts = {"spark1": _unit("spark1", ENGINE_UNIT, "NRestarts")["NRestarts"],
                    "spark2": _unit("spark2", RANK_UNIT, "NRestarts")["NRestarts"]}
        if restarts["spark1"] != before["spark1"] and restarts["spark2"] != before["spark2"] and _completion():
            break
        time.sleep(2)
    else:
        raise AssertionError(f"not serving again with both ranks restarted within {RECOVERY_DEADLINE_S} s: "
                             f"{before} -> {restarts}\n" + node_exec("spark1", "journalctl", "--no-pager", "-n", "40",
                                                                        "-u", ENGINE_UNIT).stdout)
    result_table("vllm_ranks: a worker rank killed", ["serving again after", "seconds"]).append(
        {"serving again after": "both ranks restarted", "seconds": f"{time.monotonic() - t0:.0f}"})


def test_switch_to_the_second_profile_and_back(site_converged, run_site, result_table):
    VENVS["lab-standin"] = serving_venv("spark1")
    _switch(run_site, result_table, "lab-standin-b")
    # lab-standin-b runs vLLM's own ranks: no Ray unit runs or is enabled on any node any more.
    for host in HOSTS:
        for unit in RAY_UNITS:
            state = _unit(host, unit, "ActiveState", "UnitFileState")
            assert state.get("ActiveState") != "active" and state.get("UnitFileState") != "enabled", (host, unit, state)
    assert _unit("spark2", RANK_UNIT, "ActiveState")["ActiveState"] == "active"
    _ranks_restart_together(result_table)
    # Beside, not instead: the first profile's venv and checkpoint stay on every node.
    for host in HOSTS:
        for name, want in PROFILES.items():
            node_exec(host, "test", "-x", f"{VENVS[name]}/bin/python")
            node_exec(host, "test", "-s", f"{want['checkpoint']}/{STAMP}")
    # Back, keeping one checkpoint: once verify passed, every node records lab-standin as served
    # and removes what sparkctl put in lab-standin-b's directory (the venv stays).
    _switch(run_site, result_table, "lab-standin", "-e", "checkpoint_keep=1")
    # Back on Ray: the worker's vLLM rank is stopped and disabled.
    state = _unit("spark2", RANK_UNIT, "ActiveState", "UnitFileState")
    assert state.get("ActiveState") != "active" and state.get("UnitFileState") != "enabled", state
    for host in HOSTS:
        served = json.loads(node_exec(host, "cat", "/var/lib/sparkctl/checkpoints-served.json").stdout)["served"]
        assert served == [PROFILES["lab-standin"]["checkpoint"]], (host, served)
        node_exec(host, "test", "!", "-e", PROFILES["lab-standin-b"]["checkpoint"])
        node_exec(host, "test", "-x", f"{VENVS['lab-standin-b']}/bin/python")

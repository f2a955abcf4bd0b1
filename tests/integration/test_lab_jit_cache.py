"""The kernel and JIT caches on the two-node lab (roles/jit_cache, docs/jit-cache.md), with the
stand-in engine's compile step (tests/lab/engine/README.md: SPARKLAB_ENGINE_COMPILE_S=3 in the lab
profile, a kernel file under $FLASHINFER_WORKSPACE_BASE, one `JIT cache warm|cold` line per rank).

One ordered story on the served lab, each step one serve-stage run (never the whole site):
1. reset (`jit_cache_reset=true`): every cache emptied, the engine restarted, both ranks boot cold;
   after the head's boot its cache goes to the worker (the worker then holds the head's file, mtime
   included), and verify's table says cold per node;
2. the worker's cache lost: the next run puts the head's back before anything starts, and the next
   boot is warm on both ranks (the head's second boot; the worker from the mirror, having compiled
   nothing of its own);
3. a runtime change (the stand-in pinned at 0.2.2, lab-standin-b's runtime version): the old
   identity's directory is removed on every node, the engine restarts into the new one and compiles;
   the profile's own pin put back at the end."""

from __future__ import annotations

import json
import re
import time

import pytest
from labrun import node_exec

pytestmark = [pytest.mark.lab, pytest.mark.jit_cache]

HEAD, WORKER = "spark1", "spark2"
ROOT = "/var/cache/sparkctl/jit"
KERNEL = "flashinfer/.cache/flashinfer/sparklab/fused_moe_standin.so"
ENGINE_UNIT = "sparkctl-engine.service"
MIRROR_TASK = "jit_cache : Copy the head's kernel caches to every worker whose cache differs"
OTHER_RUNTIME = {"spark_profile_overrides": {"runtime": {"venv": {"packages": ["sparklab-engine==0.2.2"]}}}}
_LINE = re.compile(r"^(?P<prefix>\(RayWorkerWrapper [^)]*\) )?\S+ [\d-]+ [\d:]+ \[sparklab_engine\] JIT cache (?P<state>\w+):")


def _engine_log() -> list[str]:
    invocation = node_exec(HEAD, "systemctl", "show", "--property=InvocationID", "--value", ENGINE_UNIT).stdout.strip()
    assert invocation, "the engine unit is not running"
    return node_exec(HEAD, "journalctl", "--no-pager", "-o", "cat", f"_SYSTEMD_INVOCATION_ID={invocation}").stdout.splitlines()


def _boots() -> dict[str, str]:
    """The current boot's compile state per node: rank 0 is the head's, the RayWorkerWrapper rank the worker's."""
    states = {}
    for line in _engine_log():
        match = _LINE.match(line)
        if match:
            states[WORKER if match["prefix"] else HEAD] = match["state"]
    return states


def _kernel(node: str) -> tuple[str, str]:
    """(sha256, mtime) of the node's cached kernel, ('', '') when there is none."""
    out = node_exec(node, "sh", "-c", f"f={ROOT}/current/{KERNEL}; [ -f $f ] && sha256sum $f | cut -c1-64 && stat -c %Y $f",
                    check=False).stdout.split()
    return (out[0], out[1]) if len(out) == 2 else ("", "")


def _identity(node: str) -> str:
    return node_exec(node, "readlink", f"{ROOT}/current").stdout.strip()


def _serve(run_site, *extra: str, tags: str = "serve,verify"):
    run = run_site("--tags", tags, *extra)
    assert run.rc == 0, run.output[-6000:]
    return run


def _wait_ready(timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while not any("Application startup complete." in line for line in _engine_log()):
        assert time.monotonic() < deadline, "the engine did not come back:\n" + "\n".join(_engine_log()[-20:])
        time.sleep(2)


@pytest.fixture(scope="module")
def served(site_converged):
    return site_converged


def test_a_reset_boots_cold_everywhere_then_the_worker_holds_the_heads_cache(served, run_site, report_dir):
    run = _serve(run_site, "-e", "jit_cache_reset=true")
    assert _boots() == {HEAD: "cold", WORKER: "cold"}, _engine_log()[-30:]
    # Both ranks compiled; after the head's boot its cache went to the worker, mtime and all.
    assert MIRROR_TASK in run.changed_tasks(HEAD), run.changed_tasks(HEAD)
    assert _kernel(WORKER) == _kernel(HEAD) != ("", "")
    report = json.loads((report_dir / "verify.json").read_text())
    assert {h: report["jit_cache"][h]["boot"] for h in (HEAD, WORKER)} == {HEAD: "cold", WORKER: "cold"}, report["jit_cache"]
    # Nothing new: a re-run mirrors nothing and restarts nothing.
    again = _serve(run_site, tags="serve")
    assert MIRROR_TASK not in again.changed_tasks(HEAD) and again.changed(WORKER) == 0, again.changed_tasks(WORKER)


def test_a_worker_that_lost_its_cache_gets_the_heads_before_its_next_boot_which_is_warm(served, run_site):
    head_kernel = _kernel(HEAD)
    node_exec(WORKER, "sh", "-c", f"rm -rf {ROOT}/current/flashinfer/.cache")
    assert _kernel(WORKER) == ("", "")
    run = _serve(run_site, tags="serve")
    assert MIRROR_TASK in run.changed_tasks(HEAD), run.changed_tasks(HEAD)
    assert _kernel(WORKER) == head_kernel
    # The ranks restart together (a restart of the head's API unit); neither compiles.
    node_exec(HEAD, "systemctl", "restart", ENGINE_UNIT)
    _wait_ready()
    assert _boots() == {HEAD: "warm", WORKER: "warm"}, _engine_log()[-30:]
    assert _kernel(WORKER) == head_kernel


def test_a_runtime_change_drops_the_old_cache_and_compiles_again(served, run_site, report_dir):
    before = {node: _identity(node) for node in (HEAD, WORKER)}
    assert before[HEAD] == before[WORKER] and before[HEAD].startswith("venv-")
    try:
        _serve(run_site, "-e", json.dumps(OTHER_RUNTIME), tags="runtime,serve,verify")
        after = {node: _identity(node) for node in (HEAD, WORKER)}
        assert after[HEAD] == after[WORKER] != before[HEAD]
        for node in (HEAD, WORKER):
            assert node_exec(node, "test", "-e", f"{ROOT}/{before[node]}", check=False).returncode != 0, node
        assert _boots() == {HEAD: "cold", WORKER: "cold"}, _engine_log()[-30:]
        assert _kernel(WORKER) == _kernel(HEAD) != ("", "")
        report = json.loads((report_dir / "verify.json").read_text())
        assert report["jit_cache"][HEAD]["identity"] == after[HEAD]
    finally:
        _serve(run_site, tags="runtime,serve")
    assert {node: _identity(node) for node in (HEAD, WORKER)} == before

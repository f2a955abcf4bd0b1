"""The kernel and JIT caches on the two-node lab (roles/jit_cache, docs/jit-cache.md), with the
stand-in engine's compile step (tests/lab/engine/README.md: SPARKLAB_ENGINE_COMPILE_S=3 in the lab
profile, a kernel file under $FLASHINFER_WORKSPACE_BASE, one `JIT cache warm|cold` line per rank).

One ordered story on the served lab, each step one serve-stage run (never the whole site):
1. reset (`jit_cache_reset=true`): every cache emptied, the engine restarted, both ranks boot cold;
   after the head's boot the worker holds the head's file, mtime included (mirrored, or written in
   the same second: the same digest), and verify's table says cold per node;
2. the worker's cache lost: the next run puts the head's back before anything starts, and the next
   boot is warm on both ranks (the head's second boot; the worker from the mirror, having compiled
   nothing of its own);
and a runtime change (the old identity's directory removed on every node, the new runtime's boot
cold) is asserted by test_lab_model_switch.py, whose two switches are runtime changes already: a
runtime change here costs two runtime-and-serve runs (measured over 900 s on a loaded machine)."""

from __future__ import annotations

import json
import time

import pytest
from labrun import JIT_CACHE_ROOT, JIT_ENGINE_UNIT, jit_boots, jit_engine_log, jit_kernel, node_exec

pytestmark = [pytest.mark.lab, pytest.mark.jit_cache]

HEAD, WORKER = "spark1", "spark2"
MIRROR_TASK = "jit_cache : Copy the head's kernel caches to every worker whose cache differs"


def _serve(run_site, *extra: str, tags: str = "serve,verify"):
    run = run_site("--tags", tags, *extra)
    assert run.rc == 0, run.output[-6000:]
    return run


def _wait_ready(timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while not any("Application startup complete." in line for line in jit_engine_log()):
        assert time.monotonic() < deadline, "the engine did not come back:\n" + "\n".join(jit_engine_log()[-20:])
        time.sleep(2)


@pytest.fixture(scope="module")
def served(site_converged):
    return site_converged


def test_a_reset_boots_cold_everywhere_then_the_worker_holds_the_heads_cache(served, run_site, report_dir):
    _serve(run_site, "-e", "jit_cache_reset=true")
    assert jit_boots() == {HEAD: "cold", WORKER: "cold"}, jit_engine_log()[-30:]
    # Both ranks compiled; after the head's boot the worker holds the head's cache, mtime and all:
    # mirrored, unless both wrote the same file in the same second (the same digest: nothing to send).
    assert jit_kernel(WORKER) == jit_kernel(HEAD) != ("", "")
    report = json.loads((report_dir / "verify.json").read_text())
    assert {h: report["jit_cache"][h]["boot"] for h in (HEAD, WORKER)} == {HEAD: "cold", WORKER: "cold"}, report["jit_cache"]
    # That a re-run mirrors nothing is the jit_cache scenario's idempotence run (molecule/jit_cache) and
    # the session's converged re-run: no serve run of its own here (the suite's time).


def test_a_worker_that_lost_its_cache_gets_the_heads_before_its_next_boot_which_is_warm(served, run_site):
    head_kernel = jit_kernel(HEAD)
    node_exec(WORKER, "sh", "-c", f"rm -rf {JIT_CACHE_ROOT}/current/flashinfer/.cache")
    assert jit_kernel(WORKER) == ("", "")
    run = _serve(run_site, tags="serve")
    assert MIRROR_TASK in run.changed_tasks(HEAD), run.changed_tasks(HEAD)
    assert jit_kernel(WORKER) == head_kernel
    # The ranks restart together (a restart of the head's API unit); neither compiles.
    node_exec(HEAD, "systemctl", "restart", JIT_ENGINE_UNIT)
    _wait_ready()
    assert jit_boots() == {HEAD: "warm", WORKER: "warm"}, jit_engine_log()[-30:]
    assert jit_kernel(WORKER) == head_kernel


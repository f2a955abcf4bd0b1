"""Fixtures for tests against the two-node lab."""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from labrun import LAB_INVENTORY, REPO, PlaybookRun, format_table, lab, parse_recap

# The suite runs two labs' integration tests side by side on one machine (tests/suite.sh).
# A test marked `timing` judges measured times or memory: while it runs, the other session
# starts no test (each takes the machine lock shared, a timing test or module takes it
# alone). The turnstile, taken briefly on the way in, lets a waiting timing test in ahead
# of the other session's next tests.
MACHINE_LOCK = REPO / ".lab" / "integration-machine.lock"
TURNSTILE = REPO / ".lab" / "integration-machine.turnstile"


@contextlib.contextmanager
def _machine(mode: int):
    MACHINE_LOCK.parent.mkdir(exist_ok=True)
    with open(TURNSTILE, "a") as turnstile, open(MACHINE_LOCK, "a") as machine:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(machine, mode)
        finally:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(machine, fcntl.LOCK_UN)


def _module_is_timing(node) -> bool:
    module = node.getparent(pytest.Module)
    return module is not None and any(marker.name == "timing" for marker in module.own_markers)


@pytest.fixture(scope="module", autouse=True)
def _machine_to_a_timing_module(request):
    """A module marked timing (its module-scoped fixtures measure too) has the machine to itself."""
    if not _module_is_timing(request.node):
        yield
        return
    with _machine(fcntl.LOCK_EX):
        yield


@pytest.fixture(autouse=True)
def _machine_per_test(request):
    """Any other test shares the machine, except a test marked timing, which has it to itself."""
    if _module_is_timing(request.node):
        yield  # the module holds the machine already
        return
    alone = any(marker.name == "timing" for marker in request.node.own_markers)
    with _machine(fcntl.LOCK_EX if alone else fcntl.LOCK_SH):
        yield


@pytest.fixture(scope="session")
def report_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("reports")


@pytest.fixture(scope="session")
def run_site(report_dir):
    """Run site.yml (or another playbook) against the lab like a user does; never raises on failure."""

    def _run(*extra: str, inventory: Path = LAB_INVENTORY, playbook: str = "site.yml", timeout: int = 900) -> PlaybookRun:
        env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), SPARKCTL_REPORT_DIR=str(report_dir),
                   ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
        proc = subprocess.run(
            [str(Path(sys.executable).with_name("ansible-playbook")), playbook, "-i", str(inventory), *extra],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout,
        )
        output = proc.stdout + proc.stderr
        return PlaybookRun(proc.returncode, output, parse_recap(output))

    return _run


@pytest.fixture(scope="session")
def lab_up():
    """The lab must already be up (the suite's molecule stage brings it up); make sure, cheaply."""
    proc = lab("up", check=False)
    if proc.returncode != 0:
        pytest.fail(f"the lab is not up and `sparklab up` failed:\n{proc.stdout}\n{proc.stderr}")
    return True


@pytest.fixture(scope="session")
def site_converged(lab_up, run_site, result_table):
    """site.yml re-run on a converged lab, once for the session, for test modules that only
    need a served cluster and leave it as they found it (a module that breaks and restores
    runs its own site.yml); test_lab_check_mode.py asserts it changed nothing (the stage-alone
    re-runs are the fault catalogue's quiet runs).

    The suite's molecule stage ends with exactly such a run (its idempotence step, nothing
    touching the lab after it but the read-only verify): tests/suite.sh names its log in
    SPARKCTL_CONVERGED_RERUN_LOG and it stands in for a run of its own. Elsewhere site.yml
    runs here, twice when the first run still had something to change."""
    source = "site.yml re-run"
    run = _logged_rerun(os.environ.get("SPARKCTL_CONVERGED_RERUN_LOG", ""))
    if run is not None:
        source = "the molecule stage's idempotence run"
    else:
        run = run_site()
        assert run.rc == 0, run.output[-6000:]
        if any(counters.get("changed") for counters in run.recap.values()):
            source = "site.yml run twice (the first converged)"
            run = run_site()
            assert run.rc == 0, run.output[-6000:]
    result_table("the session's converged re-run", ["source", "changed"]).append(
        {"source": source, "changed": ", ".join(f"{h}={c.get('changed')}" for h, c in sorted(run.recap.items()))})
    return run


def _logged_rerun(path: str) -> PlaybookRun | None:
    """The site.yml run a log holds, when it is one that ran every host to the end."""
    if not path or not Path(path).is_file():
        return None
    output = Path(path).read_text(errors="replace")
    # Hosts only: molecule's own "SCENARIO RECAP" line follows the play recap in its log.
    recap = {host: counters for host, counters in parse_recap(output).items() if "ok" in counters}
    if not recap or any(c.get("failed") or c.get("unreachable") for c in recap.values()):
        return None
    return PlaybookRun(0, output, recap)


@pytest.fixture(scope="session")
def image_base(lab_up, run_site) -> dict[str, float]:
    """Docker on every node (the engine_image role installs it where it is missing) and the
    lab's local base image on the head (the lab has no registry), for the modules that run
    the lab-image profile; the seconds each took."""
    seconds = {}
    started = time.monotonic()
    docker = run_site("-e", "spark_model_profile=lab-image", "--tags", "engine_image_docker",
                      playbook="playbooks/runtime.yml")
    assert docker.rc == 0, docker.output[-4000:]
    seconds["docker only (--tags engine_image_docker)"] = time.monotonic() - started
    started = time.monotonic()
    lab("base-image")
    seconds["sparklab base-image"] = time.monotonic() - started
    return seconds


# Result tables a catalogue test fills row by row (title -> (headers, rows)), printed in
# the terminal summary whatever the outcome, so one run shows every case at a glance.
_RESULT_TABLES: dict[str, tuple[list[str], list[dict]]] = {}


@pytest.fixture(scope="session")
def result_table():
    """result_table(title, headers) -> the list of row dicts to append to."""

    def _table(title: str, headers: list[str]) -> list[dict]:
        return _RESULT_TABLES.setdefault(title, (list(headers), []))[1]

    return _table


def pytest_terminal_summary(terminalreporter):
    for title, (headers, rows) in _RESULT_TABLES.items():
        if rows:
            terminalreporter.write_sep("=", title)
            terminalreporter.write_line(format_table(headers, rows))

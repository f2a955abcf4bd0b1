"""Fixtures for tests against the two-node lab."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from labrun import LAB_INVENTORY, REPO, PlaybookRun, format_table, lab, parse_recap


@pytest.fixture(scope="session")
def report_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("reports")


@pytest.fixture(scope="session")
def run_site(report_dir):
    """Run site.yml (or another playbook) against the lab like a user does; never raises on failure."""

    def _run(*extra: str, inventory: Path = LAB_INVENTORY, playbook: str = "site.yml") -> PlaybookRun:
        env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), SPARKCTL_REPORT_DIR=str(report_dir),
                   ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
        proc = subprocess.run(
            [str(Path(sys.executable).with_name("ansible-playbook")), playbook, "-i", str(inventory), *extra],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=900,
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
def site_converged(lab_up, run_site):
    """site.yml run once for the session, for test modules that only need a served cluster
    and leave it as they found it (a module that breaks and restores runs its own site.yml)."""
    run = run_site()
    assert run.rc == 0, run.output[-6000:]
    return run


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

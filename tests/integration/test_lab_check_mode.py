"""The converged two-node lab: a re-run of site.yml reports changed=0 on every node, and
`site.yml --check --diff` reports changed=0 too and leaves every node's state (files,
addresses, MTUs, units, firewall table; labrun.probe_nodes) exactly as it was. These two
whole-site runs stand for every stage's converged re-run and check mode."""

from __future__ import annotations

import pytest
from labrun import probe_nodes, state_diff

pytestmark = pytest.mark.lab

HOSTS = ("spark1", "spark2")


@pytest.fixture(scope="module")
def converged(site_converged):
    # site.yml once for the session (conftest.py); this module leaves the cluster as it found it.
    return site_converged


def test_a_converged_rerun_changes_nothing(converged):
    assert all(converged.changed(h) == 0 for h in HOSTS), {h: converged.changed_tasks(h) for h in HOSTS}


def test_check_diff_on_the_converged_lab_changes_nothing(converged, run_site):
    before = probe_nodes(HOSTS)
    run = run_site("--check", "--diff")
    after = probe_nodes(HOSTS)
    assert run.rc == 0, run.output[-5000:]
    assert all(run.changed(h) == 0 for h in HOSTS), {h: run.changed_tasks(h) for h in HOSTS}
    assert not state_diff(before, after), state_diff(before, after)

"""`sparkctl teardown` (playbooks/teardown.yml) gives the nodes back as they were before sparkctl.

Run last on a lab whose nodes were snapshotted fresh, before anything touched them (the
suite's twin chain: tests/suite.sh takes the snapshot right after creating the twin, then
converges it and runs its integration tests; this file and the teardown role's scenario are
its last stages). Destructive: it leaves the lab torn down, and with the hub stand-in stopped.

1. The node's administrator puts a file of their own (a registry's CA) in /etc/docker, a directory
   sparkctl created (it installed Docker for the image runtime); then `--check` on the converged
   cluster lists what would go (the checkpoint kept, the administrator's file kept and named) and
   changes nothing (marker `teardown_check`: the suite runs it before the role's scenario).
2. The teardown itself, with the checkpoints purged, then again with nothing left to do, and every
   node equal to its fresh snapshot but for node_snapshot.TEARDOWN_ALLOWED (which allows the
   administrator's file and the directories holding it): the teardown role's molecule scenario
   (molecule/teardown), which the suite runs between 1 and 3.
3. The administrator's file is still there, alone in /etc/docker (Docker's key, which dockerd
   wrote there, gone); once they remove it, a first run that fails half-way (the hub stopped:
   provision done, the checkpoint stage refuses its first download), then the user installs by hand
   a package of sparkctl's list that this run did not install (iperf3, the fabric test's tool), then
   a teardown: it purges what the run installed, keeps the user's package and names it; once the
   user's package is purged by hand, the nodes equal their fresh snapshots again; a second teardown
   changes nothing (marker `teardown_after`).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
from labrun import LAB_INVENTORY, REPO, changed_tasks, lab, lab_plan, node_exec

sys.path.insert(0, str(REPO / "tests" / "lab"))
import node_snapshot  # noqa: E402  (tests/lab/node_snapshot.py)

pytestmark = pytest.mark.teardown

TEARDOWN = "playbooks/teardown.yml"
PURGE = ("-e", "teardown_purge_checkpoints=true")
TIMINGS: dict[str, float] = {}


ALLOWED = node_snapshot.TEARDOWN_ALLOWED
# A file of the node's administrator in a directory sparkctl created (roles/teardown's shared
# directories): the teardown keeps it, with the directories that hold it (node_snapshot.KEPT_USER_FILE).
USER_FILE = node_snapshot.KEPT_USER_FILE
USER_DIR = "/etc/docker"
# A package of roles/teardown's list (the fabric test's tool) that the half-way run does not install:
# installed by hand on a worker after sparkctl's first run, it is the user's.
USER_PACKAGE = "iperf3"
APT = ("env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "-y", "-q")


def _installed(node: str) -> set[str]:
    out = node_exec(node, "dpkg-query", "-W", "-f", "${Package} ${db:Status-Abbrev}\n").stdout
    return {line.split()[0] for line in out.splitlines() if len(line.split()) > 1 and line.split()[1].startswith("i")}


def _fresh() -> dict:
    path = Path(os.environ.get("SPARKCTL_FRESH_SNAPSHOT") or node_snapshot.fresh_path(LAB_INVENTORY))
    if not path.is_file():
        pytest.fail(f"no snapshot of the fresh nodes at {path}: take it right after `sparklab up`, before any run "
                    f"(python tests/lab/node_snapshot.py -i {LAB_INVENTORY} {path})")
    import json

    return json.loads(path.read_text())


def _now() -> dict:
    return node_snapshot.snapshot([node.name for node in lab_plan().nodes], LAB_INVENTORY)


def _timed(name, run_site, *args, **kwargs):
    started = time.monotonic()
    run = run_site(*args, **kwargs)
    TIMINGS[name] = round(time.monotonic() - started, 1)
    return run


@pytest.fixture(scope="module")
def fresh():
    return _fresh()


def _nodes() -> list[str]:
    return [node.name for node in lab_plan().nodes]


@pytest.mark.teardown_check
def test_check_lists_the_teardown_and_changes_nothing(run_site, fresh):
    # The administrator's own file, in the directory sparkctl made when it installed Docker.
    for node in _nodes():
        node_exec(node, "test", "-d", USER_DIR)
        node_exec(node, "install", "-D", "-m", "0644", "/etc/hostname", USER_FILE)
    before = _now()
    run = _timed("teardown --check", run_site, "--check", "--diff", playbook=TEARDOWN)
    assert run.rc == 0, run.output[-4000:]
    assert all(stats.get("changed", 0) > 0 for host, stats in run.recap.items() if host != "localhost"), run.recap
    assert "purge" in run.output and "/etc/sparkctl" in run.output
    assert "kept (checkpoints; --purge-checkpoints removes them)" in run.output
    said = " ".join(run.output.split())
    assert f"keep {USER_DIR}, which holds what sparkctl did not put there: {USER_FILE[len(USER_DIR) + 1:]}" in said, \
        run.output[-4000:]
    assert node_snapshot.differences(before, _now()) == []


@pytest.mark.teardown_after
def test_teardown_after_a_first_run_that_failed_half_way(run_site, fresh):
    lab("hub", "stop")
    # The role's scenario tore the cluster down and kept the administrator's file alone where it was.
    for node in _nodes():
        assert node_exec(node, "find", USER_DIR, "-type", "f").stdout.split() == [USER_FILE], node
        node_exec(node, "rm", "-r", USER_DIR)
    # This run starts from nodes as fresh as they were.
    assert node_snapshot.differences(fresh, _now(), ALLOWED) == []
    failed = _timed("site.yml failing at the checkpoint", run_site)
    assert failed.rc != 0, failed.output[-3000:]
    done = changed_tasks(failed.output)
    assert any(task.startswith("direct_link") for task in done.get("spark1", [])), done
    assert "TASK [checkpoint" in failed.output and "TASK [engine_" not in failed.output
    assert node_snapshot.differences(fresh, _now(), ALLOWED) != []

    # The user's own install, after sparkctl's first run: what it brought is theirs.
    worker = lab_plan().nodes[-1].name
    before = _installed(worker)
    assert USER_PACKAGE not in before
    node_exec(worker, *APT, "install", "--no-install-recommends", USER_PACKAGE)
    users = sorted(_installed(worker) - before)
    assert USER_PACKAGE in users

    run = _timed("teardown after the failed run", run_site, playbook=TEARDOWN)
    assert run.rc == 0, run.output[-4000:]
    said = " ".join(run.output.split())
    # (The callback prints the message as YAML, its apostrophe doubled inside single quotes.)
    assert f"kept {USER_PACKAGE}: installed after sparkctl" in said and "first run, not by sparkctl" in said, \
        run.output[-4000:]
    assert set(users) <= _installed(worker), sorted(set(users) - _installed(worker))
    node_exec(worker, *APT, "purge", *users)
    assert node_snapshot.differences(fresh, _now(), ALLOWED) == []

    again = _timed("teardown again", run_site, playbook=TEARDOWN)
    assert again.rc == 0, again.output[-4000:]
    assert all(stats.get("changed", 0) == 0 for stats in again.recap.values()), again.recap
    print("\nteardown timings (s):", TIMINGS)

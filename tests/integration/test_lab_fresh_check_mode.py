"""Check mode on a FRESH lab (nodes created, nothing provisioned): `site.yml --check --diff`
must list the changes a first run would make, stage by stage and on every node, and change
nothing: files, addresses, MTUs, units, the firewall table and the installed packages are
probed on both nodes before and after.

Marker `fresh`: tests/suite.sh runs it in a stage of its own between molecule's create and
converge, on the lab molecule has just created (by hand: `sparklab down && sparklab up &&
pytest tests/integration -m fresh`); on a lab that was already provisioned it skips."""

from __future__ import annotations

import json

import pytest
from labrun import lab, node_exec, probe_nodes, state_diff

pytestmark = pytest.mark.fresh

HEAD, WORKER = "spark1", "spark2"
HOSTS = (HEAD, WORKER)

# Per node, a task of each role a first run changes there (roles in site.yml order).
WOULD_CHANGE_ON_EVERY_NODE = {
    # The service user is provision's to create: the steps that act as it wait for it.
    "linger": "Create the service user, unprivileged",
    "ssh_mesh": "Say the mesh is made once the service user exists",
    "direct_link": "Write the netplan file of the direct cable",
    "fabric_env": "Write the fabric environment file",
    "firewall": "Write the rule set",
    "checkpoint": "Create the checkpoint directory, owned by the service user",
    "engine_venv": "Install the pinned packages",
    "oom_guard": "Install earlyoom from the distribution",
    "ray_cluster": "Say which unit a run would start",
    "engine_service": "Create the configuration directory",
}
WOULD_CHANGE_ON_THE_HEAD = {
    "checkpoint": "Say what check mode cannot show before the tools exist",
    "api_proxy": "Install nginx from the distribution",
    # The lab's profile is a Ray topology: the engine's own unit runs on the head only.
    "engine_service": "Say which units a run would start",
}


def _packages(node: str) -> str:
    return node_exec(node, "dpkg-query", "-W", "-f", "${Package} ${Version}\\n").stdout


def _active_units(node: str) -> str:
    return node_exec(node, "systemctl", "list-units", "--all", "--no-legend", "--plain", "sparkctl-*", "earlyoom*",
                     "nginx*", check=False).stdout


@pytest.fixture(scope="module")
def fresh(lab_up):
    provisioned = [n for n in HOSTS if node_exec(n, "test", "-e", "/etc/sparkctl", check=False).returncode == 0]
    if provisioned:
        pytest.skip(f"the lab is not fresh ({', '.join(provisioned)} holds /etc/sparkctl): "
                    "run `sparklab down && sparklab up` first")
    # The hub stand-in is the lab's internet, not a change to a node: without it a check run
    # rightly refuses the first download, as a real run would.
    lab("hub", "start")
    return True


def test_check_mode_on_a_fresh_lab_lists_the_changes_and_changes_nothing(fresh, run_site, report_dir):
    before = probe_nodes(HOSTS)
    packages = {n: _packages(n) for n in HOSTS}
    units = {n: _active_units(n) for n in HOSTS}

    run = run_site("--check", "--diff")

    after = probe_nodes(HOSTS)
    assert run.rc == 0, run.output[-6000:]
    assert not state_diff(before, after), state_diff(before, after)
    assert {n: _packages(n) for n in HOSTS} == packages, "check mode installed or removed a package"
    assert {n: _active_units(n) for n in HOSTS} == units, "check mode created or started a unit"
    for node in HOSTS:
        assert node_exec(node, "test", "-e", "/etc/sparkctl", check=False).returncode != 0, node

    would = {host: run.changed_tasks(host) for host in HOSTS}
    for host in HOSTS:
        for role, task in WOULD_CHANGE_ON_EVERY_NODE.items():
            assert f"{role} : {task}" in would[host], (host, role, would[host])
    for role, task in WOULD_CHANGE_ON_THE_HEAD.items():
        assert f"{role} : {task}" in would[HEAD], (role, would[HEAD])
        assert f"{role} : {task}" not in would[WORKER], (role, would[WORKER])

    # --diff shows what it would write; the messages say what it cannot show yet.
    assert "40-cx7.yaml" in run.output and "fabric.env" in run.output
    assert f"a run would install and start sparkctl-ray-head.service on {HEAD}" in run.output
    assert f"a run would install and start sparkctl-ray-worker.service on {WORKER}" in run.output
    assert "sparkctl-engine.service" in run.output
    # The verify stage reports the unprobed endpoint and why, without failing the check run.
    report = json.loads((report_dir / "verify.json").read_text())
    assert report["status"] == "failed", report
    assert any("does not exist on spark1 yet: the serve stage has not run" in line for line in report["failures"]), report

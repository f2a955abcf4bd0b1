"""Check mode on a FRESH two-node lab (nodes created, nothing provisioned): `site.yml
--check --diff` must list the changes it would make, on every node, and change nothing
(files, addresses, MTUs, units, firewall table, installed packages: probed before and
after). Marker `fresh`, NOT in tests/suite.sh yet: run it by hand on a lab just created
(`sparklab down && sparklab up && pytest tests/integration -m fresh`); on a converged lab it
skips. Status: preflight, provision, checkpoint and runtime pass in check mode on a fresh
lab; the serve stage still fails there (oom_guard's and api_proxy's apt installs cannot
resolve a package without an apt cache update, which check mode does not make)."""

from __future__ import annotations

import pytest
from labrun import node_exec, probe_nodes, state_diff

pytestmark = pytest.mark.fresh

HOSTS = ("spark1", "spark2")


def _packages(node: str) -> str:
    return node_exec(node, "dpkg-query", "-W", "-f", "${Package} ${Version}\\n").stdout


@pytest.fixture(scope="module")
def fresh(lab_up):
    provisioned = [n for n in HOSTS if node_exec(n, "test", "-e", "/etc/sparkctl", check=False).returncode == 0]
    if provisioned:
        pytest.skip(f"the lab is not fresh ({', '.join(provisioned)} holds /etc/sparkctl): "
                    "run `sparklab down && sparklab up` first")
    return True


def test_check_mode_on_a_fresh_lab_lists_the_changes_and_changes_nothing(fresh, run_site):
    before, packages = probe_nodes(HOSTS), {n: _packages(n) for n in HOSTS}
    run = run_site("--check", "--diff")
    after = probe_nodes(HOSTS)
    assert run.rc == 0, run.output[-6000:]
    assert not state_diff(before, after), state_diff(before, after)
    assert {n: _packages(n) for n in HOSTS} == packages
    would = {host: run.changed_tasks(host) for host in HOSTS}
    for host in HOSTS:
        # What a first run does on every node: the cable's netplan file, the fabric
        # environment, linger, the firewall, the checkpoint directory.
        for role in ("direct_link", "fabric_env", "linger", "firewall"):
            assert any(task.startswith(f"{role} : ") for task in would[host]), (host, role, would[host])
    # --diff shows the files it would write.
    assert "40-cx7.yaml" in run.output and "fabric.env" in run.output

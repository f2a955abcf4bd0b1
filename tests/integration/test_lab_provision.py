"""Provision on the two-node lab: the fabric environment carries each node's GID index and
reaches Ray's and the engine's units only (the converged re-run and check mode are the
whole-site ones of test_lab_check_mode.py).
Drift (linger, link address, MTU, GID index, fabric env file, netplan file) is the
fault catalogue's (tests/catalogue/faults.yml, test_lab_faults.py)."""

from __future__ import annotations

import pytest
from labrun import node_exec

pytestmark = pytest.mark.lab

HOSTS = ("spark1", "spark2")
NODE_SUFFIX = {"spark1": 10, "spark2": 11}
FIXTURE_INDEX = {"spark1": 3, "spark2": 5}


@pytest.fixture(scope="module")
def provisioned(site_converged):
    # site.yml once for the session (conftest.py); these tests only read.
    return site_converged


def _env_file(node: str) -> dict[str, str]:
    text = node_exec(node, "cat", "/etc/sparkctl/fabric.env").stdout
    return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))


def test_env_file_carries_each_nodes_fixture_gid_index(provisioned):
    for node in HOSTS:
        env = _env_file(node)
        assert env["NCCL_IB_GID_INDEX"] == str(FIXTURE_INDEX[node])
        assert env["NCCL_IB_HCA"] == "rocep1s0f1,roceP2p1s0f1"
        assert env["MASTER_ADDR"] == "192.168.100.10"
        assert env["VLLM_HOST_IP"] == f"192.168.100.{NODE_SUFFIX[node]}"


def _environment_files(node: str, unit: str) -> str:
    return node_exec(node, "systemctl", "show", "-p", "EnvironmentFiles", "--value", unit).stdout


def test_only_ray_and_the_engine_read_the_fabric_environment(provisioned):
    # No prefix drop-in: a unit merely named like the stack's units sees nothing of fabric.env
    # (NCCL's LD_PRELOAD has no business in nginx, the firewall or rsyncd).
    out = node_exec("spark2", "systemd-run", "--unit=sparkctl-envprobe", "--wait", "--pipe", "--quiet",
                    "--collect", "/usr/bin/env").stdout
    env = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    assert "NCCL_IB_GID_INDEX" not in env and "MAX_JOBS" not in env, env
    for node in HOSTS:
        assert node_exec(node, "test", "!", "-e", "/etc/systemd/system/sparkctl-.service.d/10-fabric-env.conf").returncode == 0
        assert "/etc/sparkctl/fabric.env" not in _environment_files(node, "sparkctl-firewall.service"), node
    assert "/etc/sparkctl/fabric.env" not in _environment_files("spark1", "sparkctl-api-proxy.service")
    assert "/etc/sparkctl/fabric.env" not in _environment_files("spark2", "sparkctl-rsyncd@0.service")
    # Ray's units name it themselves (the engine's unit too, where the serve stage wrote it).
    assert "/etc/sparkctl/fabric.env" in _environment_files("spark1", "sparkctl-ray-head.service")
    assert "/etc/sparkctl/fabric.env" in _environment_files("spark2", "sparkctl-ray-worker.service")

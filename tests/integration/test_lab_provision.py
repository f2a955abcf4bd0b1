"""Provision on the two-node lab: the fabric environment carries each node's GID index and
reaches Ray's and the engine's units only (the converged re-run and check mode are the
whole-site ones of test_lab_check_mode.py).
Drift (linger, link address, MTU, GID index, fabric env file, netplan file) is the
fault catalogue's (tests/catalogue/faults.yml, test_lab_faults.py)."""

from __future__ import annotations

import shlex

import pytest
from labrun import node_exec, service_user

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


def test_the_service_user_is_an_unprivileged_account_of_its_own(provisioned):
    # The model's own code, Ray's jobs and the head's mesh key act as this account.
    user = service_user()
    for node in HOSTS:
        fields = node_exec(node, "getent", "passwd", user).stdout.strip().split(":")
        uid, home, shell = fields[2], fields[5], fields[6]
        assert int(uid) < 1000, f"{user} on {node} is not a system account: uid {uid}"
        assert home == f"/home/{user}" and shell == "/bin/sh", (node, home, shell)
        assert node_exec(node, "getent", "shadow", user).stdout.split(":")[1] == "*", "an account with a password"
        groups = node_exec(node, "id", "-Gn", user).stdout.split()
        assert not {"sudo", "adm", "root", "wheel"} & set(groups), (node, groups)
        tried = node_exec(node, "runuser", "-u", user, "--", "sudo", "-n", "true", check=False)
        assert tried.returncode != 0, f"{user} ran sudo -n true on {node}"


def _over_the_mesh(command: str, stdin: str = "") -> tuple[int, str]:
    """command sent from the head to the worker over the cable with the mesh key, as the head's tools do."""
    proc = node_exec("spark1", "sh", "-c", "printf %s {stdin} | runuser -u {user} -- ssh -o BatchMode=yes "
                     "192.168.100.11 {command}".format(stdin=shlex.quote(stdin), user=service_user(),
                                                       command=shlex.quote(command)), check=False)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.parametrize("command", [
    "hostname",
    "sh -c id",
    "true; id",
    "docker run --rm sparklab/engine:local id",
    "rsync --server --sender -vlogDtpre.iLsfxCIvu . /etc/",
    "rsync --server -vlogDtpre.iLsfxCIvu --delete . /home/{user}/.ssh/",
    "rsync --server -vlogDtpre.iLsfxCIvu . /home/{user}/.ssh/",
])
def test_the_mesh_key_runs_only_what_the_head_runs_on_workers(provisioned, command):
    code, said = _over_the_mesh(command.format(user=service_user()))
    assert code != 0 and "refused" in said, (command, code, said)
    assert "uid=" not in said, said


def test_the_mesh_key_still_runs_the_heads_probe(provisioned):
    code, said = _over_the_mesh("true")
    assert code == 0, said

"""Provision on the two-node lab: a converged cluster re-runs with changed=0
(also in --check); each kind of drift is repaired by one re-run that reports a
change only in the role that owns it and only on the drifted node; a further
run reports changed=0 again."""

from __future__ import annotations

import pytest
from labrun import node_exec

pytestmark = pytest.mark.lab

HOSTS = ("spark1", "spark2")
FIXTURE = "/usr/local/lib/sparklab/roce_fixture.py"
RDMA_ROOT = "/opt/sparklab/sysfs"
# The lab's planned cable: (netdev, rdma device, third octet).
HALVES = (("enp1s0f1np1", "rocep1s0f1", 100), ("enP2p1s0f1np1", "roceP2p1s0f1", 101))
NODE_SUFFIX = {"spark1": 10, "spark2": 11}
FIXTURE_INDEX = {"spark1": 3, "spark2": 5}


@pytest.fixture(scope="module")
def provisioned(lab_up, run_site):
    run = run_site("--tags", "provision")
    assert run.rc == 0, run.output
    return run


def _env_file(node: str) -> dict[str, str]:
    text = node_exec(node, "cat", "/etc/sparkctl/fabric.env").stdout
    return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))


def _move_gid(node: str, index: int) -> None:
    for netdev, ibdev, octet in HALVES:
        node_exec(node, "python3", FIXTURE, "--root", RDMA_ROOT, "--netdev", netdev, "--ibdev", ibdev,
                  "--ipv4", f"192.168.{octet}.{NODE_SUFFIX[node]}", "--index", str(index))


def _assert_repaired_then_quiet(run_site, node: str, role: str):
    repair = run_site("--tags", "provision")
    assert repair.rc == 0, repair.output
    changed = repair.changed_tasks(node)
    assert changed, f"nothing was repaired on {node}:\n{repair.output}"
    assert all(task.startswith(f"{role} : ") for task in changed), changed
    for other in HOSTS:
        if other != node:
            assert repair.changed(other) == 0, repair.changed_tasks(other)
    quiet = run_site("--tags", "provision")
    assert quiet.rc == 0, quiet.output
    assert all(quiet.changed(h) == 0 for h in HOSTS), {h: quiet.changed_tasks(h) for h in HOSTS}
    return repair


def test_converged_rerun_changes_nothing(provisioned, run_site):
    run = run_site("--tags", "provision")
    assert run.rc == 0, run.output
    assert all(run.changed(h) == 0 for h in HOSTS), {h: run.changed_tasks(h) for h in HOSTS}


def test_check_mode_on_converged_changes_nothing(provisioned, run_site):
    run = run_site("--tags", "provision", "--check")
    assert run.rc == 0, run.output
    assert all(run.changed(h) == 0 for h in HOSTS), {h: run.changed_tasks(h) for h in HOSTS}


def test_env_file_carries_each_nodes_fixture_gid_index(provisioned):
    for node in HOSTS:
        env = _env_file(node)
        assert env["NCCL_IB_GID_INDEX"] == str(FIXTURE_INDEX[node])
        assert env["NCCL_IB_HCA"] == "rocep1s0f1,roceP2p1s0f1"
        assert env["MASTER_ADDR"] == "192.168.100.10"
        assert env["VLLM_HOST_IP"] == f"192.168.100.{NODE_SUFFIX[node]}"


def test_moved_gid_index_is_followed(provisioned, run_site):
    _move_gid("spark2", 7)
    try:
        _assert_repaired_then_quiet(run_site, "spark2", "fabric_env")
        assert _env_file("spark2")["NCCL_IB_GID_INDEX"] == "7"
    finally:
        _move_gid("spark2", FIXTURE_INDEX["spark2"])
        run_site("--tags", "provision")
    assert _env_file("spark2")["NCCL_IB_GID_INDEX"] == "5"


def test_removed_link_address_is_restored(provisioned, run_site):
    node_exec("spark1", "ip", "addr", "del", "192.168.100.10/24", "dev", "enp1s0f1np1")
    _assert_repaired_then_quiet(run_site, "spark1", "direct_link")
    assert "192.168.100.10/24" in node_exec("spark1", "ip", "-br", "addr", "show", "enp1s0f1np1").stdout


def test_mtu_reset_is_restored(provisioned, run_site):
    node_exec("spark2", "ip", "link", "set", "mtu", "1500", "dev", "enP2p1s0f1np1")
    _assert_repaired_then_quiet(run_site, "spark2", "direct_link")
    assert "mtu 9000" in node_exec("spark2", "ip", "link", "show", "enP2p1s0f1np1").stdout


def test_disabled_linger_is_restored(provisioned, run_site):
    node_exec("spark2", "loginctl", "disable-linger", "spark")
    _assert_repaired_then_quiet(run_site, "spark2", "linger")
    assert node_exec("spark2", "test", "-e", "/var/lib/systemd/linger/spark", check=False).returncode == 0


def test_hand_edited_env_file_is_restored(provisioned, run_site):
    node_exec("spark1", "sh", "-c", "echo NCCL_IB_GID_INDEX=9 >> /etc/sparkctl/fabric.env")
    _assert_repaired_then_quiet(run_site, "spark1", "fabric_env")
    assert _env_file("spark1")["NCCL_IB_GID_INDEX"] == "3"


def test_units_inherit_the_fabric_environment(provisioned):
    # A transient unit named like the stack's units sees the file through the drop-in.
    out = node_exec("spark2", "systemd-run", "--unit=sparkctl-envprobe", "--wait", "--pipe", "--quiet",
                    "--collect", "/usr/bin/env").stdout
    env = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    assert env.get("NCCL_IB_GID_INDEX") == "5"
    assert env.get("MAX_JOBS") == "4"

"""The fabric environment, compared line by line with reviewed golden files:
a change in what the engines see is a diff in tests/unit/golden/fabric_env/.
Regenerate with SPARKCTL_UPDATE_GOLDEN=1 and review the diff."""

from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.sparkctl.spark.plugins.filter.env_file import env_file_lines, env_file_text
from ansible_collections.sparkctl.spark.plugins.filter.fabric_env import fabric_env
from golden_files import assert_golden_text

GOLDEN = Path(__file__).parent / "golden" / "fabric_env"
SYSTEM_PATH = ["/usr/local/cuda/bin", "/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"]


def _roce(node_suffix, index_first, index_second):
    links = [
        {"interface": "enp1s0f1np1", "rdma_device": "rocep1s0f1", "port": 1, "gid_index": index_first,
         "ipv4": f"192.168.100.{node_suffix}"},
        {"interface": "enP2p1s0f1np1", "rdma_device": "roceP2p1s0f1", "port": 1, "gid_index": index_second,
         "ipv4": f"192.168.101.{node_suffix}"},
    ]
    common = index_first if index_first == index_second else None
    return {"links": links, "gid_index": common, "gid_indexes": {link["interface"]: link["gid_index"] for link in links}}


CASES = {
    # The lab's two nodes: index 3 on the head, 5 on the worker.
    "head-index3": (_roce(10, 3, 3), {}),
    "worker-index5": (_roce(11, 5, 5), {}),
    # Halves at different indexes: NCCL must pick the IPv4 RoCE v2 GID itself.
    "halves-differ": (_roce(11, 3, 5), {}),
    # The Qwen3.8 profile's host NCCL preload and a profile override removing one variable.
    "preload-and-profile": (_roce(10, 3, 3), {"nccl_preload": "/opt/nccl-2.30.7/lib/libnccl.so.2",
                                              "extra": {"NCCL_DEBUG": "WARN", "TP_SOCKET_IFNAME": None, "MAX_JOBS": 2}}),
    # Four Sparks on a switch (spark_fabric: switch): the fourth node, GID index 4, both halves of its
    # port on the switch's two subnets; every node names the head's address as MASTER_ADDR.
    "switch-node4-index4": (_roce(13, 4, 4), {}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_environment_matches_golden(case):
    roce, kwargs = CASES[case]
    lines = env_file_lines(fabric_env(roce, head_address="192.168.100.10/24", path=SYSTEM_PATH, **kwargs))
    assert_golden_text(GOLDEN / f"{case}.env", "\n".join(lines) + "\n")


def test_both_rdma_devices_and_the_primary_netdev():
    env = fabric_env(_roce(11, 5, 5), head_address="192.168.100.10")
    assert env["NCCL_IB_HCA"] == "rocep1s0f1,roceP2p1s0f1"
    assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == env["UCX_NET_DEVICES"] == "enp1s0f1np1"
    assert env["NCCL_IB_GID_INDEX"] == "5"
    assert env["MASTER_ADDR"] == "192.168.100.10"
    assert env["VLLM_HOST_IP"] == env["RAY_NODE_IP_ADDRESS"] == env["SGLANG_HOST_IP"] == "192.168.100.11"
    assert "PATH" not in env and "LD_PRELOAD" not in env


def test_different_indexes_switch_to_address_family_selection():
    env = fabric_env(_roce(11, 3, 5), head_address="192.168.100.10")
    assert "NCCL_IB_GID_INDEX" not in env
    assert env["NCCL_IB_ADDR_FAMILY"] == "AF_INET"
    assert env["NCCL_IB_ROCE_VERSION_NUM"] == "2"


@pytest.mark.parametrize("value", ["a b", "x\ny", "$HOME", "'q'", ""])
def test_values_both_readers_disagree_on_are_refused(value):
    with pytest.raises(AnsibleFilterError, match="NCCL_DEBUG="):
        fabric_env(_roce(10, 3, 3), head_address="192.168.100.10", extra={"NCCL_DEBUG": value})


def test_bad_variable_name_is_refused():
    with pytest.raises(AnsibleFilterError, match="'1BAD' is not a valid"):
        fabric_env(_roce(10, 3, 3), head_address="192.168.100.10", extra={"1BAD": "x"})


def test_no_links_is_refused():
    with pytest.raises(AnsibleFilterError, match="list no link"):
        fabric_env({"links": []}, head_address="192.168.100.10")


def test_the_engine_environment_file_text_is_one_line_per_variable_newline_terminated():
    assert env_file_text({"A": "1", "B": "x y"}) == "A=1\nB=x y\n"
    assert env_file_text({}) == "" and env_file_text(None) == ""


def test_on_a_switch_every_node_names_both_halves_and_the_head():
    """Four Sparks on a switch: each node's NCCL/Gloo environment carries both RDMA devices of its own
    port and its own address, and all agree on the head (NCCL and Gloo rendezvous there)."""
    envs = [fabric_env(_roce(10 + n, 3 + n, 3 + n), head_address="192.168.100.10/24") for n in range(4)]
    assert {env["MASTER_ADDR"] for env in envs} == {"192.168.100.10"}
    assert all(env["NCCL_IB_HCA"] == "rocep1s0f1,roceP2p1s0f1" for env in envs)
    assert all(env["GLOO_SOCKET_IFNAME"] == env["NCCL_SOCKET_IFNAME"] == "enp1s0f1np1" for env in envs)
    assert [env["SGLANG_HOST_IP"] for env in envs] == [f"192.168.100.{10 + n}" for n in range(4)]
    assert [env["NCCL_IB_GID_INDEX"] for env in envs] == ["3", "4", "5", "6"]

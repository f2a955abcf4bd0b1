"""NCCL all_gather_perf over the cable (module_utils/nccl_test.py, filter fabric_test_nccl_plan):
the command and each rank's environment rendered for a direct cable and a switch, against
golden files; the problems that make the number meaningless; the summary line parsed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.sparkctl.spark.plugins.filter.fabric_env import fabric_env
from ansible_collections.sparkctl.spark.plugins.filter.nccl_test import fabric_test_nccl_plan, fabric_test_nccl_result
from ansible_collections.sparkctl.spark.plugins.module_utils import nccl_test
from golden_files import assert_golden_tree

GOLDEN = Path(__file__).parent / "golden" / "nccl_test"
HALVES = ("enp1s0f1np1", "enP2p1s0f1np1")
DEVICES = ("rocep1s0f1", "roceP2p1s0f1")


def _host(index, gid_indexes, mtu=9000, devices=DEVICES):
    """hostvars of a Spark: its cable plan, its link facts and its fabric.env as the fabric_env
    filter renders it from RoCE facts (the halves' GID indexes as resolved on that node)."""
    links = [{"interface": i, "address": f"192.168.{100 + h}.{10 + index}/24"} for h, i in enumerate(HALVES)]
    roce = {"links": [{"interface": i, "rdma_device": d, "port": 1, "gid_index": g,
                       "ipv4": links[h]["address"]} for h, (i, d, g) in enumerate(zip(HALVES, devices, gid_indexes, strict=False))],
            "gid_index": gid_indexes[0] if len(set(gid_indexes)) == 1 else None}
    env = fabric_env(roce, "192.168.100.10/24", path=["/usr/local/cuda/bin", "/usr/bin", "/bin"])
    text = "".join(f"{k}={v}\n" for k, v in env.items())
    # node_state's texts: the fabric environment and each half's MTU as sysfs has it.
    texts = [{"path": "/etc/sparkctl/fabric.env", "content": text}]
    texts += [{"path": f"/sys/class/net/{i}/mtu", "content": f"{mtu}\n"} for i in HALVES]
    return {"spark_link": links, "fabric_test_nccl_read": {"texts": texts}}


def _files(plan):
    files = {"command.txt": plan["command"] + "\n", "problems.json": json.dumps(plan["problems"], indent=2) + "\n"}
    files.update({f"{host}.env": text for host, text in plan["env_files"].items()})
    return files


def test_direct_cable_golden():
    # The nodes resolved different GID indexes (the index differs per node): each rank's own.
    hostvars = {"spark1": _host(0, (3, 3)), "spark2": _host(1, (5, 5))}
    plan = fabric_test_nccl_plan(hostvars, ["spark1", "spark2"], "direct", "/opt/nccl-tests/build/all_gather_perf",
                                 "/etc/sparkctl/fabric.env")
    assert plan["problems"] == [] and plan["ranks"] == 2
    assert_golden_tree(GOLDEN / "direct", _files(plan))
    assert "NCCL_IB_GID_INDEX=3" in plan["env_files"]["spark1"] and "NCCL_IB_GID_INDEX=5" in plan["env_files"]["spark2"]
    assert "NCCL_IB_HCA=rocep1s0f1,roceP2p1s0f1" in plan["env_files"]["spark2"]
    # The engines' variables stay out of the rank's view; Open MPI's own TCP on the first half's subnet.
    assert "VLLM_HOST_IP" not in plan["env_files"]["spark1"]
    assert plan["argv"][plan["argv"].index("btl_tcp_if_include") + 1] == "192.168.100.0/24"


def test_switch_golden_with_halves_at_different_gid_indexes():
    hostvars = {f"spark{i + 1}": _host(i, (3, 4) if i == 2 else (3, 3)) for i in range(3)}
    plan = fabric_test_nccl_plan(hostvars, ["spark1", "spark2", "spark3"], "switch",
                                 "/opt/nccl-tests/build/all_gather_perf", "/etc/sparkctl/fabric.env", "1G")
    assert plan["problems"] == [] and plan["ranks"] == 3
    assert "NCCL_IB_ADDR_FAMILY=AF_INET" in plan["env_files"]["spark3"]
    assert_golden_tree(GOLDEN / "switch", _files(plan))


def test_problems_name_the_half_the_mtu_and_the_fix():
    hostvars = {"spark1": _host(0, (3, 3), mtu=1500), "spark2": _host(1, (3, 3), devices=DEVICES[:1])}
    plan = fabric_test_nccl_plan(hostvars, ["spark1", "spark2"], "direct", "/x/all_gather_perf", "/etc/sparkctl/fabric.env")
    text = "\n".join(plan["problems"])
    assert "spark1: enp1s0f1np1 has MTU 1500, not 9000" in text and "spark_link_mtu: 9000" in text
    assert "spark2: NCCL_IB_HCA='rocep1s0f1' names 1 RDMA device(s) for 2 cable halves" in text
    assert any(line.startswith("problem: ") for line in plan["lines"])


def test_direct_cable_with_three_nodes_is_a_problem():
    nodes = [{"host": f"n{i}", "address": f"192.168.100.{10 + i}/24", "links": [], "env": {"NCCL_SOCKET_IFNAME": "x"}}
             for i in range(3)]
    assert "set spark_fabric: switch" in nccl_test.render(nodes, fabric="direct")["problems"][0]


def test_open_mpi_takes_the_first_halfs_own_subnet_and_no_guessed_one():
    """The subnet is the plan's (spark_link's prefix, link_address.link_subnet): a /30 stays a
    /30; an address without its prefix is refused rather than given a /24."""
    nodes = [{"host": f"n{i}", "address": f"10.9.8.{5 + i}/30", "links": [], "env": {"NCCL_SOCKET_IFNAME": "x"}}
             for i in range(2)]
    argv = nccl_test.render(nodes)["argv"]
    assert argv[argv.index("btl_tcp_if_include") + 1] == argv[argv.index("oob_tcp_if_include") + 1] == "10.9.8.4/30"
    assert "10.9.8.5:1,10.9.8.6:1" in argv
    nodes[0]["address"] = "10.9.8.5"
    with pytest.raises(ValueError, match="'10.9.8.5' has no prefix length"):
        nccl_test.render(nodes)
    hostvars = {"spark1": _host(0, (3, 3)), "spark2": _host(1, (3, 3))}
    hostvars["spark1"]["spark_link"][0]["address"] = "192.168.100.10"
    with pytest.raises(AnsibleFilterError, match="fabric_test_nccl_plan: '192.168.100.10' has no prefix length"):
        fabric_test_nccl_plan(hostvars, ["spark1", "spark2"], "direct", "/x", "/etc/sparkctl/fabric.env")


def test_a_node_without_its_fabric_environment_is_refused():
    hostvars = {"spark1": dict(_host(0, (3, 3)), fabric_test_nccl_read={"texts": []})}
    with pytest.raises(AnsibleFilterError, match="spark1.s fabric environment /etc/sparkctl/fabric.env was not read"):
        fabric_test_nccl_plan(hostvars, ["spark1"], "direct", "/x", "/etc/sparkctl/fabric.env")


# all_gather_perf's summary lines as nccl-tests prints them at the end of a run.
SUMMARY = """#  Rank  0 Group  0 Pid   4242 on     spark1 device  0 [000f:01:00] NVIDIA GB10
#       size         count      type   redop    root     time   algbw   busbw #wrong
  2147483648      67108864     float    none      -1    90612   23.70   23.70      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 21.4352
#
"""


def test_summary_parsed():
    assert fabric_test_nccl_result(SUMMARY) == {"busbw_gbs": 21.4352, "out_of_bounds": 0}
    assert fabric_test_nccl_result("mpirun: command not found") == {"busbw_gbs": None, "out_of_bounds": None}

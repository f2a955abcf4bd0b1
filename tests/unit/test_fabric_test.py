"""The fabric test (module_utils/fabric_test.py, module fabric_bandwidth, filter fabric_test_pairs): which
halves it measures, the tools' command lines on both ends, their output read, and the verdict per half."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.sparkctl.spark.plugins.filter import fabric_test as fabric_filter
from ansible_collections.sparkctl.spark.plugins.module_utils import fabric_test
from ansible_collections.sparkctl.spark.plugins.modules import fabric_bandwidth

from sparkctl.report import show_fabric_test

FIXTURES = Path(__file__).parent / "fixtures" / "fabric_test"

LINK = {
    "spark1": [{"interface": "enp1s0f1np1", "address": "192.168.100.10/24"},
               {"interface": "enP2p1s0f1np1", "address": "192.168.101.10/24"}],
    "spark2": [{"interface": "enp1s0f1np1", "address": "192.168.100.11/24"},
               {"interface": "enP2p1s0f1np1", "address": "192.168.101.11/24"}],
    "spark3": [{"interface": "enp1s0f1np1", "address": "192.168.100.12/24"},
               {"interface": "enP2p1s0f1np1", "address": "192.168.101.12/24"}],
}
# What the roce_gid module returns on each node (its `roce`), GID indexes differing per node.
ROCE = {
    host: {"roce": {"links": [
        {"interface": "enp1s0f1np1", "rdma_device": "rocep1s0f1", "port": 1, "gid_index": gid},
        {"interface": "enP2p1s0f1np1", "rdma_device": "roceP2p1s0f1", "port": 1, "gid_index": gid},
    ]}}
    for host, gid in (("spark1", 3), ("spark2", 5), ("spark3", 7))
}


def hostvars(hosts, roce=True):
    return copy.deepcopy({h: {"spark_link": LINK[h], **({"fabric_test_roce": ROCE[h]} if roce else {})} for h in hosts})


def test_the_head_measures_every_half_of_every_worker():
    pairs = fabric_filter.fabric_test_pairs(hostvars(["spark1", "spark2", "spark3"], roce=False),
                                            ["spark1", "spark2", "spark3"], "spark1", "tcp", "switch")
    assert [(p["peer"], p["half"], p["source"], p["address"]) for p in pairs] == [
        ("spark2", 0, "192.168.100.10", "192.168.100.11"), ("spark2", 1, "192.168.101.10", "192.168.101.11"),
        ("spark3", 0, "192.168.100.10", "192.168.100.12"), ("spark3", 1, "192.168.101.10", "192.168.101.12"),
    ]
    assert all("rdma" not in p for p in pairs)


def test_rdma_pairs_carry_both_ends_devices_and_gid_indexes():
    pairs = fabric_filter.fabric_test_pairs(hostvars(["spark1", "spark2"]), ["spark1", "spark2"], "spark1", "rdma", "direct")
    assert pairs[1]["rdma"] == {"rdma_device": "roceP2p1s0f1", "port": 1, "gid_index": 3}
    assert pairs[1]["peer_rdma"] == {"rdma_device": "roceP2p1s0f1", "port": 1, "gid_index": 5}


def test_an_unresolved_half_and_an_unknown_method_are_refused_by_name():
    hv = hostvars(["spark1", "spark2"])
    hv["spark2"]["fabric_test_roce"]["roce"]["links"].pop()
    with pytest.raises(AnsibleFilterError, match="spark2: no resolved RoCE link for enP2p1s0f1np1"):
        fabric_filter.fabric_test_pairs(hv, ["spark1", "spark2"], "spark1", "rdma", "direct")
    with pytest.raises(AnsibleFilterError, match="'udp' is not one of rdma, tcp"):
        fabric_filter.fabric_test_pairs(hv, ["spark1", "spark2"], "spark1", "udp", "direct")
    assert fabric_filter.fabric_test_package("rdma") == "perftest"
    with pytest.raises(AnsibleFilterError):
        fabric_filter.fabric_test_package("udp")


def test_command_lines_on_both_ends():
    tcp, rdma = (fabric_filter.fabric_test_pairs(hostvars(["spark1", "spark2"]), ["spark1", "spark2"], "spark1", m, "direct")[1]
                 for m in ("tcp", "rdma"))
    # The server ends after one client, and by itself after its lifetime when none comes.
    assert fabric_test.server_argv("tcp", tcp, 5, 18515, 50) == [
        "timeout", "50", "iperf3", "-s", "-1", "-B", "192.168.101.11", "-p", "18516"]
    assert fabric_test.client_argv("tcp", tcp, 5, 18515) == [
        "iperf3", "-c", "192.168.101.11", "-B", "192.168.101.10", "-p", "18516", "-t", "5", "-J",
        "--connect-timeout", "3000"]
    # Each end names its own device and GID index of the half.
    assert fabric_test.server_argv("rdma", rdma, 5, 18515, 50) == [
        "timeout", "50", "ib_write_bw", "-d", "roceP2p1s0f1", "-i", "1", "-x", "5", "-p", "18516", "-D", "5",
        "--report_gbits", "-F"]
    assert fabric_test.client_argv("rdma", rdma, 5, 18515) == [
        "ib_write_bw", "-d", "roceP2p1s0f1", "-i", "1", "-x", "3", "-p", "18516", "-D", "5", "--report_gbits", "-F",
        "192.168.101.11"]


def test_iperf3_reports_read_from_recorded_output():
    gbps, error = fabric_test.parse_iperf3((FIXTURES / "iperf3-client.json").read_text())
    assert error is None and gbps == pytest.approx(7.4668, abs=1e-3)
    gbps, error = fabric_test.parse_iperf3((FIXTURES / "iperf3-refused.json").read_text())
    assert gbps is None and error == "unable to connect to server: Connection refused"
    assert fabric_test.parse_iperf3("iperf3: error - unable to bind")[1] == "iperf3: error - unable to bind"
    assert fabric_test.parse_iperf3(json.dumps({"end": {}}))[1] == "iperf3's report holds no bits_per_second"


# The layout of perftest's ib_write_bw result table (its header, then one line per size).
IB_WRITE_BW = """
---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 Dual-port       : OFF          Device         : roceP2p1s0f1
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
 65536      1694000          0.00               92.51              0.176449
---------------------------------------------------------------------------------------
"""


def test_ib_write_bw_average_read_in_gbit_and_mbyte():
    assert fabric_test.parse_ib_write_bw(IB_WRITE_BW) == (92.51, None)
    in_mbytes = IB_WRITE_BW.replace("[Gb/sec]", "[MB/sec]").replace("92.51", "11563.75")
    assert fabric_test.parse_ib_write_bw(in_mbytes)[0] == pytest.approx(92.51)
    assert fabric_test.parse_ib_write_bw(" Couldn't connect to 192.168.101.11:18516\n") == (
        None, "Couldn't connect to 192.168.101.11:18516")
    assert fabric_test.parse_ib_write_bw(IB_WRITE_BW.split(" 65536")[0])[1] == (
        "ib_write_bw printed its header but no result line")


def test_verdicts_name_the_half_both_ends_and_the_variable():
    pair = fabric_filter.fabric_test_pairs(hostvars(["spark1", "spark2"], roce=False), ["spark1", "spark2"], "spark1",
                                           "tcp", "direct")[1]
    slow = fabric_test.result(pair, 0.19, None, 1)
    assert not slow["ok"]
    assert slow["problem"].startswith("half 1 enP2p1s0f1np1 192.168.101.10 -> spark2 enP2p1s0f1np1 192.168.101.11: "
                                      "0.19 Gbit/s, below the minimum 1 Gbit/s (fabric_test_min_gbps)")
    down = fabric_test.result(pair, None, "unable to connect to server: No route to host", 1)
    assert not down["ok"] and "no traffic (unable to connect to server: No route to host)" in down["problem"]
    good = fabric_test.result(pair, 5.29, None, 1)
    assert good["ok"] and good["problem"] is None
    doc = fabric_test.report("tcp", "spark1", [good, slow], 2)
    assert doc["ok"] is False and doc["tool"] == "iperf3" and doc["problems"] == [slow["problem"]]
    assert fabric_test.report("tcp", "spark1", [], 2)["ok"] is False
    lines = fabric_test.table_lines(doc)
    assert lines[0].split() == ["peer", "half", "head", "side", "peer", "side", "Gbit/s", "minimum", "verdict"]
    assert lines[2].split()[-3:] == ["0.19", "1", "FAIL"]


def test_the_client_retries_only_while_the_server_is_not_listening_yet():
    pair = fabric_filter.fabric_test_pairs(hostvars(["spark1", "spark2"], roce=False), ["spark1", "spark2"], "spark1",
                                           "tcp", "direct")[0]
    refused = (FIXTURES / "iperf3-refused.json").read_text()
    good = (FIXTURES / "iperf3-client.json").read_text()
    now = [0.0]
    outputs = [(1, refused, ""), (1, refused, ""), (0, good, "")]
    calls = []

    def run(argv):
        calls.append(argv)
        return outputs.pop(0)

    def sleep(seconds):
        now[0] += seconds

    gbps, error = fabric_bandwidth.measure(run, pair, "tcp", 2, 18515, 15, sleep=sleep, clock=lambda: now[0])
    assert error is None and gbps == pytest.approx(7.4668, abs=1e-3) and len(calls) == 3

    # Refused past the wait: the half is reported without traffic.
    outputs[:] = [(1, refused, "")] * 20
    gbps, error = fabric_bandwidth.measure(run, pair, "tcp", 2, 18515, 3, sleep=sleep, clock=lambda: now[0])
    assert gbps is None and "Connection refused" in error

    # Any other error is final at once.
    calls.clear()
    outputs[:] = [(1, json.dumps({"error": "unable to connect to server: No route to host"}), "")]
    gbps, error = fabric_bandwidth.measure(run, pair, "tcp", 2, 18515, 15, sleep=sleep, clock=lambda: now[0])
    assert error == "unable to connect to server: No route to host" and len(calls) == 1


def test_the_wrapper_prints_the_report(tmp_path):
    from rich.console import Console

    pair = fabric_filter.fabric_test_pairs(hostvars(["spark1", "spark2"], roce=False), ["spark1", "spark2"], "spark1",
                                           "tcp", "direct")[1]
    doc = fabric_test.report("tcp", "spark1", [fabric_test.result(pair, None, "No route to host", 1)], 2)
    path = tmp_path / "fabric-test.json"
    path.write_text(json.dumps(doc))
    console = Console(record=True, width=200)
    assert show_fabric_test(path, console) is False
    text = console.export_text()
    assert "Fabric test (iperf3, 2 s per half): FAILED" in text
    assert "enP2p1s0f1np1 192.168.101.11" in text and "no traffic (No route to host)" in text

"""sparkctl.spark.link_ping_*: which peers each cable half must reach, and what a failed
no-fragment ping means. Ping outputs are recorded (tests/unit/fixtures/ping/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.sparkctl.spark.plugins.filter.link_ping import (
    FilterModule,
    link_ping_failed_targets,
    link_ping_problems,
    link_ping_targets,
    parse_ping,
)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "ping"

HOSTVARS = {
    "spark1": {"spark_link": [{"interface": "enp1s0f1np1", "address": "192.168.100.10/24"},
                              {"interface": "enP2p1s0f1np1", "address": "192.168.101.10/24"}]},
    "spark2": {"spark_link": [{"interface": "enp1s0f1np1", "address": "192.168.100.11/24"},
                              {"interface": "enP2p1s0f1np1", "address": "192.168.101.11/24"}]},
    "spark3": {"spark_link": [{"interface": "enp1s0f0np0", "address": "192.168.100.12/24"},
                              {"interface": "enP2p1s0f0np0", "address": "192.168.101.12/24"}]},
}
TO_SPARK2_HALF0 = {"interface": "enp1s0f1np1", "source": "192.168.100.10", "half": 0, "peer": "spark2",
                   "peer_interface": "enp1s0f1np1", "address": "192.168.100.11"}
TO_SPARK2_HALF1 = {"interface": "enP2p1s0f1np1", "source": "192.168.101.10", "half": 1, "peer": "spark2",
                   "peer_interface": "enP2p1s0f1np1", "address": "192.168.101.11"}
TO_SPARK1_HALF0 = {"interface": "enp1s0f1np1", "source": "192.168.100.11", "half": 0, "peer": "spark1",
                   "peer_interface": "enp1s0f1np1", "address": "192.168.100.10"}
TO_SPARK1_HALF1 = {"interface": "enP2p1s0f1np1", "source": "192.168.101.11", "half": 1, "peer": "spark1",
                   "peer_interface": "enP2p1s0f1np1", "address": "192.168.101.10"}


def recorded(name, item):
    """A loop result of ansible.builtin.command as registered, from a recorded ping."""
    return {
        "item": item,
        "rc": int((FIXTURES / f"{name}.rc").read_text()),
        "stdout": (FIXTURES / f"{name}.out").read_text().rstrip("\n"),
        "stderr": (FIXTURES / f"{name}.err").read_text().rstrip("\n"),
        "changed": False,
    }


# --- targets -------------------------------------------------------------------------


def test_two_nodes_ping_each_other_on_both_halves():
    assert link_ping_targets(HOSTVARS, ["spark1", "spark2"], "spark1", "direct") == [TO_SPARK2_HALF0, TO_SPARK2_HALF1]
    assert link_ping_targets(HOSTVARS, ["spark1", "spark2"], "spark2", "direct") == [TO_SPARK1_HALF0, TO_SPARK1_HALF1]


def test_three_nodes_pair_halves_by_index_not_by_name():
    # A direct cable joins two nodes, a switch (spark_fabric: switch) more.
    targets = link_ping_targets(HOSTVARS, ["spark1", "spark2", "spark3"], "spark1", "switch")

    assert [(t["peer"], t["interface"], t["peer_interface"], t["address"]) for t in targets] == [
        ("spark2", "enp1s0f1np1", "enp1s0f1np1", "192.168.100.11"),
        ("spark2", "enP2p1s0f1np1", "enP2p1s0f1np1", "192.168.101.11"),
        ("spark3", "enp1s0f1np1", "enp1s0f0np0", "192.168.100.12"),
        ("spark3", "enP2p1s0f1np1", "enP2p1s0f0np0", "192.168.101.12"),
    ]


def test_skipped_duplicate_and_single_node():
    assert link_ping_targets(HOSTVARS, ["spark1", "spark2", "spark2", "spark3"], "spark1", "switch", skip_hosts=["spark3"]) == [
        TO_SPARK2_HALF0, TO_SPARK2_HALF1]
    assert link_ping_targets(HOSTVARS, ["spark1"], "spark1", "direct") == []


def test_peer_with_fewer_halves_is_paired_as_far_as_it_goes():
    hostvars = dict(HOSTVARS, spark2={"spark_link": HOSTVARS["spark2"]["spark_link"][:1]})

    assert link_ping_targets(hostvars, ["spark1", "spark2"], "spark1", "direct") == [TO_SPARK2_HALF0]


# --- parsing -------------------------------------------------------------------------


def test_parse_success():
    assert parse_ping((FIXTURES / "jumbo_ok.out").read_text()) == {
        "transmitted": 3, "received": 3, "source": "192.168.101.10", "local_mtu": None,
        "path_mtu_hop": None, "path_mtu": None, "errors": []}


def test_parse_local_mtu_error_in_stderr():
    parsed = parse_ping((FIXTURES / "local_mtu.out").read_text(), (FIXTURES / "local_mtu.err").read_text())

    assert (parsed["transmitted"], parsed["received"], parsed["local_mtu"], parsed["errors"]) == (3, 0, 1500, [])


def test_parse_frag_needed():
    parsed = parse_ping((FIXTURES / "frag_needed.out").read_text())

    assert (parsed["path_mtu_hop"], parsed["path_mtu"], parsed["local_mtu"]) == ("192.168.100.1", 1500, 1500)


def test_parse_output_without_statistics():
    assert parse_ping("", "ping: SO_BINDTODEVICE enp9s0: No such device\n") == {
        "transmitted": 0, "received": 0, "source": None, "local_mtu": None,
        "path_mtu_hop": None, "path_mtu": None, "errors": ["ping: SO_BINDTODEVICE enp9s0: No such device"]}


# --- verdicts ------------------------------------------------------------------------


def test_all_replies_mean_no_problem():
    results = [recorded("jumbo_ok", TO_SPARK2_HALF1)]

    assert link_ping_problems(results, 9000, this_host="spark1") == []
    assert link_ping_failed_targets(results) == []


def test_skipped_results_are_ignored():
    skipped = {"item": TO_SPARK2_HALF0, "skipped": True, "changed": False, "false_condition": "direct_link_verify_now"}

    assert link_ping_problems([skipped], 9000) == []
    assert link_ping_failed_targets([skipped]) == []
    assert link_ping_problems([], 9000) == []


def test_peer_mtu_too_small_when_a_small_ping_gets_through():
    results = [recorded("peer_mtu", TO_SPARK2_HALF0), recorded("jumbo_ok", TO_SPARK2_HALF1)]
    assert link_ping_failed_targets(results) == [TO_SPARK2_HALF0]

    (problem,) = link_ping_problems(results, 9000, small_results=[recorded("small_ok", TO_SPARK2_HALF0)], this_host="spark1")

    assert problem.startswith("spark1 enp1s0f1np1 -> spark2 192.168.100.11 (half 0, MTU 9000, 8972-byte no-fragment ping): "
                              "no reply to jumbo frames although a small ping gets through")
    assert "ping said: ping: sendmsg: No buffer space available" in problem
    assert "set MTU 9000 on spark2's enp1s0f1np1" in problem
    assert "raise its MTU to 9000 or more" in problem


def test_dead_path_when_even_a_small_ping_fails():
    results = [recorded("dead_jumbo", TO_SPARK2_HALF1)]

    (problem,) = link_ping_problems(results, 9000, small_results=[recorded("dead_small", TO_SPARK2_HALF1)], this_host="spark1")

    assert "no reply at all (3 sent, 0 received)" in problem
    assert "check the cable on this half" in problem
    assert "spark2 holds 192.168.101.11 on enP2p1s0f1np1" in problem


@pytest.mark.parametrize(
    "recording, target, this_host, said",
    [
        ("local_mtu", TO_SPARK1_HALF0, "spark2",
         ["refused locally, 'message too long, mtu=1500': enp1s0f1np1's own MTU is below 9000",
          "re-run the direct_link role on spark2"]),
        ("no_local_addr", TO_SPARK1_HALF1, "spark2",
         ["sent from 172.30.77.12, not from this node's link address 192.168.101.11",
          "enP2p1s0f1np1 has lost its address"]),
        ("frag_needed", TO_SPARK2_HALF0, "spark1",
         ["192.168.100.1 answered 'Frag needed' with MTU 1500", "raise the switch port MTU to 9000"]),
    ],
    ids=["own MTU too small", "own address missing", "switch in between with a small MTU"],
)
def test_a_failed_jumbo_ping_names_its_cause(recording, target, this_host, said):
    (problem,) = link_ping_problems([recorded(recording, target)], 9000, this_host=this_host)

    for text in said:
        assert text in problem


def test_partial_loss_blames_the_cable():
    result = recorded("partial_loss", TO_SPARK2_HALF0)
    assert link_ping_failed_targets([result]) == [TO_SPARK2_HALF0]

    (problem,) = link_ping_problems([result], "9000", this_host="spark1")

    assert "1 of 3 replies lost" in problem
    assert "reseat or replace the cable" in problem


def test_ping_that_could_not_run():
    result = {"item": TO_SPARK2_HALF0, "rc": 2, "stdout": "", "stderr": "ping: SO_BINDTODEVICE enp1s0f1np1: No such device"}

    (problem,) = link_ping_problems([result], 9000)

    assert problem.startswith("this node enp1s0f1np1 -> spark2 192.168.100.11")
    assert "ping could not run (ping: SO_BINDTODEVICE enp1s0f1np1: No such device)" in problem


@pytest.mark.parametrize("name", ["link_ping_targets", "link_ping_failed_targets", "link_ping_problems"])
def test_filters_are_registered(name):
    assert name in FilterModule().filters()

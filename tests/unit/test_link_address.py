"""module_utils/link_address: the one place a cable address loses its prefix length, shared
by the link_ips filter, the profile's renderer, the fabric environment, the ping plan, the
Ray cluster's expected nodes, the mesh keys' from= and the RoCE GID resolution."""

import pathlib
import re

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.sparkctl.spark.plugins.filter.fabric_env import fabric_env
from ansible_collections.sparkctl.spark.plugins.filter.fabric_test import fabric_test_pairs
from ansible_collections.sparkctl.spark.plugins.filter.link_ips import link_ips, link_peer_addresses
from ansible_collections.sparkctl.spark.plugins.filter.link_ping import link_ping_targets
from ansible_collections.sparkctl.spark.plugins.filter.profile import profile_cluster
from ansible_collections.sparkctl.spark.plugins.filter.ray_cluster import ray_cluster_expected
from ansible_collections.sparkctl.spark.plugins.module_utils.link_address import (
    bare_address, fabric_peers, link_addresses, link_interface, link_subnet, peer_addresses, peer_targets,
    primary_address)
from ansible_collections.sparkctl.spark.plugins.module_utils.sysfs_net import split_address

REPO = pathlib.Path(__file__).resolve().parents[2]
PLUGINS = REPO / "collections" / "ansible_collections" / "sparkctl" / "spark" / "plugins"

LINK = [
    {"interface": "enp1s0f1np1", "address": "192.168.100.10/24"},
    {"interface": "enP2p1s0f1np1", "address": "192.168.101.10/24"},
]


@pytest.mark.parametrize(
    "given, bare",
    [("192.168.100.10/24", "192.168.100.10"), ("192.168.100.10", "192.168.100.10"), (" 10.9.8.7/30 ", "10.9.8.7"),
     ("fd00::1/64", "fd00::1")],
)
def test_bare_address_drops_the_prefix(given, bare):
    assert bare_address(given) == bare


@pytest.mark.parametrize("given", ["", None, "spark1", "300.1.1.1/24", "192.168.100.10/40", '192.168.100.10",command="sh'])
def test_bare_address_refuses_what_is_not_an_address(given):
    with pytest.raises(ValueError, match="is not an address"):
        bare_address(given)


@pytest.mark.parametrize("given, subnet", [("192.168.100.10/24", "192.168.100.0/24"), ("10.9.8.6/30", "10.9.8.4/30"),
                                           ("192.168.100.10/255.255.255.0", "192.168.100.0/24")])
def test_a_cable_halfs_subnet_is_its_planned_prefix(given, subnet):
    assert link_subnet(given) == subnet
    assert str(link_interface(given).network) == subnet and str(link_interface(given).ip) == bare_address(given)


@pytest.mark.parametrize("given, match", [("192.168.100.10", "has no prefix length"), (None, "has no prefix length"),
                                          ("x/24", "is not an address"), ("192.168.100.10/ 24", "is not an address")])
def test_a_subnet_is_never_guessed(given, match):
    with pytest.raises(ValueError, match=match):
        link_subnet(given)


def test_link_addresses_and_the_primary_one():
    assert link_addresses(LINK) == ["192.168.100.10", "192.168.101.10"]
    assert primary_address(LINK) == "192.168.100.10"
    with pytest.raises(ValueError, match=r"spark_link\[0\]\.address '192.168.100.10' must be an address with its prefix"):
        link_addresses([{"interface": "x", "address": "192.168.100.10"}])


def test_every_reader_gives_the_owners_string():
    """The filter behind spark_link_ips, profile_cluster (spark_cluster's link_ip), the fabric
    environment's *_HOST_IP and MASTER_ADDR, Ray's expected nodes and the GID resolution's
    address all agree with link_addresses."""
    owner = link_addresses(LINK)
    assert link_ips(LINK) == owner
    hostvars = {"spark1": {"spark_link": LINK}, "spark2": {"spark_link": [{"interface": "e", "address": "192.168.100.11/24"}]}}
    cluster = profile_cluster({"spark_head": ["spark1"], "spark_workers": ["spark2"]}, hostvars, "spark", "/m", "/k")
    assert cluster["head"]["link_ip"] == owner[0]
    assert [n["ip"] for n in ray_cluster_expected(cluster)] == [owner[0], "192.168.100.11"]
    roce = {"gid_index": 3, "links": [{"interface": "enp1s0f1np1", "rdma_device": "rocep1s0f1", "ipv4": LINK[0]["address"]}]}
    env = fabric_env(roce, head_address=LINK[0]["address"])
    assert env["VLLM_HOST_IP"] == env["MASTER_ADDR"] == owner[0]
    assert split_address(LINK[1]["address"]) == owner[1]


def test_a_bad_address_is_a_filter_error_naming_the_filter():
    with pytest.raises(AnsibleFilterError, match="profile_cluster: spark1"):
        profile_cluster({"spark_head": ["spark1"]}, {"spark1": {"spark_link": [{"interface": "e", "address": "x/24"}]}},
                        "spark", "/m", "/k")
    with pytest.raises(AnsibleFilterError, match="fabric_env"):
        fabric_env({"links": [{"interface": "e", "rdma_device": "r", "ipv4": "x"}]}, head_address="192.168.100.10")


# An address's prefix cut off by hand: str.split/partition on "/" or a Jinja regex on it.
INLINE_CUT = re.compile(r"""(split|partition)\(\s*["']/["']|regex_replace\(\s*["'][^"']*/""")


def test_no_plugin_cuts_a_prefix_by_hand():
    """Path handling splits on '/' too; those lines name a path, never an address."""
    offenders = []
    for path in sorted(PLUGINS.rglob("*.py")):
        if path.name == "link_address.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if INLINE_CUT.search(line) and re.search(r"address|_ip\b|\bip\b|ipv4|link", line):
                offenders.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    for path in sorted(list((REPO / "roles").rglob("*.yml")) + list((REPO / "roles").rglob("*.j2"))
                       + list((REPO / "playbooks").glob("*.yml"))):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if INLINE_CUT.search(line) and re.search(r"address|link|_ip", line):
                offenders.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert offenders == []


# --- Who a node's peers are: the one owner of the answer (spark_fabric) -----------------------

def _hostvars(count):
    hostvars = {}
    for i in range(count):
        hostvars[f"spark{i + 1}"] = {"spark_link": [
            {"interface": "enp1s0f1np1", "address": f"192.168.100.{10 + i}/24"},
            {"interface": "enP2p1s0f1np1", "address": f"192.168.101.{10 + i}/24"},
        ]}
    return hostvars


def test_a_direct_cable_has_the_other_node_as_its_one_peer():
    assert fabric_peers(["spark1", "spark2"], "spark1", "direct") == ["spark2"]
    assert fabric_peers(["spark1", "spark2", "spark1"], "spark2", "direct") == ["spark1"]


def test_a_direct_cable_refuses_a_third_node_naming_the_variable_and_the_fix():
    with pytest.raises(ValueError, match=r"spark_fabric is 'direct' but the cluster has 3 nodes .* set spark_fabric: switch"):
        fabric_peers(["spark1", "spark2", "spark3"], "spark1", "direct")


def test_on_a_switch_every_node_is_every_nodes_peer():
    hosts = ["spark1", "spark2", "spark3", "spark4"]
    assert fabric_peers(hosts, "spark3", "switch") == ["spark1", "spark2", "spark4"]


def test_an_unknown_fabric_is_refused():
    with pytest.raises(ValueError, match="spark_fabric 'ring' must be one of direct, switch"):
        fabric_peers(["spark1", "spark2"], "spark1", "ring")
    with pytest.raises(ValueError, match="spark_fabric 'ring'"):
        peer_targets(_hostvars(2), ["spark1", "spark2"], "spark1", "ring")


def test_peer_targets_on_a_switch_pair_every_half_with_every_peer():
    hostvars = _hostvars(3)
    targets = peer_targets(hostvars, ["spark1", "spark2", "spark3"], "spark2", "switch")
    assert [(t["peer"], t["half"], t["source"], t["address"]) for t in targets] == [
        ("spark1", 0, "192.168.100.11", "192.168.100.10"), ("spark1", 1, "192.168.101.11", "192.168.101.10"),
        ("spark3", 0, "192.168.100.11", "192.168.100.12"), ("spark3", 1, "192.168.101.11", "192.168.101.12"),
    ]
    assert [t["peer"] for t in peer_targets(hostvars, ["spark1", "spark2", "spark3"], "spark2", "switch", ["spark3"])] == ["spark1"] * 2


def test_the_ping_plan_and_the_fabric_test_take_their_peers_from_the_owner():
    hostvars = _hostvars(3)
    hosts = ["spark1", "spark2", "spark3"]
    assert link_ping_targets(hostvars, hosts, "spark1", "switch") == peer_targets(hostvars, hosts, "spark1", "switch")
    assert {p["peer"] for p in fabric_test_pairs(hostvars, hosts, "spark1", "tcp", "switch")} == {"spark2", "spark3"}
    with pytest.raises(AnsibleFilterError, match="spark_fabric is 'direct'"):
        link_ping_targets(_hostvars(3), hosts, "spark1", "direct")


def test_peer_addresses_are_every_peers_halves_once():
    hostvars = _hostvars(3)
    assert peer_addresses(hostvars, ["spark1", "spark2", "spark3"], "spark1", "switch") == [
        "192.168.100.11", "192.168.101.11", "192.168.100.12", "192.168.101.12"]
    assert link_peer_addresses(_hostvars(2), ["spark1", "spark2"], "spark2", "direct") == ["192.168.100.10", "192.168.101.10"]
    with pytest.raises(AnsibleFilterError, match="spark_fabric is 'direct' but the cluster has 3 nodes"):
        link_peer_addresses(_hostvars(3), ["spark1", "spark2", "spark3"], "spark1", "direct")

"""sparkctl.spark.link_facts: sysfs netdev + RoCE GID table in, spark_link_facts fact out.

RDMA trees come from the lab's fixture generator (tests/lab/node/roce_fixture.py), the
class/net attributes by tests/unit/cable_sysfs.py.
"""

from __future__ import annotations

import errno
import json
import os

import module_runner
import pytest
from ansible_collections.sparkctl.spark.plugins.module_utils import sysfs_net
from ansible_collections.sparkctl.spark.plugins.modules import link_facts

import roce_fixture  # tests/lab/node, put on sys.path by conftest.py
from cable_sysfs import IBDEV, MAC, NETDEV, NODE1_GID, OTHER_HALF, OTHER_IBDEV, write_netdev

LINK_LOCAL_GID = "fe80:0000:0000:0000:4ebb:47ff:fe2e:11a3"
GLOBAL_GID = "2001:0db8:0001:0000:4ebb:47ff:fe2e:11a3"
IP = "/usr/sbin/ip"

IP_ADDR_JSON = json.dumps(
    [
        {
            "ifindex": 4,
            "ifname": NETDEV,
            "flags": ["BROADCAST", "MULTICAST", "UP", "LOWER_UP"],
            "mtu": 9000,
            "qdisc": "mq",
            "operstate": "UP",
            "group": "default",
            "txqlen": 1000,
            "link_type": "ether",
            "address": MAC,
            "broadcast": "ff:ff:ff:ff:ff:ff",
            "addr_info": [
                {
                    "family": "inet",
                    "local": "192.168.100.10",
                    "prefixlen": 24,
                    "broadcast": "192.168.100.255",
                    "scope": "global",
                    "label": NETDEV,
                    "valid_life_time": 4294967295,
                    "preferred_life_time": 4294967295,
                },
                {
                    "family": "inet6",
                    "local": "fe80::4ebb:47ff:fe2e:11a3",
                    "prefixlen": 64,
                    "scope": "link",
                    "valid_life_time": 4294967295,
                    "preferred_life_time": 4294967295,
                },
            ],
        }
    ]
)


def gid_entry(index, gid, gid_type, ndev=NETDEV, ipv4=None):
    return {"index": index, "gid": gid, "type": gid_type, "ndev": ndev, "ipv4": ipv4}


def expected_table(index):
    """The GID table the generator writes for 192.168.100.10 at `index` (3 or 5)."""
    table = [
        gid_entry(0, LINK_LOCAL_GID, "IB/RoCE v1"),
        gid_entry(1, LINK_LOCAL_GID, "RoCE v2"),
    ]
    if index == 5:
        table += [gid_entry(2, GLOBAL_GID, "IB/RoCE v1"), gid_entry(3, GLOBAL_GID, "RoCE v2")]
    table += [
        gid_entry(index - 1, NODE1_GID, "IB/RoCE v1", ipv4="192.168.100.10"),
        gid_entry(index, NODE1_GID, "RoCE v2", ipv4="192.168.100.10"),
    ]
    return table


@pytest.fixture
def spark_sysfs(tmp_path):
    """One sysfs root holding both netdevs of the cable, the first with RoCE at index 3."""
    root = tmp_path / "sys"
    write_netdev(root, NETDEV)
    roce_fixture.write_roce_tree(str(root), NETDEV, IBDEV, "192.168.100.10", 3, mac=MAC)
    return root


# --- pure helpers --------------------------------------------------------------------


@pytest.mark.parametrize(
    "gid, expected",
    [
        (NODE1_GID, "192.168.100.10"),
        ("0000:0000:0000:0000:0000:ffff:c0a8:650b", "192.168.101.11"),
        (LINK_LOCAL_GID, None),
        ("0000:0000:0000:0000:0000:0000:c0a8:640a", None),
        ("not-a-gid", None),
    ],
)
def test_gid_to_ipv4(gid, expected):
    assert sysfs_net.gid_to_ipv4(gid) == expected


def test_ip_json_gives_addresses_with_prefix():
    assert sysfs_net.parse_ip_addr_json(IP_ADDR_JSON, NETDEV) == (
        ["192.168.100.10/24"],
        ["fe80::4ebb:47ff:fe2e:11a3/64"],
    )


def test_ip_json_padding_objects_and_other_links_are_ignored():
    text = json.dumps(
        [
            {},
            {"ifname": "wlP9s9", "addr_info": [{"family": "inet", "local": "10.0.0.5", "prefixlen": 24}]},
            {"ifname": NETDEV, "addr_info": [{"family": "inet", "local": "192.168.100.10", "prefixlen": 24}]},
        ]
    )

    assert sysfs_net.parse_ip_addr_json(text, NETDEV) == (["192.168.100.10/24"], [])


def test_ip_json_of_interface_without_address():
    assert sysfs_net.parse_ip_addr_json('[{"ifindex":4,"ifname":"%s","addr_info":[]}]' % NETDEV, NETDEV) == ([], [])


@pytest.mark.parametrize("text", ["Device \"x\" does not exist.", '{"ifname": "x"}'])
def test_ip_json_garbage_is_rejected(text):
    with pytest.raises(ValueError, match="cannot parse ip -j output"):
        sysfs_net.parse_ip_addr_json(text)


def test_ip_outcome_keeps_ips_own_message():
    assert sysfs_net.ip_addr_outcome(1, "", 'Device "enp9s0" does not exist.\n') == (None, 'Device "enp9s0" does not exist.')
    assert sysfs_net.ip_addr_outcome(0, "[]", "") == ("[]", None)
    assert sysfs_net.ip_addr_outcome(255, "", "") == (None, "ip exited with return code 255")


# --- reading sysfs -------------------------------------------------------------------


@pytest.mark.parametrize("index", [3, 5])
def test_gid_table_from_generated_tree(tmp_path, index):
    roce_fixture.write_roce_tree(str(tmp_path), NETDEV, IBDEV, "192.168.100.10", index, mac=MAC)

    assert sysfs_net.read_gid_table(str(tmp_path), IBDEV, 1) == expected_table(index)


def spark_half_facts(**changes):
    """interface_facts of the Spark's cable half in spark_sysfs (RoCE v2 at GID index 3), with changes."""
    facts = {
        "exists": True,
        "operstate": "up",
        "carrier": True,
        "mtu": 9000,
        "mac": MAC,
        "ipv4": [],
        "ipv6": [],
        "address_error": None,
        "rdma_device": IBDEV,
        "rdma_fw_version": None,
        "rdma_port": 1,
        "gids": expected_table(3),
        "roce_v2_ipv4": [{"index": 3, "ipv4": "192.168.100.10"}],
    }
    facts.update(changes)
    return facts


def test_interface_with_roce_at_index_3(spark_sysfs):
    facts = sysfs_net.interface_facts(NETDEV, str(spark_sysfs), str(spark_sysfs))

    assert facts == spark_half_facts()


def test_the_adapters_firmware_version_is_read_where_sysfs_has_it(spark_sysfs):
    (spark_sysfs / "class" / "infiniband" / IBDEV / "fw_ver").write_text("28.43.1014\n")

    facts = sysfs_net.interface_facts(NETDEV, str(spark_sysfs), str(spark_sysfs))

    assert (facts["rdma_device"], facts["rdma_fw_version"]) == (IBDEV, "28.43.1014")


def test_rdma_tree_can_live_under_its_own_root(tmp_path):
    sys_root = tmp_path / "sys"
    rdma_root = tmp_path / "rdma"
    write_netdev(sys_root, NETDEV, mtu="1500")
    roce_fixture.write_roce_tree(str(rdma_root), NETDEV, IBDEV, "192.168.100.10", 5, mac=MAC)

    facts = sysfs_net.gather_link_facts([NETDEV], sysfs_root=str(sys_root), rdma_sysfs_root=str(rdma_root))

    link = facts["interfaces"][NETDEV]
    assert (link["mtu"], link["rdma_device"], link["roce_v2_ipv4"]) == (1500, IBDEV, [{"index": 5, "ipv4": "192.168.100.10"}])
    # The default RDMA root is sysfs_root, which has no RDMA tree here.
    alone = sysfs_net.gather_link_facts([NETDEV], sysfs_root=str(sys_root))
    assert (alone["interfaces"][NETDEV]["rdma_device"], alone["interfaces"][NETDEV]["gids"]) == (None, [])


def test_netdev_without_rdma_device(tmp_path):
    write_netdev(tmp_path, "enP7s7", mtu="1500")

    facts = sysfs_net.interface_facts("enP7s7", str(tmp_path), str(tmp_path))

    assert (facts["exists"], facts["rdma_device"], facts["rdma_port"], facts["gids"], facts["roce_v2_ipv4"]) == (True, None, None, [], [])


def test_missing_interface_is_listed_not_raised(spark_sysfs):
    calls = []

    def run_ip_addr(interface):
        calls.append(interface)
        return IP_ADDR_JSON, None

    facts = sysfs_net.gather_link_facts([NETDEV, "enp1s0f0np0"], sysfs_root=str(spark_sysfs), run_ip_addr=run_ip_addr)

    assert facts["missing"] == ["enp1s0f0np0"]
    # The same keys as a present interface, so a reader never needs .get(); every one empty.
    missing = facts["interfaces"]["enp1s0f0np0"]
    assert list(missing) == list(facts["interfaces"][NETDEV])
    assert missing["exists"] is False
    assert {key: value for key, value in missing.items() if value not in (None, [])} == {"exists": False}
    assert calls == [NETDEV]
    assert facts["interfaces"][NETDEV]["ipv4"] == ["192.168.100.10/24"]


def test_down_link_carrier_read_einval_gives_null(spark_sysfs, monkeypatch):
    write_netdev(spark_sysfs, NETDEV, operstate="down")
    real_open = open

    def open_like_sysfs(path, *args, **kwargs):
        if str(path).endswith(os.sep + "carrier"):
            raise OSError(errno.EINVAL, "Invalid argument", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(sysfs_net, "open", open_like_sysfs, raising=False)

    facts = sysfs_net.interface_facts(NETDEV, str(spark_sysfs), str(spark_sysfs))

    assert (facts["operstate"], facts["carrier"]) == ("down", None)


@pytest.mark.parametrize("content, expected", [("0", False), ("1", True), (None, None)])
def test_carrier_values(tmp_path, content, expected):
    write_netdev(tmp_path, NETDEV, carrier=content)

    assert sysfs_net.interface_facts(NETDEV, str(tmp_path), str(tmp_path))["carrier"] is expected


def test_unreadable_gid_type_is_null_and_entry_is_not_roce_v2(spark_sysfs, monkeypatch):
    real_open = open
    types_3 = os.path.join("gid_attrs", "types", "3")

    def open_like_sysfs(path, *args, **kwargs):
        if str(path).endswith(types_3):
            raise OSError(errno.EINVAL, "Invalid argument", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(sysfs_net, "open", open_like_sysfs, raising=False)

    facts = sysfs_net.interface_facts(NETDEV, str(spark_sysfs), str(spark_sysfs))

    assert facts["gids"][-1] == gid_entry(3, NODE1_GID, None, ipv4="192.168.100.10")
    assert facts["roce_v2_ipv4"] == []


def test_roce_v2_entries_of_a_vlan_on_the_same_port_are_not_the_links(spark_sysfs):
    port_dir = spark_sysfs / "class" / "infiniband" / IBDEV / "ports" / "1"
    (port_dir / "gid_attrs" / "ndevs" / "3").write_text(NETDEV + ".100\n")

    facts = sysfs_net.interface_facts(NETDEV, str(spark_sysfs), str(spark_sysfs))

    assert facts["gids"][-1] == gid_entry(3, NODE1_GID, "RoCE v2", ndev=NETDEV + ".100", ipv4="192.168.100.10")
    assert facts["roce_v2_ipv4"] == []
    assert sysfs_net.roce_v2_ipv4_entries(facts["gids"], NETDEV + ".100") == [{"index": 3, "ipv4": "192.168.100.10"}]


def test_missing_type_and_ndev_files_give_null(spark_sysfs):
    port_dir = spark_sysfs / "class" / "infiniband" / IBDEV / "ports" / "1"
    (port_dir / "gid_attrs" / "types" / "3").unlink()
    (port_dir / "gid_attrs" / "ndevs" / "3").unlink()

    gids = sysfs_net.read_gid_table(str(spark_sysfs), IBDEV, 1)

    assert gids[-1] == gid_entry(3, NODE1_GID, None, ndev=None, ipv4="192.168.100.10")


def test_interface_without_address_has_only_link_local_gids(tmp_path):
    write_netdev(tmp_path, NETDEV)
    roce_fixture.write_roce_tree(str(tmp_path), NETDEV, IBDEV, None, 3, mac=MAC)

    facts = sysfs_net.interface_facts(NETDEV, str(tmp_path), str(tmp_path))

    assert [entry["index"] for entry in facts["gids"]] == [0, 1]
    assert facts["roce_v2_ipv4"] == []


def test_removed_tree_means_no_rdma_device(spark_sysfs):
    roce_fixture.remove_roce_tree(str(spark_sysfs), NETDEV, IBDEV)

    facts = sysfs_net.interface_facts(NETDEV, str(spark_sysfs), str(spark_sysfs))

    assert (facts["exists"], facts["rdma_device"], facts["gids"]) == (True, None, [])


def test_both_halves_of_the_cable(tmp_path):
    write_netdev(tmp_path, NETDEV)
    write_netdev(tmp_path, OTHER_HALF, mac="4c:bb:47:2e:11:a4")
    roce_fixture.write_roce_tree(str(tmp_path), NETDEV, IBDEV, "192.168.100.10", 3)
    roce_fixture.write_roce_tree(str(tmp_path), OTHER_HALF, OTHER_IBDEV, "192.168.101.10", 5)

    facts = sysfs_net.gather_link_facts([NETDEV, OTHER_HALF], sysfs_root=str(tmp_path))

    assert facts["missing"] == []
    assert facts["interfaces"][NETDEV]["roce_v2_ipv4"] == [{"index": 3, "ipv4": "192.168.100.10"}]
    assert facts["interfaces"][OTHER_HALF]["rdma_device"] == OTHER_IBDEV
    assert facts["interfaces"][OTHER_HALF]["roce_v2_ipv4"] == [{"index": 5, "ipv4": "192.168.101.10"}]


def test_port_is_chosen_by_ndev_on_multi_port_device(tmp_path):
    write_netdev(tmp_path, NETDEV)
    roce_fixture.write_roce_tree(str(tmp_path), "ib_other", IBDEV, "10.0.0.1", 3, port=1)
    port_2 = roce_fixture.roce_tree_files(NETDEV, IBDEV, "192.168.100.10", 4, port=2, mac=MAC)
    for rel, content in port_2.items():
        target = tmp_path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    (tmp_path / "class" / "net" / NETDEV / "device" / "infiniband" / IBDEV).mkdir(parents=True, exist_ok=True)

    facts = sysfs_net.interface_facts(NETDEV, str(tmp_path), str(tmp_path))

    assert facts["rdma_port"] == 2
    assert facts["roce_v2_ipv4"] == [{"index": 4, "ipv4": "192.168.100.10"}]


# --- resolve_roce_v2_gid_index -------------------------------------------------------


@pytest.mark.parametrize("index", [3, 5])
def test_resolve_finds_the_drifting_index(tmp_path, index):
    roce_fixture.write_roce_tree(str(tmp_path), NETDEV, IBDEV, "192.168.100.10", index)
    gids = sysfs_net.read_gid_table(str(tmp_path), IBDEV, 1)

    assert sysfs_net.resolve_roce_v2_gid_index(gids, NETDEV, "192.168.100.10") == index
    assert sysfs_net.resolve_roce_v2_gid_index(gids, NETDEV, "192.168.100.10/24") == index


def test_resolve_accepts_entries_without_precomputed_ipv4():
    gids = [{"index": 7, "gid": NODE1_GID, "type": "RoCE v2", "ndev": NETDEV}]

    assert sysfs_net.resolve_roce_v2_gid_index(gids, NETDEV, "192.168.100.10") == 7


def test_resolve_takes_the_lowest_of_duplicate_entries():
    gids = [
        gid_entry(9, NODE1_GID, "RoCE v2", ipv4="192.168.100.10"),
        gid_entry(4, NODE1_GID, "RoCE v2", ipv4="192.168.100.10"),
    ]

    assert sysfs_net.resolve_roce_v2_gid_index(gids, NETDEV, "192.168.100.10") == 4


def test_resolve_without_roce_v2_entries():
    gids = [gid_entry(0, LINK_LOCAL_GID, "IB/RoCE v1"), gid_entry(2, NODE1_GID, "IB/RoCE v1", ipv4="192.168.100.10")]

    with pytest.raises(ValueError, match=r"^no RoCE v2 entry in the GID table \(types present: IB/RoCE v1\)$"):
        sysfs_net.resolve_roce_v2_gid_index(gids, NETDEV, "192.168.100.10")


def test_resolve_with_entries_of_another_netdev(tmp_path):
    roce_fixture.write_roce_tree(str(tmp_path), OTHER_HALF, OTHER_IBDEV, "192.168.101.10", 3)
    gids = sysfs_net.read_gid_table(str(tmp_path), OTHER_IBDEV, 1)

    with pytest.raises(ValueError, match=r"^RoCE v2 entries exist but none is bound to netdev enp1s0f1np1 \(bound to: enP2p1s0f1np1\)$"):
        sysfs_net.resolve_roce_v2_gid_index(gids, NETDEV, "192.168.101.10")


def test_resolve_before_an_address_is_applied(tmp_path):
    roce_fixture.write_roce_tree(str(tmp_path), NETDEV, IBDEV, None, 3)
    gids = sysfs_net.read_gid_table(str(tmp_path), IBDEV, 1)

    with pytest.raises(ValueError, match=r"carry no IPv4-mapped GID: is an IPv4 address configured on enp1s0f1np1\?$"):
        sysfs_net.resolve_roce_v2_gid_index(gids, NETDEV, "192.168.100.10")


def test_resolve_for_an_address_the_table_does_not_hold(tmp_path):
    roce_fixture.write_roce_tree(str(tmp_path), NETDEV, IBDEV, "192.168.100.10", 3)
    gids = sysfs_net.read_gid_table(str(tmp_path), IBDEV, 1)

    with pytest.raises(ValueError, match=r"^RoCE v2 entries on enp1s0f1np1 exist but none for 192\.168\.100\.11 "
                                         r"\(IPv4 GIDs present: 192\.168\.100\.10\)$"):
        sysfs_net.resolve_roce_v2_gid_index(gids, NETDEV, "192.168.100.11")


def test_resolve_on_an_empty_table():
    with pytest.raises(ValueError, match="the GID table is empty"):
        sysfs_net.resolve_roce_v2_gid_index([], NETDEV, "192.168.100.10")


@pytest.mark.parametrize("address", ["node1", "", None, "fe80::1"])
def test_resolve_rejects_what_is_not_an_ipv4_address(address):
    with pytest.raises(ValueError, match="is not an IPv4 address"):
        sysfs_net.resolve_roce_v2_gid_index(expected_table(3), NETDEV, address)


# --- the module ----------------------------------------------------------------------


def run_module(args, capsys):
    return module_runner.run_module(link_facts.main, args, capsys)


@pytest.fixture
def fake_ip(monkeypatch):
    state = {"ip": IP, "answers": {}, "calls": []}

    module_runner.fake_tool(monkeypatch, "ip", state, lambda args: state["answers"][args[-1]], path_key="ip")
    return state


def test_module_reports_the_link(spark_sysfs, fake_ip, capsys):
    fake_ip["answers"] = {NETDEV: (0, IP_ADDR_JSON, "")}

    rc, result = run_module({"interfaces": [NETDEV, OTHER_HALF], "sysfs_root": str(spark_sysfs)}, capsys)

    assert rc == 0
    assert result["changed"] is False
    link = result["ansible_facts"]["spark_link_facts"]
    assert link["missing"] == [OTHER_HALF]
    assert link["interfaces"][NETDEV] == spark_half_facts(ipv4=["192.168.100.10/24"], ipv6=["fe80::4ebb:47ff:fe2e:11a3/64"])
    assert link["interfaces"][OTHER_HALF]["exists"] is False
    assert fake_ip["calls"] == [[IP, "-j", "addr", "show", "dev", NETDEV]]


def test_module_in_check_mode_reads_the_same(tmp_path, fake_ip, capsys):
    sys_root = tmp_path / "sys"
    rdma_root = tmp_path / "rdma"
    write_netdev(sys_root, NETDEV)
    roce_fixture.write_roce_tree(str(rdma_root), NETDEV, IBDEV, "192.168.100.10", 5, mac=MAC)
    fake_ip["answers"] = {NETDEV: (0, IP_ADDR_JSON, "")}

    rc, result = run_module(
        {"interfaces": [NETDEV], "sysfs_root": str(sys_root), "rdma_sysfs_root": str(rdma_root), "_ansible_check_mode": True},
        capsys,
    )

    assert rc == 0
    assert result["changed"] is False
    link = result["ansible_facts"]["spark_link_facts"]["interfaces"][NETDEV]
    assert link["gids"] == expected_table(5)
    assert link["roce_v2_ipv4"] == [{"index": 5, "ipv4": "192.168.100.10"}]


def test_module_without_ip_reports_why_addresses_are_empty(spark_sysfs, fake_ip, capsys):
    fake_ip["ip"] = None

    rc, result = run_module({"interfaces": [NETDEV], "sysfs_root": str(spark_sysfs)}, capsys)

    link = result["ansible_facts"]["spark_link_facts"]["interfaces"][NETDEV]
    assert rc == 0
    assert (link["ipv4"], link["address_error"], link["rdma_device"]) == ([], "ip not found", IBDEV)
    assert fake_ip["calls"] == []


def test_module_keeps_the_error_of_a_failing_ip(spark_sysfs, fake_ip, capsys):
    fake_ip["answers"] = {NETDEV: (1, "", 'Device "enp1s0f1np1" does not exist.\n')}

    rc, result = run_module({"interfaces": [NETDEV], "sysfs_root": str(spark_sysfs)}, capsys)

    link = result["ansible_facts"]["spark_link_facts"]["interfaces"][NETDEV]
    assert rc == 0
    assert (link["ipv4"], link["address_error"]) == ([], 'Device "enp1s0f1np1" does not exist.')


def test_module_requires_interfaces(capsys):
    rc, result = run_module({}, capsys)

    assert rc == 1
    assert result["failed"] is True
    assert "interfaces" in result["msg"]


def test_the_rdma_device_nodes_are_the_character_devices_of_their_directory(tmp_path):
    devices = tmp_path / "infiniband"
    devices.mkdir()
    # Links to a character device stand in for the kernel's nodes (stat follows them).
    for name in ("uverbs1", "rdma_cm", "uverbs0"):
        (devices / name).symlink_to("/dev/null")
    (devices / "README").write_text("not a device\n")
    (devices / "gone").symlink_to(tmp_path / "nowhere")

    facts = sysfs_net.gather_link_facts([], rdma_device_dir=str(devices))

    assert facts["rdma_char_devices"] == ["rdma_cm", "uverbs0", "uverbs1"]
    assert sysfs_net.rdma_char_devices(str(tmp_path / "absent")) == []

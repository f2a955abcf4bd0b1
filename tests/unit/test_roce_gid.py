"""sparkctl.spark.roce_gid: link plan + sysfs GID tables in, the RoCE v2 GID index of each link out.

RDMA trees come from the lab's fixture generator (tests/lab/node/roce_fixture.py), the
class/net directories by tests/unit/cable_sysfs.py.
"""

from __future__ import annotations

import threading
from pathlib import Path

import module_runner
import pytest
from ansible_collections.sparkctl.spark.plugins.module_utils import sysfs_net
from ansible_collections.sparkctl.spark.plugins.modules import roce_gid

import roce_fixture  # tests/lab/node, put on sys.path by conftest.py
from cable_sysfs import IBDEV, NETDEV, NODE1_GID, OTHER_HALF, OTHER_IBDEV, write_netdev

NODE1_GID_101 = "0000:0000:0000:0000:0000:ffff:c0a8:650a"
LINK = {"interface": NETDEV, "address": "192.168.100.10/24"}
BOND = "bond0"
LAG_IBDEV = "mlx5_bond_0"
LAG_SLAVES = ("enp1s0f0np0", "enp1s0f1np1")
BOND_LINK = {"interface": BOND, "address": "192.168.100.10/24"}
OTHER_LINK = {"interface": OTHER_HALF, "address": "192.168.101.10/24"}


def write_roce_lag(root, ipv4, index, bond=BOND, ibdev=LAG_IBDEV, slaves=LAG_SLAVES):
    """A RoCE LAG as mlx5 builds it: the bond netdev is virtual (no device/ link), the
    RDMA device hangs off the first slave's PCI function and names the bond in its GID
    table's ndevs; the second slave's function has no RDMA device of its own."""
    for rel, content in roce_fixture.roce_tree_files(bond, ibdev, ipv4, index).items():
        target = Path(root) / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    bond_dir = write_netdev(root, bond)
    (bond_dir / "bonding").mkdir(exist_ok=True)
    (bond_dir / "bonding" / "slaves").write_text(" ".join(slaves) + "\n")
    for position, slave in enumerate(slaves):
        device = write_netdev(root, slave) / "device"
        device.mkdir(exist_ok=True)
        if position == 0:
            (device / "infiniband" / ibdev).mkdir(parents=True, exist_ok=True)
        (bond_dir / ("lower_" + slave)).mkdir(exist_ok=True)


@pytest.fixture
def sysfs(tmp_path):
    """A sysfs root holding both cable halves (netdevs only; each test writes its RDMA trees)."""
    root = tmp_path / "sys"
    write_netdev(root, NETDEV)
    write_netdev(root, OTHER_HALF)
    return root


def run_module(args, capsys):
    return module_runner.run_module(roce_gid.main, args, capsys)


class FakeClock:
    """time.monotonic/time.sleep stand-ins: sleeping advances the clock and may run a hook."""

    def __init__(self, on_sleep=None):
        self.now = 100.0
        self.sleeps = []
        self.on_sleep = on_sleep

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds
        if self.on_sleep:
            self.on_sleep(self.now - 100.0)


# --- resolving -----------------------------------------------------------------------


@pytest.mark.parametrize("index", [3, 5])
def test_index_is_found_where_the_table_has_it(sysfs, index):
    roce_fixture.write_roce_tree(str(sysfs), NETDEV, IBDEV, "192.168.100.10", index)

    assert sysfs_net.resolve_link_gid(NETDEV, "192.168.100.10/24", str(sysfs)) == {
        "interface": NETDEV,
        "rdma_device": IBDEV,
        "port": 1,
        "gid_index": index,
        "gid": NODE1_GID,
        "ipv4": "192.168.100.10",
    }


def test_address_without_prefix_resolves_the_same(sysfs):
    roce_fixture.write_roce_tree(str(sysfs), NETDEV, IBDEV, "192.168.100.10", 3)

    assert sysfs_net.resolve_link_gid(NETDEV, "192.168.100.10", str(sysfs))["gid_index"] == 3


def test_a_moved_index_is_followed(sysfs):
    roce_fixture.write_roce_tree(str(sysfs), NETDEV, IBDEV, "192.168.100.10", 3)
    before = sysfs_net.resolve_link_gid(NETDEV, "192.168.100.10/24", str(sysfs))
    # After a reboot the IPv6 addresses came up first and pushed the IPv4 entry to 7.
    assert roce_fixture.write_roce_tree(str(sysfs), NETDEV, IBDEV, "192.168.100.10", 7) is True

    after = sysfs_net.resolve_link_gid(NETDEV, "192.168.100.10/24", str(sysfs))

    assert (before["gid_index"], after["gid_index"]) == (3, 7)


def test_rdma_tree_under_its_own_root(tmp_path):
    sys_root = tmp_path / "sys"
    rdma_root = tmp_path / "rdma"
    write_netdev(sys_root, NETDEV)
    roce_fixture.write_roce_tree(str(rdma_root), NETDEV, IBDEV, "192.168.100.10", 5)

    roce, errors, _ = sysfs_net.resolve_links_gids([LINK], str(sys_root), str(rdma_root))

    assert errors == []
    assert roce["gid_index"] == 5


def _lookup_error(sysfs, netdev):
    """The GidLookupError resolving 192.168.100.10/24 on netdev raises."""
    with pytest.raises(sysfs_net.GidLookupError) as info:
        sysfs_net.resolve_link_gid(netdev, "192.168.100.10/24", str(sysfs))
    return info.value


def test_address_missing_from_the_table_is_transient_and_says_so(sysfs):
    roce_fixture.write_roce_tree(str(sysfs), NETDEV, IBDEV, None, 3)

    error = _lookup_error(sysfs, NETDEV)

    assert error.transient is True
    assert "carry no IPv4-mapped GID" in error.reason
    assert "address not applied yet? run the direct_link role" in error.fix
    assert "ip addr show dev enp1s0f1np1" in error.fix


def test_another_address_in_the_table_is_transient_too(sysfs):
    roce_fixture.write_roce_tree(str(sysfs), NETDEV, IBDEV, "192.168.100.99", 3)

    error = _lookup_error(sysfs, NETDEV)

    assert error.transient is True
    assert error.reason.startswith(
        "RoCE v2 entries on enp1s0f1np1 exist but none for 192.168.100.10 (IPv4 GIDs present: 192.168.100.99)"
    )


def test_roce_v1_only_is_permanent(sysfs):
    roce_fixture.write_roce_tree(str(sysfs), NETDEV, IBDEV, "192.168.100.10", 3)
    types = sysfs / "class" / "infiniband" / IBDEV / "ports" / "1" / "gid_attrs" / "types"
    for entry in types.iterdir():
        entry.write_text("IB/RoCE v1\n")

    error = _lookup_error(sysfs, NETDEV)

    assert error.transient is False
    assert error.reason.startswith("no RoCE v2 entry in the GID table (types present: IB/RoCE v1)")
    assert "RoCE v1 only" in error.fix


def test_gids_of_another_netdev_are_permanent(sysfs):
    roce_fixture.write_roce_tree(str(sysfs), "bond0", IBDEV, "192.168.100.10", 3)
    (sysfs / "class" / "net" / NETDEV / "device" / "infiniband" / IBDEV).mkdir(parents=True)

    error = _lookup_error(sysfs, NETDEV)

    assert error.transient is False
    assert "none is bound to netdev enp1s0f1np1 (bound to: bond0)" in error.reason


@pytest.mark.parametrize("index", [3, 5])
def test_a_bond_without_device_link_is_found_through_the_gid_table(sysfs, index):
    write_roce_lag(sysfs, "192.168.100.10", index)
    assert not (sysfs / "class" / "net" / BOND / "device").exists()

    assert sysfs_net.resolve_link_gid(BOND, "192.168.100.10/24", str(sysfs)) == {
        "interface": BOND,
        "rdma_device": LAG_IBDEV,
        "port": 1,
        "gid_index": index,
        "gid": NODE1_GID,
        "ipv4": "192.168.100.10",
    }


def test_a_bond_before_its_address_is_applied_is_transient(sysfs):
    # The link-local GIDs already name the bond, so the device is found; only the IPv4
    # entry is missing.
    write_roce_lag(sysfs, None, 3)

    error = _lookup_error(sysfs, BOND)

    assert error.transient is True
    assert error.reason.startswith("RoCE v2 entries on bond0 carry no IPv4-mapped GID")
    assert error.reason.endswith("(device mlx5_bond_0 port 1)")


def test_a_slave_of_the_lag_is_pointed_at_the_bond(sysfs):
    write_roce_lag(sysfs, "192.168.100.10", 3)

    error = _lookup_error(sysfs, LAG_SLAVES[0])

    assert error.transient is False
    assert "none is bound to netdev enp1s0f0np0 (bound to: bond0)" in error.reason
    assert "point spark_link[].interface at that netdev" in error.fix


def test_a_bond_no_gid_table_names_has_no_rdma_device(sysfs):
    write_roce_lag(sysfs, "192.168.100.10", 3, bond="bond1")
    write_netdev(sysfs, BOND)

    error = _lookup_error(sysfs, BOND)

    assert error.transient is False
    assert "no RDMA device behind the netdev" in error.reason
    assert "no GID table entry names it" in error.reason
    assert "rdma link" in error.fix


def test_link_facts_find_the_bond_device_too(sysfs):
    write_roce_lag(sysfs, "192.168.100.10", 5)

    facts = sysfs_net.interface_facts(BOND, str(sysfs), str(sysfs))

    assert (facts["rdma_device"], facts["rdma_port"], facts["roce_v2_ipv4"]) == (LAG_IBDEV, 1, [{"index": 5, "ipv4": "192.168.100.10"}])


def test_no_rdma_device_says_load_mlx5_ib(sysfs):
    error = _lookup_error(sysfs, NETDEV)

    assert error.transient is False
    assert "no RDMA device behind the netdev" in error.reason
    assert "load mlx5_ib" in error.fix


def test_missing_interface(sysfs):
    with pytest.raises(sysfs_net.GidLookupError, match="enp1s0f0np0: the interface does not exist"):
        sysfs_net.resolve_link_gid("enp1s0f0np0", "192.168.100.10/24", str(sysfs))


def test_device_without_ports(sysfs):
    (sysfs / "class" / "net" / NETDEV / "device" / "infiniband" / IBDEV).mkdir(parents=True)

    with pytest.raises(sysfs_net.GidLookupError, match="RDMA device rocep1s0f1 has no ports"):
        sysfs_net.resolve_link_gid(NETDEV, "192.168.100.10/24", str(sysfs))


@pytest.mark.parametrize("address", ["node1", "", "fe80::1/64"])
def test_address_that_is_not_ipv4(sysfs, address):
    with pytest.raises(sysfs_net.GidLookupError, match="is not an IPv4 address") as info:
        sysfs_net.resolve_link_gid(NETDEV, address, str(sysfs))

    assert info.value.transient is False


# --- polling -------------------------------------------------------------------------


def test_polling_waits_for_the_entry_to_appear(sysfs):
    roce_fixture.write_roce_tree(str(sysfs), NETDEV, IBDEV, None, 3)

    def kernel_adds_the_gid(elapsed):
        if elapsed >= 2.0:
            roce_fixture.write_roce_tree(str(sysfs), NETDEV, IBDEV, "192.168.100.10", 3)

    fake = FakeClock(on_sleep=kernel_adds_the_gid)

    roce, errors, waited = sysfs_net.resolve_links_gids([LINK], str(sysfs), wait_timeout=10, sleep=fake.sleep, clock=fake.clock)

    assert errors == []
    assert roce["gid_index"] == 3
    assert waited == 2.0
    assert fake.sleeps == [0.5, 0.5, 0.5, 0.5]


def test_polling_gives_up_at_the_timeout(sysfs):
    roce_fixture.write_roce_tree(str(sysfs), NETDEV, IBDEV, None, 3)
    fake = FakeClock()

    roce, errors, waited = sysfs_net.resolve_links_gids(
        [LINK], str(sysfs), wait_timeout=2, poll_interval=0.75, sleep=fake.sleep, clock=fake.clock
    )

    assert [exc.transient for exc in errors] == [True]
    assert roce == {"links": [], "rdma_devices": [], "gid_index": None, "gid_indexes": {}}
    # The last sleep is cut to what is left of the timeout.
    assert fake.sleeps == [0.75, 0.75, 0.5]
    assert waited == 2.0


def test_permanent_problems_are_not_waited_for(sysfs):
    roce_fixture.write_roce_tree(str(sysfs), NETDEV, IBDEV, None, 3)  # transient on this half
    fake = FakeClock()  # no RDMA device on the other half: permanent

    _, errors, waited = sysfs_net.resolve_links_gids([LINK, OTHER_LINK], str(sysfs), wait_timeout=10, sleep=fake.sleep, clock=fake.clock)

    assert [(exc.interface, exc.transient) for exc in errors] == [(NETDEV, True), (OTHER_HALF, False)]
    assert fake.sleeps == []
    assert waited == 0


def test_polling_with_a_real_clock_and_a_writer_thread(sysfs):
    roce_fixture.write_roce_tree(str(sysfs), NETDEV, IBDEV, None, 5)
    writer = threading.Timer(0.3, roce_fixture.write_roce_tree, args=(str(sysfs), NETDEV, IBDEV, "192.168.100.10", 5))
    writer.start()
    try:
        roce, errors, waited = sysfs_net.resolve_links_gids([LINK], str(sysfs), wait_timeout=5, poll_interval=0.05)
    finally:
        writer.cancel()
        writer.join()

    assert errors == []
    assert roce["gid_index"] == 5
    assert 0.25 <= waited < 5


# --- the module ----------------------------------------------------------------------


def test_module_returns_both_halves_sharing_index_3(sysfs, capsys):
    roce_fixture.write_roce_tree(str(sysfs), NETDEV, IBDEV, "192.168.100.10", 3)
    roce_fixture.write_roce_tree(str(sysfs), OTHER_HALF, OTHER_IBDEV, "192.168.101.10", 3)

    rc, result = run_module({"links": [LINK, OTHER_LINK], "sysfs_root": str(sysfs)}, capsys)

    assert rc == 0
    assert result["changed"] is False
    assert result["roce"] == {
        "links": [
            {"interface": NETDEV, "rdma_device": IBDEV, "port": 1, "gid_index": 3, "gid": NODE1_GID, "ipv4": "192.168.100.10"},
            {"interface": OTHER_HALF, "rdma_device": OTHER_IBDEV, "port": 1, "gid_index": 3, "gid": NODE1_GID_101,
             "ipv4": "192.168.101.10"},
        ],
        "rdma_devices": [IBDEV, OTHER_IBDEV],
        "gid_index": 3,
        "gid_indexes": {NETDEV: 3, OTHER_HALF: 3},
    }


def test_module_with_two_halves_on_different_indexes(sysfs, capsys):
    roce_fixture.write_roce_tree(str(sysfs), NETDEV, IBDEV, "192.168.100.10", 3)
    roce_fixture.write_roce_tree(str(sysfs), OTHER_HALF, OTHER_IBDEV, "192.168.101.10", 5)

    rc, result = run_module({"links": [LINK, OTHER_LINK], "sysfs_root": str(sysfs)}, capsys)

    assert rc == 0
    assert result["roce"]["gid_index"] is None
    assert result["roce"]["gid_indexes"] == {NETDEV: 3, OTHER_HALF: 5}
    assert [link["gid_index"] for link in result["roce"]["links"]] == [3, 5]


def test_module_index_5_with_separate_rdma_root_in_check_mode(tmp_path, capsys):
    sys_root = tmp_path / "sys"
    rdma_root = tmp_path / "rdma"
    write_netdev(sys_root, NETDEV)
    roce_fixture.write_roce_tree(str(rdma_root), NETDEV, IBDEV, "192.168.100.11", 5)

    rc, result = run_module(
        {
            "links": [{"interface": NETDEV, "address": "192.168.100.11"}],
            "sysfs_root": str(sys_root),
            "rdma_sysfs_root": str(rdma_root),
            "_ansible_check_mode": True,
        },
        capsys,
    )

    assert rc == 0
    assert result["changed"] is False
    assert result["roce"]["gid_index"] == 5
    assert result["roce"]["links"][0]["gid"] == "0000:0000:0000:0000:0000:ffff:c0a8:640b"


def test_module_fails_per_interface_with_the_fix(sysfs, capsys):
    roce_fixture.write_roce_tree(str(sysfs), NETDEV, IBDEV, None, 3)

    rc, result = run_module({"links": [LINK, OTHER_LINK], "sysfs_root": str(sysfs), "wait_timeout": 0}, capsys)

    assert rc == 1
    assert result["failed"] is True
    assert result["changed"] is False
    assert [(e["interface"], e["transient"]) for e in result["errors"]] == [(NETDEV, True), (OTHER_HALF, False)]
    assert "enp1s0f1np1: RoCE v2 entries on enp1s0f1np1 carry no IPv4-mapped GID" in result["msg"]
    assert "address not applied yet?" in result["msg"]
    assert "enP2p1s0f1np1: no RDMA device behind the netdev" in result["msg"]
    assert "load mlx5_ib" in result["msg"]


def test_module_waits_for_the_gid_then_succeeds(sysfs, capsys, monkeypatch):
    roce_fixture.write_roce_tree(str(sysfs), NETDEV, IBDEV, None, 5)
    fake = FakeClock(
        on_sleep=lambda elapsed: elapsed >= 1.0 and roce_fixture.write_roce_tree(str(sysfs), NETDEV, IBDEV, "192.168.100.10", 5)
    )
    monkeypatch.setattr(sysfs_net.time, "sleep", fake.sleep)
    monkeypatch.setattr(sysfs_net.time, "monotonic", fake.clock)

    rc, result = run_module({"links": [LINK], "sysfs_root": str(sysfs)}, capsys)

    assert rc == 0
    assert result["roce"]["gid_index"] == 5
    assert result["waited"] == 1.0


def test_module_says_how_long_it_waited(sysfs, capsys, monkeypatch):
    roce_fixture.write_roce_tree(str(sysfs), NETDEV, IBDEV, None, 3)
    fake = FakeClock()
    monkeypatch.setattr(sysfs_net.time, "sleep", fake.sleep)
    monkeypatch.setattr(sysfs_net.time, "monotonic", fake.clock)

    rc, result = run_module({"links": [LINK], "sysfs_root": str(sysfs), "wait_timeout": 3}, capsys)

    assert rc == 1
    assert result["msg"].startswith("Cannot resolve the RoCE v2 GID index (after waiting 3.0 s): enp1s0f1np1:")
    assert result["waited"] == 3.0


def test_module_resolves_a_bond(sysfs, capsys):
    write_roce_lag(sysfs, "192.168.100.10", 3)

    rc, result = run_module({"links": [BOND_LINK], "sysfs_root": str(sysfs)}, capsys)

    assert rc == 0
    assert result["roce"]["rdma_devices"] == [LAG_IBDEV]
    assert result["roce"]["gid_index"] == 3


class SlowClock:
    """time.monotonic for a slow sysfs: every reading of the clock is 0.05 s later."""

    def __init__(self):
        self.now = 100.0

    def __call__(self):
        self.now += 0.05
        return self.now


def test_module_does_not_claim_it_waited_when_wait_timeout_is_0(sysfs, capsys, monkeypatch):
    roce_fixture.write_roce_tree(str(sysfs), NETDEV, IBDEV, None, 3)
    monkeypatch.setattr(sysfs_net.time, "monotonic", SlowClock())
    monkeypatch.setattr(sysfs_net.time, "sleep", lambda seconds: pytest.fail("slept with wait_timeout 0"))

    rc, result = run_module({"links": [LINK], "sysfs_root": str(sysfs), "wait_timeout": 0}, capsys)

    assert rc == 1
    assert "waiting" not in result["msg"]
    assert result["msg"].startswith(
        "Cannot resolve the RoCE v2 GID index (read once: wait_timeout is 0; raise it to wait for the address): enp1s0f1np1:"
    )
    assert result["waited"] > 0  # the reading itself still took its time


def test_module_names_no_wait_for_permanent_problems(sysfs, capsys):
    rc, result = run_module({"links": [OTHER_LINK], "sysfs_root": str(sysfs), "wait_timeout": 0}, capsys)

    assert rc == 1
    assert result["msg"].startswith("Cannot resolve the RoCE v2 GID index: enP2p1s0f1np1: no RDMA device")


READ_ONCE = "(read once: wait_timeout is 0; raise it to wait for the address)"


@pytest.mark.parametrize(
    "transient, waited, wait_timeout, note",
    [
        ([True], 3.0, 3, " (after waiting 3.0 s)"),
        ([True], 0.2, 0, " " + READ_ONCE),
        ([True], 0.0, 0, " " + READ_ONCE),
        ([False], 0.2, 10, ""),
        ([False], 0.0, 0, ""),
        # A permanent problem ends the polling at once: nothing was waited for.
        ([True, False], 0.2, 10, ""),
        ([True, False], 0.2, 0, " " + READ_ONCE),
    ],
)
def test_failure_message(transient, waited, wait_timeout, note):
    errors = [sysfs_net.GidLookupError("if%d" % n, "reason %d" % n, "fix %d" % n, flag) for n, flag in enumerate(transient)]

    message = sysfs_net.gid_failure_message(errors, waited, wait_timeout)

    assert message == "Cannot resolve the RoCE v2 GID index%s: %s" % (
        note,
        " | ".join("if%d: reason %d; fix %d" % (n, n, n) for n in range(len(transient))),
    )


def test_module_rejects_a_negative_timeout(sysfs, capsys):
    rc, result = run_module({"links": [LINK], "sysfs_root": str(sysfs), "wait_timeout": -1}, capsys)

    assert rc == 1
    assert "wait_timeout must be 0 or more" in result["msg"]


def test_module_requires_interface_and_address(capsys):
    rc, result = run_module({"links": [{"interface": NETDEV}]}, capsys)

    assert rc == 1
    assert "address" in result["msg"]

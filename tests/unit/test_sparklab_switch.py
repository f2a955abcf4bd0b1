"""The N-node lab on a switch stand-in (tests/lab/README.md, "Three and more nodes on a switch"):
the plan the lab tool reads from inventories/lab-switch, the names and checks of the switch's
bridges and ports, and the commands `up` runs to build it. No command reaches the machine here:
`run` and the namespace reads are fakes."""

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "lab"))
sys.path.insert(0, str(REPO / "tests" / "integration"))

import labrun  # noqa: E402
import sparklab  # noqa: E402

LAB = REPO / "inventories" / "lab"
SWITCH = REPO / "inventories" / "lab-switch"


def test_the_switch_lab_is_three_nodes_with_the_real_port_names_and_a_gid_index_each():
    plan = sparklab.load_plan(SWITCH)
    assert plan.topology == "switch" and plan.name == "switch" and plan.switch_netns == "switch-switch"
    assert [(n.name, n.role, n.container) for n in plan.nodes] == [
        ("spark1", "head", "switch-spark1"), ("spark2", "worker", "switch-spark2"), ("spark3", "worker", "switch-spark3")]
    assert {tuple(link.interface for link in n.links) for n in plan.nodes} == {("enp1s0f1np1", "enP2p1s0f1np1")}
    assert len({n.gid_index for n in plan.nodes}) == 3
    for half in range(2):
        subnets = {str(sparklab.ipaddress.ip_interface(n.links[half].address).network) for n in plan.nodes}
        assert len(subnets) == 1, half


def test_the_default_lab_stays_a_direct_cable():
    plan = sparklab.load_plan(LAB)
    assert plan.topology == "direct" and len(plan.nodes) == 2


def test_the_switch_labs_ansible_vars_differ_from_the_labs_only_where_meant():
    _, lab = labrun.inventory_vars(LAB / "hosts.yml")
    _, switch = labrun.inventory_vars(SWITCH / "hosts.yml")
    for host in ("spark1", "spark2"):
        differ = {key for key in lab[host].keys() | switch[host].keys() if lab[host].get(key) != switch[host].get(key)}
        assert differ == {"ansible_host", "spark_management_network", "sparklab_name", "spark_fabric", "inventory_dir"}
    assert switch["spark3"]["spark_fabric"] == "switch"


def _inventory(tmp_path, fabric, workers=("spark2", "spark3")):
    inventory = tmp_path / "inv"
    (inventory / "group_vars").mkdir(parents=True)
    hosts = {"all": {"children": {"sparklab": {"children": {
        "spark_head": {"hosts": {"spark1": _host(1)}},
        "spark_workers": {"hosts": {w: _host(int(w[-1])) for w in workers}}}}}}}
    (inventory / "hosts.yml").write_text(sparklab.yaml.safe_dump(hosts))
    (inventory / "group_vars" / "all.yml").write_text(
        "spark_sysfs_rdma_root: /opt/sparklab/sysfs\nspark_management_network: 172.30.90.0/24\nansible_user: spark\n"
        + (f"spark_fabric: {fabric}\n" if fabric else ""))
    return inventory


def _host(i):
    return {"ansible_host": f"172.30.90.{10 + i}", "sparklab_roce_gid_index": 2 + i,
            "spark_link": [{"interface": "enp1s0f1np1", "address": f"192.168.100.{9 + i}/24"}]}


@pytest.mark.parametrize("fabric", [None, "direct"])
def test_a_direct_cable_with_two_workers_is_refused_naming_the_switch(tmp_path, fabric):
    with pytest.raises(sparklab.LabError, match="set spark_fabric: switch .* as inventories/lab-switch does"):
        sparklab.load_plan(_inventory(tmp_path, fabric))


def test_any_number_of_nodes_on_a_switch(tmp_path):
    plan = sparklab.load_plan(_inventory(tmp_path, "switch", workers=("spark2", "spark3", "spark4")))
    assert [n.name for n in plan.nodes] == ["spark1", "spark2", "spark3", "spark4"]


def test_an_unknown_fabric_is_refused(tmp_path):
    with pytest.raises(sparklab.LabError, match="spark_fabric 'ring' must be one of direct, switch"):
        sparklab.load_plan(_inventory(tmp_path, "ring"))


def test_switch_port_names_fit_a_netdev_name():
    node = SimpleNamespace(name="spark1")
    assert sparklab.switch_port(node, 1) == "spark1-h1"
    long_a, long_b = SimpleNamespace(name="a-very-long-node-1"), SimpleNamespace(name="a-very-long-node-2")
    names = {sparklab.switch_port(n, h) for n in (long_a, long_b) for h in (0, 1)}
    assert len(names) == 4 and all(len(n) <= 15 for n in names)


def _ends(node_ifindex=7, port_ifindex=12, master="half0", kind="veth"):
    node_end = {"ifindex": node_ifindex, "link_index": port_ifindex, "linkinfo": {"info_kind": kind}}
    port = {"ifindex": port_ifindex, "link_index": node_ifindex, "master": master, "linkinfo": {"info_kind": "veth"}}
    return node_end, port


def test_a_port_is_intact_only_when_paired_and_on_its_bridge():
    assert sparklab.port_intact(*_ends(), "half0")
    assert not sparklab.port_intact(*_ends(master="half1"), "half0")
    assert not sparklab.port_intact(*_ends(kind="dummy"), "half0")
    node_end, port = _ends()
    port["link_index"] = 99
    assert not sparklab.port_intact(node_end, port, "half0")
    assert not sparklab.port_intact(None, port, "half0")


def test_up_builds_a_bridge_per_half_at_mtu_9000_and_plugs_every_node_in(monkeypatch):
    plan = sparklab.load_plan(SWITCH)
    for i, node in enumerate(plan.nodes):
        node.pid = 100 + i
    ran = []
    monkeypatch.setattr(sparklab, "run", lambda cmd, check=True, **kw: ran.append(cmd) or SimpleNamespace(returncode=0))
    monkeypatch.setattr(sparklab, "say", lambda msg: None)
    monkeypatch.setattr(sparklab, "switch_netns_exists", lambda p: False)
    monkeypatch.setattr(sparklab, "switch_links", lambda p: {})
    monkeypatch.setattr(sparklab, "node_links", lambda pid: {})
    assert sparklab.ensure_cable(plan) == 6
    assert ["ip", "netns", "add", "switch-switch"] in ran
    for half in (0, 1):
        assert ["ip", "-n", "switch-switch", "link", "add", f"half{half}", "mtu", "9000", "type", "bridge"] in ran
    adds = [cmd for cmd in ran if cmd[:3] == ["ip", "link", "add"]]
    assert len(adds) == 6
    spark3_h1 = next(cmd for cmd in adds if "spark3-h1" in cmd)
    assert spark3_h1[3] == "enP2p1s0f1np1" and spark3_h1[spark3_h1.index("netns") + 1] == "102"
    assert spark3_h1[-6:] == ["name", "spark3-h1", "mtu", "9000", "netns", "switch-switch"]
    assert ["ip", "-n", "switch-switch", "link", "set", "spark3-h1", "master", "half1", "up"] in ran


def test_up_lays_each_half_of_the_direct_cable_as_one_veth_between_the_two_nodes(monkeypatch):
    plan = sparklab.load_plan(LAB)
    a, b = plan.nodes
    a.pid, b.pid = 100, 101
    ran = []
    monkeypatch.setattr(sparklab, "run", lambda cmd, check=True, **kw: ran.append(cmd) or SimpleNamespace(returncode=0))
    monkeypatch.setattr(sparklab, "say", lambda msg: None)
    monkeypatch.setattr(sparklab, "node_links", lambda pid: {})
    assert sparklab.ensure_cable(plan) == 2
    for x, y in zip(a.links, b.links, strict=True):
        leftovers = [["nsenter", "-t", "100", "-n", "ip", "link", "del", x.interface],
                     ["nsenter", "-t", "101", "-n", "ip", "link", "del", y.interface]]
        add = ["ip", "link", "add", x.interface, "mtu", "1500", "address", sparklab.mac_for(a.name, x.interface),
               "netns", "100", "type", "veth", "peer", "name", y.interface, "mtu", "1500",
               "address", sparklab.mac_for(b.name, y.interface), "netns", "101"]
        ups = [["nsenter", "-t", "100", "-n", "ip", "link", "set", x.interface, "up"],
               ["nsenter", "-t", "101", "-n", "ip", "link", "set", y.interface, "up"]]
        start = ran.index(leftovers[0])
        assert ran[start:start + 5] == leftovers + [add] + ups


def test_up_leaves_a_plugged_in_switch_alone(monkeypatch):
    plan = sparklab.load_plan(SWITCH)
    for i, node in enumerate(plan.nodes):
        node.pid = 100 + i
    ports, own = {}, {}
    for i, node in enumerate(plan.nodes):
        own[node.pid] = {}
        for half, link in enumerate(node.links):
            node_end, port = _ends(node_ifindex=10 * i + half, port_ifindex=100 + 10 * i + half, master=f"half{half}")
            own[node.pid][link.interface] = node_end
            ports[sparklab.switch_port(node, half)] = port
    ports.update({"half0": {}, "half1": {}})
    ran = []
    monkeypatch.setattr(sparklab, "run", lambda cmd, check=True, **kw: ran.append(cmd) or SimpleNamespace(returncode=0))
    monkeypatch.setattr(sparklab, "switch_netns_exists", lambda p: True)
    monkeypatch.setattr(sparklab, "switch_links", lambda p: ports)
    monkeypatch.setattr(sparklab, "node_links", lambda pid: own[pid])
    assert sparklab.ensure_cable(plan) == 0
    assert all(cmd[-1] == "up" and "mtu" in cmd for cmd in ran)  # only the bridges' MTU and state asserted


def test_down_removes_the_switch_namespace_of_a_switch_lab_only(monkeypatch):
    ran = []
    monkeypatch.setattr(sparklab, "run", lambda cmd, check=True, **kw: ran.append(cmd))
    monkeypatch.setattr(sparklab, "switch_netns_exists", lambda p: True)
    assert sparklab.remove_switch(sparklab.load_plan(LAB)) is False and ran == []
    assert sparklab.remove_switch(sparklab.load_plan(SWITCH)) is True
    assert ran == [["ip", "netns", "del", "switch-switch"]]


def test_up_with_topology_switch_takes_the_switch_inventory_and_checks_it(monkeypatch):
    monkeypatch.delenv(sparklab.INVENTORY_ENV, raising=False)
    assert sparklab.up_inventory(SimpleNamespace(inventory=None, topology="switch")) == sparklab.SWITCH_INVENTORY
    assert sparklab.up_inventory(SimpleNamespace(inventory=None, topology=None)) is None
    assert sparklab.up_inventory(SimpleNamespace(inventory=LAB, topology="switch")) == LAB
    plan = sparklab.load_plan(SWITCH)
    sparklab.check_up_request(plan, "switch", 3)
    sparklab.check_up_request(plan, None, None)
    with pytest.raises(sparklab.LabError, match="--nodes 4, but .* has 3 .* add or remove hosts"):
        sparklab.check_up_request(plan, "switch", 4)
    with pytest.raises(sparklab.LabError, match="--topology switch, but .* says spark_fabric: direct"):
        sparklab.check_up_request(sparklab.load_plan(LAB), "switch", None)

"""The direct_link role's hosts whose link is about to be re-applied (roles/direct_link/vars/main.yml,
direct_link_pending_hosts), as Ansible's own templating evaluates it with the collection's filters:
the same hosts the role's earlier Jinja loop found (kept below as it was), for two and three nodes,
and what --check then leaves out of the ping; and sparkctl.spark.link_apply_pending on its own."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.sparkctl.spark.plugins.filter.link_drift import link_apply_pending
from collection_templating import TemplateFailed, evaluate

ROLE = Path(__file__).resolve().parents[2] / "roles" / "direct_link"
VARS = yaml.safe_load((ROLE / "vars" / "main.yml").read_text(encoding="utf-8"))
DEFAULTS = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text(encoding="utf-8"))
NETPLAN = DEFAULTS["direct_link_netplan_path"]
HALVES = ["enp1s0f1np1", "enP2p1s0f1np1"]

# The role's var before the loop moved into sparkctl.spark.link_apply_pending.
OLD_VARS = yaml.safe_load(r"""
direct_link_pending_hosts: >-
  {%- set ns = namespace(hosts=[]) -%}
  {%- for host in ansible_play_hosts -%}
  {%-   set read = hostvars[host].direct_link_node | default({}) -%}
  {%-   if read.drifted is defined and (direct_link_netplan_path in read.drifted
          or read.ansible_facts['spark_link_facts'] | sparkctl.spark.link_drift(hostvars[host].spark_link, direct_link_mtu)
             | length > 0) -%}
  {%-     set ns.hosts = ns.hosts + [host] -%}
  {%-   endif -%}
  {%- endfor -%}
  {{ ns.hosts }}
""")


def _link(node: int) -> list[dict]:
    return [{"interface": HALVES[half], "address": f"192.168.{100 + half}.{10 + node}/24"} for half in range(2)]


def _read(node: int, netplan_drifted: bool = False, mtu: int = 9000, missing_address: bool = False) -> dict:
    """A node's registered read of sparkctl.spark.link_facts: the live link and the netplan file."""
    interfaces = {}
    for item in _link(node):
        ipv4 = [] if missing_address and item["interface"] == HALVES[1] else [item["address"]]
        interfaces[item["interface"]] = {"exists": True, "operstate": "up", "carrier": True, "mtu": mtu, "ipv4": ipv4,
                                         "address_error": None}
    return {"changed": False, "failed": False, "drifted": [NETPLAN] if netplan_drifted else [],
            "paths": {NETPLAN: {"exists": True, "owner": "root", "group": "root", "mode": "0600"}},
            "ansible_facts": {"spark_link_facts": {"interfaces": interfaces, "missing": []}}}


def _variables(reads: dict, nodes: int, check_mode: bool = True, role_vars: dict = VARS) -> dict:
    """reads: host -> its read (a host left out registered none)."""
    names = [f"spark{n + 1}" for n in range(nodes)]
    hostvars = {}
    for n, name in enumerate(names):
        hostvars[name] = {"ansible_host": f"10.0.0.{11 + n}", "spark_link": _link(n)}
        if name in reads:
            hostvars[name]["direct_link_node"] = reads[name]
    # Three nodes or more are on a switch; two share the direct cable.
    return {**DEFAULTS, **role_vars, "hostvars": hostvars, "ansible_play_hosts": names, "inventory_hostname": names[0],
            "spark_fabric": "switch" if nodes > 2 else "direct",
            "groups": {"spark_head": names[:1], "spark_workers": names[1:]}, "spark_link_mtu": 9000,
            "ansible_check_mode": check_mode, "direct_link_node": reads.get(names[0], {})}


def _old(variables: dict) -> dict:
    return {**variables, **OLD_VARS}


def _pending(variables: dict) -> list:
    return evaluate("{{ direct_link_pending_hosts }}", variables)


CASES = {
    "two nodes as planned": (2, {"spark1": _read(0), "spark2": _read(1)}, []),
    "the worker's netplan file drifted": (2, {"spark1": _read(0), "spark2": _read(1, netplan_drifted=True)}, ["spark2"]),
    "the head's MTU was reset by hand": (2, {"spark1": _read(0, mtu=1500), "spark2": _read(1)}, ["spark1"]),
    "three nodes, an address deleted on the third": (
        3, {"spark1": _read(0), "spark2": _read(1), "spark3": _read(2, missing_address=True)}, ["spark3"]),
    "three nodes, two drifted, in play order": (
        3, {"spark1": _read(0, netplan_drifted=True, mtu=1500), "spark2": _read(1), "spark3": _read(2, mtu=1500)},
        ["spark1", "spark3"]),
    "a host without a read is not pending": (3, {"spark1": _read(0), "spark3": _read(2, mtu=1500)}, ["spark3"]),
    "a skipped read is not pending": (
        2, {"spark1": {"changed": False, "skipped": True, "skip_reason": "Conditional result was False"},
            "spark2": _read(1, netplan_drifted=True)}, ["spark2"]),
}


@pytest.mark.parametrize("nodes, reads, expected", CASES.values(), ids=CASES.keys())
def test_the_pending_hosts_are_those_the_loop_found(nodes, reads, expected):
    variables = _variables(reads, nodes)
    assert _pending(variables) == expected
    assert _pending(_old(variables)) == expected


def test_in_check_mode_the_pending_hosts_are_not_pinged():
    variables = _variables({"spark1": _read(0), "spark2": _read(1, netplan_drifted=True), "spark3": _read(2)}, 3)
    targets = evaluate("{{ direct_link_ping_targets }}", variables)
    assert targets == evaluate("{{ direct_link_ping_targets }}", _old(variables))
    assert {target["peer"] for target in targets} == {"spark3"}
    real_run = evaluate("{{ direct_link_ping_targets }}", dict(variables, ansible_check_mode=False))
    assert {target["peer"] for target in real_run} == {"spark2", "spark3"}


def test_a_read_without_the_link_facts_fails_as_before():
    broken = _read(1)
    del broken["ansible_facts"]
    variables = _variables({"spark1": _read(0), "spark2": broken}, 2)
    for each in (variables, _old(variables)):
        with pytest.raises(TemplateFailed):
            _pending(each)
    # The netplan file's drift decides without the live link, as before.
    broken["drifted"] = [NETPLAN]
    variables = _variables({"spark1": _read(0), "spark2": broken}, 2)
    assert _pending(variables) == _pending(_old(variables)) == ["spark2"]


# --- the filter on its own ----------------------------------------------------------------------


def test_the_filter_reads_a_missing_read_as_none_pending():
    assert link_apply_pending(["spark1", "spark2"], [{}, {}], [_link(0), _link(1)], NETPLAN, 9000) == []


def test_the_filter_takes_the_mtu_as_the_inventory_gives_it():
    reads = [_read(0, mtu=9000), _read(1, mtu=1500)]
    assert link_apply_pending(["spark1", "spark2"], reads, [_link(0), _link(1)], NETPLAN, "9000") == ["spark2"]


def test_the_filter_refuses_lists_of_other_hosts():
    with pytest.raises(AnsibleFilterError, match="2 hosts, 1 reads and 2"):
        link_apply_pending(["spark1", "spark2"], [{}], [_link(0), _link(1)], NETPLAN, 9000)


def test_the_filter_names_the_host_whose_read_lacks_the_link_facts():
    read = copy.deepcopy(_read(1))
    read["ansible_facts"] = {}
    with pytest.raises(AnsibleFilterError, match="spark2"):
        link_apply_pending(["spark2"], [read], [_link(1)], NETPLAN, 9000)

"""link_subnets / link_ips: the cable's subnets for from= and the peers' bare addresses."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.sparkctl.spark.plugins.filter.link_subnets import link_ips, link_subnets

LINK = [
    {"interface": "enp1s0f1np1", "address": "192.168.100.10/24"},
    {"interface": "enP2p1s0f1np1", "address": "192.168.101.10/24"},
]


def test_subnets_in_cable_half_order():
    assert link_subnets(LINK) == ["192.168.100.0/24", "192.168.101.0/24"]


def test_bare_addresses_in_cable_half_order():
    assert link_ips(LINK) == ["192.168.100.10", "192.168.101.10"]


def test_one_half_and_other_prefixes():
    assert link_subnets([{"interface": "enp1s0f1np1", "address": "10.9.8.7/30"}]) == ["10.9.8.4/30"]


def test_duplicate_subnets_are_listed_once():
    link = [{"interface": "a", "address": "192.168.100.10/23"}, {"interface": "b", "address": "192.168.101.10/23"}]
    assert link_subnets(link) == ["192.168.100.0/23"]


@pytest.mark.parametrize(
    "link", [[], None, [{"interface": "x"}], [{"interface": "x", "address": "192.168.100.10"}], [{"address": "300.1.1.1/24"}], ["text"]]
)
def test_bad_plans_are_refused(link):
    with pytest.raises(AnsibleFilterError):
        link_subnets(link)

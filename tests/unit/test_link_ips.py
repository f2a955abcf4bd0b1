"""link_ips: the bare addresses of a host's cable halves."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.sparkctl.spark.plugins.filter.link_ips import link_ips

LINK = [
    {"interface": "enp1s0f1np1", "address": "192.168.100.10/24"},
    {"interface": "enP2p1s0f1np1", "address": "192.168.101.10/24"},
]


def test_bare_addresses_in_cable_half_order():
    assert link_ips(LINK) == ["192.168.100.10", "192.168.101.10"]


def test_one_half_and_other_prefixes():
    assert link_ips([{"interface": "enp1s0f1np1", "address": "10.9.8.7/30"}]) == ["10.9.8.7"]


def test_an_address_on_two_halves_is_listed_once():
    link = [{"interface": "a", "address": "192.168.100.10/24"}, {"interface": "b", "address": "192.168.100.10/24"}]
    assert link_ips(link) == ["192.168.100.10"]


@pytest.mark.parametrize(
    "link", [[], None, [{"interface": "x"}], [{"interface": "x", "address": "192.168.100.10"}], [{"address": "300.1.1.1/24"}], ["text"]]
)
def test_bad_plans_are_refused(link):
    with pytest.raises(AnsibleFilterError):
        link_ips(link)

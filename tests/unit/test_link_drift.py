"""sparkctl.spark.link_drift: live link facts + plan in, what netplan apply must repair out."""

from __future__ import annotations

import copy

import pytest
from ansible_collections.sparkctl.spark.plugins.filter.link_drift import (
    FilterModule,
    link_drift,
    link_drift_lines,
    link_missing_interfaces,
)

HALF0 = "enp1s0f1np1"
HALF1 = "enP2p1s0f1np1"
PLAN = [
    {"interface": HALF0, "address": "192.168.100.10/24"},
    {"interface": HALF1, "address": "192.168.101.10/24"},
]


def live(ipv4, mtu=9000, operstate="up", carrier=True, exists=True, address_error=None):
    """One interface as sparkctl.spark.link_facts reports it (the keys link_drift reads)."""
    return {
        "exists": exists,
        "operstate": operstate if exists else None,
        "carrier": carrier if exists else None,
        "mtu": mtu if exists else None,
        "ipv4": list(ipv4),
        "address_error": address_error,
    }


CONVERGED = {
    "interfaces": {HALF0: live(["192.168.100.10/24"]), HALF1: live(["192.168.101.10/24"])},
    "missing": [],
}


def facts_with(**changes):
    facts = copy.deepcopy(CONVERGED)
    for interface, value in changes.items():
        facts["interfaces"][{"half0": HALF0, "half1": HALF1}[interface]] = value
    return facts


def test_converged_link_has_no_drift():
    assert link_drift(CONVERGED, PLAN, 9000) == []
    assert link_drift(CONVERGED, PLAN, "9000") == []


def test_fresh_cable_lacks_addresses_and_mtu():
    facts = facts_with(half0=live([], mtu=1500), half1=live([], mtu=1500))

    assert link_drift(facts, PLAN, 9000) == [
        {"interface": HALF0, "reasons": ["address 192.168.100.10/24 missing (has: none)", "mtu 1500, plan 9000"]},
        {"interface": HALF1, "reasons": ["address 192.168.101.10/24 missing (has: none)", "mtu 1500, plan 9000"]},
    ]


def test_address_deleted_by_hand():
    assert link_drift(facts_with(half0=live([])), PLAN, 9000) == [
        {"interface": HALF0, "reasons": ["address 192.168.100.10/24 missing (has: none)"]}
    ]


def test_mtu_reset_by_hand():
    assert link_drift(facts_with(half1=live(["192.168.101.10/24"], mtu=1500)), PLAN, 9000) == [
        {"interface": HALF1, "reasons": ["mtu 1500, plan 9000"]}
    ]


def test_wrong_prefix_length_is_drift():
    assert link_drift(facts_with(half0=live(["192.168.100.10/16"])), PLAN, 9000) == [
        {"interface": HALF0, "reasons": ["address 192.168.100.10/24 missing (has: 192.168.100.10/16)"]}
    ]


def test_address_replaced_by_another():
    assert link_drift(facts_with(half1=live(["192.168.101.20/24"])), PLAN, 9000) == [
        {"interface": HALF1, "reasons": ["address 192.168.101.10/24 missing (has: 192.168.101.20/24)"]}
    ]


def test_extra_addresses_are_not_drift():
    assert link_drift(facts_with(half0=live(["10.9.9.9/24", "192.168.100.10/24"])), PLAN, 9000) == []


def test_link_set_down_by_hand():
    # The kernel refuses to read carrier of a down link: link_facts reports None.
    assert link_drift(facts_with(half1=live([], operstate="down", carrier=None)), PLAN, 9000) == [
        {"interface": HALF1, "reasons": ["administratively down", "address 192.168.101.10/24 missing (has: none)"]}
    ]


def test_missing_address_without_carrier_points_at_the_cable():
    (entry,) = link_drift(facts_with(half0=live([], operstate="down", carrier=False)), PLAN, 9000)

    assert entry["reasons"] == ["address 192.168.100.10/24 missing (has: none; no carrier: the address returns with the cable)"]


def test_no_carrier_alone_is_not_drift():
    # netplan apply cannot bring a cable back; the verification reports it instead.
    assert link_drift(facts_with(half0=live(["192.168.100.10/24"], operstate="down", carrier=False)), PLAN, 9000) == []


def test_missing_interface_and_unreadable_addresses():
    facts = facts_with(half0=live([], exists=False), half1=live([], address_error="ip not found"))

    assert link_drift(facts, PLAN, 9000) == [
        {"interface": HALF0, "reasons": ["interface does not exist"]},
        {"interface": HALF1, "reasons": ["addresses could not be read (ip not found)"]},
    ]


def test_interface_absent_from_the_facts():
    assert link_drift({"interfaces": {}}, PLAN[:1], 9000) == [{"interface": HALF0, "reasons": ["interface does not exist"]}]


def test_unknown_mtu():
    assert link_drift(facts_with(half0=live(["192.168.100.10/24"], mtu=None)), PLAN, 9000) == [
        {"interface": HALF0, "reasons": ["mtu None, plan 9000"]}
    ]


def test_drift_lines():
    drift = link_drift(facts_with(half0=live([], mtu=1500)), PLAN, 9000)

    assert link_drift_lines(drift) == ["enp1s0f1np1: address 192.168.100.10/24 missing (has: none); mtu 1500, plan 9000"]
    assert link_drift_lines([]) == []


def test_missing_interfaces_are_named_by_their_plan_item():
    facts = facts_with(half1=live([], exists=False))

    assert link_missing_interfaces(facts, PLAN) == ["spark_link[1].interface 'enP2p1s0f1np1'"]
    assert link_missing_interfaces(CONVERGED, PLAN) == []


@pytest.mark.parametrize("name", ["link_drift", "link_drift_lines", "link_missing_interfaces"])
def test_filters_are_registered(name):
    assert name in FilterModule().filters()

# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Addresses and subnets of a host's direct-cable plan (spark_link), with the
standard library's ipaddress so no extra collection (ansible.utils) is needed."""

from __future__ import annotations

import ipaddress

from ansible.errors import AnsibleFilterError

DOCUMENTATION = r"""
name: link_subnets
short_description: The subnets of a host's cable halves
version_added: 0.1.0
description:
  - Takes a host's C(spark_link) list (items with C(interface) and C(address) in CIDR form) and returns the subnet of
    each cable half, in cable-half order, without duplicates, e.g. C(['192.168.100.0/24', '192.168.101.0/24']).
  - The companion filter C(sparkctl.spark.link_ips) returns the bare addresses (no prefix length) in the same order.
options:
  _input:
    description: A host's C(spark_link) list.
    type: list
    elements: dict
    required: true
"""

EXAMPLES = r"""
- name: Restrict a key to the cable's subnets
  ansible.builtin.set_fact:
    from_option: 'from="{{ spark_link | sparkctl.spark.link_subnets | join(",") }}"'

- name: The peer's link addresses, for ssh
  ansible.builtin.set_fact:
    peer_addresses: "{{ hostvars['spark2'].spark_link | sparkctl.spark.link_ips }}"
"""

RETURN = r"""
_value:
  description: Subnets in CIDR notation (C(link_subnets)) or bare addresses (C(link_ips)), in cable-half order.
  type: list
  elements: str
"""


def _interfaces(link):
    if not isinstance(link, (list, tuple)) or not link:
        raise AnsibleFilterError("spark_link must be a non-empty list of {interface, address} items")
    parsed = []
    for index, item in enumerate(link):
        address = item.get("address") if isinstance(item, dict) else None
        if not isinstance(address, str) or "/" not in address:
            raise AnsibleFilterError(f"spark_link[{index}].address {address!r} must be an address with its prefix, e.g. 192.168.100.10/24")
        try:
            parsed.append(ipaddress.ip_interface(address))
        except ValueError as exc:
            raise AnsibleFilterError(f"spark_link[{index}].address {address!r} is not valid: {exc}") from exc
    return parsed


def _unique(values):
    seen = []
    for value in values:
        if value not in seen:
            seen.append(value)
    return seen


def link_subnets(link):
    return _unique(str(iface.network) for iface in _interfaces(link))


def link_ips(link):
    return _unique(str(iface.ip) for iface in _interfaces(link))


class FilterModule:
    def filters(self):
        return {"link_subnets": link_subnets, "link_ips": link_ips}

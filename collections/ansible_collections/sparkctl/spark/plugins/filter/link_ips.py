# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The addresses of a host's direct-cable plan (spark_link), with the standard library's
ipaddress so no extra collection (ansible.utils) is needed."""

from __future__ import annotations

import ipaddress

from ansible.errors import AnsibleFilterError

DOCUMENTATION = r"""
name: link_ips
short_description: The bare addresses of a host's cable halves
version_added: 0.1.0
description:
  - Takes a host's C(spark_link) list (items with C(interface) and C(address) in CIDR form) and returns each cable
    half's address without its prefix length, in cable-half order, without duplicates, e.g.
    C(['192.168.100.10', '192.168.101.10']).
  - Fails naming the item when an address lacks its prefix or is not an address.
options:
  _input:
    description: A host's C(spark_link) list.
    type: list
    elements: dict
    required: true
"""

EXAMPLES = r"""
- name: The peer's link addresses, for ssh
  ansible.builtin.set_fact:
    peer_addresses: "{{ hostvars['spark2'].spark_link | sparkctl.spark.link_ips }}"
"""

RETURN = r"""
_value:
  description: Bare addresses, in cable-half order.
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


def link_ips(link):
    return _unique(str(iface.ip) for iface in _interfaces(link))


class FilterModule:
    def filters(self):
        return {"link_ips": link_ips}

# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The addresses of a host's direct-cable plan (spark_link), with the standard library's
ipaddress so no extra collection (ansible.utils) is needed. The work is done in
module_utils/link_address.py, which the plugins needing a cable address share."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.sparkctl.spark.plugins.module_utils import link_address

DOCUMENTATION = r"""
name: link_ips
short_description: The bare addresses of a host's cable halves
version_added: 0.1.0
description:
  - Takes a host's C(spark_link) list (items with C(interface) and C(address) in CIDR form) and returns each cable
    half's address without its prefix length, in cable-half order, without duplicates, e.g.
    C(['192.168.100.10', '192.168.101.10']).
  - Fails naming the item when an address lacks its prefix or is not an address.
  - The same file provides C(link_peer_addresses) (C(hostvars | sparkctl.spark.link_peer_addresses(cluster_hosts,
    inventory_hostname, spark_fabric))) - the bare cable addresses of this host's peers as C(spark_fabric) makes them (direct,
    the other node of the cable; switch, every other node), in peer then cable-half order, each once; it fails naming
    C(spark_fabric) for an unknown fabric or a direct cable asked to join more than two nodes.
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


def link_ips(link):
    try:
        return link_address.link_addresses(link)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def link_peer_addresses(hostvars, cluster_hosts, this_host, fabric):
    try:
        return link_address.peer_addresses(hostvars, cluster_hosts, this_host, fabric)
    except (KeyError, ValueError) as exc:
        raise AnsibleFilterError("The peers' cable addresses cannot be worked out: %s" % (exc,)) from exc


class FilterModule:
    def filters(self):
        return {"link_ips": link_ips, "link_peer_addresses": link_peer_addresses}

# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host firewall's nft file, rendered from the firewall role's variables and refused,
naming the variable, when a value is wrong."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.sparkctl.spark.plugins.module_utils import firewall

DOCUMENTATION = r"""
name: firewall_ruleset
short_description: The nft file of sparkctl's host firewall (table inet sparkctl)
version_added: 0.1.0
description:
  - Renders the complete file for C(nft -f). It starts with C(table inet sparkctl) and C(delete table inet sparkctl),
    so loading it replaces sparkctl's table in one transaction and touches no other table (docker's NAT, the
    distribution's firewall).
  - The table has one chain hooked on input, policy accept. Packets arriving on C(lo), on the cable interfaces
    (O(_input)) or on O(trusted_interfaces) are accepted. On every other interface the chain accepts established and
    related traffic, ICMP echo and errors, ICMPv6 echo, errors and neighbour discovery, DHCPv6 replies, TCP to
    O(ssh_ports) and O(extra_tcp_ports), on the head TCP to O(api_port) from O(api_allowed_cidrs), and TCP to each
    port of O(source_tcp_ports) from its sources; it drops
    invalid packets and everything else, with counters (and a rate-limited log line with O(log_drops)).
  - The table carries a comment with a digest of its definition, so C(nft list ruleset) shows which version is loaded.
  - Raises an error naming the role variable (C(firewall_api_allowed_cidrs), C(firewall_extra_allowed_tcp_ports), ...)
    for a network that does not parse, a port out of range or a bad interface name.
options:
  _input:
    description: The cable interfaces of this host (C(spark_link | map(attribute='interface'))).
    type: list
    elements: str
    required: true
  ssh_ports:
    description: TCP ports of sshd, open on every interface.
    type: list
    elements: int
    required: true
  api_port:
    description: The public API port (the profile's C(api.port)); only used when O(is_head).
    type: int
  api_allowed_cidrs:
    description:
      - IPv4 and IPv6 networks allowed to reach O(api_port); C(0.0.0.0/0) and C(::/0) mean any address of the family.
      - Empty closes the API port on the filtered interfaces (loopback and the cable still reach it).
    type: list
    elements: str
    default: []
  is_head:
    description: Whether this host serves the API.
    type: bool
    default: false
  extra_tcp_ports:
    description: More TCP ports open on every interface.
    type: list
    elements: int
    default: []
  trusted_interfaces:
    description: More interfaces trusted like the cable (nothing on them is filtered).
    type: list
    elements: str
    default: []
  log_drops:
    description: Log dropped packets (prefix C(sparkctl-firewall drop:)), at most O(log_rate).
    type: bool
    default: false
  log_rate:
    description: The log line's rate limit, e.g. C(10/minute).
    type: str
    default: 10/minute
  peer_addresses:
    description:
      - The cluster peers' cable addresses (C(link_peer_addresses)), given when the cable halves are shared through a
        switch (C(spark_fabric=switch)). The cable interfaces are then not trusted whole; packets on them from these
        addresses are, and everything else on them is filtered like on any other interface.
      - Omitted (a direct cable, which reaches only the peer), the cable interfaces are trusted.
    type: list
    elements: str
  source_tcp_ports:
    description:
      - TCP ports open on the filtered interfaces to some source networks only, each a mapping of C(port), C(sources)
        (IPv4/IPv6 networks; none keeps the port closed) and C(comment) (the rule's comment). The observe stage opens
        the node exporter to the Prometheus host and Prometheus to the management network so.
    type: list
    elements: dict
    default: []
"""

EXAMPLES = r"""
- name: Render the head's rule set
  ansible.builtin.set_fact:
    firewall_rendered: >-
      {{ ['enp1s0f1np1', 'enP2p1s0f1np1'] | sparkctl.spark.firewall_ruleset([22], api_port=8000,
         api_allowed_cidrs=['10.0.0.0/24'], is_head=true) }}
"""

RETURN = r"""
_value:
  description: The text of the nft file.
  type: str
"""


def firewall_ruleset(link_interfaces, ssh_ports, api_port=None, api_allowed_cidrs=None, is_head=False, extra_tcp_ports=None,
                     trusted_interfaces=None, log_drops=False, log_rate=firewall.DEFAULT_LOG_RATE, peer_addresses=None,
                     source_tcp_ports=None):
    try:
        return firewall.render(
            link_interfaces, ssh_ports, api_port=api_port, api_allowed_cidrs=api_allowed_cidrs or [],
            is_head=boolean(is_head, strict=False), extra_tcp_ports=extra_tcp_ports or [],
            trusted_interfaces=trusted_interfaces or [], log_drops=boolean(log_drops, strict=False), log_rate=log_rate,
            peer_addresses=peer_addresses, source_tcp_ports=source_tcp_ports or [],
        )
    except firewall.FirewallError as exc:
        raise AnsibleFilterError("The firewall cannot be rendered: " + " ".join(exc.problems)) from exc


def firewall_start_gate(config_file=firewall.CONFIG_FILE, nft=firewall.NFT):
    """`{{ firewall_config_file | sparkctl.spark.firewall_start_gate }}`: the ExecStartPre= value
    (`+/bin/sh -c "..."`, run as root whatever the unit's User=) that fails, naming
    `systemctl restart sparkctl-firewall.service`, while the rule set file exists but table
    inet sparkctl is not loaded, and passes with the file absent (the firewall turned off).
    The Ray and engine units rendered from a profile carry the same check."""
    try:
        return firewall.start_gate_exec(config_file, nft)
    except firewall.FirewallError as exc:
        raise AnsibleFilterError("The firewall's start check cannot be rendered: " + " ".join(exc.problems)) from exc


class FilterModule:
    def filters(self):
        return {"firewall_ruleset": firewall_ruleset, "firewall_start_gate": firewall_start_gate}

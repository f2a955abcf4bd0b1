# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A cable address without its prefix length, worked out in one place.

The link_ips filter (behind spark_link_ips in roles/spark/defaults/main.yml) and every
plugin that needs a node's cable address (the profile's renderer, the fabric environment,
the ping plan, the Ray cluster's expected nodes, the RoCE GID resolution, the NCCL test's
subnet, the inventory's checks) call these, so they all read the same string, parsed with
Python's ipaddress. It lives in module_utils because modules import only from there;
filters and plugin_utils import it too.
"""

from __future__ import annotations

import ipaddress


def link_interface(address):
    """'192.168.100.10/24' -> IPv4Interface('192.168.100.10/24'): the address (.ip, what
    bare_address gives) with its subnet (.network), read as written (the inventory's form);
    '192.168.100.10' -> the address alone (/32).

    Raises ValueError naming the value when it is not an address.
    """
    try:
        return ipaddress.ip_interface(str(address if address is not None else ""))
    except ValueError:
        raise ValueError("%r is not an address" % (address,)) from None


def bare_address(address):
    """'192.168.100.10/24' or '192.168.100.10' -> '192.168.100.10' (surrounding whitespace, as a
    command's output has it, ignored).

    Raises ValueError naming the value when it is not an address.
    """
    try:
        return str(link_interface(str(address if address is not None else "").strip()).ip)
    except ValueError:
        raise ValueError("%r is not an address" % (address,)) from None


def link_subnet(address):
    """'192.168.100.10/24' -> '192.168.100.0/24': the subnet of a cable half, from its planned
    address. The prefix length is part of the plan (spark_link): an address without one is
    refused, never given a guessed subnet.

    Raises ValueError naming the value otherwise.
    """
    if "/" not in str(address if address is not None else ""):
        raise ValueError("%r has no prefix length: a cable address names its subnet, e.g. 192.168.100.10/24"
                         % (address,))
    return str(link_interface(address).network)


def link_addresses(link):
    """A spark_link list -> its cable halves' bare addresses, in cable-half order, each once.

    Every item needs an address with its prefix length (the plan's subnet is part of it).
    Raises ValueError naming the item otherwise.
    """
    if not isinstance(link, (list, tuple)) or not link:
        raise ValueError("spark_link must be a non-empty list of {interface, address} items")
    addresses = []
    for index, item in enumerate(link):
        address = item.get("address") if isinstance(item, dict) else None
        if not isinstance(address, str) or "/" not in address:
            raise ValueError("spark_link[%d].address %r must be an address with its prefix, e.g. 192.168.100.10/24"
                             % (index, address))
        try:
            bare = str(ipaddress.ip_interface(address).ip)
        except ValueError as exc:
            raise ValueError("spark_link[%d].address %r is not valid: %s" % (index, address, exc)) from None
        if bare not in addresses:
            addresses.append(bare)
    return addresses


def primary_address(link):
    """The first cable half's bare address: the one Ray, the engines and MASTER_ADDR bind to."""
    return link_addresses(link)[0]


# The ways the nodes' cable halves can be joined (spark_fabric, roles/spark/defaults/main.yml).
# direct: one ConnectX-7 cable between two nodes, each half a point-to-point link.
# switch: every node's halves on shared subnets through a switch, each half one subnet.
# The fabric is the caller's spark_fabric as the play resolves it (the inventory's, else the spark
# role's default): hostvars hold no role defaults, so it is never read from them here.
FABRICS = ("direct", "switch")


def fabric_peers(cluster_hosts, this_host, fabric):
    """Who this host exchanges traffic with over the cable halves: the one owner of the answer.

    direct: a cable joins exactly two nodes, so the peer is the other one; a cluster of more
    than two cannot be cabled directly (ValueError naming spark_fabric and the fix).
    switch: every other node of the cluster is a peer on every half.
    Cluster order is kept; duplicates and this host are left out."""
    if fabric not in FABRICS:
        raise ValueError("spark_fabric %r must be one of %s" % (fabric, ", ".join(FABRICS)))
    hosts = list(dict.fromkeys(cluster_hosts))
    if fabric == "direct" and len(hosts) > 2:
        raise ValueError("spark_fabric is 'direct' but the cluster has %d nodes (%s): a direct cable joins two; "
                         "set spark_fabric: switch for nodes on a switch" % (len(hosts), ", ".join(hosts)))
    return [host for host in hosts if host != this_host]


def peer_addresses(hostvars, cluster_hosts, this_host, fabric):
    """Every peer's bare addresses on every cable half, in peer then half order (each once):
    the sources this host trusts on its cable interfaces when they are shared (a switch)."""
    peers = fabric_peers(cluster_hosts, this_host, fabric)
    addresses = []
    for peer in peers:
        for address in link_addresses(hostvars[peer]["spark_link"]):
            if address not in addresses:
                addresses.append(address)
    return addresses


def peer_targets(hostvars, cluster_hosts, this_host, fabric, skip_hosts=None):
    """Per peer of this host (fabric_peers, by spark_fabric) but skip_hosts, and
    cable half i: this host's spark_link[i] interface and address paired with the peer's,
    addresses without prefix length. The jumbo ping (link_ping_targets) and the fabric test
    (fabric_test_pairs) take these paths."""
    skip = set(skip_hosts or [])
    own = list(hostvars[this_host]["spark_link"])
    targets = []
    for peer in fabric_peers(cluster_hosts, this_host, fabric):
        if peer in skip:
            continue
        peer_link = list(hostvars[peer]["spark_link"])
        for half, mine in enumerate(own):
            if half >= len(peer_link):
                break
            targets.append(
                {
                    "interface": mine["interface"],
                    "source": bare_address(mine["address"]),
                    "half": half,
                    "peer": peer,
                    "peer_interface": peer_link[half]["interface"],
                    "address": bare_address(peer_link[half]["address"]),
                }
            )
    return targets

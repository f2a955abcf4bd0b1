# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A cable address without its prefix length, worked out in one place.

The link_ips filter (behind spark_link_ips in roles/spark/defaults/main.yml) and every
plugin that needs a node's cable address (the profile's renderer, the fabric environment,
the ping plan, the Ray cluster's expected nodes, the RoCE GID resolution) call these, so
they all read the same string. It lives in module_utils because modules import only from
there; filters and plugin_utils import it too.
"""

from __future__ import annotations

import ipaddress


def bare_address(address):
    """'192.168.100.10/24' or '192.168.100.10' -> '192.168.100.10'.

    Raises ValueError naming the value when it is not an address.
    """
    text = str(address if address is not None else "").strip()
    try:
        return str(ipaddress.ip_interface(text).ip)
    except ValueError:
        raise ValueError("%r is not an address" % (address,)) from None


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


def peer_targets(hostvars, cluster_hosts, this_host, skip_hosts=None):
    """Per other host of cluster_hosts (but skip_hosts) and cable half i: this host's
    spark_link[i] interface and address paired with the peer's, addresses without prefix length.
    The jumbo ping (link_ping_targets) and the fabric test (fabric_test_pairs) take these paths."""
    skip = set(skip_hosts or [])
    own = list(hostvars[this_host]["spark_link"])
    targets = []
    seen = set()
    for peer in cluster_hosts:
        if peer == this_host or peer in skip or peer in seen:
            continue
        seen.add(peer)
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

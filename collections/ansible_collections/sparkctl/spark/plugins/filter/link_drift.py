# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Compare the live direct link (spark_link_facts) with the plan (spark_link,
spark_link_mtu): the drift a netplan file cannot show, such as an address removed
by hand or an MTU reset, which only `netplan apply` repairs; and, from every host's read,
the hosts of the play whose link is about to be re-applied."""

from __future__ import annotations

import ipaddress

from ansible.errors import AnsibleFilterError

DOCUMENTATION = r"""
name: link_drift
short_description: List the link interfaces whose live state differs from the plan, and why
version_added: 0.1.0
description:
  - Takes the C(spark_link_facts) fact of one node (from C(sparkctl.spark.link_facts)), the host's C(spark_link)
    plan and the planned MTU, and returns one entry per interface that drifted, in plan order.
  - "Reasons: the interface does not exist, its addresses could not be read, it is administratively down,
    a planned address is missing (the prefix length counts), or its MTU differs."
  - Extra addresses are not drift; the role owns only what the plan names.
  - Also provides C(link_drift_lines) (the result as one line per interface, for messages),
    C(link_missing_interfaces) (the C(spark_link) items whose interface does not exist) and C(link_apply_pending)
    (input the play's hosts; arguments each host's registered read of C(sparkctl.spark.link_facts), C({}) where it has
    none, and each host's C(spark_link), both in the order of the hosts, then the netplan file's path and the planned
    MTU), which returns the hosts whose link is about to be re-applied, in input order. A host is pending when its read
    names the netplan file among its C(drifted) paths or its live link differs from the plan (C(link_drift)); a
    host without a read, or whose read has no C(drifted), is not.
options:
  _input:
    description: The C(spark_link_facts) fact (C(interfaces) keyed by name, C(missing)).
    type: dict
    required: true
  spark_link:
    description: The host's plan, a list of C({interface, address}).
    type: list
    elements: dict
    required: true
  mtu:
    description: The planned MTU.
    type: int
    required: true
"""

EXAMPLES = r"""
- name: Compare the live link with the plan
  ansible.builtin.set_fact:
    direct_link_drift: "{{ ansible_facts['spark_link_facts'] | sparkctl.spark.link_drift(spark_link, spark_link_mtu) }}"
"""

RETURN = r"""
_value:
  description:
    - One entry per drifted interface; empty when the live link matches the plan.
    - C(link_apply_pending) returns the names of the pending hosts instead.
  type: list
  elements: dict
  contains:
    interface: {description: The netdev., type: str}
    reasons:
      description: "What differs, e.g. C(address 192.168.100.10/24 missing (has: none)), C(mtu 1500, plan 9000)."
      type: list
      elements: str
"""


def _interface_key(text):
    """'192.168.100.10/24' -> IPv4Interface, for a comparison that ignores spelling."""
    try:
        return ipaddress.ip_interface(str(text).strip())
    except ValueError:
        return None


def interface_drift(facts, planned_addresses, mtu):
    """Reasons one interface differs from its plan (empty list: it matches)."""
    if not facts or not facts.get("exists"):
        return ["interface does not exist"]
    if facts.get("address_error"):
        return ["addresses could not be read (%s)" % facts["address_error"]]
    reasons = []
    # A link set down by hand keeps its addresses; carrier is unreadable only then.
    if facts.get("operstate") == "down" and facts.get("carrier") is None:
        reasons.append("administratively down")
    live = [str(address) for address in facts.get("ipv4") or []]
    live_keys = {_interface_key(address) for address in live}
    # networkd drops a link's addresses when it loses carrier and restores them with the
    # carrier, so without carrier a missing address is the cable's doing, not the plan's.
    no_carrier = "; no carrier: the address returns with the cable" if facts.get("carrier") is False else ""
    for address in planned_addresses:
        if _interface_key(address) not in live_keys:
            reasons.append("address %s missing (has: %s%s)" % (address, ", ".join(live) or "none", no_carrier))
    if facts.get("mtu") is None or int(facts["mtu"]) != int(mtu):
        reasons.append("mtu %s, plan %s" % (facts.get("mtu"), int(mtu)))
    return reasons


def link_drift(link_facts, spark_link, mtu):
    """[{interface, reasons}] for each planned interface whose live state differs."""
    interfaces = (link_facts or {}).get("interfaces") or {}
    planned = {}
    for item in spark_link or []:
        planned.setdefault(item["interface"], []).append(item["address"])
    drift = []
    for interface, addresses in planned.items():
        reasons = interface_drift(interfaces.get(interface), addresses, mtu)
        if reasons:
            drift.append({"interface": interface, "reasons": reasons})
    return drift


def link_missing_interfaces(link_facts, spark_link):
    """["spark_link[1].interface 'enP2p1s0f1np1'", ...] for planned interfaces that do not exist."""
    interfaces = (link_facts or {}).get("interfaces") or {}
    return [
        "spark_link[%d].interface '%s'" % (index, item["interface"])
        for index, item in enumerate(spark_link or [])
        if not (interfaces.get(item["interface"]) or {}).get("exists")
    ]


def link_drift_lines(drift):
    """['enp1s0f1np1: mtu 1500, plan 9000; ...'] from link_drift's result, for messages."""
    return ["%s: %s" % (entry["interface"], "; ".join(entry["reasons"])) for entry in drift or []]


def link_apply_pending(hosts, reads, links, netplan_path, mtu):
    """The hosts whose link is about to be re-applied: their read (reads, in the order of hosts,
    {} where none was registered) names the netplan file among its drifted paths, or their live
    link differs from their plan (links: each host's spark_link, in the same order)."""
    hosts, reads, links = list(hosts or []), list(reads or []), list(links or [])
    if not len(hosts) == len(reads) == len(links):
        raise AnsibleFilterError("link_apply_pending: %d hosts, %d reads and %d spark_link plans"
                                 % (len(hosts), len(reads), len(links)))
    pending = []
    for host, read, link in zip(hosts, reads, links, strict=True):
        if "drifted" not in read:
            continue
        if netplan_path in read["drifted"]:
            pending.append(host)
            continue
        try:
            link_facts = read["ansible_facts"]["spark_link_facts"]
        except (KeyError, TypeError) as exc:
            raise AnsibleFilterError("link_apply_pending: the read of %s has no spark_link_facts" % (host,)) from exc
        if link_drift(link_facts, link, mtu):
            pending.append(host)
    return pending


class FilterModule:
    def filters(self):
        return {
            "link_drift": link_drift,
            "link_drift_lines": link_drift_lines,
            "link_missing_interfaces": link_missing_interfaces,
            "link_apply_pending": link_apply_pending,
        }

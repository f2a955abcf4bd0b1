# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""End-to-end check of the direct link: which peer addresses each cable half must
reach, and what a failed no-fragment ping of MTU-28 bytes means (iputils output)."""

from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError

from ansible_collections.sparkctl.spark.plugins.module_utils.link_address import peer_targets

DOCUMENTATION = r"""
name: link_ping_targets
short_description: The peer addresses each cable half of this node must reach
version_added: 0.1.0
extends_documentation_fragment:
  - sparkctl.spark.cluster_hostvars
description:
  - For every other host of O(cluster_hosts) and every cable half C(i), pairs this host's C(spark_link[i].interface)
    with the peer's C(spark_link[i].address) (prefix length removed).
  - Hosts in O(skip_hosts) are left out (the role passes the peers with a change pending in check mode).
  - The same file provides C(link_ping_failed_targets) (the targets of failed results) and C(link_ping_problems)
    (one sentence per failed target with the MTU and the likely fix, from iputils C(ping) output), both reading
    RV(sparkctl.spark.link_ping#module:pings).
options:
  this_host:
    description: C(inventory_hostname).
    type: str
    required: true
  fabric:
    description: C(spark_fabric) as the play resolves it - C(direct) (the other node of the cable) or C(switch) (every other node).
    type: str
    required: true
  skip_hosts:
    description: Peers not to ping.
    type: list
    elements: str
    default: []
"""

EXAMPLES = r"""
# The sparkctl.spark.link_ping module pings them; its example judges the results with link_ping_problems.
- name: The peers this node must reach, per cable half
  ansible.builtin.set_fact:
    link_targets: >-
      {{ hostvars | sparkctl.spark.link_ping_targets(groups['spark_head'] + groups['spark_workers'], inventory_hostname,
         spark_fabric) }}
"""

RETURN = r"""
_value:
  description: One target per peer and cable half, in cluster then cable order.
  type: list
  elements: dict
  contains:
    interface: {description: This host's netdev of the half., type: str}
    source: {description: This host's address on the half, without prefix length., type: str}
    half: {description: Index of the half in C(spark_link)., type: int}
    peer: {description: The peer's inventory name., type: str}
    peer_interface: {description: The peer's netdev of the half., type: str}
    address: {description: The peer's address on the half, without prefix length., type: str}
"""

_STATS_RE = re.compile(r"(\d+) packets transmitted, (\d+) (?:packets )?received")
_LOCAL_MTU_RE = re.compile(r"message too long, mtu[= ]+(\d+)", re.IGNORECASE)
_PATH_MTU_RE = re.compile(r"From (\S+).*Frag needed and DF set \(mtu = (\d+)\)", re.IGNORECASE)
# "PING 192.168.100.11 (192.168.100.11) from 192.168.100.10 enp1s0f1np1: 8972(9000) bytes of data."
_SOURCE_RE = re.compile(r"^PING \S+ \(\S+\) from (\S+) ", re.MULTILINE)


def link_ping_targets(hostvars, cluster_hosts, this_host, fabric, skip_hosts=None):
    try:
        return peer_targets(hostvars, cluster_hosts, this_host, fabric, skip_hosts)
    except ValueError as exc:
        raise AnsibleFilterError(f"link_ping_targets: {exc}") from exc


def parse_ping(stdout, stderr=""):
    """Read iputils ping output: packets sent/received and the errors that explain a loss."""
    text = "%s\n%s" % (stdout or "", stderr or "")
    stats = _STATS_RE.search(text)
    local_mtu = _LOCAL_MTU_RE.search(text)
    source = _SOURCE_RE.search(text)
    path_mtu = _PATH_MTU_RE.search(text)
    errors = [
        line.strip()
        for line in text.splitlines()
        if line.strip().startswith("ping:") and not _LOCAL_MTU_RE.search(line)
    ]
    return {
        "transmitted": int(stats.group(1)) if stats else 0,
        "received": int(stats.group(2)) if stats else 0,
        "source": source.group(1) if source else None,
        "local_mtu": int(local_mtu.group(1)) if local_mtu else None,
        "path_mtu_hop": path_mtu.group(1) if path_mtu else None,
        "path_mtu": int(path_mtu.group(2)) if path_mtu else None,
        "errors": errors,
    }


def _ran(result):
    return isinstance(result, dict) and not result.get("skipped") and "item" in result and "rc" in result


def _passed(result):
    parsed = parse_ping(result.get("stdout"), result.get("stderr"))
    return result.get("rc") == 0 and parsed["transmitted"] > 0 and parsed["received"] == parsed["transmitted"]


def link_ping_failed_targets(results):
    """The targets (loop items) of the ping results that did not pass."""
    return [result["item"] for result in results or [] if _ran(result) and not _passed(result)]


def _target_key(target):
    return (target.get("interface"), target.get("address"))


def _problem(target, parsed, mtu, small_passed, this_host):
    interface, peer, address = target["interface"], target["peer"], target["address"]
    peer_if = target.get("peer_interface") or interface
    payload = mtu - 28
    where = "%s %s -> %s %s (half %s, MTU %d, %d-byte no-fragment ping)" % (
        this_host or "this node", interface, peer, address, target.get("half", "?"), mtu, payload)
    # A hop's 'Frag needed' also lowers the kernel's path MTU, after which ping reports
    # 'message too long' locally: the hop is the cause, so it is judged first.
    if parsed["path_mtu"] is not None:
        return ("%s: %s answered 'Frag needed' with MTU %d: a device between the nodes does not carry %d-byte frames. "
                "Likely fix: raise the switch port MTU to %d or more, or cable the nodes directly."
                % (where, parsed["path_mtu_hop"], parsed["path_mtu"], mtu, mtu))
    if parsed["local_mtu"] is not None:
        return ("%s: refused locally, 'message too long, mtu=%d': %s's own MTU is below %d. "
                "Likely fix: re-run the direct_link role on %s (something reset the MTU; check `ip link show %s`)."
                % (where, parsed["local_mtu"], interface, mtu, this_host or "this node", interface))
    if target.get("source") and parsed["source"] and parsed["source"] != target["source"]:
        # Without its own address on the interface, ping borrows another interface's.
        return ("%s: sent from %s, not from this node's link address %s: %s has lost its address. "
                "Likely fix: re-run the direct_link role here; check `ip addr show dev %s` and the cable "
                "(networkd drops the addresses of a link without carrier)."
                % (where, parsed["source"], target["source"], interface, interface))
    if parsed["errors"] and parsed["transmitted"] == 0:
        return ("%s: ping could not run (%s). Likely fix: check that %s holds its link address (`ip addr show dev %s`); "
                "re-run the direct_link role." % (where, "; ".join(parsed["errors"]), interface, interface))
    if parsed["received"] and parsed["received"] < parsed["transmitted"]:
        return ("%s: %d of %d replies lost. Likely fix: a flaky cable or transceiver on this half; reseat or replace the cable."
                % (where, parsed["transmitted"] - parsed["received"], parsed["transmitted"]))
    said = "" if not parsed["errors"] else " (ping said: %s)" % "; ".join(sorted(set(parsed["errors"])))
    if small_passed:
        return ("%s: no reply to jumbo frames although a small ping gets through%s: the path drops %d-byte frames. "
                "Likely fix: set MTU %d on %s's %s (run the direct_link role there; check `ip link show %s` on %s); "
                "if a switch is in between, raise its MTU to %d or more."
                % (where, said, mtu, mtu, peer, peer_if, peer_if, peer, mtu))
    return ("%s: no reply at all (%d sent, 0 received%s). Likely fix: check the cable on this half (carrier on both ends, "
            "`ip link show %s`), that %s holds %s on %s (run the direct_link role there), and that no firewall drops ICMP "
            "on the link; if a switch is in between, check its MTU is %d or more."
            % (where, parsed["transmitted"], said, interface, peer, address, peer_if, mtu))


def link_ping_problems(results, mtu, small_results=None, this_host=None):
    """One sentence per failed jumbo ping: where, what was seen, the MTU and the likely fix."""
    mtu = int(mtu)
    small_passed = {
        _target_key(result["item"]): _passed(result) for result in small_results or [] if _ran(result)
    }
    problems = []
    for result in results or []:
        if not _ran(result) or _passed(result):
            continue
        parsed = parse_ping(result.get("stdout"), result.get("stderr"))
        problems.append(_problem(result["item"], parsed, mtu, small_passed.get(_target_key(result["item"])), this_host))
    return problems


class FilterModule:
    def filters(self):
        return {
            "link_ping_targets": link_ping_targets,
            "link_ping_failed_targets": link_ping_failed_targets,
            "link_ping_problems": link_ping_problems,
        }

# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host firewall: sparkctl's own nftables table, rendered from the inventory, and
the comparison of the live table with the rendered one.

Ray 2.60 binds GCS, raylet, workers and the dashboard agent on every address and
cannot be told otherwise (docs/field-notes.md, "The lab"), so the cable is trusted and every other
interface is filtered: established traffic, ping/ICMP errors, IPv6 neighbour
discovery, DHCPv6 replies, ssh, and on the head the API port from configured CIDRs;
the rest is dropped. Only the table ``inet sparkctl`` is ever written or deleted: the
ruleset also holds docker's NAT and the distribution's firewall, which stay untouched
(never ``flush ruleset``).

Shared by the filter (rendering, refusing bad values), the inventory validation
(the same checks before any host is touched) and the firewall_state module (live
table versus rendered table)."""

from __future__ import annotations

import difflib
import hashlib
import ipaddress
import json
import re

from ansible_collections.sparkctl.spark.plugins.module_utils.units import UNITS, unit_stem

FAMILY = "inet"
TABLE = "sparkctl"
CHAIN = "input"
DIGEST_PREFIX = "sparkctl host firewall sha256:"
LOG_PREFIX = "sparkctl-firewall drop: "
DEFAULT_LOG_RATE = "10/minute"

# Linux netdev names, as the inventory validation accepts them (no quotes, no wildcard).
_IFNAME_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,15}$")
_LOG_RATE_RE = re.compile(r"^[1-9][0-9]{0,5}/(second|minute|hour|day)$")

ICMP_TYPES = ("echo-request", "destination-unreachable", "time-exceeded", "parameter-problem")
# Ping, the errors path MTU discovery needs, and neighbour discovery (no IPv6 at all without it).
ICMPV6_TYPES = ("echo-request", "destination-unreachable", "packet-too-big", "time-exceeded", "parameter-problem",
                "nd-router-advert", "nd-neighbor-solicit", "nd-neighbor-advert", "mld-listener-query")


class FirewallError(ValueError):
    """Values the firewall cannot be rendered from; .problems names each variable."""

    def __init__(self, problems):
        super().__init__("\n".join(problems))
        self.problems = list(problems)


# --- Validation ------------------------------------------------------------------


def _list_problems(name, values, expected, item_problems):
    """Problems with a list held in variable `name`: not a list at all (`expected` says what it
    must be), else the sentences item_problems(name, index, item) says about each item."""
    if values is None:
        return []
    if not isinstance(values, (list, tuple)):
        return [f"'{name}' must be {expected}, got {values!r}."]
    return [problem for idx, value in enumerate(values) for problem in item_problems(name, idx, value)]


def _each(one_problem):
    """item_problems for _list_problems from a check that says what is wrong with one item, or None."""
    def item_problems(name, idx, value):
        problem = one_problem(value)
        return [f"'{name}'[{idx}] {value!r} {problem}."] if problem else []
    return item_problems


def port_problems(name, ports):
    """Problems with a list of TCP ports held in variable `name`."""
    return _list_problems(name, ports, "a list of TCP ports (1-65535), e.g. [9100]", _each(_one_port_problem))


def _one_port_problem(port):
    if isinstance(port, bool) or not isinstance(port, (int, str)) or (isinstance(port, str) and not port.strip().isdigit()):
        return "is not a TCP port number (1-65535)"
    if not 1 <= int(port) <= 65535:
        return "is out of range: a TCP port is 1-65535"
    return None


def single_port_problems(name, port):
    problem = _one_port_problem(port)
    return [f"'{name}' {port!r} {problem}."] if problem else []


def _one_cidr_problem(cidr):
    try:
        if not isinstance(cidr, str):
            raise ValueError("not a string")
        ipaddress.ip_network(cidr.strip(), strict=False)
    except ValueError:
        return ("is not an IPv4 or IPv6 network: write it like 10.0.0.0/24 or fd00::/64 "
                "(a single address is a /32 or /128); 0.0.0.0/0 and ::/0 mean any")
    return None


def cidr_problems(name, cidrs):
    """Problems with a list of IPv4/IPv6 networks held in variable `name`."""
    return _list_problems(name, cidrs, "a list of IPv4/IPv6 networks, e.g. ['10.0.0.0/24', 'fd00::/64']", _each(_one_cidr_problem))


def _one_interface_problem(iface):
    if not isinstance(iface, str) or not _IFNAME_RE.match(iface) or iface in (".", ".."):
        return "is not a network interface name (1-15 of A-Z a-z 0-9 _ . : -)"
    return None


def interface_problems(name, interfaces):
    return _list_problems(name, interfaces, "a list of interface names", _each(_one_interface_problem))


def revert_seconds_problems(name, seconds):
    if isinstance(seconds, bool) or not str(seconds).strip().isdigit() or int(seconds) < 5:
        return [f"'{name}' {seconds!r} must be a whole number of seconds, 5 or more (a new SSH connection must fit in it), e.g. 60."]
    return []


def log_rate_problems(name, rate):
    if rate is None or (isinstance(rate, str) and _LOG_RATE_RE.match(rate)):
        return []
    return [f"'{name}' {rate!r} must be a rate like 10/minute (per second, minute, hour or day)."]


def source_port_problems(name, entries):
    """Problems with a list of {port, sources, comment} held in variable `name`: ports open only
    to some networks (the observe stage's node exporter to the Prometheus host, Prometheus to the
    management network)."""
    return _list_problems(name, entries, "a list of {port, sources, comment}", _source_port_problems)


def _source_port_problems(name, idx, entry):
    if not isinstance(entry, dict) or set(entry) - {"port", "sources", "comment"} or "port" not in entry:
        return [f"'{name}'[{idx}] {entry!r} must be a mapping with port, sources and comment."]
    problems = single_port_problems(f"{name}[{idx}].port", entry["port"])
    problems += cidr_problems(f"{name}[{idx}].sources", entry.get("sources") or [])
    if not re.match(r"^[A-Za-z0-9 _.,()/:-]*$", str(entry.get("comment", ""))):
        problems.append(f"'{name}'[{idx}].comment {entry.get('comment')!r} may hold letters, digits, spaces and _ . , ( ) / : - only.")
    return problems


# What the inventory validation checks, by variable; each runs only when the inventory sets it.
_INVENTORY_CHECKS = {
    "ansible_port": single_port_problems,
    "firewall_ssh_ports": port_problems,
    "firewall_extra_allowed_tcp_ports": port_problems,
    "firewall_api_port": single_port_problems,
    "firewall_api_allowed_cidrs": cidr_problems,
    "firewall_trusted_interfaces": interface_problems,
    "firewall_log_rate": log_rate_problems,
    "firewall_revert_seconds": revert_seconds_problems,
    "firewall_source_tcp_ports": source_port_problems,
}


def inventory_problems(host_vars):
    """Problems with the firewall variables a host's inventory sets (role defaults are known good)."""
    problems = []
    for name, check in _INVENTORY_CHECKS.items():
        if name in host_vars:
            problems.extend(check(name, host_vars[name]))
    return problems


# --- Rendering ---------------------------------------------------------------------


def _ports(ports):
    return list(dict.fromkeys(int(p) for p in ports or []))


def _networks(cidrs):
    """(ipv4 networks, ipv6 networks), deduplicated in the given order, host bits cleared."""
    v4, v6 = [], []
    for cidr in cidrs or []:
        net = ipaddress.ip_network(cidr.strip(), strict=False)
        target = v4 if net.version == 4 else v6
        if net not in target:
            target.append(net)
    return v4, v6


def _set(items):
    items = list(items)
    return items[0] if len(items) == 1 else "{ " + ", ".join(items) + " }"


def _quoted_set(names):
    return "{ " + ", ".join(f'"{n}"' for n in names) + " }"


def _api_rules(api_port, v4, v6):
    rules = []
    for family, nets, label in (("ip", v4, "IPv4"), ("ip6", v6, "IPv6")):
        if not nets:
            continue
        if any(net.prefixlen == 0 for net in nets):
            rules.append(f'meta nfproto {"ipv4" if family == "ip" else "ipv6"} tcp dport {api_port} accept '
                         f'comment "API port from any {label} address"')
        else:
            rules.append(f'tcp dport {api_port} {family} saddr {_set(str(n) for n in nets)} accept '
                         f'comment "API port from firewall_api_allowed_cidrs ({label})"')
    return rules


def _source_port_rules(entries):
    """One rule per family a port's sources hold; a port with no source stays closed (no rule)."""
    rules = []
    for entry in entries or []:
        v4, v6 = _networks(entry.get("sources") or [])
        comment = entry.get("comment") or f"port {int(entry['port'])} from its sources"
        for family, nets, label in (("ip", v4, "IPv4"), ("ip6", v6, "IPv6")):
            if nets:
                rules.append(f'tcp dport {int(entry["port"])} {family} saddr {_set(str(n) for n in nets)} accept '
                             f'comment "{comment} ({label})"')
    return rules


def peer_address_problems(peer_addresses):
    """Problems with the peers' cable addresses (computed from their spark_link, never typed by hand)."""
    if peer_addresses is None:
        return []
    if not isinstance(peer_addresses, (list, tuple)) or not peer_addresses:
        return [f"the peers' cable addresses (spark_link of the other nodes) must be a non-empty list, got {peer_addresses!r}."]
    problems = []
    for address in peer_addresses:
        try:
            ipaddress.ip_address(str(address))
        except ValueError:
            problems.append(f"peer cable address {address!r} (spark_link of another node) is not an address.")
    return problems


def render(link_interfaces, ssh_ports, api_port=None, api_allowed_cidrs=(), is_head=False, extra_tcp_ports=(),
           trusted_interfaces=(), log_drops=False, log_rate=DEFAULT_LOG_RATE, peer_addresses=None,
           source_tcp_ports=()):
    """The complete nft file: replaces table inet sparkctl in one transaction, touches nothing else.

    peer_addresses None: the cable interfaces are trusted whole (a direct cable reaches only the
    peer). A list (spark_fabric: switch): the cable subnets are shared with whatever else the
    switch joins, so on the cable interfaces only these source addresses (the cluster's peers)
    are trusted and everything else there is filtered like any other interface.

    source_tcp_ports: [{port, sources, comment}], each port open on the filtered interfaces to its
    source networks only (firewall_source_tcp_ports).

    Raises FirewallError naming the role variable of every bad value."""
    problems = []
    problems += peer_address_problems(peer_addresses)
    problems += interface_problems("spark_link (interfaces)", link_interfaces)
    problems += interface_problems("firewall_trusted_interfaces", trusted_interfaces)
    problems += port_problems("firewall_ssh_ports", ssh_ports)
    problems += port_problems("firewall_extra_allowed_tcp_ports", extra_tcp_ports)
    problems += cidr_problems("firewall_api_allowed_cidrs", api_allowed_cidrs)
    problems += log_rate_problems("firewall_log_rate", log_rate)
    problems += source_port_problems("firewall_source_tcp_ports", source_tcp_ports)
    if is_head:
        problems += single_port_problems("firewall_api_port", api_port)
    if not link_interfaces and not problems:
        problems.append("'spark_link' lists no interface: the firewall trusts the cable and needs its interface names.")
    if not ssh_ports and not problems:
        problems.append("'firewall_ssh_ports' is empty: Ansible could not reach the node after the firewall is loaded.")
    if problems:
        raise FirewallError(problems)

    switch = peer_addresses is not None
    trusted = list(dict.fromkeys(["lo", *([] if switch else link_interfaces), *(trusted_interfaces or [])]))
    ssh = _ports(ssh_ports)
    extra = [p for p in _ports(extra_tcp_ports) if p not in ssh]
    v4, v6 = _networks(api_allowed_cidrs)

    rules = [
        f'iifname {_quoted_set(trusted)} accept comment "trusted: loopback'
        + ("" if switch else ", the direct cable") + (', firewall_trusted_interfaces"' if trusted_interfaces else '"'),
    ]
    if switch:
        peers = list(dict.fromkeys(ipaddress.ip_address(str(a)) for a in peer_addresses))
        for family, addresses in (("ip", [a for a in peers if a.version == 4]), ("ip6", [a for a in peers if a.version == 6])):
            if addresses:
                rules.append(f'iifname {_quoted_set(dict.fromkeys(link_interfaces))} {family} saddr '
                             f'{_set(str(a) for a in addresses)} accept comment "trusted: the cluster peers on the switch"')
    rules += [
        'ct state established,related accept comment "replies to connections of this host"',
        'ct state invalid counter drop comment "invalid packets"',
        f'icmp type {{ {", ".join(ICMP_TYPES)} }} accept comment "ping and ICMP errors"',
        f'icmpv6 type {{ {", ".join(ICMPV6_TYPES)} }} accept comment "ping, ICMPv6 errors, neighbour discovery"',
        'ip6 saddr fe80::/10 udp sport 547 udp dport 546 accept comment "DHCPv6 replies"',
        f'tcp dport {_set(str(p) for p in ssh)} accept comment "ssh (firewall_ssh_ports)"',
    ]
    if extra:
        rules.append(f'tcp dport {_set(str(p) for p in extra)} accept comment "firewall_extra_allowed_tcp_ports"')
    if is_head:
        rules += _api_rules(int(api_port), v4, v6)
    rules += _source_port_rules(source_tcp_ports)
    if log_drops:
        rules.append(f'limit rate {log_rate} log prefix "{LOG_PREFIX}" comment "log what is dropped, rate limited"')
    rules.append('counter drop comment "everything else: Ray, engine and other ports stay off this interface"')

    body = "\n".join([
        f"table {FAMILY} {TABLE} {{",
        f"\tchain {CHAIN} {{",
        "\t\ttype filter hook input priority filter; policy accept;",
        *(f"\t\t{rule}" for rule in rules),
        "\t}",
        "}",
    ])
    digest = hashlib.sha256(body.encode()).hexdigest()[:16]
    body = body.replace(f"table {FAMILY} {TABLE} {{", f'table {FAMILY} {TABLE} {{\n\tcomment "{DIGEST_PREFIX}{digest}"', 1)
    header = [
        "# Managed by sparkctl (roles/firewall). Hand edits are replaced on the next run.",
        "# The two lines below create the table if it is missing and delete it, so that `nft -f`",
        f"# replaces table {FAMILY} {TABLE} in one transaction and leaves every other table alone.",
        (f"# Packets on {', '.join(trusted)}, and from the cluster's peers on {', '.join(dict.fromkeys(link_interfaces))},"
         " are trusted; elsewhere only what the" if switch
         else f"# Packets on {', '.join(trusted)} are trusted; on any other interface only what the"),
        "# rules accept gets through: Ray and the engines bind their ports on every address.",
        f"table {FAMILY} {TABLE}",
        f"delete table {FAMILY} {TABLE}",
        "",
    ]
    return "\n".join(header) + body + "\n"


# --- Units that must not run without the table ----------------------------------------

UNIT = UNITS["firewall"]
CONFIG_FILE = "/etc/sparkctl/firewall.nft"
NFT = "/usr/sbin/nft"


def start_gate_argv(config_file=CONFIG_FILE, nft=NFT, family=FAMILY, table=TABLE, unit=UNIT):
    """argv of a check that fails while the firewall is enabled but its table is not loaded.

    Ray and the engines bind their ports on every address: a unit running this before it
    starts never listens on an unfiltered management network. "Enabled" is read on the
    node at start time (the role removes the rule set file when the firewall is turned
    off), so the rendered units need not know the inventory's firewall_enabled."""
    for word in (config_file, nft, family, table, unit):
        if not re.match(r"^[A-Za-z0-9_./@-]+$", str(word)):
            raise FirewallError([f"{word!r} cannot be used in a unit's start check (letters, digits, _ . / @ - only)."])
    script = (f"test ! -e {config_file} || {nft} list table {family} {table} >/dev/null 2>&1 || "
              f"{{ echo sparkctl: the firewall is enabled but table {family} {table} is not loaded, not starting."
              f" Load it with: systemctl restart {unit} >&2; exit 1; }}")
    return ["/bin/sh", "-c", script]


def start_gate_exec(config_file=CONFIG_FILE, nft=NFT):
    """The ExecStartPre= value of the check: run as root ("+"; nft needs CAP_NET_ADMIN even to
    read) whatever User= the unit runs as; no '%', '$' or quote to escape for systemd."""
    shell, flag, script = start_gate_argv(config_file, nft)
    return f'+{shell} {flag} "{script}"'


def start_gate_unit_lines(config_file=CONFIG_FILE, nft=NFT, unit=UNIT):
    """{"unit": [...], "service": [...]}: the lines a unit that must not run without the table carries.

    Wants=+After=: starting the unit (re)loads a firewall that failed or was stopped, before
    the check. Not Requires=: the firewall restarts with nftables.service (whose config
    flushes the ruleset), and a Requires= would restart Ray and the engine with it."""
    return {"unit": [f"Wants={unit}", f"After={unit}"], "service": [f"ExecStartPre={start_gate_exec(config_file, nft)}"]}


# --- The live table against the rendered one ----------------------------------------


def parse_json(text):
    """The list under "nftables" of `nft -j` output; ValueError when it is not nft's JSON."""
    doc = json.loads(text)
    if not isinstance(doc, dict) or not isinstance(doc.get("nftables"), list):
        raise ValueError("not the output of `nft -j`: no 'nftables' list")
    return doc["nftables"]


def table_present(tables_json, family=FAMILY, table=TABLE):
    """Whether `nft -j list tables` output holds the table."""
    return any(
        isinstance(obj, dict) and isinstance(obj.get("table"), dict)
        and obj["table"].get("family") == family and obj["table"].get("name") == table
        for obj in parse_json(tables_json)
    )


def _without_state(node):
    """A copy without handles and counter values: what was configured, not what happened since."""
    if isinstance(node, list):
        return [_without_state(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key == "handle":
            continue
        if key == "counter" and isinstance(value, dict) and set(value) <= {"packets", "bytes"}:
            out[key] = None
            continue
        out[key] = _without_state(value)
    return out


def normalise(objects):
    """{"table": {...}, "chains": {name: {...}}, "rules": {chain: [rule, ...]}, "other": [...]} of `nft -j list table`."""
    model = {"table": None, "chains": {}, "rules": {}, "other": []}
    for obj in objects:
        if not isinstance(obj, dict) or len(obj) != 1:
            continue
        kind, body = next(iter(obj.items()))
        if kind == "metainfo":
            continue
        body = _without_state(body)
        if kind == "table":
            model["table"] = body
        elif kind == "chain":
            model["chains"][body.get("name")] = body
        elif kind == "rule":
            model["rules"].setdefault(body.get("chain"), []).append(body)
        else:
            model["other"].append({kind: body})
    return model


def _rule_key(rule):
    """A rule as one comparable string, for lining up the rendered rules with the live ones."""
    return json.dumps(rule, sort_keys=True)


def _rule_label(rule):
    comment = rule.get("comment")
    if comment:
        return f"'{comment}'"
    text = json.dumps(rule.get("expr"), sort_keys=True, separators=(",", ":"))
    return text if len(text) <= 100 else text[:97] + "..."


def differences(live, expected):
    """Readable lines saying how the live table (normalised, or None when absent) differs from the expected one."""
    if live is None:
        return [f"table {FAMILY} {TABLE} is not loaded"]
    lines = []
    if _strip(live["table"], "comment") != _strip(expected["table"], "comment"):
        lines.append(f"table attributes differ: {live['table']} (expected {expected['table']})")
    elif (live["table"] or {}).get("comment") != (expected["table"] or {}).get("comment"):
        lines.append(f"table comment {(live['table'] or {}).get('comment')!r} (expected {(expected['table'] or {}).get('comment')!r})")
    for name in expected["chains"]:
        if name not in live["chains"]:
            lines.append(f"chain {name} is missing")
        elif live["chains"][name] != expected["chains"][name]:
            got, want = live["chains"][name], expected["chains"][name]
            changed = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))
            lines.append("chain " + name + ": " + ", ".join(f"{k} {got.get(k)!r} (expected {want.get(k)!r})" for k in changed))
    for name in live["chains"]:
        if name not in expected["chains"]:
            lines.append(f"unexpected chain {name}")
    for chain in sorted(set(expected["rules"]) | set(live["rules"]), key=str):
        want = expected["rules"].get(chain, [])
        got = live["rules"].get(chain, [])
        matcher = difflib.SequenceMatcher(a=[_rule_key(r) for r in want], b=[_rule_key(r) for r in got], autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag == "equal":
                continue
            if tag == "replace" and i2 - i1 == j2 - j1:
                for idx, jdx in zip(range(i1, i2), range(j1, j2)):
                    if want[idx].get("comment") == got[jdx].get("comment"):
                        lines.append(f"chain {chain}: rule {idx + 1} {_rule_label(want[idx])} differs from the rendered one")
                    else:
                        lines.append(f"chain {chain}: rule {idx + 1} is {_rule_label(got[jdx])} (expected {_rule_label(want[idx])})")
                continue
            for idx in range(i1, i2):
                how = "is missing" if tag == "delete" else "is missing or altered"
                lines.append(f"chain {chain}: rule {idx + 1} {_rule_label(want[idx])} {how}")
            for idx in range(j1, j2):
                lines.append(f"chain {chain}: unexpected rule at position {idx + 1}: {_rule_label(got[idx])}")
    for obj in live["other"]:
        if obj not in expected["other"]:
            kind, body = next(iter(obj.items()))
            lines.append(f"unexpected {kind} {body.get('name', '')}".rstrip())
    for obj in expected["other"]:
        if obj not in live["other"]:
            kind, body = next(iter(obj.items()))
            lines.append(f"{kind} {body.get('name', '')} is missing".replace("  ", " "))
    return lines


def _strip(body, key):
    return {k: v for k, v in (body or {}).items() if k != key}


# --- Without a scratch network namespace: the comments say which rules are ours ------

_TABLE_COMMENT_RE = re.compile(r'^\s*comment "([^"]*)"\s*$')
_RULE_COMMENT_RE = re.compile(r'comment "([^"]*)"\s*$')
_CHAIN_HEADER_RE = re.compile(r"^\s*type .*;\s*$")


def text_summary(text):
    """(table comment, chain header lines, rule comments in order) of a table in nft's text form.

    Works on the rendered file and on `nft list table` output alike: both put one rule
    per line inside the chain, its comment last."""
    table_comment, headers, rules = None, [], []
    depth = 0
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("{"):
            depth += 1
            continue
        if line == "}":
            depth -= 1
            continue
        if depth == 1:
            match = _TABLE_COMMENT_RE.match(line)
            if match:
                table_comment = match.group(1)
        elif depth == 2:
            if _CHAIN_HEADER_RE.match(line):
                headers.append(" ".join(line.split()))
            else:
                match = _RULE_COMMENT_RE.search(line)
                rules.append(match.group(1) if match else None)
    return table_comment, headers, rules


def comment_differences(live_text, expected_text):
    """Differences found from comments alone (the table's digest, each rule's comment, the chain's header)."""
    if live_text is None:
        return [f"table {FAMILY} {TABLE} is not loaded"]
    live, expected = text_summary(live_text), text_summary(expected_text)
    lines = []
    if live[0] != expected[0]:
        lines.append(f"table comment {live[0]!r} (expected {expected[0]!r}): another version of the rule set is loaded")
    if live[1] != expected[1]:
        lines.append(f"chain header {live[1]} (expected {expected[1]})")
    matcher = difflib.SequenceMatcher(a=expected[2], b=live[2], autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        for idx in range(i1, i2):
            lines.append(f"rule {idx + 1} '{expected[2][idx]}' is missing")
        for idx in range(j1, j2):
            lines.append(f"unexpected rule at position {idx + 1}: {live[2][idx] and repr(live[2][idx]) or 'without a comment'}")
    return lines


# --- Reading the live table (the firewall_state module) -------------------------------

# Loads the candidate into an empty network namespace and lists it there: nft prints it
# in the same canonical form as the live table, whatever nft's version reorders or folds.
_SCRATCH_SCRIPT = '"$0" -f /dev/stdin && exec "$0" -j list table "$1" "$2"'


class FirewallStateError(RuntimeError):
    """nft failed in a way that says nothing about the table (no permission, bad candidate)."""


def without_nft(nft, content=None, family=FAMILY, table=TABLE):
    """table_state's answer on a node without nft: nothing can have loaded the table, and
    with `content` it is not in sync (the role installs nftables, then loads it)."""
    if content is None:
        return {"present": False, "in_sync": None, "method": None, "differences": []}
    return {"present": False, "in_sync": False, "method": None,
            "differences": [f"table {family} {table} is not loaded: {nft} is missing (nftables is not installed)"]}


def table_state(run, nft, content=None, unshare=None, family=FAMILY, table=TABLE):
    """{present, in_sync, method, differences} of the live table against `content`.

    run(argv, data=None) -> (rc, stdout, stderr). `in_sync` is None without `content`.
    method "canonical": the candidate is loaded in a scratch network namespace (`unshare`)
    and both are compared as nft's JSON without handles and counter values; "comments"
    when no namespace can be made: the table's digest comment and each rule's comment."""
    rc, out, err = run([nft, "-j", "list", "tables"])
    if rc != 0:
        raise FirewallStateError(f"`nft -j list tables` failed (rc {rc}): {err.strip() or out.strip()}")
    present = table_present(out, family, table)
    result = {"present": present, "in_sync": None, "method": None, "differences": []}
    if content is None:
        return result

    live_json = None
    if present:
        rc, out, err = run([nft, "-j", "list", "table", family, table])
        if rc != 0:
            raise FirewallStateError(f"`nft -j list table {family} {table}` failed (rc {rc}): {err.strip()}")
        live_json = out

    if unshare:
        rc, out, err = run([unshare, "--net", "--", "/bin/sh", "-c", _SCRATCH_SCRIPT, nft, family, table], data=content)
        if rc == 0:
            live = normalise(parse_json(live_json)) if live_json is not None else None
            diffs = differences(live, normalise(parse_json(out)))
            result.update(method="canonical", in_sync=not diffs, differences=diffs)
            return result
        if not err.lstrip().startswith("unshare"):
            raise FirewallStateError(f"the rendered rule set does not load (checked in a scratch network namespace): {err.strip()}")

    live_text = None
    if present:
        rc, out, err = run([nft, "list", "table", family, table])
        if rc != 0:
            raise FirewallStateError(f"`nft list table {family} {table}` failed (rc {rc}): {err.strip()}")
        live_text = out
    diffs = comment_differences(live_text, content)
    result.update(method="comments", in_sync=not diffs, differences=diffs)
    return result


# --- Loading a changed table with an automatic revert -----------------------------------

# A transient timer (systemd-run) that puts the previous table back unless the run
# confirms over a fresh SSH connection: a rule set that drops the management SSH
# (firewall_ssh_ports not what sshd listens on) undoes itself.
REVERT_TIMER = UNITS["firewall_revert"]
REVERT_UNIT = unit_stem(REVERT_TIMER)
# The states in which `systemctl is-active` (confirm() below) counts the timer as pending.
PENDING_STATES = ("active", "reloading")


def revert_pending(active_state):
    """Whether the revert timer, in this ActiveState, would still put the previous table back."""
    return active_state in PENDING_STATES


def revert_content(previous_text, family=FAMILY, table=TABLE):
    """The nft file that restores `previous_text` (`nft -s list table` output), or deletes the
    table when there was none; like the rendered file, one transaction touching no other table."""
    lines = [f"table {family} {table}", f"delete table {family} {table}"]
    if previous_text and previous_text.strip():
        lines.append(previous_text.strip("\n"))
    return "\n".join(lines) + "\n"


def arm_and_load(run, write, nft, content, candidate_file, revert_file, seconds, systemd_run="systemd-run",
                 systemctl="systemctl", family=FAMILY, table=TABLE):
    """Load `content` after arming a revert to the live table in `seconds`.

    run(argv) -> (rc, out, err); write(path, text). Nothing is loaded unless the revert is
    armed; a candidate nft refuses changes nothing (nft loads a file in one transaction)."""
    seconds = int(seconds)
    if seconds < 5:
        raise FirewallStateError(f"firewall_revert_seconds {seconds} is too short for a fresh SSH connection: use 5 or more.")
    rc, out, err = run([nft, "-j", "list", "tables"])
    if rc != 0:
        raise FirewallStateError(f"`nft -j list tables` failed (rc {rc}): {err.strip() or out.strip()}")
    previous = None
    if table_present(out, family, table):
        rc, out, err = run([nft, "-s", "list", "table", family, table])
        if rc != 0:
            raise FirewallStateError(f"`nft -s list table {family} {table}` failed (rc {rc}): {err.strip()}")
        previous = out
    write(revert_file, revert_content(previous, family, table))
    write(candidate_file, content)
    for path, what in ((revert_file, "the revert file"), (candidate_file, "the rule set")):
        rc, out, err = run([nft, "-c", "-f", path])
        if rc != 0:
            raise FirewallStateError(f"{what} ({path}) does not load: {err.strip() or out.strip()}")
    # A timer left by an interrupted run would revert this load later: replace it.
    run([systemctl, "stop", REVERT_TIMER])
    run([systemctl, "reset-failed", REVERT_TIMER, f"{REVERT_UNIT}.service"])
    rc, out, err = run([systemd_run, f"--unit={REVERT_UNIT}", f"--on-active={seconds}s", "--timer-property=AccuracySec=1s",
                        "--description=sparkctl: put the previous firewall table back unless a run confirms the new one",
                        nft, "-f", revert_file])
    if rc != 0:
        raise FirewallStateError(f"cannot arm the revert timer (systemd-run rc {rc}): {err.strip() or out.strip()}; "
                                 "the rule set was not loaded.")
    rc, out, err = run([nft, "-f", candidate_file])
    if rc != 0:
        run([systemctl, "stop", REVERT_TIMER])
        raise FirewallStateError(f"`nft -f {candidate_file}` failed (rc {rc}): {err.strip() or out.strip()}")
    return {"previous_present": previous is not None, "revert_unit": REVERT_TIMER, "revert_seconds": seconds}


def confirm(run, systemctl="systemctl", check_mode=False):
    """Cancel a pending revert; True when one was pending (and, unless check_mode, is now cancelled)."""
    rc, _out, _err = run([systemctl, "is-active", "--quiet", REVERT_TIMER])
    pending = rc == 0
    if pending and not check_mode:
        rc, out, err = run([systemctl, "stop", REVERT_TIMER])
        if rc != 0:
            raise FirewallStateError(f"cannot cancel {REVERT_TIMER} (rc {rc}): {err.strip() or out.strip()}")
    return pending

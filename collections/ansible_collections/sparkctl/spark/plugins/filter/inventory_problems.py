# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Inventory validation for sparkctl: every rule here needs no facts, so a bad
inventory is refused before any host is contacted."""

from __future__ import annotations

import ipaddress
import os
import posixpath
import re

from ansible.errors import AnsibleFilterError
from ansible_collections.sparkctl.spark.plugins.plugin_utils import api_proxy
from ansible_collections.sparkctl.spark.plugins.module_utils import firewall
from ansible_collections.sparkctl.spark.plugins.module_utils import hub_access
from ansible_collections.sparkctl.spark.plugins.module_utils import link_address
from ansible_collections.sparkctl.spark.plugins.module_utils import shapes
from ansible_collections.sparkctl.spark.plugins.plugin_utils import known_bad
from ansible_collections.sparkctl.spark.plugins.plugin_utils import profile as profiles
from ansible_collections.sparkctl.spark.plugins.plugin_utils import profile_schema

DOCUMENTATION = r"""
name: inventory_problems
short_description: List what is wrong with a sparkctl inventory
version_added: 0.1.0
description:
  - Checks the groups C(spark_head) and C(spark_workers) and each cluster host's C(spark_link) plan
    without contacting any host, and returns one message per problem, each naming the variable and the fix.
  - Link addresses are parsed as every other plugin parses them (Python's ipaddress, the collection's link_address
    module_utils).
  - C(spark_fabric) says how the cable halves are joined, the same on every host - C(direct) (one cable, exactly two
    nodes) or C(switch) (every node's halves on shared subnets through a switch, any number of nodes). For both, each
    link address is unique, every node has an address in every half's subnet, and the halves' subnets are distinct.
  - The model profile (C(spark_model_profile), searched in C(spark_profile_paths) relative to the inventory directory,
    then in the collection) is loaded with C(spark_profile_overrides) and refused when it is unknown, malformed or
    walks into one of the known engine traps (see the collection's profiles/README.md).
  - A chosen API key (C(spark_api_key)) shorter than 32 characters (or C(engine_service_api_key_min_length)), or
    holding characters a Bearer token cannot carry, is refused here, before provision, rather than in the serve
    stage; the key never appears in a message.
  - A hub endpoint (C(spark_hf_endpoint)) that is not an http(s) URL, or plain C(http://) to another machine while
    C(spark_hf_token) is set (the token would cross the network in clear text; loopback is accepted), is refused.
  - Paths written into sparkctl's systemd units (C(spark_engine_venv_path), C(spark_checkpoint_dir), C(spark_api_key_file),
    C(checkpoint_rsyncd_config_file)), where a host sets them, must be absolute, in normal form, and hold only letters,
    digits and C(_ . / @ + -); a shell metacharacter, a C(%) or a line break there would run as a command or start a
    new unit directive.
  - The firewall role's variables a host sets (C(firewall_api_allowed_cidrs), C(firewall_extra_allowed_tcp_ports),
    C(firewall_ssh_ports), C(ansible_port), ...) are checked as the role's C(firewall_ruleset) filter checks them.
  - The user's own known-bad platform entries (C(preflight_known_bad_platforms_extra)) are checked as the preflight
    role reads them (an unknown fact or condition, a version YAML read as a number, a missing reason or fix).
options:
  _input:
    description: The C(groups) magic variable.
    type: dict
    required: true
  hostvars:
    description: The C(hostvars) magic variable.
    type: dict
    required: true
  defaults:
    description:
      - The role defaults a check falls back on where the inventory sets nothing (C(hostvars) holds no role
        defaults), read from the roles that own them - C(spark_link_interface_pattern), C(spark_link_mtu),
        C(spark_model_profile), C(spark_fabric) (role spark) and C(engine_service_api_key_min_length) (role
        engine_service).
      - The validation play (playbooks/validate_inventory.yml) reads them from the roles' defaults/main.yml.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Refuse a bad inventory before touching any host
  ansible.builtin.assert:
    that: problems | length == 0
    fail_msg: "{{ problems | join('\n') }}"
  vars:
    problems: "{{ groups | sparkctl.spark.inventory_problems(hostvars, role_defaults) }}"
    role_defaults:
      spark_link_interface_pattern: "{{ sparkctl_spark_defaults.spark_link_interface_pattern }}"
      spark_link_mtu: "{{ sparkctl_spark_defaults.spark_link_mtu }}"
      spark_model_profile: "{{ sparkctl_spark_defaults.spark_model_profile }}"
      spark_fabric: "{{ sparkctl_spark_defaults.spark_fabric }}"
      engine_service_api_key_min_length: "{{ sparkctl_engine_service_defaults.engine_service_api_key_min_length }}"
"""

RETURN = r"""
_value:
  description: Problems found, each a sentence naming the variable and the fix; empty when the inventory is sound.
  type: list
  elements: str
"""

HEAD_GROUP = "spark_head"
WORKER_GROUP = "spark_workers"

# Linux netdev names: at most 15 bytes, no slash, no whitespace, not "." or "..".
_IFNAME_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,15}$")
# The role defaults the checks fall back on where the inventory sets nothing (the `defaults`
# argument): their values live in the roles that own them only.
ROLE_DEFAULT_NAMES = ("spark_link_interface_pattern", "spark_link_mtu", "spark_model_profile", "spark_fabric",
                      "engine_service_api_key_min_length")
# 1280 is the smallest MTU IPv6 tolerates; 9216 the largest the ConnectX-7 + switch path is qualified for.
MTU_MIN = 1280
MTU_MAX = 9216
# The preflight role's variable for the user's own known-bad platform entries.
KNOWN_BAD_EXTRA = "preflight_known_bad_platforms_extra"


def _cluster_hosts(groups):
    head = list(groups.get(HEAD_GROUP) or [])
    workers = list(groups.get(WORKER_GROUP) or [])
    return head, workers


def _group_problems(head, workers, groups):
    problems = []
    if HEAD_GROUP not in groups:
        problems.append(
            f"Group '{HEAD_GROUP}' is missing: add a '{HEAD_GROUP}' group with exactly one host"
            " (the node that runs the Ray head and the API)."
        )
    elif len(head) != 1:
        problems.append(
            f"Group '{HEAD_GROUP}' has {len(head)} hosts ({', '.join(head) or 'none'}): it must hold exactly one; "
            f"move the others to '{WORKER_GROUP}'."
        )
    if not workers:
        problems.append(
            f"Group '{WORKER_GROUP}' is missing or empty: add one or more worker hosts (a cluster needs a head and at least one worker)."
        )
    both = sorted(set(head) & set(workers))
    if both:
        problems.append(
            f"Host(s) {', '.join(both)} are in both '{HEAD_GROUP}' and '{WORKER_GROUP}': keep each host in one of them."
        )
    return problems


def _parse_address(text):
    """Return (the address with its subnet, an ipaddress interface; error) for a 'a.b.c.d/nn' link
    address, parsed by the collection's one reader of cable addresses (link_address.link_interface)."""
    if not isinstance(text, str) or "/" not in text:
        return None, "must be an IPv4 address with its prefix length, e.g. 192.168.100.10/24"
    try:
        net = link_address.link_interface(text)
    except ValueError:
        return None, "is not a valid IPv4 address with prefix length"
    if net.version != 4:
        return None, "must be IPv4 (the RoCE v2 GID the engines use is IPv4-mapped)"
    if net.network.prefixlen > 30:
        return None, "needs a prefix of /30 or shorter so the peer fits in the same subnet"
    if net.ip in (net.network.network_address, net.network.broadcast_address):
        return None, f"is the network or broadcast address of {net.network}; use a host address"
    return net, None


def _overlap(one, other):
    """Whether two networks share an address (CIDR blocks do when one holds the other); networks of
    two IP versions never do."""
    return one.version == other.version and (one.subnet_of(other) or other.subnet_of(one))


def _link_problems(hostname, vars_, interface_re):
    """Problems with one host's spark_link list; returns (problems, [interface or None per half])."""
    problems = []
    link = vars_.get("spark_link")
    if link is None:
        return [
            f"{hostname}: 'spark_link' is not set: give one item per cable half, "
            "e.g. [{interface: enp1s0f1np1, address: 192.168.100.10/24}]."
        ], []
    if not isinstance(link, list) or not link:
        return [f"{hostname}: 'spark_link' must be a non-empty list of {{interface, address}} items."], []
    nets = []
    seen_ifaces = set()
    for idx, item in enumerate(link):
        where = f"{hostname}: spark_link[{idx}]"
        if not isinstance(item, dict):
            problems.append(f"{where} must be a mapping with 'interface' and 'address'.")
            nets.append(None)
            continue
        unknown = sorted(set(item) - {"interface", "address"})
        if unknown:
            problems.append(f"{where} has unknown key(s) {', '.join(unknown)}: only 'interface' and 'address' are read.")
        iface = item.get("interface")
        if not isinstance(iface, str) or not _IFNAME_RE.match(iface) or iface in (".", ".."):
            problems.append(f"{where}.interface {iface!r} is not a valid network interface name.")
        elif interface_re is not None and not interface_re.match(iface):
            problems.append(
                f"{where}.interface '{iface}' is not a ConnectX-7 port name (pattern '{interface_re.pattern}'); "
                "use the name `ibdev2netdev` prints on the node, or set 'spark_link_interface_pattern' for other NICs."
            )
        elif iface in seen_ifaces:
            problems.append(f"{where}.interface '{iface}' is listed twice for this host.")
        else:
            seen_ifaces.add(iface)
        net, err = _parse_address(item.get("address"))
        if err:
            problems.append(f"{where}.address {item.get('address')!r} {err}.")
        nets.append(net)
    return problems, nets


def _fabric_problems(cluster, hostvars, default):
    """spark_fabric: one known value, the same on every host, and a node count the fabric can join."""
    fabric_of = {}
    for host in cluster:
        value = hostvars[host].get("spark_fabric", default)
        fabric_of.setdefault(value if isinstance(value, str) else repr(value), []).append(host)
    problems = []
    for fabric, hosts in fabric_of.items():
        if fabric not in link_address.FABRICS:
            problems.append(
                f"{', '.join(hosts)}: 'spark_fabric' {fabric!r} is not a fabric: set it to 'direct' (one cable between two "
                "nodes) or 'switch' (every node's cable halves on a switch), in group_vars/all."
            )
    if problems:
        return problems
    if len(fabric_of) > 1:
        detail = "; ".join(f"{fabric}: {', '.join(hosts)}" for fabric, hosts in fabric_of.items())
        return [f"'spark_fabric' differs between hosts ({detail}): the nodes share one fabric; "
                "set it once, in group_vars/all."]
    fabric = next(iter(fabric_of), default)
    if fabric == "direct" and len(cluster) > 2:
        return [f"'spark_fabric' is 'direct' but the cluster has {len(cluster)} nodes ({', '.join(cluster)}): a direct "
                "cable joins exactly two; set spark_fabric: switch (every node's cable halves on a switch) or keep "
                "one head and one worker."]
    return []


# Directories that hold the system or other people's data: the checkpoint stage writes, verifies
# and cleans its directory, so it never takes one of these itself (a directory below them is fine).
_SYSTEM_DIRS = ("/", "/etc", "/usr", "/var", "/boot", "/root", "/home", "/opt", "/srv")


def _is_home(normalized):
    """Whether a normalized path is an account's home as the nodes make one: /root or /home/<name>."""
    return normalized == "/root" or posixpath.dirname(normalized) == "/home"


def _checkpoint_dir_problem(ckpt_dir):
    fix = "point spark_checkpoint_dir at a directory of its own, e.g. /srv/sparkctl/models/<model>"
    if not isinstance(ckpt_dir, str) or not ckpt_dir.startswith("/") or ckpt_dir.rstrip("/") == "":
        return f"'spark_checkpoint_dir' {ckpt_dir!r} must be an absolute directory path other than '/': {fix}."
    normalized = posixpath.normpath(ckpt_dir)
    if normalized in _SYSTEM_DIRS:
        return (f"'spark_checkpoint_dir' {ckpt_dir!r} is the system directory {normalized}: the checkpoint stage writes "
                f"and cleans its directory on every node; {fix}.")
    if _is_home(normalized):
        return (f"'spark_checkpoint_dir' {ckpt_dir!r} is an account's home: the checkpoint stage writes and "
                f"cleans its directory on every node; {fix}.")
    return None


# Paths an inventory may set that sparkctl writes into systemd units (the engine's and Ray's
# ExecStart= and EnvironmentFile=, the /bin/sh line putting the venv on PATH, docker -v, the rsync
# daemon's ExecStart=), each with a plain path to suggest instead.
UNIT_PATHS = {
    "spark_engine_venv_path": "/opt/sparkctl/venvs/mine",
    "spark_checkpoint_dir": "/srv/sparkctl/models/mine",
    "spark_api_key_file": "/etc/sparkctl/api-key.env",
    "checkpoint_rsyncd_config_file": "/etc/sparkctl/checkpoint-rsyncd.conf",
}


def _unit_path_problems(cluster, hostvars):
    """Each of UNIT_PATHS a host sets must stand in a unit as one plain word, as the profile's own
    strings must (profile_schema.unit_path_problem): a '$(...)', ';' or line break there would run
    as a command or start a new directive. One line per problem with the hosts it concerns."""
    hosts_of = {}
    for host in cluster:
        vars_ = hostvars[host]
        for name, example in UNIT_PATHS.items():
            if name not in vars_:
                continue
            value = vars_[name]
            # The checkpoint directory's own rule (no system directory, not a home) says it better.
            if name == "spark_checkpoint_dir" and _checkpoint_dir_problem(value):
                continue
            reason = profile_schema.unit_path_problem(value)
            if reason:
                problem = (f"'{name}' {value!r} {reason}: set it to an absolute path of "
                           f"{profile_schema.UNIT_PATH_CHARACTERS} only, e.g. {example}.")
                hosts_of.setdefault(problem, []).append(host)
    return [f"{', '.join(hosts)}: {problem}" for problem, hosts in hosts_of.items()]


def _is_count(value):
    """A whole number >= 0, as YAML or -e gives it (an int, or a string of digits)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return value >= 0
    return isinstance(value, str) and value.strip().isdigit()


def _checkpoint_problems(vars_):
    """The checkpoint source and directory, judged before any host is touched."""
    problems = []
    ckpt_dir = vars_.get("spark_checkpoint_dir")
    if ckpt_dir is not None:
        problem = _checkpoint_dir_problem(ckpt_dir)
        if problem:
            problems.append(problem)
    keep = vars_.get("checkpoint_keep")
    if keep is not None and not _is_count(keep):
        problems.append(f"'checkpoint_keep' {keep!r} must be a whole number: how many checkpoints every node keeps, the "
                        "served one included (e.g. 2), or 0 to keep them all.")
    source = vars_.get("spark_checkpoint")
    if source is None:
        return problems
    if not isinstance(source, dict):
        return problems + ["'spark_checkpoint' must be a mapping, e.g. {source: hub, repo_id: org/name, revision: <sha>}."]
    kind = source.get("source")
    if kind == "hub":
        repo = source.get("repo_id")
        if not isinstance(repo, str) or not shapes.REPO_ID.match(repo):
            problems.append(f"'spark_checkpoint.repo_id' {repo!r} is not a hub repo id like 'org/name'.")
        revision = source.get("revision")
        if not isinstance(revision, str) or not revision.strip():
            problems.append("'spark_checkpoint.revision' is not set: pin the commit sha (or a branch) to download.")
        patterns = source.get("allow_patterns", [])
        if patterns is not None and (not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns)):
            problems.append("'spark_checkpoint.allow_patterns' must be a list of glob patterns, e.g. ['*.safetensors', '*.json'].")
    elif kind == "path":
        path = source.get("path")
        if not isinstance(path, str) or not path.startswith("/"):
            problems.append(f"'spark_checkpoint.path' {path!r} must be the absolute path of a directory on the head.")
    else:
        problems.append(f"'spark_checkpoint.source' {kind!r} must be 'hub' or 'path'.")
    return problems


# What Ansible's `bool` filter and a role's `type: bool` argument take (`-e jit_cache_reset=true` is a string).
_BOOLEAN_WORDS = {"true", "false", "yes", "no", "on", "off", "1", "0", "y", "n", "t", "f"}


def _jit_cache_problems(vars_):
    """The kernel cache's switches (roles/jit_cache) are booleans: a word the role would refuse only
    once the serve stage reaches it is refused here, before any host changes."""
    problems = []
    for name, meaning in (("jit_cache_reset", "true empties every node's kernel cache before the engine starts"),
                          ("jit_cache_mirror", "false keeps the head's kernel cache off the workers")):
        value = vars_.get(name)
        if value is None or isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
            continue
        if isinstance(value, str) and value.strip().lower() in _BOOLEAN_WORDS:
            continue
        problems.append(f"'{name}' {value!r} is not a boolean: set it to true or false ({meaning}).")
    return problems


def _api_key_problems(vars_, defaults):
    """A chosen API key (spark_api_key) that is too short, refused before the serve stage, which
    comes after provision has changed the hosts. The key itself is never part of a message."""
    key = vars_.get("spark_api_key")
    if key is None or key == "":
        return []  # empty: the serve stage generates one on the head
    if isinstance(key, (bool, list, dict)):
        return [f"'spark_api_key' must be a string (vault it: spark_api_key: !vault ...), got {type(key).__name__}."]
    minimum = vars_.get("engine_service_api_key_min_length", defaults["engine_service_api_key_min_length"])
    try:
        minimum = int(minimum)
    except (TypeError, ValueError):
        minimum = int(defaults["engine_service_api_key_min_length"])
    length = len(str(key))
    if length < minimum:
        return [
            f"'spark_api_key' is {length} characters: use {minimum} or more (e.g. `openssl rand -hex 24`), "
            "vaulted (spark_api_key: !vault ...), or leave it empty to have one generated on the head."
        ]
    if api_proxy.key_problem(str(key)):
        # Sent as `Authorization: Bearer <key>`, and matched so by the API proxy (role api_proxy).
        return ["'spark_api_key' holds characters a Bearer token cannot carry (RFC 6750 allows letters, digits and "
                "- . _ ~ + /, then trailing =): choose another (e.g. `openssl rand -hex 24`), vaulted, or leave it "
                "empty to have one generated on the head."]
    return []


def _profile_problems(vars_, cluster_size, defaults):
    """The model profile the inventory picked: found, well-formed, clear of the known engine traps, and
    needing no more nodes than the inventory has."""
    name = vars_.get("spark_model_profile", defaults["spark_model_profile"])
    paths = vars_.get("spark_profile_paths", [])
    overrides = vars_.get("spark_profile_overrides", {})
    if paths is not None and (not isinstance(paths, list) or not all(isinstance(p, str) for p in paths)):
        return [f"'spark_profile_paths' {paths!r} must be a list of directories (relative to the inventory directory or absolute)."]
    if overrides is not None and not isinstance(overrides, dict):
        return [f"'spark_profile_overrides' must be a mapping deep-merged over the profile, got {type(overrides).__name__}."]
    base_dir = vars_.get("inventory_dir")
    resolved, problems = profiles.resolve(name, paths or [], overrides or {}, base_dir)
    # Name the overrides too when there are any: the wrong value may come from them, not the file.
    label = "'spark_model_profile' (with 'spark_profile_overrides')" if overrides else "'spark_model_profile'"
    problems = [f"{label}: {p}" for p in problems]
    nodes = ((resolved or {}).get("topology") or {}).get("nodes") if not problems else None
    if isinstance(nodes, int) and not isinstance(nodes, bool) and nodes > cluster_size:
        problems.append(
            f"'spark_model_profile': profile {name} runs on {nodes} nodes (topology.nodes) but the inventory has "
            f"{cluster_size} (spark_head + spark_workers): add workers, or pick a profile for {cluster_size} node(s)."
        )
    return problems


def _firewall_problems(cluster, hostvars):
    """The firewall role's variables the inventory sets (CIDRs, ports, interfaces), one line per problem
    with the hosts it concerns (group_vars would otherwise repeat it per host)."""
    hosts_of = {}
    for host in cluster:
        for problem in firewall.inventory_problems(hostvars[host]):
            hosts_of.setdefault(problem, []).append(host)
    return [f"{', '.join(hosts)}: {problem}" for problem, hosts in hosts_of.items()]


def _known_bad_problems(cluster, hostvars):
    """The user's own known-bad platform entries (preflight_known_bad_platforms_extra), checked as
    preflight will read them: a malformed one is refused here, before any node is read, with the
    hosts it concerns (group_vars would otherwise repeat it per host)."""
    hosts_of = {}
    for host in cluster:
        vars_ = hostvars[host]
        if KNOWN_BAD_EXTRA not in vars_:
            continue
        try:
            known_bad.check_entries(vars_[KNOWN_BAD_EXTRA], KNOWN_BAD_EXTRA)
        except known_bad.KnownBadError as exc:
            hosts_of.setdefault(str(exc), []).append(host)
    return [f"{', '.join(hosts)}: {problem}" for problem, hosts in hosts_of.items()]


def inventory_problems(groups, hostvars, defaults):
    """Return a list of human-readable problems; empty when the inventory is sound."""
    missing = [name for name in ROLE_DEFAULT_NAMES if name not in (defaults or {})]
    if missing:
        raise AnsibleFilterError("inventory_problems: the role defaults %s are not given: pass them from the roles "
                                 "that own them (playbooks/validate_inventory.yml)" % ", ".join(missing))
    head, workers = _cluster_hosts(groups)
    problems = _group_problems(head, workers, groups)
    cluster = head + [w for w in workers if w not in head]
    if not cluster:
        return problems

    any_vars = hostvars[cluster[0]]
    pattern = any_vars.get("spark_link_interface_pattern", defaults["spark_link_interface_pattern"])
    try:
        interface_re = re.compile(pattern) if pattern else None
    except re.error as exc:
        problems.append(f"'spark_link_interface_pattern' {pattern!r} is not a valid regular expression: {exc}.")
        interface_re = None

    mtu = any_vars.get("spark_link_mtu", defaults["spark_link_mtu"])
    if isinstance(mtu, bool) or not isinstance(mtu, int) and not (isinstance(mtu, str) and mtu.isdigit()):
        problems.append(f"'spark_link_mtu' {mtu!r} must be an integer between {MTU_MIN} and {MTU_MAX}.")
    elif not MTU_MIN <= int(mtu) <= MTU_MAX:
        problems.append(
            f"'spark_link_mtu' {mtu} is out of range: use {MTU_MIN}-{MTU_MAX} (9000 is what the direct cable recipes use)."
        )

    problems.extend(_checkpoint_problems(any_vars))
    problems.extend(_unit_path_problems(cluster, hostvars))
    venv_keep = any_vars.get("engine_venv_keep")
    if venv_keep is not None and not _is_count(venv_keep):
        problems.append(f"'engine_venv_keep' {venv_keep!r} must be a whole number: how many of the profile's per-lock "
                        "venvs every node keeps, the served one included (e.g. 2), or 0 to keep them all.")
    # The head sends spark_hf_token to spark_hf_endpoint: never in clear text off the node. Unset in
    # the inventory, the token is the role default's: HF_TOKEN on this (the control) node.
    hf_token = any_vars["spark_hf_token"] if "spark_hf_token" in any_vars else os.environ.get("HF_TOKEN", "")
    endpoint_problem = hub_access.endpoint_problem(any_vars.get("spark_hf_endpoint"), hf_token)
    if endpoint_problem:
        problems.append(endpoint_problem)
    problems.extend(_api_key_problems(any_vars, defaults))
    problems.extend(_jit_cache_problems(any_vars))
    problems.extend(_profile_problems(any_vars, len(cluster), defaults))
    problems.extend(_known_bad_problems(cluster, hostvars))

    mgmt = any_vars.get("spark_management_network")
    mgmt_net = None
    if mgmt:
        try:
            mgmt_net = ipaddress.ip_interface(str(mgmt))
        except ValueError:
            problems.append(f"'spark_management_network' {mgmt!r} is not a valid network, e.g. 10.0.0.0/24.")

    per_host_nets = {}
    for host in cluster:
        host_problems, nets = _link_problems(host, hostvars[host], interface_re)
        problems.extend(host_problems)
        per_host_nets[host] = nets
    problems.extend(_firewall_problems(cluster, hostvars))
    problems.extend(_fabric_problems(cluster, hostvars, defaults["spark_fabric"]))
    fabric = any_vars.get("spark_fabric", defaults["spark_fabric"])
    # What one cable half is, in the messages below: a point-to-point link, or a subnet on a switch.
    shared = "every node on a switch needs an address in each half's subnet" if fabric == "switch" \
        else "both ends of a cable half must share a subnet"

    counts = {host: len(nets) for host, nets in per_host_nets.items() if nets}
    if len(set(counts.values())) > 1:
        detail = ", ".join(f"{h}={n}" for h, n in counts.items())
        problems.append(f"'spark_link' has a different number of cable halves per host ({detail}): every node needs the same halves.")
        return problems

    owner_of = {}
    halves = max(counts.values(), default=0)
    for half in range(halves):
        subnets = {}
        for host in cluster:
            nets = per_host_nets.get(host) or []
            net = nets[half] if half < len(nets) else None
            if net is None:
                continue
            subnets.setdefault(str(net.network), []).append(host)
            addr = link_address.bare_address(net)
            if addr in owner_of:
                problems.append(
                    f"{host}: spark_link[{half}].address {addr} is already used by {owner_of[addr]}: every link address must be unique."
                )
            else:
                owner_of[addr] = f"{host} spark_link[{half}]"
            if mgmt_net is not None and _overlap(net.network, mgmt_net.network):
                problems.append(
                    f"{host}: spark_link[{half}].address {net} overlaps 'spark_management_network' {mgmt_net}: "
                    "the cable needs its own subnet, e.g. 192.168.100.0/24."
                )
            mgmt_ip = hostvars[host].get("ansible_host")
            if mgmt_ip:
                try:
                    if ipaddress.ip_address(str(mgmt_ip)) in net.network:
                        problems.append(
                            f"{host}: 'ansible_host' {mgmt_ip} lies inside the link subnet {net.network} of spark_link[{half}]: "
                            "manage the node over another network so the cable stays private."
                        )
                except ValueError:
                    pass  # a DNS name: nothing to compare without resolving it
        if len(subnets) > 1:
            detail = "; ".join(f"{cidr}: {', '.join(hosts)}" for cidr, hosts in sorted(subnets.items()))
            problems.append(
                f"spark_link[{half}] addresses are not in one subnet ({detail}): {shared}."
            )
    all_subnets = {}
    for half in range(halves):
        for host in cluster:
            nets = per_host_nets.get(host) or []
            if half < len(nets) and nets[half] is not None:
                all_subnets.setdefault(half, nets[half].network)
    seen = {}
    for half, cidr in all_subnets.items():
        for other_half, other in seen.items():
            if _overlap(cidr, other):
                problems.append(
                    f"spark_link[{half}] subnet {cidr} overlaps spark_link[{other_half}] subnet {other}:"
                    " give each cable half its own subnet."
                )
        seen[half] = cidr
    return problems


class FilterModule:
    def filters(self):
        return {"inventory_problems": inventory_problems}

# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Find the authorized_keys lines the SSH mesh wrote earlier that no longer
belong: a peer's key that was regenerated, or a host that is no longer a peer.
Only lines whose comment carries the mesh's marker are ever considered, so the
other keys in the file (an operator's, the management key) are never touched.

Also who logs in to whom (mesh_directions: head -> workers only), the options of an
authorized mesh key (mesh_key_options: restrict, from= the source's cable addresses and, given
the directories the head writes to, command= the mesh key's forced command), and
whether a key is authorized or a host key pinned as the writing modules would leave it
(authorized_key_current, known_host_current), judged on the files' text read once, so
those modules run only where something differs: the sources whose key line is not there yet
(mesh_unauthorized_sources) and the peer addresses not pinned yet (mesh_unpinned)."""

from __future__ import annotations

import hashlib
import hmac
import re
from base64 import b64decode

from ansible.errors import AnsibleFilterError

from ansible_collections.sparkctl.spark.plugins.module_utils.link_address import bare_address
from ansible_collections.sparkctl.spark.plugins.module_utils.jit_cache import BASE_DIR as JIT_CACHE_DIR
from ansible_collections.sparkctl.spark.plugins.module_utils.mesh_command import MESH_COMMAND_PATH, forced_command

DOCUMENTATION = r"""
name: stale_mesh_keys
short_description: authorized_keys lines of the SSH mesh that are out of date
version_added: 0.1.0
description:
  - Parses an C(authorized_keys) text (options, key type, key, comment) and returns the lines whose comment starts with
    O(marker) and that are not the current key of a current peer.
  - A line is stale when the host named after the marker is not in O(expected), or its key differs from the one in
    O(expected). A line holding the current key of any peer is never stale (only its comment may be out of date).
    A peer whose expected key is null (not known yet, e.g. a first C(--check) run) keeps its lines.
  - Lines without the marker are never returned.
  - Companion filters, judged on the same texts read once so the writing modules run only where something
    differs. C(mesh_unauthorized_sources) (input the source nodes' published identities, each with C(public_key)
    and C(addresses); arguments the C(authorized_keys) text, the extra key options and the forced command's roots
    of C(mesh_key_options)) returns the nodes with a public key whose exact line (key, type, options, comment) the
    text lacks (C(authorized_key_current)); a node without a key yet is left out.
    C(mesh_unpinned) (input the C([node, address]) pairs of C(subelements('addresses')) over the target nodes'
    identities, each with C(host_key); argument the C(known_hosts) text) returns the pairs whose address is not
    pinned to the node's host key (C(known_host_current)), in input order.
  - Also C(mesh_directions) (who logs in to whom), C(mesh_key_options) (the options of an authorized mesh key),
    C(mesh_command_path) (where the forced command is installed), C(authorized_key_current) and
    C(known_host_current) (whether C(ansible.posix.authorized_key) or C(ansible.builtin.known_hosts) would leave a
    text unchanged).
options:
  _input:
    description: The text of C(authorized_keys) (empty when the file does not exist).
    type: str
    required: true
  expected:
    description: Peer name (the part of the comment after the marker) to its current public key (C(type base64 [comment])) or null.
    type: dict
    required: true
  marker:
    description: The comment prefix of the mesh's keys.
    type: str
    default: sparkctl-mesh@
"""

EXAMPLES = r"""
- name: Forget keys of peers that were regenerated or left the cluster
  ansible.posix.authorized_key:
    user: spark
    key: "{{ item.key }}"
    state: absent
  loop: "{{ authorized_keys_text | sparkctl.spark.stale_mesh_keys({'spark1': 'ssh-ed25519 AAAA... sparkctl-mesh@spark1'}) }}"
"""

RETURN = r"""
_value:
  description: One dict per stale line, in file order.
  type: list
  elements: dict
  contains:
    key: {description: C(type base64 comment), what C(ansible.posix.authorized_key state=absent) needs., type: str}
    peer: {description: The host named in the comment., type: str}
    reason: {description: C(not a peer) or C(key replaced)., type: str}
"""

# Key types sshd accepts (sshd(8) AUTHORIZED_KEYS FILE FORMAT); the options field ends where one starts.
_KEY_TYPE = re.compile(
    r"^(ssh-(ed25519|rsa|dss)|ecdsa-sha2-nistp(256|384|521)|sk-(ssh-ed25519|ecdsa-sha2-nistp256)@openssh\.com)(-cert-v01@openssh\.com)?$"
)


def _tokens(line):
    """Split on whitespace outside double quotes (options such as command="a b")."""
    tokens, current, quoted = [], "", False
    for char in line:
        if char == '"':
            quoted = not quoted
        if char.isspace() and not quoted:
            if current:
                tokens.append(current)
                current = ""
            continue
        current += char
    if current:
        tokens.append(current)
    return tokens


def parse_authorized_key(line):
    """Return {'type', 'blob', 'comment', 'options'} for one line, or None for blanks, comments and garbage."""
    line = line.strip()
    if not line or line.startswith("#"):
        return None
    tokens = _tokens(line)
    for index, token in enumerate(tokens):
        if _KEY_TYPE.match(token) and index + 1 < len(tokens):
            return {
                "options": " ".join(tokens[:index]),
                "type": token,
                "blob": tokens[index + 1],
                "comment": " ".join(tokens[index + 2 :]),
            }
    return None


def _blob(public_key):
    parsed = parse_authorized_key(public_key or "")
    return parsed["blob"] if parsed else None


def stale_mesh_keys(text, expected, marker="sparkctl-mesh@"):
    expected = expected or {}
    # A key that is current for some peer is never stale: at worst its comment is
    # out of date, and authorized_key rewrites the comment in place.
    current_blobs = {_blob(key) for key in expected.values() if key}
    stale = []
    for line in str(text or "").splitlines():
        parsed = parse_authorized_key(line)
        if parsed is None or not parsed["comment"].startswith(marker):
            continue
        peer = parsed["comment"][len(marker) :].split()[0] if parsed["comment"][len(marker) :] else ""
        key = f"{parsed['type']} {parsed['blob']} {parsed['comment']}"
        if parsed["blob"] in current_blobs:
            continue
        if peer not in expected:
            stale.append({"key": key, "peer": peer, "reason": "not a peer"})
        elif expected[peer] is not None and _blob(expected[peer]) != parsed["blob"]:
            stale.append({"key": key, "peer": peer, "reason": "key replaced"})
    return stale


def mesh_directions(groups, host, worker_to_worker=False):
    """{"targets": hosts `host` logs in to, "sources": hosts whose key `host` authorizes}.

    Only the head needs to reach the workers (the checkpoint mirror and the image copy
    push from the head): a worker authorizes the head and logs in nowhere, the head
    authorizes nobody. worker_to_worker adds the other workers both ways."""
    head = list((groups or {}).get("spark_head") or [])
    workers = [w for w in (groups or {}).get("spark_workers") or [] if w not in head]
    if host in head:
        return {"targets": workers, "sources": []}
    others = [w for w in workers if w != host] if _truthy(worker_to_worker) else []
    return {"targets": others, "sources": head + others}


def mesh_key_options(source_addresses, extra_options=(), roots=None):
    """The options of an authorized mesh key: `restrict` (no forwarding of any kind, no
    pty, no ~/.ssh/rc), `from=` the source's cable addresses, with roots (a list of
    directories, to which the kernel caches' root is added) `command=` the mesh key's forced
    command (module_utils/mesh_command.py: true, docker load, rsync receiving into one of the
    roots, the checkpoint relay from them), then extra_options. Always in this order, so
    authorized_key_current can compare them as written."""
    try:
        addresses = [bare_address(a) for a in source_addresses or []]
    except ValueError:
        addresses = []
    if not addresses:
        raise AnsibleFilterError(f"mesh_key_options: the source's cable addresses must be IP addresses, got {source_addresses!r}")
    options = ["restrict", 'from="' + ",".join(addresses) + '"']
    if roots is not None:
        if isinstance(roots, str) or not isinstance(roots, (list, tuple)):
            raise AnsibleFilterError(f"mesh_key_options: roots must be a list of directories, got {roots!r}")
        try:
            options.append('command="' + forced_command(list(roots) + [JIT_CACHE_DIR]) + '"')
        except ValueError as exc:
            raise AnsibleFilterError(f"mesh_key_options: the forced command's root {exc}") from exc
    return ",".join(options + [str(o) for o in extra_options or []])


def mesh_command_path(_ignored=None):
    """Where the mesh key's forced command is installed (module_utils/mesh_command.py)."""
    return MESH_COMMAND_PATH


def _truthy(value):
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def authorized_key_current(text, key, options=None):
    """Whether ansible.posix.authorized_key (state present, key_options=options) would leave
    the authorized_keys text unchanged: it keys the file by the key's base64 blob (the last
    line holding it counts) and rewrites that line unless its type, options and comment
    are the ones given. Options are compared as written, so a line that only spells them
    differently reads as not current and the module decides."""
    wanted = parse_authorized_key(key or "")
    if wanted is None:
        return False
    current = None
    for line in str(text or "").splitlines():
        parsed = parse_authorized_key(line)
        if parsed is not None and parsed["blob"] == wanted["blob"]:
            current = parsed
    if current is None:
        return False
    return (current["type"], current["options"], current["comment"]) == (
        wanted["type"], wanted["options"] if options is None else str(options), wanted["comment"])


def _hashed_host_matches(pattern, host):
    """A HashKnownHosts entry |1|salt|hash names host when HMAC-SHA1(salt, host) is the hash."""
    try:
        salt, digest = (b64decode(part) for part in pattern[3:].split("|", 1))
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(hmac.new(salt, host.encode(), hashlib.sha1).digest(), digest)


def known_host_current(text, name, key):
    """Whether ansible.builtin.known_hosts (state present, name, key "type base64") would
    leave the known_hosts text unchanged. Like the module (through ssh-keygen -F) it takes
    the lines naming the host in file order: the first whose key has the same type decides,
    current only when it is that key on a line of the host alone (the module, not hashing,
    rewrites a hashed line of the host with the key in the clear). Marker lines
    (@cert-authority, @revoked) never decide. A line whose host patterns hold wildcards or
    negations is not matched here: with a key of the same type it reads as not current and
    the module decides."""
    host = str(name).lower()
    fields = str(key or "").split()
    if len(fields) < 2:
        return False
    key_type, blob = fields[0], fields[1]
    for line in str(text or "").splitlines():
        parts = line.split()
        if not parts or parts[0].startswith("#") or parts[0].startswith("@") or len(parts) < 3:
            continue
        hosts, line_type, line_blob = parts[:3]
        hashed = hosts.startswith("|1|")
        if not hashed and any(c in hosts for c in "*?!"):
            if line_type == key_type:
                return False
            continue
        named = _hashed_host_matches(hosts, host) if hashed else host in hosts.lower().split(",")
        if not named or line_type != key_type:
            continue
        return line_blob == blob and hosts == host
    return False


def mesh_unauthorized_sources(sources, text, extra_options=(), roots=None):
    """The source nodes (published ssh_mesh_node identities) whose public key authorized_keys
    lacks as the exact line ansible.posix.authorized_key would write: key, type, comment and
    the options of mesh_key_options. A node without a public key yet (--check before the key
    exists) has nothing to authorize, so its options are not worked out."""
    unauthorized = []
    for node in sources or []:
        try:
            public_key = node["public_key"]
            if len(public_key) > 0 and not authorized_key_current(
                    text, public_key, mesh_key_options(node["addresses"], extra_options, roots)):
                unauthorized.append(node)
        except (KeyError, TypeError) as exc:
            raise AnsibleFilterError(f"mesh_unauthorized_sources: not a mesh identity with public_key and addresses: "
                                     f"{node!r} ({exc!r})") from exc
    return unauthorized


def mesh_unpinned(pairs, text):
    """The [node, address] pairs (subelements('addresses') over the target nodes' identities)
    whose address known_hosts does not pin to the node's host key as ansible.builtin.known_hosts
    would leave it."""
    unpinned = []
    for pair in pairs or []:
        try:
            node, address = pair
            if not known_host_current(text, address, node["host_key"]):
                unpinned.append(pair)
        except (KeyError, TypeError, ValueError) as exc:
            raise AnsibleFilterError(f"mesh_unpinned: not a [node with host_key, address] pair: {pair!r} ({exc!r})") from exc
    return unpinned


class FilterModule:
    def filters(self):
        return {"stale_mesh_keys": stale_mesh_keys, "mesh_directions": mesh_directions, "mesh_key_options": mesh_key_options,
                "mesh_command_path": mesh_command_path,
                "authorized_key_current": authorized_key_current, "known_host_current": known_host_current,
                "mesh_unauthorized_sources": mesh_unauthorized_sources, "mesh_unpinned": mesh_unpinned}

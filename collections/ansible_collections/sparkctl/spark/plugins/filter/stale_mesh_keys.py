# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Find the authorized_keys lines the SSH mesh wrote earlier that no longer
belong: a peer's key that was regenerated, or a host that is no longer a peer.
Only lines whose comment carries the mesh's marker are ever considered, so the
other keys in the file (an operator's, the management key) are never touched.

Also who logs in to whom (mesh_directions: head -> workers only) and the options of an
authorized mesh key (mesh_key_options: restrict, from= the source's cable addresses)."""

from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError

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


_ADDRESS = re.compile(r"^[0-9A-Fa-f:.]+$")


def mesh_key_options(source_addresses, extra_options=()):
    """The options of an authorized mesh key: `restrict` (no forwarding of any kind, no
    pty, no ~/.ssh/rc), `from=` the source's cable addresses, then extra_options."""
    addresses = [str(a).split("/")[0] for a in source_addresses or []]
    if not addresses or not all(_ADDRESS.match(a) for a in addresses):
        raise AnsibleFilterError(f"mesh_key_options: the source's cable addresses must be IP addresses, got {source_addresses!r}")
    return ",".join(["restrict", 'from="' + ",".join(addresses) + '"'] + [str(o) for o in extra_options or []])


def _truthy(value):
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


class FilterModule:
    def filters(self):
        return {"stale_mesh_keys": stale_mesh_keys, "mesh_directions": mesh_directions, "mesh_key_options": mesh_key_options}

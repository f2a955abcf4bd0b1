# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The observe stage's web authentication: the bcrypt hash Prometheus and node exporter read from
their web configuration (``basic_auth_users``), kept when it still matches the password.

bcrypt salts every hash anew: hashing on every run would rewrite the web configuration and
restart both daemons each time. The hash already on the node is kept while it verifies the
password, so a re-run changes nothing and a new password (the vaulted ``observe_password``)
replaces it."""

from __future__ import annotations

import yaml
from ansible.errors import AnsibleFilterError

try:
    import bcrypt
except ImportError:  # pragma: no cover - the message below names the fix
    bcrypt = None

DOCUMENTATION = r"""
name: observe_web_hash
short_description: The bcrypt hash of the observe stage's password, the node's own while it still matches
version_added: 0.1.0
description:
  - Reads the user's hash from O(_input), the text of a Prometheus or node exporter web configuration
    (C(basic_auth_users)), and returns it when it verifies O(password); otherwise (no file, no such user, another
    password, text that is not the web configuration) returns a new bcrypt hash of O(password).
  - Needs the C(bcrypt) Python package on the control node (requirements/dev.txt).
options:
  _input:
    description: The text of the web configuration on the node; empty when it does not exist yet.
    type: str
    required: true
  password:
    description: The password (a secret; never shown), at most 72 bytes (bcrypt's limit).
    type: str
    required: true
  user:
    description: The user of C(basic_auth_users).
    type: str
    required: true
  rounds:
    description: bcrypt's cost factor for a new hash (Prometheus's documentation uses 10 or more).
    type: int
    default: 10
"""

EXAMPLES = r"""
- name: Keep the node's hash while it matches
  ansible.builtin.set_fact:
    observe_hash: "{{ observe_node_web_text | sparkctl.spark.observe_web_hash(observe_secret, 'sparkctl') }}"
  no_log: true
"""

RETURN = r"""
_value:
  description: A bcrypt hash (C($2b$...)) of the password.
  type: str
"""


def existing_hash(web_config_text, user):
    """The user's hash in a web configuration's text, or None."""
    try:
        doc = yaml.safe_load(web_config_text or "") or {}
    except yaml.YAMLError:
        return None
    users = doc.get("basic_auth_users") if isinstance(doc, dict) else None
    value = users.get(user) if isinstance(users, dict) else None
    return value if isinstance(value, str) and value.startswith("$2") else None


def observe_web_hash(web_config_text, password, user, rounds=10):
    if bcrypt is None:
        raise AnsibleFilterError("observe_web_hash needs the bcrypt Python package on the control node: "
                                 "pip install -r requirements/dev.txt")
    if not isinstance(password, str) or not password:
        raise AnsibleFilterError("observe_web_hash: the password is empty; set observe_password (vaulted) or let "
                                 "the observe role generate one")
    if len(password.encode()) > 72:
        raise AnsibleFilterError("observe_web_hash: observe_password is longer than 72 bytes, which bcrypt cannot hash; "
                                 "choose a shorter one (32 characters are plenty)")
    if not isinstance(user, str) or not user or ":" in user:
        raise AnsibleFilterError(f"observe_web_hash: observe_user {user!r} must be a non-empty name without ':'")
    current = existing_hash(web_config_text, user)
    if current:
        try:
            if bcrypt.checkpw(password.encode(), current.encode()):
                return current
        except ValueError:
            pass
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=int(rounds))).decode()


class FilterModule:
    def filters(self):
        return {"observe_web_hash": observe_web_hash}

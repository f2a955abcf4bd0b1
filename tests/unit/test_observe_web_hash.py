"""The observe stage's web password hash (filter observe_web_hash): the node's bcrypt hash is
kept while it verifies the password, so a re-run rewrites no web configuration; another
password, user or an unreadable file gets a new hash."""

from __future__ import annotations

import bcrypt
import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.sparkctl.spark.plugins.filter.observe import existing_hash, observe_web_hash

PASSWORD = "s3cret-password-of-32-characters"


def _web(user, hashed):
    return f"# Managed by sparkctl\nbasic_auth_users:\n  {user}: {hashed}\n"


def test_a_first_hash_verifies_the_password():
    hashed = observe_web_hash("", PASSWORD, "sparkctl", rounds=4)
    assert hashed.startswith("$2b$04$") and bcrypt.checkpw(PASSWORD.encode(), hashed.encode())


def test_the_nodes_hash_is_kept_while_it_matches():
    hashed = observe_web_hash("", PASSWORD, "sparkctl", rounds=4)
    assert observe_web_hash(_web("sparkctl", hashed), PASSWORD, "sparkctl") == hashed


@pytest.mark.parametrize("text", [
    _web("sparkctl", bcrypt.hashpw(b"another password", bcrypt.gensalt(4)).decode()),  # the password changed
    _web("someone-else", bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()),  # another user
    "basic_auth_users: [not, a, mapping]\n",
    "basic_auth_users:\n  sparkctl: plain-text\n",
    ": not yaml : [",
])
def test_a_hash_that_does_not_verify_is_replaced(text):
    hashed = observe_web_hash(text, PASSWORD, "sparkctl", rounds=4)
    assert hashed != existing_hash(text, "sparkctl") and bcrypt.checkpw(PASSWORD.encode(), hashed.encode())


@pytest.mark.parametrize(("password", "user", "says"), [
    ("", "sparkctl", "observe_password"),
    (None, "sparkctl", "observe_password"),
    (PASSWORD, "", "observe_user"),
    (PASSWORD, "a:b", "observe_user"),
    ("x" * 73, "sparkctl", "observe_password is longer than 72 bytes"),
])
def test_bad_values_are_refused_naming_the_variable(password, user, says):
    with pytest.raises(AnsibleFilterError, match=says):
        observe_web_hash("", password, user)

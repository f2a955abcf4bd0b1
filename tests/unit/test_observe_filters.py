"""The observe stage's web password hash (filter observe_web_hash): the node's bcrypt hash is
kept while it verifies the password, so a re-run rewrites no web configuration; another
password, user or an unreadable file gets a new hash."""

from __future__ import annotations

import bcrypt
import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.sparkctl.spark.plugins.filter.observe import (
    existing_hash,
    observe_status_lines,
    observe_status_queries,
    observe_web_hash,
)

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


# --- sparkctl status: the live numbers from Prometheus --------------------------------------------

def _answer(name, samples, ok=True):
    body = {"status": "success", "data": {"resultType": "vector", "result": samples}} if ok else None
    return {"item": {"name": name, "query": "q"}, "json": body, "status": 200 if ok else -1}


def test_status_lines_show_the_live_numbers_and_the_firing_alerts():
    results = [
        _answer("tokens_per_second", [{"metric": {}, "value": [1, "42.37"]}]),
        _answer("running", [{"metric": {}, "value": [1, "3"]}]),
        _answer("waiting", [{"metric": {}, "value": [1, "1"]}]),
        _answer("kv_cache", [{"metric": {}, "value": [1, "0.125"]}]),
        _answer("alerts", [{"metric": {"alertname": "SparkMemAvailableNearOOMLine", "node": "spark2"}, "value": [1, "1"]},
                           {"metric": {"alertname": "SparkEngineDown"}, "value": [1, "1"]}]),
    ]
    assert observe_status_lines(results) == [
        "live (Prometheus): 42.4 tokens/s, 3 running, 1 waiting, KV cache 12 %",
        "alerts firing: SparkEngineDown, SparkMemAvailableNearOOMLine (spark2)"]


def test_status_lines_say_na_for_what_prometheus_did_not_answer():
    results = [_answer("tokens_per_second", []), _answer("running", None, ok=False), _answer("alerts", [])]
    assert observe_status_lines(results) == [
        "live (Prometheus): n/a tokens/s, n/a running, n/a waiting, KV cache n/a", "alerts firing: none"]
    assert observe_status_lines([])[1] == "alerts: n/a"


def test_status_queries_name_each_line():
    assert [q["name"] for q in observe_status_queries()] == ["tokens_per_second", "running", "waiting", "kv_cache", "alerts"]
    with pytest.raises(AnsibleFilterError):
        observe_status_lines("not a list")

"""The observe stage's web password hash (filter observe_web_hash): the node's bcrypt hash is
kept while it verifies the password, so a re-run rewrites no web configuration; another
password, user or an unreadable file gets a new hash. The engine's metric names
(observe_engine_metrics, module_utils/engine_metrics.py) and `sparkctl status`'s queries in them."""

from __future__ import annotations

import re
from pathlib import Path

import bcrypt
import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.sparkctl.spark.plugins.filter.observe import (
    existing_hash,
    observe_engine_metrics,
    observe_status_lines,
    observe_status_queries,
    observe_web_hash,
)
from ansible_collections.sparkctl.spark.plugins.module_utils import engine_metrics
from ansible_collections.sparkctl.spark.plugins.plugin_utils.profile_engine import ENGINES

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


@pytest.mark.parametrize("engine", ENGINES)
def test_status_queries_name_each_line(engine):
    assert [q["name"] for q in observe_status_queries(engine)] == ["tokens_per_second", "running", "waiting", "kv_cache", "alerts"]
    with pytest.raises(AnsibleFilterError):
        observe_status_lines("not a list")


def test_status_queries_ask_for_the_profile_s_engine_s_metrics():
    assert {q["name"]: q["query"] for q in observe_status_queries("vllm")} == {
        "tokens_per_second": "sum(rate(vllm:generation_tokens_total[1m]))",
        "running": "sum(vllm:num_requests_running)",
        "waiting": "sum(vllm:num_requests_waiting)",
        "kv_cache": "max(vllm:kv_cache_usage_perc)",
        "alerts": 'ALERTS{alertstate="firing"}',
    }
    assert {q["name"]: q["query"] for q in observe_status_queries("sglang")} == {
        "tokens_per_second": "sum(rate(sglang:generation_tokens_total[1m]))",
        "running": "sum(sglang:num_running_reqs)",
        "waiting": "sum(sglang:num_queue_reqs)",
        "kv_cache": "max(sglang:token_usage)",
        "alerts": 'ALERTS{alertstate="firing"}',
    }


@pytest.mark.parametrize("engine", [None, "", "tgi", {"kind": "vllm"}])
def test_an_engine_without_metric_names_is_refused_naming_the_profile_s_field(engine):
    for each_filter in (observe_engine_metrics, observe_status_queries):
        with pytest.raises(AnsibleFilterError, match=r"spark_profile\.engine\.kind.*vllm, sglang"):
            each_filter(engine)


# --- The engines' metric names (module_utils/engine_metrics.py) -------------------------------------

def test_every_engine_sparkctl_runs_has_every_metric():
    assert set(engine_metrics.ENGINE_METRICS) == set(ENGINES)
    roles = {engine: set(names) for engine, names in engine_metrics.ENGINE_METRICS.items()}
    assert all(names == roles["vllm"] for names in roles.values()), roles
    for engine in ENGINES:
        names = observe_engine_metrics(engine)
        assert names == engine_metrics.ENGINE_METRICS[engine]
        assert all(name.startswith(f"{engine}:") for name in names.values()), names
        assert all(name.endswith("_total") for role, name in names.items()
                   if role in ("generation_tokens", "prompt_tokens", "requests_finished"))
        assert all(name.endswith("_seconds_bucket") for role, name in names.items() if role.endswith("_buckets"))


@pytest.mark.parametrize("doc", ["docs/observability.md"])
def test_the_docs_list_the_table_as_it_is(doc):
    """The docs' table of the engine metrics: one row per role, vLLM's and SGLang's names."""
    docs = (Path(__file__).resolve().parents[2] / doc).read_text(encoding="utf-8")
    rows = {}
    for line in docs.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        role = re.search(r"\(`([a-z0-9_]+)`, (?:gauge|counter|histogram)\)", cells[0]) if len(cells) == 3 else None
        if role:
            rows[role.group(1)] = {"vllm": cells[1].strip("`"), "sglang": cells[2].strip("`")}
    assert rows == {role: {engine: names[role] for engine, names in engine_metrics.ENGINE_METRICS.items()}
                    for role in engine_metrics.ENGINE_METRICS["vllm"]}


def test_the_table_is_not_changed_through_a_filter_s_answer():
    observe_engine_metrics("vllm")["requests_running"] = "changed"
    assert observe_engine_metrics("vllm")["requests_running"] == "vllm:num_requests_running"


def test_queries_over_both_engines_take_whichever_answers():
    both = ("vllm", "sglang")
    assert engine_metrics.counter_rate(both, "prompt_tokens", "1m", 'job="engine"') == (
        'sum(rate(vllm:prompt_tokens_total{job="engine"}[1m])) or sum(rate(sglang:prompt_tokens_total{job="engine"}[1m]))')
    assert engine_metrics.gauge(both, "kv_cache_usage_ratio", "max") == "max(vllm:kv_cache_usage_perc) or max(sglang:token_usage)"
    assert engine_metrics.latency_quantile(both, "time_to_first_token_buckets", "0.95", "5m") == (
        "histogram_quantile(0.95, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket[5m])"
        " or rate(sglang:time_to_first_token_seconds_bucket[5m])))")
    with pytest.raises(ValueError, match="the roles are"):
        engine_metrics.series("vllm", "tokens")

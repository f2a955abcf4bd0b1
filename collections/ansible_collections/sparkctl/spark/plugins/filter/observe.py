# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The observe stage's credentials and web authentication, the engine's metric names its alert rules use, and the
live numbers `sparkctl status` reads from Prometheus.

Credentials: each component (Prometheus's web pages, the node exporters, Grafana's admin, Grafana's
data source) has its own password, chosen (vaulted), read back from the file that keeps it, or
generated; two components with one password are refused, so one leaked file opens one door only.

Web authentication: the bcrypt hash Prometheus and node exporter read from
their web configuration (``basic_auth_users``), kept when it still matches the password.

bcrypt salts every hash anew: hashing on every run would rewrite the web configuration and
restart both daemons each time. The hash already on the node is kept while it verifies the
password, so a re-run changes nothing and a new password (the vaulted ``observe_password``)
replaces it.

Engine metrics: vLLM and SGLang name the same numbers differently; the names come from
module_utils/engine_metrics.py (ENGINE_METRICS), for the profile's engine (spark_profile.engine.kind)."""

from __future__ import annotations

import base64
import binascii
import datetime
import ipaddress
import secrets
import string

import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.sparkctl.spark.plugins.module_utils import engine_metrics

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
  - C(observe_web_configs) takes the node's texts (C(path), C(content)), per web configuration the users it lets in
    (C(user), C(credential)) and the secrets by credential, and returns per web configuration each user's hash (as
    C(observe_web_hash) chooses it); a user named twice in one configuration is refused.
  - C(observe_secrets) takes the credentials (name to C(password), C(file)) and the registered C(results) of
    C(ansible.builtin.slurp) looping over their names, and returns each credential's secret, the chosen password, else
    the file's content (trimmed), else 32 generated letters and digits; two credentials with one secret are refused.
  - C(observe_engine_metrics) takes the engine's kind (C(spark_profile.engine.kind), C(vllm) or C(sglang)) and returns
    that engine's metric names by role (C(module_utils/engine_metrics.py)); the alert rules name the engine's series with
    them. An engine without metric names is refused.
  - C(observe_status_queries) takes the engine's kind (C(spark_profile.engine.kind)) and returns the queries
    C(sparkctl status) asks Prometheus, each C(name) and C(query), in that engine's metric names; an engine without
    metric names is refused. C(observe_status_lines) takes the registered C(results) of C(ansible.builtin.uri) looping
    over them against C(/api/v1/query) and returns the lines C(status) shows (tokens/s, running and waiting requests,
    KV cache usage, the firing alerts), C(n/a) for a query that failed or found no sample.
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
    observe_hash: "{{ observe_node_web_text | sparkctl.spark.observe_web_hash(observe_secrets.prometheus, 'sparkctl') }}"
  no_log: true

- name: Name the engine's running requests in an alert rule
  ansible.builtin.debug:
    msg: "{{ (spark_profile.engine.kind | sparkctl.spark.observe_engine_metrics).requests_running }}"

- name: Ask Prometheus for the live numbers of the profile's engine
  ansible.builtin.uri:
    url: "http://prometheus.example:9090/api/v1/query?query={{ item.query | urlencode }}"
  loop: "{{ spark_profile.engine.kind | sparkctl.spark.observe_status_queries }}"
"""

RETURN = r"""
_value:
  description:
    - "C(observe_web_hash): a bcrypt hash (C($2b$...)) of the password."
    - "C(observe_web_configs): per web configuration path, each user's bcrypt hash."
    - "C(observe_secrets): each credential's secret, by credential name."
    - "C(observe_engine_metrics): the engine's series names by role: C(requests_running), C(requests_waiting),
      C(kv_cache_usage_ratio) (gauges), C(generation_tokens), C(prompt_tokens), C(requests_finished) (counters, with
      C(_total)), C(time_to_first_token_buckets), C(inter_token_latency_buckets), C(e2e_latency_buckets) (histograms'
      C(_bucket) series), as module_utils/engine_metrics.py names them for the engine."
    - "C(observe_status_queries): a list of C(name) and C(query): C(tokens_per_second), C(running), C(waiting),
      C(kv_cache) (the engine's), C(alerts) (sparkctl's firing alerts)."
    - "C(observe_status_lines): two lines, the live numbers and the firing alerts."
    - "C(observe_tls_sans) (input the TLS servers of a host, by daemon: C(key), C(cert), C(group), C(names)): the same
      with C(sans), each name once as C(IP:address) when it is an IPv4 or IPv6 address, else C(DNS:name)."
    - "C(observe_tls_paths) (input those servers): the owner, group and mode each key (0640 root and the daemon's
      group) and certificate (0644 root) must have, as C(path), C(owner), C(group), C(mode) items."
    - "C(observe_tls_due) (input those servers; arguments the node read's C(texts) and C(drifted), the CA's subject key
      identifier as C(x509_certificate_info) gives it, the renewal margin in days, whether the CA was made or renewed
      in this run): the daemons whose certificate a run issues: its key or certificate missing or not as owned, the
      certificate unreadable, for other names, not signed by the CA's key, or ending within the margin; all of them when
      the CA is new."
  type: raw
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


def observe_web_configs(texts, web_users, secrets_by_credential, rounds=10):
    """Per web configuration path, {user: bcrypt hash} for the users it lets in."""
    contents = {t.get("path"): t.get("content") or "" for t in texts or [] if isinstance(t, dict)}
    out = {}
    for path, users in (web_users or {}).items():
        hashes = {}
        for entry in users:
            user, credential = entry["user"], entry["credential"]
            if user in hashes:
                raise AnsibleFilterError(f"observe_web_configs: {path} would let in the user {user!r} twice; give each "
                                         "component its own user (observe_user, observe_node_exporter_user, "
                                         "observe_grafana_datasource_user)")
            if credential not in secrets_by_credential:
                raise AnsibleFilterError(f"observe_web_configs: no secret for the credential {credential!r}")
            hashes[user] = observe_web_hash(contents.get(path, ""), secrets_by_credential[credential], user, rounds)
        out[path] = hashes
    return out


GENERATED_CHARS = string.ascii_letters + string.digits


def _kept(result):
    """The secret a slurp result read back from its file, or None (no file, unreadable, empty)."""
    if not isinstance(result, dict) or result.get("failed") or "content" not in result:
        return None
    try:
        text = base64.b64decode(result["content"]).decode().strip()
    except (binascii.Error, UnicodeDecodeError, TypeError):
        return None
    return text or None


def observe_secrets(credentials, read_results):
    """Each credential's secret: chosen, else kept in its file, else generated."""
    if not isinstance(credentials, dict):
        raise AnsibleFilterError(f"observe_secrets: expected the credentials (a dict), got {type(credentials).__name__}")
    kept = {r.get("item"): _kept(r) for r in read_results or [] if isinstance(r, dict)}
    out = {}
    for name, spec in credentials.items():
        chosen = str(spec.get("password") or "")
        out[name] = chosen or kept.get(name) or "".join(secrets.choice(GENERATED_CHARS) for _position in range(32))
    by_secret = {}
    for name, secret in out.items():
        by_secret.setdefault(secret, []).append(name)
    shared = [names for names in by_secret.values() if len(names) > 1]
    if shared:
        said = "; ".join(" and ".join(names) for names in shared)
        raise AnsibleFilterError(f"observe_secrets: {said} have the same password; each component needs its own "
                                 "(leave the password empty to have one generated)")
    return out


def _engine_metrics(filter_name, engine_kind):
    try:
        return engine_metrics.engine_metrics(engine_kind)
    except ValueError:
        raise AnsibleFilterError(f"{filter_name}: the engine {engine_kind!r} (spark_profile.engine.kind) has no metric names; "
                                 f"sparkctl knows those of {', '.join(engine_metrics.ENGINES)} "
                                 "(module_utils/engine_metrics.py)") from None


def observe_engine_metrics(engine_kind):
    """The engine's {role: series name}, for the alert rules."""
    return _engine_metrics("observe_engine_metrics", engine_kind)


def status_queries(engine_kind):
    """What `sparkctl status` asks Prometheus for, by name: the engine's numbers in its own metric names, and
    sparkctl's firing alerts."""
    _engine_metrics("observe_status_queries", engine_kind)
    engines = (engine_kind,)
    return {
        "tokens_per_second": engine_metrics.counter_rate(engines, "generation_tokens", "1m"),
        "running": engine_metrics.gauge(engines, "requests_running", "sum"),
        "waiting": engine_metrics.gauge(engines, "requests_waiting", "sum"),
        "kv_cache": engine_metrics.gauge(engines, "kv_cache_usage_ratio", "max"),
        "alerts": 'ALERTS{alertstate="firing"}',
    }


def _samples(result):
    answer = result.get("json") if isinstance(result, dict) else None
    if not isinstance(answer, dict) or answer.get("status") != "success":
        return None
    data = answer.get("data") or {}
    return data.get("result") if data.get("resultType") == "vector" else None


def _number(samples):
    try:
        return float(samples[0]["value"][1]) if samples else None
    except (KeyError, IndexError, TypeError, ValueError):
        return None


def observe_status_queries(engine_kind):
    return [{"name": name, "query": query} for name, query in status_queries(engine_kind).items()]


def observe_status_lines(results):
    if not isinstance(results, list):
        raise AnsibleFilterError(f"observe_status_lines: expected the uri loop's results (a list), got {type(results).__name__}")
    by_name = {}
    for result in results:
        item = result.get("item") if isinstance(result, dict) else None
        if isinstance(item, dict) and item.get("name"):
            by_name[item["name"]] = _samples(result)

    def fmt(name, pattern, scale=1.0):
        value = _number(by_name.get(name))
        return "n/a" if value is None else pattern % (value * scale)

    line = (f"live (Prometheus): {fmt('tokens_per_second', '%.1f')} tokens/s, {fmt('running', '%d')} running, "
            f"{fmt('waiting', '%d')} waiting, KV cache {fmt('kv_cache', '%.0f %%', 100.0)}")
    alerts = by_name.get("alerts")
    if alerts is None:
        said = "alerts: n/a"
    else:
        names = sorted({f"{s['metric'].get('alertname', '?')}"
                        + (f" ({s['metric']['node']})" if s.get("metric", {}).get("node") else "") for s in alerts})
        said = "alerts firing: " + (", ".join(names) if names else "none")
    return [line, said]


def _san(name):
    try:
        return "IP:" + str(ipaddress.ip_address(name))
    except ValueError:
        return "DNS:" + name


def observe_tls_sans(servers):
    out = {}
    for daemon, server in (servers or {}).items():
        names = list(dict.fromkeys(str(name) for name in server.get("names", []) if str(name)))
        out[daemon] = dict(server, sans=[_san(name) for name in names])
    return out


def observe_tls_paths(servers):
    paths = []
    for server in (servers or {}).values():
        paths.append({"path": server["key"], "owner": "root", "group": server["group"], "mode": "0640"})
        paths.append({"path": server["cert"], "owner": "root", "group": "root", "mode": "0644"})
    return paths


def _certificate(text):
    """The PEM certificate's (subject alternative names as IP:/DNS: strings, authority key identifier as
    colon-separated hex, end of validity in UTC), or None when the text holds no readable certificate."""
    if "BEGIN CERTIFICATE" not in (text or ""):
        return None
    from cryptography import x509  # ansible-core's own dependency, on every control node

    try:
        cert = x509.load_pem_x509_certificate(text.encode())
    except ValueError:
        return None
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = ["IP:" + str(v) for v in san.get_values_for_type(x509.IPAddress)] \
            + ["DNS:" + v for v in san.get_values_for_type(x509.DNSName)]
    except x509.ExtensionNotFound:
        names = []
    try:
        aki = cert.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value.key_identifier or b""
    except x509.ExtensionNotFound:
        aki = b""
    return names, ":".join(f"{byte:02x}" for byte in aki), cert.not_valid_after_utc


def observe_tls_due(servers, texts, drifted, ca_ski, renew_days, ca_changed=False, now=None):
    contents = {item.get("path"): item.get("content") or "" for item in texts or []}
    now = now or datetime.datetime.now(datetime.timezone.utc)
    margin = datetime.timedelta(days=int(renew_days))
    due = []
    for daemon, server in (servers or {}).items():
        read = _certificate(contents.get(server["cert"], ""))
        if ca_changed or server["key"] in drifted or server["cert"] in drifted or read is None:
            due.append(daemon)
            continue
        names, aki, not_after = read
        if sorted(names) != sorted(server["sans"]) or aki.lower() != (ca_ski or "").lower() or not_after - now < margin:
            due.append(daemon)
    return due


class FilterModule:
    def filters(self):
        return {"observe_web_hash": observe_web_hash, "observe_web_configs": observe_web_configs,
                "observe_secrets": observe_secrets, "observe_status_lines": observe_status_lines,
                "observe_status_queries": observe_status_queries, "observe_engine_metrics": observe_engine_metrics,
                "observe_tls_sans": observe_tls_sans, "observe_tls_paths": observe_tls_paths,
                "observe_tls_due": observe_tls_due}

"""TLS of the observe stage (roles/observe, `observe_tls`, on by default; docs/observability.md, "TLS"):
Prometheus, every node exporter and Grafana answer HTTPS only, with certificates of a CA sparkctl makes
on the Prometheus host.

- The templates with TLS on and off: the web configurations' tls_server_config, Prometheus's scrapes of
  itself and of the node exporters (https, the CA), the engine and Ray jobs unchanged, Grafana's drop-in
  (protocol, key, certificate) and its data source (https, the CA), the ARGS files that restart a daemon
  when TLS is turned on or off.
- The tasks: a key is made on the node that uses it and no task reads or moves one; the CA's key stays on
  the Prometheus host, which signs the requests (delegated); every step is skipped on a converged run
  (check, then act) and, in --check, where the key or CA it needs would only be made by a real run.
- The role's own certificates, made here with community.crypto's modules as the role's tasks call them
  (their arguments templated by Ansible): the role's judgement (vars/main.yml, evaluated by Ansible with
  community.crypto's filter in a fresh interpreter, as tests/unit/test_plugin_preload.py does, so the
  collection finder does not leak into the other tests) accepts what a run issued, so a re-run changes
  nothing, and wants anew what is missing, not as owned, for other names, of another CA or ending soon;
  Python's strict TLS client trusts them through the CA only; promtool accepts the web configuration; the
  distribution's prometheus (unpacked by tests/bootstrap.sh) serves HTTPS only and scrapes itself through
  the CA."""

from __future__ import annotations

import base64
import contextlib
import importlib
import io
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import textwrap
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import jinja2
import pytest
import yaml
from alert_rules import PROMTOOL, PROMTOOL_MISSING
from ansible.module_utils.testing import patch_module_args
from ansible_collections.sparkctl.spark.plugins.module_utils.node_state import assess
from ports import free_port, wait_listening
from collection_templating import evaluate

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "observe"
DEFAULTS = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text(encoding="utf-8"))
VARS = yaml.safe_load((ROLE / "vars" / "main.yml").read_text(encoding="utf-8"))
PROMETHEUS = Path(PROMTOOL).with_name("prometheus") if PROMTOOL else None
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason=PROMTOOL_MISSING)
needs_prometheus = pytest.mark.skipif(PROMETHEUS is None or not PROMETHEUS.is_file(), reason=PROMTOOL_MISSING)
# community.crypto's backend names every key type cryptography knows while it loads one.
pytestmark = pytest.mark.filterwarnings("ignore::cryptography.utils.CryptographyDeprecationWarning")

HEAD, WORKER = "spark1", "spark2"
ADDRESSES = {HEAD: "10.0.0.1", WORKER: "10.0.0.2"}


def _all(tasks):
    for task in tasks or []:
        if "block" in task:
            yield from _all(task["block"])
        else:
            yield task


def _flat(path: Path, inherited: dict | None = None) -> list[dict]:
    """A task file's tasks in the order they run, blocks opened and imported files inlined (with the
    import's vars and when)."""
    out = []
    for task in _all(yaml.safe_load(path.read_text(encoding="utf-8"))):
        imported = task.get("ansible.builtin.import_tasks")
        if imported:
            out += _flat(path.parent / imported, {"vars": {**(inherited or {}).get("vars", {}), **task.get("vars", {})},
                                                  "when": task.get("when")})
        else:
            out.append({**task, "_import": inherited or {}})
    return out


# tls.yml's own tasks (the CA and its copies; it imports tls_issue.yml for the daemons' certificates).
TLS = [t for t in yaml.safe_load((ROLE / "tasks" / "tls.yml").read_text(encoding="utf-8")) if "ansible.builtin.import_tasks" not in t]
ISSUE = yaml.safe_load((ROLE / "tasks" / "tls_issue.yml").read_text(encoding="utf-8"))
MAIN = _flat(ROLE / "tasks" / "main.yml")


def _task(tasks, module, **match):
    found = [t for t in tasks if module in t and all(t[module].get(k) == v for k, v in match.items())]
    assert len(found) == 1, (module, match, [t.get("name") for t in found])
    return found[0]


# --- The templates, TLS on and off ------------------------------------------------------------------------------


def _paths():
    """The role's TLS paths (vars/main.yml) with its defaults, as Ansible evaluates them."""
    names = ("observe_node_exporter_tls_key", "observe_node_exporter_tls_cert", "observe_prometheus_tls_key",
             "observe_prometheus_tls_cert", "observe_grafana_tls_key", "observe_grafana_tls_cert", "observe_tls_ca_key")
    return {name: evaluate("{{ %s }}" % name, {**VARS, **DEFAULTS}) for name in names}


PATHS = _paths()


def _render(name, **values):
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["to_json"] = json.dumps
    env.filters["bool"] = bool
    env.filters["comment"] = lambda text: "# " + text
    base = {key: value for key, value in DEFAULTS.items() if "{{" not in str(value)}
    base.update(PATHS, ansible_managed="Managed by sparkctl", groups={"spark_head": [HEAD], "spark_workers": [WORKER]},
                hostvars={host: {"ansible_host": address} for host, address in ADDRESSES.items()}, observe_head=HEAD,
                spark_profile={"api": {"port": 8000}}, observe_prometheus_listen_address=ADDRESSES[HEAD],
                observe_prometheus_port=9090, observe_node_exporter_port=9100, observe_node_exporter_listen_address=ADDRESSES[HEAD],
                observe_scrape_engine=True, observe_scrape_ray=True, observe_ray_metrics_port=8080,
                observe_grafana_listen_address=ADDRESSES[HEAD], observe_grafana_port=3000, observe_grafana_admin_user="sparkctl",
                observe_web_config_users={"sparkctl": "$2b$04$hash"}, observe_web_config_tls={})
    base.update(values)
    return env.from_string((ROLE / "templates" / name).read_text(encoding="utf-8")).render(**base)


def test_tls_is_on_by_default_with_false_as_the_way_out():
    assert DEFAULTS["observe_tls"] is True
    spec = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text(encoding="utf-8"))
    option = spec["argument_specs"]["main"]["options"]["observe_tls"]
    assert option["type"] == "bool" and option["default"] is True
    assert "C(false)" in " ".join(option["description"])
    # The days the role renews within stay below what it issues for: a fresh certificate is never due.
    assert 0 < DEFAULTS["observe_tls_renew_days"] < DEFAULTS["observe_tls_cert_days"] <= 825 < DEFAULTS["observe_tls_ca_days"]
    docs = (REPO / "docs" / "observability.md").read_text(encoding="utf-8")
    for said in ("observe_tls: false", "curl --cacert", DEFAULTS["observe_tls_ca_cert"], "observe_tls_renew_days"):
        assert said in docs, said


def test_each_web_configuration_serves_https_with_its_daemons_own_key_and_certificate():
    tls = {"cert": PATHS["observe_node_exporter_tls_cert"], "key": PATHS["observe_node_exporter_tls_key"]}
    on = yaml.safe_load(_render("web.yml.j2", observe_web_config_tls=tls))
    assert on["tls_server_config"] == {"cert_file": tls["cert"], "key_file": tls["key"], "min_version": "TLS12"}
    assert on["basic_auth_users"] == {"sparkctl": "$2b$04$hash"}
    off = yaml.safe_load(_render("web.yml.j2", observe_web_config_tls={}))
    assert "tls_server_config" not in off and off["basic_auth_users"] == {"sparkctl": "$2b$04$hash"}
    # The task hands each web configuration its own daemon's pair (vars/main.yml observe_web_tls).
    write = next(t for t in MAIN if t.get("name", "").startswith("Write the web configurations"))
    assert write["vars"]["observe_web_config_tls"] == "{{ observe_web_tls[item] | default({}) }}"
    mapping = VARS["observe_web_tls"]
    assert "{observe_node_exporter_web_config: observe_tls_servers.node_exporter}" in mapping
    assert "{observe_prometheus_web_config: observe_tls_servers.prometheus}" in mapping


def _jobs(**values):
    return {job["job_name"]: job for job in yaml.safe_load(_render("prometheus.yml.j2", **values))["scrape_configs"]}


def test_prometheus_scrapes_itself_and_the_node_exporters_over_https_checking_sparkctls_ca():
    jobs = _jobs(observe_tls=True)
    for name in ("prometheus", "node"):
        assert jobs[name]["scheme"] == "https", name
        assert jobs[name]["tls_config"] == {"ca_file": DEFAULTS["observe_tls_ca_cert"]}, name
    # The engine's API is the API proxy's (nginx's plain HTTP) and Ray's agent is Ray's own: as they were.
    for name in ("engine", "engine_health", "ray"):
        assert "scheme" not in jobs[name] and "tls_config" not in jobs[name], name
    off = _jobs(observe_tls=False)
    assert not [name for name, job in off.items() if "scheme" in job or "tls_config" in job]
    # Otherwise the same configuration.
    for name, job in off.items():
        assert {k: v for k, v in jobs[name].items() if k not in ("scheme", "tls_config")} == job, name


@needs_promtool
@pytest.mark.parametrize("tls", [True, False])
def test_promtool_accepts_prometheus_configuration(tmp_path, tls):
    (tmp_path / "prometheus.yml").write_text(_render("prometheus.yml.j2", observe_tls=tls))
    done = subprocess.run([PROMTOOL, "check", "config", "--syntax-only", str(tmp_path / "prometheus.yml")],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def _environment(dropin):
    return dict(line.removeprefix("Environment=").split("=", 1) for line in dropin.splitlines() if line.startswith("Environment="))


def test_grafana_serves_https_with_its_own_key_and_certificate():
    env = _environment(_render("grafana-server.conf.j2", observe_tls=True))
    assert env["GF_SERVER_PROTOCOL"] == "https"
    assert env["GF_SERVER_CERT_FILE"] == PATHS["observe_grafana_tls_cert"] == DEFAULTS["observe_grafana_tls_dir"] + "/grafana.crt"
    assert env["GF_SERVER_CERT_KEY"] == PATHS["observe_grafana_tls_key"]
    off = _environment(_render("grafana-server.conf.j2", observe_tls=False))
    assert not [key for key in off if key in ("GF_SERVER_PROTOCOL", "GF_SERVER_CERT_FILE", "GF_SERVER_CERT_KEY")]
    assert {k: v for k, v in env.items() if not k.startswith(("GF_SERVER_PROTOCOL", "GF_SERVER_CERT"))} == off


def test_grafanas_data_source_checks_prometheus_against_sparkctls_ca():
    """Grafana's provisioning: jsonData.tlsAuthWithCACert with secureJsonData.tlsCACert, the CA's
    certificate read from its file like the password ($__file{path})."""
    source = yaml.safe_load(_render("grafana-datasource.yml.j2", observe_tls=True))["datasources"][0]
    assert source["url"] == f"https://{ADDRESSES[HEAD]}:9090"
    assert source["jsonData"]["tlsAuthWithCACert"] is True
    assert source["secureJsonData"]["tlsCACert"] == "$__file{%s}" % DEFAULTS["observe_tls_ca_cert"]
    assert "tlsSkipVerify" not in source["jsonData"]
    off = yaml.safe_load(_render("grafana-datasource.yml.j2", observe_tls=False))["datasources"][0]
    assert off["url"] == f"http://{ADDRESSES[HEAD]}:9090"
    assert "tlsAuthWithCACert" not in off["jsonData"] and "tlsCACert" not in off["secureJsonData"]


def test_turning_tls_on_or_off_restarts_node_exporter_and_prometheus():
    """Node exporter and Prometheus decide HTTP or HTTPS at their start only (the web configuration is
    read again at every request, its tls_server_config at every connection): their ARGS file names
    the scheme, and a changed ARGS file restarts the daemon."""
    for template, handler in (("node-exporter.default.j2", "Restart node exporter"), ("prometheus.default.j2", "Restart Prometheus")):
        on, off = _render(template, observe_tls=True), _render(template, observe_tls=False)
        assert on != off and "HTTPS" in on and "HTTPS" not in off, template
        assert [line for line in on.splitlines() if line.startswith("ARGS=")] == [
            line for line in off.splitlines() if line.startswith("ARGS=")], template
        writer = next(t for t in MAIN if t.get("ansible.builtin.template", {}).get("src") == template)
        assert writer["notify"] == handler, template


# --- The tasks -----------------------------------------------------------------------------------------------


def test_tls_is_in_place_before_anything_names_it():
    """The keys and certificates exist before a web configuration names them (a daemon reads them as it
    starts) and before the daemons start; Grafana's before its drop-in and its start."""
    names = [t.get("name", "") for t in MAIN]
    write = next(i for i, t in enumerate(MAIN) if t.get("ansible.builtin.template", {}).get("src") == "web.yml.j2")
    node_exporter_start = names.index("Enable and start node exporter")
    issued = [i for i, t in enumerate(MAIN) if "ansible.builtin.copy" in t and "observe_tls_servers" in str(t["ansible.builtin.copy"])]
    assert len(issued) == 2, issued  # node exporter's and Prometheus's, then Grafana's
    assert issued[0] < write < node_exporter_start
    dropin = next(i for i, t in enumerate(MAIN) if t.get("ansible.builtin.template", {}).get("src") == "grafana-server.conf.j2")
    assert issued[1] < dropin < names.index("Enable and start Grafana")
    imports = [t for t in _all(yaml.safe_load((ROLE / "tasks" / "main.yml").read_text(encoding="utf-8")))
               if t.get("ansible.builtin.import_tasks") == "tls.yml"]
    assert imports and imports[0]["when"] == "observe_tls | bool"
    # Grafana's certificate restarts Grafana (it reads it at its start); the others' need no restart.
    assert MAIN[issued[0]]["_import"]["vars"]["observe_tls_notify"] == []
    assert MAIN[issued[1]]["_import"]["vars"]["observe_tls_notify"] == ["Restart Grafana"]
    assert MAIN[issued[1]]["notify"] == "{{ observe_tls_notify }}"
    handlers = yaml.safe_load((ROLE / "handlers" / "main.yml").read_text(encoding="utf-8"))
    assert "Restart Grafana" in [h["name"] for h in handlers]


def test_keys_never_leave_their_node_only_requests_and_certificates_cross():
    every = [t for path in sorted((ROLE / "tasks").glob("*.yml")) for t in _all(yaml.safe_load(path.read_text(encoding="utf-8")))]
    # No task reads, fetches, copies or templates a TLS key: they are made in place, by the node that uses them.
    key_names = ("tls_key", "tls_ca_key", "].key", ".key")
    for task in every:
        for module in ("ansible.builtin.slurp", "ansible.builtin.fetch", "ansible.builtin.copy", "ansible.builtin.template"):
            if module in task:
                assert not [k for k in key_names if k in json.dumps(task[module])], task["name"]
    # The daemons' keys: made on their own node (no delegation), 0640 root and the daemon's group.
    key = _task(ISSUE, "community.crypto.openssl_privatekey")
    assert "delegate_to" not in key and "run_once" not in key
    args = key["community.crypto.openssl_privatekey"]
    assert (args["owner"], args["group"], args["mode"]) == ("root", "{{ observe_tls_servers[item].group }}", "0640")
    request = _task(ISSUE, "community.crypto.openssl_csr_pipe")
    assert "delegate_to" not in request
    # The CA's key: made on the Prometheus host only, 0600 root; the signing runs there.
    ca_key = _task(TLS, "community.crypto.openssl_privatekey")
    assert ca_key["delegate_to"] == "{{ spark_observe_host }}" and ca_key["run_once"] is True
    ca_args = ca_key["community.crypto.openssl_privatekey"]
    assert (ca_args["path"], ca_args["owner"], ca_args["group"], ca_args["mode"]) == ("{{ observe_tls_ca_key }}", "root", "root", "0600")
    sign = _task(ISSUE, "community.crypto.x509_certificate_pipe")
    assert sign["delegate_to"] == "{{ spark_observe_host }}"
    assert sign["community.crypto.x509_certificate_pipe"]["csr_content"] == "{{ item.csr }}"
    assert sign["community.crypto.x509_certificate_pipe"]["ownca_privatekey_path"] == "{{ observe_tls_ca_key }}"
    # Debian runs node exporter and Prometheus as prometheus, grafana-server as grafana.
    assert "'group': 'prometheus'" in VARS["observe_tls_servers"] and "'group': 'grafana'" in VARS["observe_tls_servers"]


def test_every_tls_step_is_skipped_on_a_converged_run_and_where_check_mode_lacks_its_key_or_ca():
    """Check, then act: every task of tls.yml runs only for what the first read found due; every task of
    tls_issue.yml loops over the daemons due (none on a converged run). The first read is the role's
    one node_state call, which reads the certificates' text and the keys' owner and mode too."""
    for task in TLS:
        when = str(task.get("when", ""))
        assert any(due in when for due in ("observe_tls_ca_due", "observe_tls_ca_copy_due", "observe_node is not defined",
                                           "observe_tls_ca_request is not skipped")), task["name"]
    for task in ISSUE:
        loop = str(task["loop"])
        assert "observe_tls_issue" in loop or "observe_tls_requests" in loop or "observe_tls_signed" in loop, task["name"]
    read = MAIN[0]["sparkctl.spark.node_state"]
    assert "observe_tls_read_texts" in read["texts"] and read["paths"] == "{{ observe_tls_read_paths }}"
    # The pipes write nothing: only the key, the CA and the copies report a change.
    for task in (_task(TLS, "community.crypto.openssl_csr_pipe"), _task(ISSUE, "community.crypto.openssl_csr_pipe"),
                 _task(ISSUE, "community.crypto.x509_certificate_pipe")):
        assert task["changed_when"] is False, task["name"]
    # --check makes no directory, key or CA: the steps that need them are skipped there (a key only
    # where its directory would be made; a request only with a key the first read found).
    assert "ansible_check_mode and observe_tls_ca_dirs is changed" in _task(TLS, "community.crypto.openssl_privatekey")["when"]
    key_when = " ".join(_task(ISSUE, "community.crypto.openssl_privatekey")["when"].split())
    assert key_when.startswith("not (ansible_check_mode and") and "in observe_tls_dirs.results" in key_when
    assert "not ansible_check_mode or observe_tls_ca_node.paths[observe_tls_ca_key].exists" in \
        _task(TLS, "community.crypto.openssl_csr_pipe")["when"]
    assert "not ansible_check_mode or observe_node.paths[observe_tls_servers[item].key].exists" in \
        _task(ISSUE, "community.crypto.openssl_csr_pipe")["when"]
    assert "ansible_check_mode and observe_tls_ca_due" in _task(ISSUE, "community.crypto.x509_certificate_pipe")["when"]
    assert "ansible_check_mode and observe_tls_ca_copy_dir is changed" in _task(TLS, "ansible.builtin.copy")["when"]


def test_the_role_asks_grafana_over_https_trusting_the_ca():
    for task in _all(yaml.safe_load((ROLE / "tasks" / "grafana_admin.yml").read_text(encoding="utf-8"))):
        if "ansible.builtin.uri" in task:
            uri = task["ansible.builtin.uri"]
            assert uri["url"].startswith("{{ observe_web_scheme }}://"), task["name"]
            assert uri["ca_path"] == "{{ observe_tls_ca_cert if observe_tls | bool else omit }}", task["name"]
    assert evaluate("{{ observe_web_scheme }}", {**VARS, **DEFAULTS}) == "https"
    assert evaluate("{{ observe_web_scheme }}", {**VARS, **DEFAULTS, "observe_tls": False}) == "http"


def test_sparkctl_status_asks_prometheus_over_https_with_the_ca_copied_to_the_head():
    play = yaml.safe_load((REPO / "playbooks" / "status.yml").read_text(encoding="utf-8"))[0]
    uri = next(t for t in play["tasks"] if t.get("name") == "Ask Prometheus for the live numbers")["ansible.builtin.uri"]
    # Where the inventory leaves them unset, the settings are the observe role's defaults, which the
    # play reads from the role (no copy of them in the playbook).
    read = next(t for t in play["tasks"] if t.get("name") == "Read the observe stage's defaults")["ansible.builtin.include_vars"]
    assert read == {"file": "../roles/observe/defaults/main.yml", "name": "status_observe_defaults"}
    values = {"spark_observe_host": HEAD, "hostvars": {HEAD: {"ansible_host": ADDRESSES[HEAD]}},
              "spark_observe_ports": {"prometheus": 9090}, "item": {"query": "up"}, "status_observe_defaults": DEFAULTS}
    assert evaluate(uri["url"], values) == f"https://{ADDRESSES[HEAD]}:9090/api/v1/query?query=up"
    assert evaluate(uri["ca_path"], values) == DEFAULTS["observe_tls_ca_cert"]
    assert evaluate(uri["url"], {**values, "observe_tls": False}).startswith("http://")
    assert evaluate(uri["ca_path"], {**values, "observe_tls_ca_cert": "/elsewhere/ca.crt"}) == "/elsewhere/ca.crt"


def test_sparkctl_teardown_removes_every_tls_file():
    teardown = yaml.safe_load((REPO / "roles" / "teardown" / "vars" / "main.yml").read_text(encoding="utf-8"))["teardown_fixed_paths"]
    for path in [DEFAULTS["observe_tls_dir"], DEFAULTS["observe_tls_ca_cert"], DEFAULTS["observe_grafana_tls_dir"], *PATHS.values()]:
        assert any(path.startswith(root + "/") for root in teardown), path


# --- The role's own certificates --------------------------------------------------------------------------------


def _values(host: str, root: Path | None = None, **extra) -> dict:
    """Role variables for host. A node's TLS files are under root/host here (each node its own tree, the
    same paths in each, as on the nodes); without root, the paths as the node itself names them."""
    here = str(root / host) if root else ""
    return {"inventory_hostname": host, "ansible_host": ADDRESSES[host], "spark_observe_host": HEAD,
            "spark_observe_address": ADDRESSES[HEAD], "spark_observe_grafana": True, "observe_tls_dir": here + "/tls",
            "observe_grafana_tls_dir": here + "/grafana-tls", "observe_tls_ca_cert": here + "/tls/sparkctl-ca.crt", **extra}


def _template(data, variables):
    """data with its templates rendered by Ansible, the role's vars and defaults trusted as templates and the
    collection's filters loaded, as a run has them (tests/unit/collection_templating.py)."""
    return evaluate("{{ rendered_data }}", {**variables, "rendered_data": data})


def _module(name: str, args: dict) -> dict:
    """community.crypto's module run in this process as Ansible runs it; owner and group left out (the
    daemons' groups do not exist here)."""
    module = importlib.import_module(f"ansible_collections.community.crypto.plugins.modules.{name}")
    printed = io.StringIO()
    args = {key: value for key, value in args.items() if key not in ("owner", "group")}
    with patch_module_args(args), contextlib.redirect_stdout(printed), pytest.raises(SystemExit) as ended:
        module.main()
    result = json.loads(printed.getvalue())
    assert ended.value.code == 0, result
    return result


def _module_args(task):
    return next(value for key, value in task.items() if key.startswith("community.crypto."))


def _make_ca(root: Path) -> str:
    """The CA as tls.yml makes it on the Prometheus host; its certificate."""
    values = {**VARS, **DEFAULTS, **_values(HEAD, root), "observe_tls_ca_renew": False}
    Path(_template("{{ observe_tls_ca_key }}", values)).parent.mkdir(parents=True, exist_ok=True)
    _module("openssl_privatekey", _template(_module_args(_task(TLS, "community.crypto.openssl_privatekey")), values))
    request = _module("openssl_csr_pipe", _template(_module_args(_task(TLS, "community.crypto.openssl_csr_pipe")), values))
    values["observe_tls_ca_request"] = request
    written = _module("x509_certificate", _template(_module_args(_task(TLS, "community.crypto.x509_certificate")), values))
    return written["certificate"]


def _issue(host: str, root: Path, ca_root: Path, names: list[str], **extra):
    """tls_issue.yml for host's daemons named, signed with the CA under ca_root; the CA's copy beside them."""
    values = {**VARS, **DEFAULTS, **_values(host, root, **extra)}
    servers = _template("{{ observe_tls_servers }}", values)
    ca_values = {**VARS, **DEFAULTS, **_values(HEAD, ca_root)}
    for name in names:
        Path(servers[name]["key"]).parent.mkdir(parents=True, exist_ok=True)
        item = {**values, "item": name, "observe_tls_servers": servers}
        _module("openssl_privatekey", _template(_module_args(_task(ISSUE, "community.crypto.openssl_privatekey")), item))
        request = _module("openssl_csr_pipe", _template(_module_args(_task(ISSUE, "community.crypto.openssl_csr_pipe")), item))
        sign = _template(_module_args(_task(ISSUE, "community.crypto.x509_certificate_pipe")), {**ca_values, "item": request})
        signed = _module("x509_certificate_pipe", sign)
        Path(servers[name]["cert"]).write_text(signed["certificate"])
        os.chmod(servers[name]["cert"], 0o644)
    copy = Path(values["observe_tls_ca_cert"])
    if not copy.exists():
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ca_values["observe_tls_ca_cert"], copy)
        os.chmod(copy, 0o644)
    return servers


def _read(host: str, root: Path, **extra) -> dict:
    """The role's first read of TLS on host (the node's tree under root), by node_state's own code, with the
    paths as the node names them; the daemons' groups read as root's (the files here are root's)."""
    values = {**VARS, **DEFAULTS, **_values(host, root, **extra)}
    paths = [{**path, "group": "root"} for path in _template("{{ observe_tls_read_paths }}", values)]
    read = assess(paths, [], [], run=None, texts=_template("{{ observe_tls_read_texts }}", values))
    prefix = str(root / host)
    return json.loads(json.dumps(read).replace(json.dumps(prefix)[1:-1], ""))


JUDGE = textwrap.dedent("""
    import json, sys
    from ansible.plugins.loader import init_plugin_loader
    init_plugin_loader([sys.argv[1]])
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template
    out = []
    for case in json.load(sys.stdin):
        names = {key: trust_as_template(value) if isinstance(value, str) and key in case["templates"] else value
                 for key, value in case["vars"].items()}
        templar = Templar(loader=DataLoader(), variables=names)
        out.append({expr: templar.template(trust_as_template("{{ %s }}" % expr)) for expr in case["exprs"]})
    print(json.dumps(out))
""")
JUDGED = ("observe_tls_due", "observe_tls_ca_due", "observe_tls_ca_renew", "observe_tls_ca_copy_due")


def _judge(cases: dict[str, dict]) -> dict[str, dict]:
    """Per case (role variables), the role's TLS judgement as Ansible evaluates it, with community.crypto's
    filter: all cases in one fresh interpreter."""
    payload = []
    for values in cases.values():
        variables = {**VARS, **DEFAULTS, **values}
        templates = [key for key in {**VARS, **DEFAULTS} if key not in values]
        payload.append({"vars": variables, "templates": templates, "exprs": JUDGED})
    env = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_")}
    done = subprocess.run([sys.executable, "-c", JUDGE, str(REPO / "collections")], input=json.dumps(payload), cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(zip(cases, json.loads(done.stdout.strip().splitlines()[-1]), strict=True))


@pytest.fixture(scope="module")
def issued(tmp_path_factory):
    """A cluster's TLS as a first run leaves it: the CA on the head, the head's three daemons' and the
    worker's node exporter's keys and certificates, each node with the CA's copy."""
    root = tmp_path_factory.mktemp("tls")
    ca = _make_ca(root)
    servers = {HEAD: _issue(HEAD, root, root, ["node_exporter", "prometheus", "grafana"]),
               WORKER: _issue(WORKER, root, root, ["node_exporter"])}
    return {"root": root, "ca": ca, "servers": servers}


def _case(host, root, read_root=None, head_read=None, **extra):
    """Role variables of host after its first read (of read_root, root by default), the head's read as hostvars."""
    read_root = read_root or root
    return {**_values(host, **extra), "observe_node": _read(host, read_root, **extra),
            "hostvars": {HEAD: {"observe_node": head_read if head_read is not None else _read(HEAD, root)}}}


@pytest.fixture(scope="module")
def judged(issued, tmp_path_factory):
    root = issued["root"]
    empty = tmp_path_factory.mktemp("empty")
    # A second CA (the head replaced, or spark_observer moved): the worker's certificate is of the first.
    other = tmp_path_factory.mktemp("other-ca")
    _make_ca(other)
    # The worker's key left readable by all (its mode changed by hand).
    loose = tmp_path_factory.mktemp("loose")
    shutil.copytree(root / WORKER, loose / WORKER)
    os.chmod(loose / WORKER / "tls" / "node-exporter.key", 0o644)
    made = {"changed": True, "certificate": issued["ca"]}
    return _judge({
        "converged head": _case(HEAD, root),
        "converged worker": _case(WORKER, root),
        "fresh cluster": _case(HEAD, empty, head_read=_read(HEAD, empty)),
        "fresh worker": _case(WORKER, root, read_root=empty),
        "worker of another CA": _case(WORKER, root, head_read=_read(HEAD, other)),
        "worker at another address": {**_case(WORKER, root), "ansible_host": "10.0.0.9"},
        "worker's key loose": _case(WORKER, root, read_root=loose),
        "certificates ending within the margin": _case(HEAD, root, observe_tls_renew_days=900),
        "the CA ending within the margin": _case(HEAD, root, observe_tls_renew_days=4000),
        "the CA made this run": {**_case(WORKER, root), "observe_tls_ca_written": made},
        "TLS off": {**_case(HEAD, root), "observe_tls": False},
    })


def test_what_a_run_issues_a_rerun_accepts(judged):
    """The check the role makes before it acts accepts what its act leaves: the re-run calls no module."""
    for case in ("converged head", "converged worker"):
        assert judged[case] == {"observe_tls_due": [], "observe_tls_ca_due": False, "observe_tls_ca_renew": False,
                                "observe_tls_ca_copy_due": False}, case


def test_what_is_missing_or_wrong_is_issued_anew(judged):
    assert judged["fresh cluster"]["observe_tls_ca_due"] is True
    assert judged["fresh cluster"]["observe_tls_due"] == ["node_exporter", "prometheus", "grafana"]
    # A new node: its certificate and the CA's copy.
    assert judged["fresh worker"]["observe_tls_due"] == ["node_exporter"] and judged["fresh worker"]["observe_tls_ca_copy_due"] is True
    assert judged["fresh worker"]["observe_tls_ca_due"] is False
    for case in ("worker of another CA", "worker at another address", "worker's key loose", "the CA made this run"):
        assert judged[case]["observe_tls_due"] == ["node_exporter"], case
    assert judged["worker of another CA"]["observe_tls_ca_copy_due"] is True
    assert judged["worker at another address"]["observe_tls_ca_copy_due"] is False


def test_a_certificate_ending_within_the_margin_is_renewed_the_ca_with_its_own_key(judged):
    servers = judged["certificates ending within the margin"]
    assert servers["observe_tls_due"] == ["node_exporter", "prometheus", "grafana"] and servers["observe_tls_ca_due"] is False
    ca = judged["the CA ending within the margin"]
    assert ca["observe_tls_ca_due"] is True and ca["observe_tls_ca_renew"] is True
    # The CA task forces a renewal only then (the module keeps a certificate fitting its key otherwise).
    ca = _task(TLS, "community.crypto.x509_certificate")["community.crypto.x509_certificate"]
    assert ca["force"] == "{{ observe_tls_ca_renew | bool }}"


def test_tls_off_wants_nothing(judged):
    assert judged["TLS off"] == {"observe_tls_due": [], "observe_tls_ca_due": False, "observe_tls_ca_renew": False,
                                 "observe_tls_ca_copy_due": False}
    assert _template("{{ observe_tls_read_paths }}", {**VARS, **DEFAULTS, **_values(HEAD, Path("/x")), "observe_tls": False}) == []
    assert _template("{{ observe_tls_packages }}", {**VARS, **DEFAULTS, "observe_tls": False}) == []
    assert _template("{{ observe_tls_packages }}", {**VARS, **DEFAULTS}) == ["python3-cryptography"]


def test_the_first_read_never_takes_a_keys_content():
    values = {**VARS, **DEFAULTS, **_values(HEAD, Path("/x"))}
    texts = _template("{{ observe_tls_read_texts }}", values)
    assert texts and not [path for path in texts if path.endswith(".key")]
    keys = [path for path in _template("{{ observe_tls_read_paths }}", values) if path["path"].endswith(".key")]
    assert [(Path(k["path"]).name, k["group"], k["mode"]) for k in keys] == [
        ("node-exporter.key", "prometheus", "0640"), ("prometheus.key", "prometheus", "0640"),
        ("grafana.key", "grafana", "0640"), ("sparkctl-ca.key", "root", "0600")]
    assert not [k for k in keys if "checksum" in k or k.get("get_checksum")]


def _certificate(path):
    from cryptography import x509
    return x509.load_pem_x509_certificate(Path(path).read_bytes())


def _sans(certificate):
    from cryptography import x509
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return sorted([f"DNS:{n}" for n in names.get_values_for_type(x509.DNSName)]
                  + [f"IP:{n}" for n in names.get_values_for_type(x509.IPAddress)])


def test_each_daemon_is_named_by_the_addresses_clients_reach_it_at(issued):
    servers = issued["servers"]
    assert _sans(_certificate(servers[WORKER]["node_exporter"]["cert"])) == ["DNS:spark2", "IP:10.0.0.2"]
    assert _sans(_certificate(servers[HEAD]["node_exporter"]["cert"])) == ["DNS:spark1", "IP:10.0.0.1"]
    for name in ("prometheus", "grafana"):
        assert _sans(_certificate(servers[HEAD][name]["cert"])) == ["DNS:localhost", "DNS:spark1", "IP:10.0.0.1", "IP:127.0.0.1"], name


def _days(certificate) -> int:
    return round((certificate.not_valid_after_utc - certificate.not_valid_before_utc).total_seconds() / 86400)


def test_the_ca_signs_servers_only_and_outlives_their_certificates(issued):
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID

    ca = x509.load_pem_x509_certificate(issued["ca"].encode())
    constraints = ca.extensions.get_extension_for_class(x509.BasicConstraints)
    assert constraints.critical and constraints.value.ca and constraints.value.path_length == 0
    assert ca.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign
    assert isinstance(ca.public_key(), ec.EllipticCurvePublicKey)
    assert _days(ca) == DEFAULTS["observe_tls_ca_days"]
    ski = ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value.digest
    for host, servers in issued["servers"].items():
        for name, server in servers.items():
            cert = _certificate(server["cert"])
            assert cert.issuer == ca.subject, (host, name)
            assert cert.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value.key_identifier == ski
            assert list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [ExtendedKeyUsageOID.SERVER_AUTH]
            assert not [e for e in cert.extensions if isinstance(e.value, x509.BasicConstraints) and e.value.ca], (host, name)
            assert _days(cert) == DEFAULTS["observe_tls_cert_days"], (host, name)
            assert oct(os.stat(server["key"]).st_mode & 0o777) == "0o640", (host, name)
    ca_key = evaluate("{{ observe_tls_ca_key }}", {**VARS, **DEFAULTS, **_values(HEAD, issued["root"])})
    assert oct(os.stat(ca_key).st_mode & 0o777) == "0o600"


class _TLSServer:
    """A TLS server on loopback with a daemon's key and certificate, answering every handshake."""

    def __init__(self, server):
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(server["cert"], server["key"])
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with contextlib.suppress(OSError), self.context.wrap_socket(conn, server_side=True) as tls:
                tls.sendall(b"ok")

    def handshake(self, context, name):
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as raw, context.wrap_socket(raw, server_hostname=name) as tls:
            return tls.recv(2)


def test_a_strict_tls_client_trusts_the_daemons_through_the_ca_only(issued):
    """Python's default client context (3.13: X.509 strict) with the CA's certificate verifies the daemon's
    certificate for its names; without the CA, or for a name not the daemon's, the handshake fails."""
    server = _TLSServer(issued["servers"][HEAD]["prometheus"])
    try:
        trusting = ssl.create_default_context(cadata=issued["ca"])
        for name in ("127.0.0.1", "localhost", "10.0.0.1", HEAD):
            assert server.handshake(trusting, name) == b"ok", name
        with pytest.raises(ssl.SSLCertVerificationError):
            server.handshake(trusting, WORKER)
        with pytest.raises(ssl.SSLCertVerificationError):
            server.handshake(ssl.create_default_context(), "127.0.0.1")
    finally:
        server.sock.close()


@needs_promtool
def test_promtool_accepts_the_web_configurations_with_the_issued_files(issued, tmp_path):
    import bcrypt

    hashed = bcrypt.hashpw(b"password", bcrypt.gensalt(4)).decode()
    for host, servers in issued["servers"].items():
        for name in ("node_exporter", "prometheus"):
            if name not in servers:
                continue
            path = tmp_path / f"{host}-{name}-web.yml"
            path.write_text(_render("web.yml.j2", observe_web_config_users={"sparkctl": hashed},
                                    observe_web_config_tls={"cert": servers[name]["cert"], "key": servers[name]["key"]}))
            done = subprocess.run([PROMTOOL, "check", "web-config", str(path)], capture_output=True, text=True, check=False)
            assert done.returncode == 0, (host, name, done.stdout + done.stderr)


def _get(url, context=None, password=None):
    request = urllib.request.Request(url)
    if password is not None:
        request.add_header("Authorization", "Basic " + base64.b64encode(f"sparkctl:{password}".encode()).decode())
    with urllib.request.urlopen(request, timeout=5, context=context) as answer:
        return answer.status, answer.read().decode()


@needs_prometheus
def test_prometheus_serves_https_only_and_scrapes_itself_through_the_ca(issued, tmp_path):
    """The distribution's prometheus with the rendered web configuration and scrape configuration and the
    issued files: it answers HTTPS with the password, refuses plain HTTP and a client that does not trust the
    CA, and its own scrape of itself (https, the CA, the password) is up."""
    import bcrypt

    port, password = free_port(), "the-password"
    prometheus = issued["servers"][HEAD]["prometheus"]
    ca = _values(HEAD, issued["root"])["observe_tls_ca_cert"]
    (tmp_path / "password").write_text(password + "\n")
    (tmp_path / "web.yml").write_text(_render(
        "web.yml.j2", observe_web_config_users={"sparkctl": bcrypt.hashpw(password.encode(), bcrypt.gensalt(4)).decode()},
        observe_web_config_tls={"cert": prometheus["cert"], "key": prometheus["key"]}))
    (tmp_path / "prometheus.yml").write_text(_render(
        "prometheus.yml.j2", observe_tls=True, observe_scrape_interval="1s", observe_evaluation_interval="1s",
        observe_prometheus_listen_address="127.0.0.1", observe_prometheus_port=port, observe_password_file=str(tmp_path / "password"),
        observe_node_exporter_password_file=str(tmp_path / "password"), observe_tls_ca_cert=ca,
        observe_prometheus_rules_file=str(tmp_path / "none.rules.yml"), observe_scrape_engine=False, observe_scrape_ray=False,
        # The node job's one target: a closed port on loopback.
        groups={"spark_head": [HEAD], "spark_workers": []}, hostvars={HEAD: {"ansible_host": "127.0.0.1"}},
        observe_node_exporter_port=free_port()))
    log = open(tmp_path / "prometheus.log", "w")
    proc = subprocess.Popen([str(PROMETHEUS), f"--config.file={tmp_path / 'prometheus.yml'}", f"--web.listen-address=127.0.0.1:{port}",
                             f"--web.config.file={tmp_path / 'web.yml'}", f"--storage.tsdb.path={tmp_path / 'data'}"],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        assert wait_listening(port, proc), (tmp_path / "prometheus.log").read_text()[-3000:]
        trusting = ssl.create_default_context(cadata=issued["ca"])
        base = f"https://127.0.0.1:{port}"
        with pytest.raises(urllib.error.HTTPError) as unauthorized:
            _get(base + "/api/v1/targets", trusting)
        assert unauthorized.value.code == 401
        # Go's HTTPS server answers plain HTTP with 400, never with the page.
        with pytest.raises(urllib.error.HTTPError) as plain:
            _get(f"http://127.0.0.1:{port}/api/v1/targets", password=password)
        assert plain.value.code == 400
        with pytest.raises(urllib.error.URLError) as untrusted:
            _get(base + "/api/v1/targets", ssl.create_default_context(), password)
        assert isinstance(untrusted.value.reason, ssl.SSLCertVerificationError)
        deadline = time.monotonic() + 20
        while True:
            _, body = _get(base + "/api/v1/query?" + urllib.parse.urlencode({"query": 'up{job="prometheus"}'}), trusting, password)
            result = json.loads(body)["data"]["result"]
            if result and result[0]["value"][1] == "1":
                break
            assert time.monotonic() < deadline, (body, (tmp_path / "prometheus.log").read_text()[-3000:])
            time.sleep(0.5)
        _, body = _get(base + "/api/v1/targets", trusting, password)
        urls = {t["labels"]["job"]: t["scrapeUrl"] for t in json.loads(body)["data"]["activeTargets"]}
        assert urls["prometheus"] == f"https://127.0.0.1:{port}/metrics" and urls["node"].startswith("https://127.0.0.1:")
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()

"""The observe stage's credentials (roles/observe): each component has its own, so one file read
or one password seen on the wire opens one door only.

- Prometheus's web pages and API: observe_user, observe_password_file (Prometheus sends it to scrape
  itself; people and `sparkctl status` read it with sudo);
- the node exporters: observe_node_exporter_user, observe_node_exporter_password_file on the
  Prometheus host (Prometheus sends it to scrape them);
- Grafana's admin: observe_grafana_admin_user, observe_grafana_password_file;
- Grafana's data source towards Prometheus: observe_grafana_datasource_user,
  observe_grafana_datasource_password_file (a second user of Prometheus's web configuration).

Each file is 0640, root and the group of the daemon that reads it, written with no_log and no diff."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import jinja2
import pytest
import yaml
from role_templating import evaluate

ROLE = Path(__file__).resolve().parents[2] / "roles" / "observe"
DEFAULTS = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text(encoding="utf-8"))
VARS = yaml.safe_load((ROLE / "vars" / "main.yml").read_text(encoding="utf-8"))

# component: (its user variable, its password variable, the file keeping it, the group of the daemon reading the file)
CREDENTIALS = {
    "prometheus": ("observe_user", "observe_password", "observe_password_file", "prometheus"),
    "node_exporter": ("observe_node_exporter_user", "observe_node_exporter_password", "observe_node_exporter_password_file",
                      "prometheus"),
    "grafana_admin": ("observe_grafana_admin_user", "observe_grafana_admin_password", "observe_grafana_password_file", "grafana"),
    "grafana_datasource": ("observe_grafana_datasource_user", "observe_grafana_datasource_password",
                           "observe_grafana_datasource_password_file", "grafana"),
}


def _flat(path: Path) -> list[dict]:
    """A task file's tasks in the order they run, blocks opened and imported task files inlined."""
    return _flat_list(yaml.safe_load(path.read_text(encoding="utf-8")) or [], path.parent)


def _flat_list(tasks, directory):
    out = []
    for task in tasks:
        if "block" in task:
            out += _flat_list(task["block"], directory)
        elif "ansible.builtin.import_tasks" in task:
            out += _flat(directory / task["ansible.builtin.import_tasks"])
        else:
            out.append(task)
    return out


TASKS = _flat(ROLE / "tasks" / "main.yml")


def _evaluate(expr: str, **values):
    return evaluate(expr, {**VARS, **DEFAULTS, **values})


def test_each_component_has_its_own_credential_file():
    files = {name: DEFAULTS[spec[2]] for name, spec in CREDENTIALS.items()}
    assert len(set(files.values())) == len(files), files
    for name, (user, password, file, group) in CREDENTIALS.items():
        assert DEFAULTS[password] == "", name
        assert DEFAULTS[file].startswith(f"/etc/{group}/"), name
        assert DEFAULTS[user], name
    # The Prometheus UI's user and the data source's share one web configuration: two names.
    assert DEFAULTS["observe_grafana_datasource_user"] != DEFAULTS["observe_user"]


def test_each_credential_file_holds_its_own_secret_0640_root_and_its_daemons_group():
    for name, (_, _, file, group) in CREDENTIALS.items():
        writers = [t for t in TASKS if any(t.get(m, {}).get("dest") == "{{ %s }}" % file
                                           for m in ("ansible.builtin.copy", "ansible.builtin.template"))]
        assert len(writers) == 1, (name, writers)
        task = writers[0]
        args = task["ansible.builtin.copy"]
        assert args["content"] == "{{ observe_secrets.%s }}\n" % name, name
        assert (args["owner"], args["group"], args["mode"]) == ("root", group, "0640"), name
        assert task["no_log"] is True and task["diff"] is False, name


def test_the_credentials_the_role_keeps_and_reads_back():
    """Evaluated as Ansible does: Grafana's two only with Grafana on."""
    both = _evaluate("{{ observe_credentials }}", observe_grafana=True)
    assert {name: value["file"] for name, value in both.items()} == {name: DEFAULTS[spec[2]] for name, spec in CREDENTIALS.items()}
    assert all(value["password"] == "" for value in both.values())
    alone = _evaluate("{{ observe_credentials }}", observe_grafana=False)
    assert sorted(alone) == ["node_exporter", "prometheus"]
    chosen = _evaluate("{{ observe_credentials }}", observe_grafana=False, observe_node_exporter_password="vaulted-one")
    assert chosen["node_exporter"]["password"] == "vaulted-one" and chosen["prometheus"]["password"] == ""


def test_each_web_configuration_lets_in_its_own_users():
    """Node exporter asks for the node exporter's credential only; Prometheus for the UI's and, with
    Grafana, the data source's."""
    users = _evaluate("{{ observe_web_users }}", observe_is_prometheus_host=True, observe_grafana=True)
    node_exporter = [{"user": DEFAULTS["observe_node_exporter_user"], "credential": "node_exporter"}]
    prometheus = [{"user": "sparkctl", "credential": "prometheus"},
                  {"user": DEFAULTS["observe_grafana_datasource_user"], "credential": "grafana_datasource"}]
    assert users == {DEFAULTS["observe_node_exporter_web_config"]: node_exporter, DEFAULTS["observe_prometheus_web_config"]: prometheus}
    worker = _evaluate("{{ observe_web_users }}", observe_is_prometheus_host=False, observe_grafana=True)
    assert list(worker) == [DEFAULTS["observe_node_exporter_web_config"]]
    no_grafana = _evaluate("{{ observe_web_users }}", observe_is_prometheus_host=True, observe_grafana=False)
    assert no_grafana[DEFAULTS["observe_prometheus_web_config"]] == [{"user": "sparkctl", "credential": "prometheus"}]


def _render_prometheus_config():
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["bool"] = bool
    values = {key: value for key, value in DEFAULTS.items() if "{{" not in str(value)}
    values.update(ansible_managed="Managed by sparkctl", groups={"spark_head": ["spark1"], "spark_workers": ["spark2"]},
                  hostvars={"spark1": {"ansible_host": "10.0.0.1"}, "spark2": {"ansible_host": "10.0.0.2"}},
                  observe_head="spark1", spark_profile={"api": {"port": 8000}}, observe_prometheus_listen_address="10.0.0.1",
                  observe_prometheus_port=9090, observe_node_exporter_port=9100, observe_scrape_engine=True, observe_scrape_ray=False)
    return yaml.safe_load(env.from_string((ROLE / "templates" / "prometheus.yml.j2").read_text(encoding="utf-8")).render(**values))


def test_prometheus_scrapes_itself_and_the_node_exporters_each_with_its_credential():
    jobs = {job["job_name"]: job for job in _render_prometheus_config()["scrape_configs"]}
    assert jobs["prometheus"]["basic_auth"] == {"username": "sparkctl", "password_file": DEFAULTS["observe_password_file"]}
    assert jobs["node"]["basic_auth"] == {"username": DEFAULTS["observe_node_exporter_user"],
                                          "password_file": DEFAULTS["observe_node_exporter_password_file"]}


def _read(name, content=None):
    if content is None:
        return {"item": name, "failed": True, "msg": "file not found"}
    return {"item": name, "content": base64.b64encode(content.encode()).decode()}


def test_secrets_are_chosen_kept_or_generated_each_on_its_own():
    from ansible_collections.sparkctl.spark.plugins.filter.observe import observe_secrets

    credentials = {"prometheus": {"password": "", "file": "/etc/prometheus/sparkctl.password"},
                   "node_exporter": {"password": "", "file": "/etc/prometheus/sparkctl-node-exporter.password"},
                   "grafana_admin": {"password": "a-vaulted-password", "file": "/etc/grafana/sparkctl-admin.password"},
                   "grafana_datasource": {"password": "", "file": "/etc/grafana/sparkctl-datasource.password"}}
    secrets = observe_secrets(credentials, [_read("prometheus", "kept-from-its-file\n"), _read("node_exporter"),
                                            _read("grafana_datasource", "  \n")])
    assert secrets["prometheus"] == "kept-from-its-file" and secrets["grafana_admin"] == "a-vaulted-password"
    for name in ("node_exporter", "grafana_datasource"):
        assert re.fullmatch(r"[A-Za-z0-9]{32}", secrets[name]), name
    assert len(set(secrets.values())) == 4


def test_one_password_for_two_components_is_refused_naming_both():
    from ansible.errors import AnsibleFilterError
    from ansible_collections.sparkctl.spark.plugins.filter.observe import observe_secrets

    credentials = {"prometheus": {"password": "", "file": "/a"}, "grafana_admin": {"password": "the-same-one", "file": "/b"}}
    with pytest.raises(AnsibleFilterError, match="prometheus.*grafana_admin|grafana_admin.*prometheus"):
        observe_secrets(credentials, [_read("prometheus", "the-same-one")])


def test_web_configurations_hash_each_user_with_its_own_secret():
    import bcrypt
    from ansible_collections.sparkctl.spark.plugins.filter.observe import observe_web_configs

    users = {"/etc/prometheus/web.yml": [{"user": "sparkctl", "credential": "prometheus"},
                                         {"user": "grafana", "credential": "grafana_datasource"}],
             "/etc/prometheus/node-exporter-web.yml": [{"user": "prometheus", "credential": "node_exporter"}]}
    secrets = {"prometheus": "ui-password", "grafana_datasource": "ds-password", "node_exporter": "scrape-password"}
    hashes = observe_web_configs([{"path": "/etc/prometheus/web.yml", "content": ""}], users, secrets, rounds=4)
    assert bcrypt.checkpw(b"ui-password", hashes["/etc/prometheus/web.yml"]["sparkctl"].encode())
    assert bcrypt.checkpw(b"ds-password", hashes["/etc/prometheus/web.yml"]["grafana"].encode())
    assert list(hashes["/etc/prometheus/node-exporter-web.yml"]) == ["prometheus"]
    assert bcrypt.checkpw(b"scrape-password", hashes["/etc/prometheus/node-exporter-web.yml"]["prometheus"].encode())
    # A hash already on the node is kept while it verifies (no rewrite, no restart on a re-run).
    on_node = "basic_auth_users:\n  prometheus: %s\n" % hashes["/etc/prometheus/node-exporter-web.yml"]["prometheus"]
    kept = observe_web_configs([{"path": "/etc/prometheus/node-exporter-web.yml", "content": on_node}], users, secrets, rounds=4)
    assert kept["/etc/prometheus/node-exporter-web.yml"] == hashes["/etc/prometheus/node-exporter-web.yml"]
    from ansible.errors import AnsibleFilterError
    with pytest.raises(AnsibleFilterError, match="sparkctl"):
        observe_web_configs([], {"/etc/prometheus/web.yml": [{"user": "sparkctl", "credential": "prometheus"},
                                                             {"user": "sparkctl", "credential": "grafana_datasource"}]}, secrets)

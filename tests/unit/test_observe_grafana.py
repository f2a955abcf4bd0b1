"""Grafana on the Prometheus host (roles/observe/tasks/grafana.yml): never run in the lab, whose
machines cannot reach Grafana's apt repository (the lab inventory turns spark_observe_grafana
off), so its tasks and templates are checked here: the repository signed by its own key file,
the data source pointing at sparkctl's Prometheus with its own user and password (read from a 0640
file of the grafana group that no output shows), the admin's password given in a form the packaged
grafana-server reads, an existing database brought to it through grafana-cli, the dashboard
provisioned from where the role writes it.

Grafana's own behaviour these tests rely on (grafana/grafana): the server reads GF_<SECTION>_<KEY>
from its environment and then expands $__file{path} in every setting, the file's content trimmed
(pkg/setting/setting.go: applyEnvVariableOverrides, then expandConfig; pkg/setting/expanders.go);
the same expansion runs over provisioning files (pkg/services/provisioning/values). The __FILE
suffix is read by the container image's entrypoint only (packaging/docker/run.sh), never by the
deb's grafana-server. admin_password is used once, when the server creates its database; `grafana-cli
admin reset-admin-password --password-from-stdin` sets the first user's password in an existing one
(pkg/cmd/grafana-cli/commands/reset_password_command.go; packaging/wrappers/grafana-cli gives it the
deb's configuration and data paths)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import jinja2
import yaml

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "observe"
DEFAULTS = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text(encoding="utf-8"))
TASKS = yaml.safe_load((ROLE / "tasks" / "grafana.yml").read_text(encoding="utf-8"))
# Grafana's own pattern for an expanded value (pkg/setting/expanders.go).
GRAFANA_EXPANSION = re.compile(r"\$(|__\w+){([^}]+)}")

sys.path.insert(0, str(REPO / "tools"))
import observe_dashboard  # noqa: E402


def _all(tasks):
    for task in tasks:
        if "block" in task:
            yield from _all(task["block"])
        else:
            yield task


ALL = list(_all(TASKS))


def _flat(path):
    """A task file's tasks in the order they run, blocks opened and imported task files inlined."""
    out = []
    for task in _all(yaml.safe_load(path.read_text(encoding="utf-8")) or []):
        imported = task.get("ansible.builtin.import_tasks")
        out += _flat(path.parent / imported) if imported else [task]
    return out


def _task(module, **match):
    found = [t for t in ALL if module in t and all(t[module].get(k) == v for k, v in match.items())]
    assert len(found) == 1, (module, match, found)
    return found[0]


def _render(name, **values):
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["to_json"] = json.dumps
    env.filters["bool"] = bool
    base = {key: value for key, value in DEFAULTS.items() if "{{" not in str(value)}
    base.update(ansible_managed="Managed by sparkctl", observe_prometheus_listen_address="10.0.0.5",
                observe_prometheus_port=9090, observe_grafana_listen_address="10.0.0.5", observe_grafana_port=3000,
                observe_grafana_admin_user="sparkctl",
                # Grafana's key and certificate (roles/observe/vars; tests/unit/test_observe_tls.py checks TLS).
                observe_grafana_tls_key=DEFAULTS["observe_grafana_tls_dir"] + "/grafana.key",
                observe_grafana_tls_cert=DEFAULTS["observe_grafana_tls_dir"] + "/grafana.crt")
    base.update(values)
    return env.from_string((ROLE / "templates" / name).read_text(encoding="utf-8")).render(**base)


def test_the_repository_is_signed_by_its_own_key_file():
    key = _task("ansible.builtin.get_url", dest="{{ observe_grafana_keyring }}")
    repo = _task("ansible.builtin.deb822_repository")["ansible.builtin.deb822_repository"]
    assert repo["signed_by"] == "{{ observe_grafana_keyring }}" and DEFAULTS["observe_grafana_keyring"].startswith("/etc/apt/keyrings/")
    assert DEFAULTS["observe_grafana_key_url"].startswith("https://") and DEFAULTS["observe_grafana_repo_url"].startswith("https://")
    assert repo["uris"] == ["{{ observe_grafana_repo_url }}"] and repo["components"] == ["main"]
    order = [ALL.index(key), ALL.index(_task("ansible.builtin.deb822_repository")), ALL.index(_task("ansible.builtin.apt"))]
    assert order == sorted(order)


def test_the_data_source_is_sparkctls_prometheus_with_its_own_user_and_password_file():
    """The data source has its own Prometheus user; its password stays in its 0640 file, which Grafana
    expands ($__file) when it provisions the data source: the provisioning file holds no secret."""
    text = _render("grafana-datasource.yml.j2", observe_grafana_datasource_user="grafana")
    source = yaml.safe_load(text)["datasources"][0]
    assert source["uid"] == DEFAULTS["observe_grafana_datasource_uid"] == observe_dashboard.DATASOURCE.uid
    # HTTPS by default (observe_tls); tests/unit/test_observe_tls.py checks the CA it trusts.
    assert source["type"] == "prometheus" and source["url"] == "https://10.0.0.5:9090"
    assert source["basicAuth"] is True and source["basicAuthUser"] == "grafana"
    password = source["secureJsonData"]["basicAuthPassword"]
    assert password == "$__file{%s}" % DEFAULTS["observe_grafana_datasource_password_file"]
    assert GRAFANA_EXPANSION.fullmatch(password).group(1) == "__file"
    assert "observe_secret" not in (ROLE / "templates" / "grafana-datasource.yml.j2").read_text(encoding="utf-8")


def _holds_secret(task) -> bool:
    """Whether the task writes a file with a secret in it."""
    args = next((v for k, v in task.items() if k in ("ansible.builtin.copy", "ansible.builtin.template")), {})
    template = ROLE / "templates" / str(args.get("src", ""))
    return "observe_secret" in json.dumps(args) or (template.is_file() and "observe_secret" in template.read_text(encoding="utf-8"))


def test_files_holding_a_password_are_0640_grafana_and_never_shown():
    holders = [t for t in ALL if _holds_secret(t)]
    assert [t["name"] for t in holders] == ["Keep the password of Grafana's admin (0640, grafana group)",
                                            "Keep the password of Grafana's data source towards Prometheus (0640, grafana group)"]
    for task in holders:
        args = next(v for k, v in task.items() if k.startswith("ansible.builtin."))
        assert task.get("no_log") is True and task.get("diff") is False, task["name"]
        assert (args["owner"], args["group"], args["mode"]) == ("root", "grafana", "0640"), task["name"]


def _environment(dropin):
    return dict(line.removeprefix("Environment=").split("=", 1) for line in dropin.splitlines() if line.startswith("Environment="))


def test_grafana_listens_where_prometheus_does_with_its_admin_and_no_anonymous_access():
    env = _environment(_render("grafana-server.conf.j2"))
    assert env["GF_SERVER_HTTP_ADDR"] == "10.0.0.5" and env["GF_SERVER_HTTP_PORT"] == "3000"
    assert env["GF_SECURITY_ADMIN_USER"] == "sparkctl"
    assert env["GF_AUTH_ANONYMOUS_ENABLED"] == "false" and env["GF_USERS_ALLOW_SIGN_UP"] == "false"


def test_the_admin_password_is_given_in_a_form_the_packaged_server_reads():
    """GF_SECURITY_ADMIN_PASSWORD__FILE is read by the container image's entrypoint only: the deb's
    grafana-server ignores it and creates its admin with the password `admin`. The setting itself,
    as $__file{path}, is expanded by the server (after its environment overrides)."""
    dropin = _render("grafana-server.conf.j2")
    env = _environment(dropin)
    assert not [key for key in env if key.endswith("__FILE")], env
    assert env["GF_SECURITY_ADMIN_PASSWORD"] == "$__file{%s}" % DEFAULTS["observe_grafana_password_file"]
    match = GRAFANA_EXPANSION.fullmatch(env["GF_SECURITY_ADMIN_PASSWORD"])
    assert match and match.groups() == ("__file", DEFAULTS["observe_grafana_password_file"])
    # systemd expands specifiers (%) in Environment=, never $: the value reaches Grafana as written.
    assert "%" not in env["GF_SECURITY_ADMIN_PASSWORD"]
    assert not [(p.name, line) for p in (ROLE / "templates").iterdir() for line in p.read_text(encoding="utf-8").splitlines()
                if "__FILE" in line and not line.lstrip().startswith("#")]


def test_an_existing_database_gets_the_generated_admin_password_through_grafana_cli():
    """admin_password counts only when Grafana creates its database. After Grafana is up with this run's
    configuration (handlers flushed), the role logs in as the admin with the generated password; when it
    is refused, grafana-cli (as the grafana user, the password on its stdin) resets it, and the login
    must then succeed."""
    tasks = _flat(ROLE / "tasks" / "main.yml")
    names = [t.get("name", "") for t in tasks]
    start = names.index("Enable and start Grafana")
    flush = next(i for i, t in enumerate(tasks) if t.get("ansible.builtin.meta") == "flush_handlers")
    logins = [i for i, t in enumerate(tasks) if "ansible.builtin.uri" in t and "/api/user" in t["ansible.builtin.uri"]["url"]]
    resets = [i for i, t in enumerate(tasks)
              if t.get("ansible.builtin.command", {}).get("argv", [])[:3] == ["grafana-cli", "admin", "reset-admin-password"]]
    assert len(logins) == 2 and len(resets) == 1, (logins, resets)
    assert start < flush < logins[0] < resets[0] < logins[1]
    first, reset, second = tasks[logins[0]], tasks[resets[0]], tasks[logins[1]]
    for login in (first, second):
        uri = login["ansible.builtin.uri"]
        assert uri["url_username"] == "{{ observe_grafana_admin_user }}" and uri["url_password"] == "{{ observe_secrets.grafana_admin }}"
        assert uri["force_basic_auth"] is True and login["no_log"] is True
    assert 401 in first["ansible.builtin.uri"]["status_code"] and first.get("failed_when") is None
    command = reset["ansible.builtin.command"]
    assert command["argv"] == ["grafana-cli", "admin", "reset-admin-password", "--password-from-stdin"]
    assert command["stdin"] == "{{ observe_secrets.grafana_admin }}" and reset["no_log"] is True
    assert reset["become"] is True and reset["become_user"] == "grafana"
    register = first["register"]
    assert f"{register}.status" in reset["when"] and "401" in reset["when"]
    assert second["ansible.builtin.uri"].get("status_code", 200) in (200, [200]) and second["when"] == reset["when"]


def test_the_dashboard_is_provisioned_from_where_the_role_writes_it():
    provider = yaml.safe_load(_render("grafana-dashboards.yml.j2"))["providers"][0]
    assert provider["options"]["path"] == DEFAULTS["observe_grafana_dashboards_dir"]
    copy = _task("ansible.builtin.copy", src="sparkctl-dashboard.json")["ansible.builtin.copy"]
    assert copy["dest"] == "{{ observe_grafana_dashboards_dir }}/sparkctl-dashboard.json"
    assert (ROLE / "files" / "sparkctl-dashboard.json").is_file()


def test_grafana_is_released_only_after_its_configuration_and_before_its_start():
    names = [t["name"] for t in ALL]
    release = names.index("Release Grafana's hold (its configuration is in place)")
    start = names.index("Enable and start Grafana")
    for config in ("Provision the Prometheus data source", "Provision sparkctl's dashboards", "Bind Grafana",
                   "Keep the password of Grafana's admin", "Keep the password of Grafana's data source", "Write sparkctl's dashboard"):
        assert next(i for i, n in enumerate(names) if n.startswith(config)) < release < start, config


def test_the_lab_keeps_grafana_off_and_real_nodes_get_it():
    lab = yaml.safe_load((REPO / "inventories" / "lab" / "group_vars" / "all.yml").read_text(encoding="utf-8"))
    assert lab["spark_observe_grafana"] is False
    spark = yaml.safe_load((REPO / "roles" / "spark" / "defaults" / "main.yml").read_text(encoding="utf-8"))
    assert spark["spark_observe_grafana"] is True and DEFAULTS["observe_grafana"] == "{{ spark_observe_grafana }}"
    main = yaml.safe_load((ROLE / "tasks" / "main.yml").read_text(encoding="utf-8"))
    imported = [t for t in _all(main) if t.get("ansible.builtin.import_tasks") == "grafana.yml"]
    assert imported and imported[0]["when"] == "observe_grafana_here | bool"

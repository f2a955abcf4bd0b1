"""Grafana on the Prometheus host (roles/observe/tasks/grafana.yml): never run in the lab, whose
machines cannot reach Grafana's apt repository (the lab inventory turns spark_observe_grafana
off), so its tasks and templates are checked here: the repository signed by its own key file,
the data source pointing at sparkctl's Prometheus with the basic-auth password in a 0640 file of
the grafana group that no output shows, the dashboard provisioned from where the role writes it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jinja2
import yaml

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "observe"
DEFAULTS = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text(encoding="utf-8"))
TASKS = yaml.safe_load((ROLE / "tasks" / "grafana.yml").read_text(encoding="utf-8"))

sys.path.insert(0, str(REPO / "tools"))
import observe_dashboard  # noqa: E402


def _all(tasks):
    for task in tasks:
        if "block" in task:
            yield from _all(task["block"])
        else:
            yield task


ALL = list(_all(TASKS))


def _task(module, **match):
    found = [t for t in ALL if module in t and all(t[module].get(k) == v for k, v in match.items())]
    assert len(found) == 1, (module, match, found)
    return found[0]


def _render(name, **values):
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["to_json"] = json.dumps
    base = {key: value for key, value in DEFAULTS.items() if "{{" not in str(value)}
    base.update(ansible_managed="Managed by sparkctl", observe_secret='p@ss "word"', observe_prometheus_listen_address="10.0.0.5",
                observe_prometheus_port=9090, observe_grafana_listen_address="10.0.0.5", observe_grafana_port=3000)
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


def test_the_data_source_is_sparkctls_prometheus_with_its_password():
    source = yaml.safe_load(_render("grafana-datasource.yml.j2"))["datasources"][0]
    assert source["uid"] == DEFAULTS["observe_grafana_datasource_uid"] == observe_dashboard.DATASOURCE.uid
    assert source["type"] == "prometheus" and source["url"] == "http://10.0.0.5:9090"
    assert source["basicAuth"] is True and source["basicAuthUser"] == "sparkctl"
    assert source["secureJsonData"] == {"basicAuthPassword": 'p@ss "word"'}


def _holds_secret(task) -> bool:
    args = next((v for k, v in task.items() if k.startswith("ansible.builtin.") and isinstance(v, dict)), {})
    template = ROLE / "templates" / str(args.get("src", ""))
    return "observe_secret" in json.dumps(args) or (template.is_file() and "observe_secret" in template.read_text(encoding="utf-8"))


def test_files_holding_the_password_are_0640_grafana_and_never_shown():
    holders = [t for t in ALL if _holds_secret(t)]
    assert [t["name"] for t in holders] == ["Keep the password for Grafana's admin user (0640, grafana group)",
                                            "Provision the Prometheus data source (with its basic-auth password; 0640, grafana group)"]
    for task in holders:
        args = next(v for k, v in task.items() if k.startswith("ansible.builtin."))
        assert task.get("no_log") is True and task.get("diff") is False, task["name"]
        assert (args["owner"], args["group"], args["mode"]) == ("root", "grafana", "0640"), task["name"]


def test_grafana_listens_where_prometheus_does_with_its_admin_and_no_anonymous_access():
    dropin = _render("grafana-server.conf.j2")
    env = dict(line.removeprefix("Environment=").split("=", 1) for line in dropin.splitlines() if line.startswith("Environment="))
    assert env["GF_SERVER_HTTP_ADDR"] == "10.0.0.5" and env["GF_SERVER_HTTP_PORT"] == "3000"
    assert env["GF_SECURITY_ADMIN_PASSWORD__FILE"] == DEFAULTS["observe_grafana_password_file"]
    assert env["GF_AUTH_ANONYMOUS_ENABLED"] == "false" and env["GF_USERS_ALLOW_SIGN_UP"] == "false"
    assert "p@ss" not in dropin


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
                   "Keep the password for Grafana's admin user", "Write sparkctl's dashboard"):
        assert next(i for i, n in enumerate(names) if n.startswith(config)) < release < start, config


def test_the_lab_keeps_grafana_off_and_real_nodes_get_it():
    lab = yaml.safe_load((REPO / "inventories" / "lab" / "group_vars" / "all.yml").read_text(encoding="utf-8"))
    assert lab["spark_observe_grafana"] is False
    spark = yaml.safe_load((REPO / "roles" / "spark" / "defaults" / "main.yml").read_text(encoding="utf-8"))
    assert spark["spark_observe_grafana"] is True and DEFAULTS["observe_grafana"] == "{{ spark_observe_grafana }}"
    main = yaml.safe_load((ROLE / "tasks" / "main.yml").read_text(encoding="utf-8"))
    imported = [t for t in _all(main) if t.get("ansible.builtin.import_tasks") == "grafana.yml"]
    assert imported and imported[0]["when"] == "observe_grafana_here | bool"

"""The observe role's install order (roles/observe/tasks): Debian's prometheus and
prometheus-node-exporter start their daemon as they install, on every address and without a
password. The role holds each daemon with a drop-in before the install and releases it only
after the daemon's configuration is written, just before it starts the daemon itself."""

from __future__ import annotations

from pathlib import Path

import yaml
from role_templating import evaluate

ROLE = Path(__file__).resolve().parents[2] / "roles" / "observe"


def _flat(path: Path, inherited: dict | None = None) -> list[dict]:
    """The role's tasks in the order they run: blocks opened, imported task files inlined with
    their vars (the release's service)."""
    return _flat_list(yaml.safe_load(path.read_text(encoding="utf-8")) or [], path.parent, inherited or {})


def _flat_list(tasks: list[dict], directory: Path, inherited: dict) -> list[dict]:
    out = []
    for task in tasks:
        if "block" in task:
            out += _flat_list(task["block"], directory, inherited)
        elif "ansible.builtin.import_tasks" in task:
            out += _flat(directory / task["ansible.builtin.import_tasks"], {**inherited, **task.get("vars", {})})
        else:
            out.append({**task, "_vars": inherited})
    return out


TASKS = _flat(ROLE / "tasks" / "main.yml")
DEFAULTS = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text(encoding="utf-8"))
VARS = yaml.safe_load((ROLE / "vars" / "main.yml").read_text(encoding="utf-8"))


def _index(predicate, what):
    found = [i for i, task in enumerate(TASKS) if predicate(task)]
    assert found, f"no task {what}"
    return found


def _install():
    return _index(lambda t: "ansible.builtin.apt" in t, "installs the packages")[0]


def _start(service_var):
    return _index(lambda t: t.get("ansible.builtin.systemd_service", {}).get("name") == "{{ %s }}" % service_var
                  and t["ansible.builtin.systemd_service"].get("state") == "started", f"starts {service_var}")[0]


def _writes(dest_var):
    return _index(lambda t: any(t.get(m, {}).get("dest") in ("{{ %s }}" % dest_var, "{{ item }}")
                                and (m != "ansible.builtin.template" or dest_var in str(t.get("loop", "")) or
                                     t[m].get("dest") == "{{ %s }}" % dest_var)
                                for m in ("ansible.builtin.template", "ansible.builtin.copy")), f"writes {dest_var}")


def test_every_daemon_whose_package_the_run_installs_is_held_before_the_install():
    install = _install()
    holds = _index(lambda t: "ConditionPathExists=" in str(t.get("ansible.builtin.copy", {}).get("content", "")), "writes the hold")
    assert holds[0] < install
    hold = TASKS[holds[0]]
    assert hold["loop"] == "{{ observe_services_installing }}"
    # A condition that can never hold: systemd skips the package's start (no failure, no listener).
    condition = [line for line in hold["ansible.builtin.copy"]["content"].splitlines() if line.startswith("ConditionPathExists=")]
    assert condition == ["ConditionPathExists=/dev/null/sparkctl-holds-this-unit"]
    for service in ("observe_node_exporter_service", "observe_prometheus_service"):
        assert service in VARS["observe_services_installing"] and service in VARS["observe_services"]
    assert "observe_node_exporter_package in observe_node.packages_missing" in VARS["observe_services_installing"]
    assert "observe_prometheus_package in observe_node.packages_missing" in VARS["observe_services_installing"]


def test_each_hold_is_released_after_its_configuration_and_before_its_start():
    install = _install()
    for service, configs in (("observe_node_exporter_service", ["observe_node_exporter_web_config", "observe_node_exporter_defaults_file"]),
                             ("observe_prometheus_service", ["observe_prometheus_web_config", "observe_prometheus_config_file",
                                                             "observe_prometheus_rules_file", "observe_prometheus_defaults_file"])):
        start = _start(service)
        releases = _index(lambda t, s=service: t.get("ansible.builtin.file", {}).get("state") == "absent"
                          and t["_vars"].get("observe_release_service") == "{{ %s }}" % s, f"releases {service}")
        assert len(releases) == 1 and install < releases[0] < start, (service, install, releases, start)
        for config in configs:
            assert max(_writes(config)) < releases[0], (service, config)
        # The release reloads systemd before the start (a drop-in is read at daemon-reload only).
        reload = [i for i in range(releases[0], start) if TASKS[i].get("ansible.builtin.systemd_service", {}).get("daemon_reload")]
        assert reload, service


def test_a_hold_left_by_a_run_that_stopped_early_is_released_by_the_next():
    release = yaml.safe_load((ROLE / "tasks" / "release.yml").read_text(encoding="utf-8"))[0]
    assert "observe_node.texts | map(attribute='path')" in release["when"]
    read = TASKS[0]["sparkctl.spark.node_state"]
    assert "observe_hold_paths.values()" in read["texts"]


def _evaluate(expr: str, **values):
    """expr evaluated by Ansible's own templating with the role's vars and the given values."""
    return evaluate(expr, {**VARS, **DEFAULTS, **values})


def test_each_daemon_has_its_own_hold_in_its_units_drop_in_directory():
    """Evaluated as Ansible does: one drop-in per unit, in that unit's own .d directory."""
    paths = _evaluate("{{ observe_hold_paths }}", observe_is_prometheus_host=True, observe_grafana=True)
    assert paths == {service: f"/etc/systemd/system/{service}.d/sparkctl-hold.conf"
                     for service in ("prometheus-node-exporter.service", "prometheus.service", "grafana-server.service")}
    installing = _evaluate("{{ observe_services_installing }}", observe_is_prometheus_host=True, observe_grafana=False,
                           observe_node={"packages_missing": ["prometheus", "prometheus-node-exporter"]})
    assert installing == ["prometheus-node-exporter.service", "prometheus.service"]
    worker = _evaluate("{{ observe_services_installing }}", observe_is_prometheus_host=False, observe_grafana=True,
                       observe_node={"packages_missing": ["prometheus-node-exporter"]})
    assert worker == ["prometheus-node-exporter.service"]

"""ray_cluster's view of the head's engine (roles/ray_cluster/vars/main.yml), evaluated by Ansible's
own templating: engine processes found while the engine is stopped are leftovers the whole Ray
cluster is recovered for; while systemd is about to restart a killed engine they are its ranks
still ending, not leftovers."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from role_templating import evaluate

ROLE = Path(__file__).resolve().parents[2] / "roles" / "ray_cluster"
VARS = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
ENGINE = "sparkctl-engine.service"


def _engine_active(unit):
    head = {} if unit is None else {"ray_cluster_node": {"units": {ENGINE: unit}}}
    variables = {"hostvars": {"spark1": head}, "spark_cluster": {"head": {"name": "spark1", "link_ip": "192.168.100.10"}},
                 "ray_cluster_engine_unit": ENGINE,
                 **{name: VARS[name] for name in ("ray_cluster_engine_read", "ray_cluster_engine_active")}}
    value = evaluate("{{ ray_cluster_engine_active }}", variables)
    # recover.yml's condition reads it as it is: a boolean, not the text of one.
    assert isinstance(value, bool), repr(value)
    return value


@pytest.mark.parametrize("unit, active", [
    ({"active_state": "active", "sub_state": "running", "restart_pending": False}, True),
    ({"active_state": "activating", "sub_state": "auto-restart", "restart_pending": True}, True),
    ({"active_state": "failed", "sub_state": "failed", "restart_pending": False}, False),
    ({"active_state": "inactive", "sub_state": "dead", "restart_pending": False}, False),
    # A read from before restart_pending existed, and a run limited to the workers.
    ({"active_state": "active", "sub_state": "running"}, True),
    (None, False),
])
def test_the_engine_counts_as_active_while_systemd_restarts_it(unit, active):
    assert _engine_active(unit) is active


def test_a_ray_restart_stops_the_heads_engine_before_the_head_restarts():
    # The engine is PartOf the Ray head: restarted with it at once, before the workers restart, it
    # could boot on a half-restarted cluster and die with a worker's raylet (a second boot and a
    # second outage, measured on the lab's image runtime). It stops first; the serve stage starts it once.
    tasks = yaml.safe_load((ROLE / "tasks" / "start_write.yml").read_text())
    modules = [task.get("ansible.builtin.systemd_service") or {} for task in tasks]
    stop = next(i for i, m in enumerate(modules) if m.get("name") == "{{ ray_cluster_engine_unit }}")
    head = next(i for i, m in enumerate(modules) if m.get("name") == "{{ ray_cluster_head_unit }}")
    assert stop < head and modules[stop]["state"] == "stopped"
    assert {"ray_cluster_restart | bool", "ray_cluster_engine_active | bool"} <= set(tasks[stop]["when"])

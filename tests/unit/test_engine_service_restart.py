"""engine_service's restart decision (roles/engine_service/vars/main.yml), evaluated by Ansible's
own templating: what already restarted the engine on this run must not restart it again (a
second restart stops the boot the first began: 'interrupted during startup')."""
from __future__ import annotations

from pathlib import Path

import pytest
import collection_templating
import yaml
from role_templating import evaluate

ROLE = Path(__file__).resolve().parents[2] / "roles" / "engine_service"
VARS = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
CLUSTER = {"head": {"name": "spark1"}, "workers": [{"name": "spark2"}]}
CHANGED = {"changed": True}


def _restart(head=None, worker=None, check_mode=False):
    hostvars = {"spark1": dict(head or {}), "spark2": dict(worker or {})}
    variables = {"hostvars": hostvars, "ansible_play_hosts": ["spark1", "spark2"], "spark_cluster": CLUSTER,
                 "ansible_check_mode": check_mode}
    variables.update({name: VARS[name] for name in ("engine_service_restart", "engine_service_ray_restarted_engine")})
    # The decision calls the collection's filter (sparkctl.spark.engine_restart_due).
    return str(collection_templating.evaluate("{{ engine_service_restart }}", variables)).strip() == "True"


def test_nothing_happened_nothing_restarts():
    assert not _restart()


@pytest.mark.parametrize("jit", [{"relinked": True}, {"reset": True}])
def test_a_kernel_cache_change_restarts_the_engine(jit):
    assert _restart(worker={"jit_cache_node": jit})


@pytest.mark.parametrize("jit", [{"relinked": True}, {"reset": True}])
def test_ray_restarting_the_head_after_a_kernel_cache_change_is_the_engines_restart(jit):
    """The jit_cache stage runs before ray_cluster: a Ray head restarted on this run restarted the
    engine (PartOf it) after the cache changed, so the engine boots with the new cache already."""
    assert not _restart(head={"ray_cluster_head_start": CHANGED}, worker={"jit_cache_node": jit})


def test_check_mode_still_reports_the_restart():
    assert _restart(head={"ray_cluster_head_start": CHANGED}, worker={"jit_cache_node": {"relinked": True}},
                    check_mode=True)


def test_units_written_after_rays_restart_restart_the_engine_again():
    """The engine's unit files are written after Ray's restart: the running engine has the old ones."""
    assert _restart(head={"ray_cluster_head_start": CHANGED, "engine_service_units_written": CHANGED})


def _start_drift(units):
    variables = {"engine_service_node": {"units": units, "drifted": [], "daemon_reload": False},
                 "engine_service_units": {"sparkctl-engine.service": "[Unit]"},
                 "engine_service_restart": False}
    variables.update({name: VARS[name] for name in ("engine_service_restart_pending", "engine_service_start_drift")})
    return {name: str(evaluate("{{ %s }}" % name, variables)).strip() == "True"
            for name in ("engine_service_restart_pending", "engine_service_start_drift")}


RUNNING = {"active_state": "active", "sub_state": "running", "restart_pending": False}


def test_an_engine_systemd_is_about_to_restart_gets_its_start_limit_cleared():
    """A run that meets the engine killed, inside RestartSec, is the request to try again: the start
    limit earlier restarts spent must not refuse systemd's restart (start_write.yml clears it)."""
    assert _start_drift({"sparkctl-engine.service": RUNNING}) == {
        "engine_service_restart_pending": False, "engine_service_start_drift": False}
    waiting = {"active_state": "activating", "sub_state": "auto-restart", "restart_pending": True}
    assert _start_drift({"sparkctl-engine.service": waiting}) == {
        "engine_service_restart_pending": True, "engine_service_start_drift": True}
    # Ray's units are ray_cluster's: their restart is not this role's business.
    assert _start_drift({"sparkctl-engine.service": RUNNING, "sparkctl-ray-head.service": waiting}) == {
        "engine_service_restart_pending": False, "engine_service_start_drift": False}

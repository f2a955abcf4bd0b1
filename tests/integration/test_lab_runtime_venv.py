"""The venv runtime on the two-node lab (playbooks/runtime.yml, role engine_venv, lab
profile tests/lab/profiles/lab-standin.yml): Ray from PyPI and the stand-in engine from
the profile's wheel directory in a root-owned venv on every node, the lab plugin
installed with a .orig backup of the engine's registry.py and its architecture checked
through the engine's registry (its converged re-run and check mode are the whole-site
ones of test_lab_check_mode.py); a plugin file edited by hand, or put back by a reinstall of the engine, on one worker is
repaired by one run that changes only that node; uninstalling restores the backups."""

from __future__ import annotations

import functools
import json

import pytest
from labrun import lab_profile_pins, node_exec, pep503_pin, service_user, serving_venv

pytestmark = pytest.mark.lab

PLAYBOOK = "playbooks/runtime.yml"
HOSTS = ("spark1", "spark2")
STAGING = "/opt/sparkctl/venv-sources/lab-standin"
REGISTRY = "sparklab_engine/models/registry.py"
ADDED = "sparklab_engine/models/standin.py"
ARCH = "SparklabStandinForCausalLM"
PLUGIN_TASK = "engine_venv : Install the plugin into the venv's site-packages"
# A repaired plugin is new code the running engine never loaded: the venv's change marker moves with
# it (roles/engine_venv, write.yml), so the next serve stage restarts the units that run from the venv.
MARKER_TASK = "engine_venv : Mark the venv changed, for the restart of the units that run from it"


@functools.cache
def _venv() -> str:
    """The venv the lab serves from (one path on every node), read from the head's engine unit
    once: no test here changes which venv serves."""
    return serving_venv("spark1")


@pytest.fixture(scope="module")
def converged(site_converged):
    # site.yml once for the session (conftest.py); every test here leaves the venv as it found it.
    return site_converged


@pytest.fixture(scope="module")
def site_packages(converged):
    out = node_exec("spark1", "python3", "-c",
                    f"import glob; print(glob.glob('{_venv()}/lib/python3*/site-packages')[0])").stdout
    return out.strip()


def _read(node: str, path: str) -> str:
    return node_exec(node, "cat", path).stdout


def _exists(node: str, path: str) -> bool:
    return node_exec(node, "test", "-e", path, check=False).returncode == 0


def _archs(node: str) -> list[str]:
    code = "import json; from sparklab_engine.models.registry import get_supported_archs as g; print(json.dumps(g()))"
    # As the service user: the venv must be readable by the account that runs the engine.
    return json.loads(node_exec(node, "runuser", "-u", service_user(), "--", f"{_venv()}/bin/python", "-c", code).stdout)


def _quiet(run_site, *extra: str):
    run = run_site(*extra, playbook=PLAYBOOK)
    assert run.rc == 0, run.output
    assert all(run.changed(h) == 0 for h in HOSTS), {h: run.changed_tasks(h) for h in HOSTS}
    return run


def _repaired_on_spark2_only(run_site):
    check = run_site("--check", playbook=PLAYBOOK)
    assert check.rc == 0, check.output
    assert check.changed_tasks("spark2") == [PLUGIN_TASK, MARKER_TASK] and check.changed("spark1") == 0
    repair = run_site(playbook=PLAYBOOK)
    assert repair.rc == 0, repair.output
    assert repair.changed_tasks("spark2") == [PLUGIN_TASK, MARKER_TASK], repair.changed_tasks("spark2")
    assert repair.changed("spark1") == 0, repair.changed_tasks("spark1")
    return repair


def test_every_node_has_the_venv_the_engine_and_the_plugin(converged, site_packages):
    pins = lab_profile_pins()
    assert set(pins) >= {"ray", "sparklab-engine"}, pins
    for node in HOSTS:
        assert node_exec(node, "stat", "-c", "%U:%G %a", _venv()).stdout.split() == ["root:root", "755"]
        freeze = node_exec(node, f"{_venv()}/bin/python", "-m", "pip", "freeze").stdout.splitlines()
        installed = dict(pep503_pin(line) for line in freeze if "==" in line)
        assert {name: installed.get(name) for name in pins} == pins, freeze
        assert ARCH in _archs(node)
        assert "SparklabStandinForCausalLM" in _read(node, f"{site_packages}/{REGISTRY}")
        assert ARCH not in _read(node, f"{site_packages}/{REGISTRY}.orig")
        manifest = json.loads(_read(node, f"{_venv()}/.sparkctl-plugin.json"))
        assert manifest["files"][REGISTRY]["backup"] == f"{REGISTRY}.orig"
        assert manifest["files"][ADDED]["backup"] is None


def test_registration_is_checked_by_the_role(converged):
    assert f"{ARCH} is registered (2 architectures)" in converged.output



def test_hand_edited_plugin_file_on_a_worker_is_repaired(converged, run_site, site_packages):
    path = f"{site_packages}/{REGISTRY}"
    good = _read("spark2", path)
    orig = _read("spark2", f"{path}.orig")
    node_exec("spark2", "sed", "-i", f"/{ARCH}/d", path)
    assert ARCH not in _archs("spark2")
    _repaired_on_spark2_only(run_site)
    assert _read("spark2", path) == good and _read("spark2", f"{path}.orig") == orig
    assert ARCH in _archs("spark2")
    _quiet(run_site)


def test_engine_reinstalled_by_pip_is_patched_again_and_the_backup_kept(converged, run_site, site_packages):
    orig = _read("spark2", f"{site_packages}/{REGISTRY}.orig")
    node_exec("spark2", f"{_venv()}/bin/python", "-m", "pip", "install", "--quiet", "--force-reinstall", "--no-deps",
              "--no-index", "--find-links", f"{STAGING}/find-links/0", "sparklab-engine==0.3.0")
    assert _read("spark2", f"{site_packages}/{REGISTRY}") == orig
    _repaired_on_spark2_only(run_site)
    assert ARCH in _archs("spark2")
    assert _read("spark2", f"{site_packages}/{REGISTRY}.orig") == orig


def test_uninstall_restores_the_backups_then_a_run_reinstalls(converged, run_site, site_packages):
    origs = {node: _read(node, f"{site_packages}/{REGISTRY}.orig") for node in HOSTS}
    off = run_site("-e", "engine_venv_plugin_state=absent", playbook=PLAYBOOK)
    assert off.rc == 0, off.output
    for node in HOSTS:
        assert PLUGIN_TASK in off.changed_tasks(node)
        assert _read(node, f"{site_packages}/{REGISTRY}") == origs[node]
        for gone in (f"{site_packages}/{REGISTRY}.orig", f"{site_packages}/{ADDED}", f"{_venv()}/.sparkctl-plugin.json",
                     f"{STAGING}/plugin"):
            assert not _exists(node, gone), gone
        assert ARCH not in _archs(node)
    _quiet(run_site, "-e", "engine_venv_plugin_state=absent")
    on = run_site(playbook=PLAYBOOK)
    assert on.rc == 0, on.output
    for node in HOSTS:
        assert ARCH in _archs(node)
        assert _read(node, f"{site_packages}/{REGISTRY}.orig") == origs[node]
    _quiet(run_site)

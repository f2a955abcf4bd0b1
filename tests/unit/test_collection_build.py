"""The built collection is complete (roles, playbooks, site playbook, README, its ansible.cfg),
and the wrapper runs its playbooks when it is installed instead of a checkout."""

from __future__ import annotations

import configparser
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml
from sparkctl import project, runner, stages
from sparkctl.stages import Stage

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))
import build_collection  # noqa: E402

COLLECTION = REPO / "collections" / "ansible_collections" / "sparkctl" / "spark"
# What only the checkout's ansible.cfg has: where it keeps roles, collections and the lab inventory.
CHECKOUT_ONLY = {("defaults", "roles_path"), ("defaults", "collections_path"), ("defaults", "inventory")}


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The collection built from this checkout and installed into an empty directory."""
    tmp = tmp_path_factory.mktemp("collection")
    artifact = build_collection.build(tmp / "build")
    return artifact, build_collection.install(artifact, tmp / "installed")


def _settings(path: Path) -> dict:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(path)
    return {(section, key): value for section in parser.sections() for key, value in parser.items(section)}


def test_the_artifact_holds_every_role_and_playbook_once(installed):
    artifact, _ = installed
    with tarfile.open(artifact) as tar:
        names = set(tar.getnames())
        manifest = json.load(tar.extractfile("MANIFEST.json"))
    for kind in ("roles", "playbooks"):
        for path in (REPO / kind).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                assert str(path.relative_to(REPO)) in names, f"{path} is missing from {artifact.name}"
    assert {"README.md", "config/ansible.cfg", "playbooks/site.yml", "plugins/modules/node_state.py"} <= names
    assert manifest["collection_info"]["readme"] == "README.md"
    assert not any(tar_name.startswith(("tests/output", "molecule")) for tar_name in names)


def test_the_installed_collection_is_found_and_its_stages_planned(installed, tmp_path, monkeypatch):
    _, collection = installed
    base = collection.parents[2]
    assert project.installed_collection([tmp_path, base]) == collection
    monkeypatch.delenv("SPARKCTL_PROJECT", raising=False)
    monkeypatch.setattr(project, "is_checkout", lambda root: False)
    monkeypatch.setattr(project, "collection_search_paths", lambda: [tmp_path, base])
    root = project.project_dir()
    assert root == collection
    assert [stage.name for stage in stages.plan("up", root).stages] == [
        "preflight", "provision", "checkpoint", "runtime", "serve", "observe", "verify"]


def test_the_wrapper_runs_an_installed_collection_with_its_config_and_path(installed, tmp_path, monkeypatch):
    _, collection = installed
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SPARKCTL_REPORT_DIR", raising=False)
    options = runner.RunOptions(inventory=tmp_path / "hosts.yml")
    kwargs = runner.runner_kwargs(Stage("preflight", collection / "playbooks" / "preflight.yml"), options,
                                  collection, "x", None)
    env = kwargs["envvars"]
    assert env["ANSIBLE_CONFIG"] == str(collection / "config" / "ansible.cfg")
    assert env["ANSIBLE_COLLECTIONS_PATH"] == str(collection.parents[2])
    # Reports and runner artifacts go where the command was started, not into the installation.
    assert env["SPARKCTL_REPORT_DIR"] == str(tmp_path / ".sparkctl" / "reports")
    assert kwargs["private_data_dir"] == str(tmp_path / ".sparkctl" / "runner")


def test_a_checkout_keeps_its_own_config_and_reports(monkeypatch):
    monkeypatch.delenv("SPARKCTL_REPORT_DIR", raising=False)
    kwargs = runner.runner_kwargs(Stage("preflight", REPO / "playbooks" / "preflight.yml"),
                                  runner.RunOptions(inventory=REPO / "inventories" / "lab" / "hosts.yml"), REPO, "x", None)
    assert kwargs["envvars"]["ANSIBLE_CONFIG"] == str(REPO / "ansible.cfg")
    assert "ANSIBLE_COLLECTIONS_PATH" not in kwargs["envvars"]
    assert kwargs["envvars"]["SPARKCTL_REPORT_DIR"] == str(REPO / ".sparkctl" / "reports")


def test_ansible_collections_path_finds_the_installed_collection(installed, tmp_path):
    """Outside a checkout, Ansible's own collection paths lead the wrapper to the collection."""
    _, collection = installed
    env = {key: value for key, value in os.environ.items() if not key.startswith(("ANSIBLE_", "SPARKCTL_"))}
    env.update(ANSIBLE_COLLECTIONS_PATH=str(collection.parents[2]), PYTHONPATH=str(REPO))
    found = subprocess.run([sys.executable, "-c", "from sparkctl import project; print(project.installed_collection())"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, check=True, timeout=60)
    assert found.stdout.strip() == str(collection)


def test_no_playbooks_anywhere_names_the_fix(tmp_path, monkeypatch):
    monkeypatch.delenv("SPARKCTL_PROJECT", raising=False)
    monkeypatch.setattr(project, "is_checkout", lambda root: False)
    monkeypatch.setattr(project, "collection_search_paths", lambda: [tmp_path])
    with pytest.raises(SystemExit, match="ansible-galaxy collection install.*ANSIBLE_COLLECTIONS_PATH"):
        project.project_dir()


def test_the_checkouts_ansible_cfg_is_the_collections_plus_its_own_paths():
    checkout = _settings(REPO / "ansible.cfg")
    collection = _settings(COLLECTION / "config" / "ansible.cfg")
    assert set(checkout) - set(collection) == CHECKOUT_ONLY
    assert {key: value for key, value in checkout.items() if key not in CHECKOUT_ONLY} == collection


def test_the_collection_has_no_copy_of_the_roles_or_playbooks():
    """The checkout keeps one copy (top-level roles/ and playbooks/); the build adds them."""
    for name in build_collection.SHARED:
        assert not (COLLECTION / name).exists()


def test_the_galaxy_readme_exists():
    galaxy = yaml.safe_load((COLLECTION / "galaxy.yml").read_text())
    assert (COLLECTION / galaxy["readme"]).is_file()

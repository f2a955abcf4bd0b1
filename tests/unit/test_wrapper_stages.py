"""Command -> stage plan: `up` runs the stages playbooks/site.yml imports, in its order."""

from pathlib import Path

import pytest
from sparkctl import stages

REPO = Path(__file__).resolve().parents[2]

SITE = """---
- name: Preflight
  ansible.builtin.import_playbook: preflight.yml
- name: Provision
  import_playbook: provision.yml
- name: Checkpoint
  ansible.builtin.import_playbook: checkpoint.yml
"""


@pytest.fixture
def root(tmp_path):
    (tmp_path / "playbooks").mkdir()
    for name in ("preflight", "provision", "checkpoint", "runtime", "validate_inventory"):
        (tmp_path / "playbooks" / f"{name}.yml").write_text("---\n")
    (tmp_path / "playbooks" / "site.yml").write_text(SITE)
    return tmp_path


def test_up_runs_what_site_yml_imports_in_its_order(root):
    plan = stages.plan("up", root)
    assert [s.name for s in plan.stages] == ["preflight", "provision", "checkpoint"]
    assert plan.stages[0].playbook == root / "playbooks" / "preflight.yml"


def test_a_stage_added_to_site_yml_is_run_by_up(root):
    (root / "playbooks" / "site.yml").write_text(SITE + "- name: Runtime\n  ansible.builtin.import_playbook: runtime.yml\n")
    assert [s.name for s in stages.plan("up", root).stages] == ["preflight", "provision", "checkpoint", "runtime"]


def test_the_projects_up_is_site_yml():
    assert [s.name for s in stages.plan("up", REPO).stages] == [
        "preflight", "provision", "checkpoint", "runtime", "serve", "observe", "verify"]


def test_without_site_yml_up_fails_naming_it(root):
    (root / "playbooks" / "site.yml").unlink()
    with pytest.raises(stages.StageError, match=r"no playbooks/site.yml in .*SPARKCTL_PROJECT"):
        stages.plan("up", root)


@pytest.mark.parametrize("site", [
    "---\n",
    "---\n- name: A play\n  hosts: all\n  tasks: []\n",
    "---\n- ansible.builtin.import_playbook: elsewhere/preflight.yml\n",
    "---\n- ansible.builtin.import_playbook: playbooks/preflight.yml\n",
    "---\n- ansible.builtin.import_playbook: preflight.yaml\n",
    "- [unclosed\n",
])
def test_a_site_yml_the_wrapper_cannot_run_stage_by_stage_is_refused(root, site):
    (root / "playbooks" / "site.yml").write_text(site)
    with pytest.raises(stages.StageError, match="site.yml"):
        stages.plan("up", root)


def test_a_stage_whose_playbook_is_missing_is_refused(root):
    (root / "playbooks" / "provision.yml").unlink()
    with pytest.raises(stages.StageError, match=r"playbooks/provision.yml is missing"):
        stages.plan("up", root)


@pytest.mark.parametrize("command, playbook", [("doctor", "preflight"), ("provision", "provision")])
def test_single_stage_commands(root, command, playbook):
    plan = stages.plan(command, root)
    assert [s.playbook.name for s in plan.stages] == [f"{playbook}.yml"]


@pytest.mark.parametrize("command, playbook", [("serve", "serve"), ("verify", "verify"), ("bench", "benchmark"),
                                               ("stop", "stop"), ("status", "status"), ("logs", "logs"),
                                               ("api-key", "api_key")])
def test_a_command_whose_playbook_is_missing_is_refused(root, command, playbook):
    with pytest.raises(stages.StageError, match=f"playbooks/{playbook}.yml is missing"):
        stages.plan(command, root)


def test_every_command_has_its_playbook_in_the_project():
    assert set(stages.COMMAND_STAGES) == {"doctor", "provision", "serve", "verify", "bench", "stop", "status", "logs",
                                          "api-key", "fabric-test", "teardown", "rollback"}
    for command in stages.COMMAND_STAGES:
        assert [s.playbook.is_file() for s in stages.plan(command, REPO).stages] == [True]


def test_the_checkouts_site_yml_is_the_collections_site_playbook():
    """One chain of stages: the top-level site.yml only imports playbooks/site.yml."""
    import yaml
    plays = yaml.safe_load((REPO / "site.yml").read_text())
    assert [play.get("ansible.builtin.import_playbook") for play in plays] == ["playbooks/site.yml"]

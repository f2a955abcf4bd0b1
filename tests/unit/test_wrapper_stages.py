"""Command -> stage plan: `up` runs the stages this version has, in order."""

from pathlib import Path

import pytest
import yaml
from sparkctl import stages

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def root(tmp_path):
    (tmp_path / "playbooks").mkdir()
    for name in ("preflight", "provision", "checkpoint", "runtime", "validate_inventory"):
        (tmp_path / "playbooks" / f"{name}.yml").write_text("---\n")
    return tmp_path


def test_up_runs_existing_stages_in_order_and_lists_the_rest(root):
    plan = stages.plan("up", root)
    assert [s.name for s in plan.stages] == ["preflight", "provision", "checkpoint", "runtime"]
    assert plan.stages[0].playbook == root / "playbooks" / "preflight.yml"
    assert plan.unavailable == ("serve", "verify")


def test_up_keeps_the_order_when_later_stages_arrive(root):
    (root / "playbooks" / "verify.yml").write_text("---\n")
    (root / "playbooks" / "serve.yml").write_text("---\n")
    assert [s.name for s in stages.plan("up", root).stages] == list(stages.UP_STAGES)


@pytest.mark.parametrize("command, playbook", [("doctor", "preflight"), ("provision", "provision")])
def test_single_stage_commands(root, command, playbook):
    plan = stages.plan(command, root)
    assert [s.playbook.name for s in plan.stages] == [f"{playbook}.yml"]
    assert plan.unavailable == ()


@pytest.mark.parametrize("command, playbook", [("serve", "serve"), ("verify", "verify"), ("bench", "benchmark"),
                                               ("stop", "stop"), ("status", "status"), ("logs", "logs")])
def test_commands_whose_playbook_is_missing_get_no_stage(root, command, playbook):
    plan = stages.plan(command, root)
    assert plan.stages == ()
    assert plan.unavailable == (playbook,)


def test_every_command_maps_to_a_playbook_name():
    assert set(stages.COMMAND_STAGES) == {"doctor", "provision", "serve", "verify", "bench", "stop", "status", "logs",
                                          "api-key"}


def test_up_runs_the_stages_site_yml_imports_in_the_same_order():
    # Two lists of the same stages (site.yml for ansible-playbook, UP_STAGES for the wrapper): kept in step here.
    site = yaml.safe_load((REPO / "site.yml").read_text(encoding="utf-8"))
    imported = [Path(play["ansible.builtin.import_playbook"]).stem for play in site]
    assert list(stages.UP_STAGES) == imported

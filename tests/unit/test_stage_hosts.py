"""The stage_hosts filter (a stage play matches no hosts when the run's tags leave it out)
and each site.yml stage's list of tags, kept equal to the tags its play and roles hold."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.sparkctl.spark.plugins.filter.stage_hosts import stage_hosts

REPO = Path(__file__).resolve().parents[2]
PATTERN = "spark_head:spark_workers"
PROVISION = ["provision", "link", "firewall", "fabric", "linger", "ssh"]


@pytest.mark.parametrize(("run_tags", "skip_tags", "runs"), [
    (["all"], [], True),                       # no --tags: every stage
    ([], [], True),
    (["provision"], [], True),
    (["serve"], [], False),                    # another stage only: this play is skipped whole
    (["serve", "provision"], [], True),
    (["ssh"], [], True),                       # a tag of one of the stage's roles
    (["link", "verify"], [], True),
    (["always"], [], True),                    # tags that reach tasks whatever their own tags
    (["tagged"], [], True),
    (["untagged"], [], True),
    (["all"], ["provision"], False),           # the stage's own tag skipped: every task of it is
    (["all"], ["ssh"], True),                  # one role skipped, the others still run
    (["provision"], ["provision"], False),
])
def test_the_stage_runs_when_a_selected_tag_can_reach_it(run_tags, skip_tags, runs):
    assert stage_hosts(PATTERN, PROVISION, run_tags, skip_tags) == (PATTERN if runs else [])


@pytest.mark.parametrize(("stage_tags", "run_tags"), [("provision", ["all"]), ([], ["all"]), (PROVISION, "provision")])
def test_a_tag_list_that_is_not_one_is_refused(stage_tags, run_tags):
    with pytest.raises(AnsibleFilterError, match="stage_hosts"):
        stage_hosts(PATTERN, stage_tags, run_tags, [])


def _collect(node, found_at) -> set[str]:
    """Walk a YAML tree; found_at(key, value) gives the names a mapping entry holds, or None to
    walk into its value."""
    found: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            here = found_at(key, value)
            found |= _collect(value, found_at) if here is None else here
    elif isinstance(node, list):
        for item in node:
            found |= _collect(item, found_at)
    return found


def _tags_of(node) -> set[str]:
    """Every tag anywhere in a YAML tree (plays, role entries, tasks, include `apply`)."""
    def tags(key, value):
        if key == "tags":
            return {value} if isinstance(value, str) else set(value)
        return None

    return _collect(node, tags)


def _roles_of(node) -> set[str]:
    """Roles a YAML tree runs: `roles:` entries, import_role and include_role."""
    def roles(key, value):
        if key in ("ansible.builtin.import_role", "ansible.builtin.include_role", "import_role", "include_role"):
            return {value["name"]}
        if key == "roles":
            return {entry if isinstance(entry, str) else entry["role"] for entry in value}
        return None

    return _collect(node, roles)


def _reachable_tags(play: dict) -> set[str]:
    tags, seen, todo = _tags_of(play), set(), _roles_of(play)
    while todo:
        role = todo.pop()
        seen.add(role)
        for path in sorted((REPO / "roles" / role / "tasks").glob("*.yml")):
            tasks = yaml.safe_load(path.read_text()) or []
            tags |= _tags_of(tasks)
            todo |= _roles_of(tasks) - seen
    return tags - {"always"}


def _stage_playbooks() -> list[str]:
    site = yaml.safe_load((REPO / "playbooks" / "site.yml").read_text())
    return ["playbooks/" + entry["ansible.builtin.import_playbook"] for entry in site]


@pytest.mark.parametrize("playbook", _stage_playbooks())
def test_each_stage_lists_every_tag_its_play_can_carry(playbook):
    plays = [play for play in yaml.safe_load((REPO / playbook).read_text()) if "hosts" in play]
    staged = [play for play in plays if "sparkctl.spark.stage_hosts" in str(play["hosts"])]
    assert staged, f"{playbook}: no play takes its hosts from sparkctl.spark.stage_hosts"
    for play in staged:
        listed = play["vars"]["sparkctl_stage_tags"]
        assert listed[0] == play["tags"][0], f"{playbook}: sparkctl_stage_tags must start with the play's own tag"
        assert set(listed) == _reachable_tags(play), (
            f"{playbook}: sparkctl_stage_tags {listed} != the tags its play and roles hold "
            f"{sorted(_reachable_tags(play))}: a run selecting a missing one would skip the play")


@pytest.mark.parametrize("playbook", _stage_playbooks())
def test_each_stage_validates_the_inventory_first(playbook):
    # The bad-input catalogue's lab test leans on this: an entry refused by the validation play
    # is run through playbooks/validate_inventory.yml alone (one entry through site.yml).
    first = yaml.safe_load((REPO / playbook).read_text())[0]
    assert first.get("ansible.builtin.import_playbook") == "validate_inventory.yml", (
        f"{playbook}: its first entry must import validate_inventory.yml, so a bad inventory is refused before any host is touched")


def test_the_validation_play_runs_whatever_the_tags_on_the_control_node_only():
    play, = yaml.safe_load((REPO / "playbooks" / "validate_inventory.yml").read_text())
    assert play["hosts"] == "localhost" and play["connection"] == "local" and play["gather_facts"] is False
    assert play["tags"] == ["always"]

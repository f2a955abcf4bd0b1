"""The bad-input catalogue (tests/catalogue/bad_inputs.yml), in-process.

Every entry refused at stage `validation` is applied to a copy of the lab inventory exactly
as the lab test applies it (labrun.write_inventory), flattened the way Ansible builds
hostvars (plus the entry's extra vars), and judged by the inventory_problems filter: the
expected substrings (the variable and the fix) must be in the problems, the forbidden ones
(secrets) must not. Entries refused later (preflight, the checkpoint stage) must pass the
validation, or they would never reach their stage. Adding an entry adds its test."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml
from inventory_check import inventory_problems

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))

import labrun  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
ENTRIES = labrun.bad_inputs()
STAGES = ("validation", "arguments", "preflight", "checkpoint-before-write")
PRODUCE_KEYS = {"groups", "host_vars", "group_vars", "extra_vars", "profile_overrides", "profile_files", "hub"}
REQUIRES = {"hub", "checkpoint-tools"}
LAB_NODES = ("spark1", "spark2")


def _problems(entry, tmp_path):
    hosts = labrun.write_inventory(tmp_path / "inv", change=entry["produce"])
    groups, hostvars = labrun.inventory_vars(hosts, entry["produce"].get("extra_vars"))
    return inventory_problems(groups, hostvars)


def _flat(text):
    return " ".join(str(text).split())


def _by_stage(stage):
    return [pytest.param(e, id=e["id"]) for e in ENTRIES if e["stage"] == stage]


# -- the catalogue itself ---------------------------------------------------------------------


def test_the_catalogue_is_well_formed():
    raw = yaml.safe_load(labrun.CATALOGUE.read_text())
    assert raw["schema"] == 1
    ids = [e["id"] for e in ENTRIES]
    assert len(ids) == len(set(ids)), "duplicate ids"
    for entry in ENTRIES:
        where = entry.get("id", "?")
        assert set(entry) <= {"id", "what", "stage", "produce", "expect", "forbid", "tags", "requires", "playbook"}, where
        assert entry["what"] and entry["stage"] in STAGES, where
        assert entry["produce"] and set(entry["produce"]) <= PRODUCE_KEYS, where
        assert entry["expect"] and all(isinstance(s, str) and s.strip() for s in entry["expect"]), where
        assert set(entry.get("requires", [])) <= REQUIRES, where
        # The stand-in must be up (and new enough) before it is told what to do.
        assert "hub" not in entry["produce"] or "hub" in entry.get("requires", []), where
        assert (REPO / entry.get("playbook", "site.yml")).is_file(), where
        for host in list(entry["produce"].get("host_vars", {})) + [h for m in entry["produce"].get("groups", {}).values() for h in m]:
            # A node the lab lacks only where validation refuses the run before any host is contacted,
            # with its management address and cable plan given by the entry.
            assert host in LAB_NODES or (
                entry["stage"] == "validation"
                and {"ansible_host", "spark_link"} <= set(entry["produce"].get("host_vars", {}).get(host, {}))), where


def test_the_catalogue_covers_every_case_the_issue_names():
    ids = {e["id"] for e in ENTRIES}
    assert {
        "duplicate-link-address", "link-subnets-differ", "link-overlaps-management", "interface-not-connectx7",
        "interface-absent-on-node", "mtu-above-range", "empty-worker-group", "two-heads", "unknown-model-profile",
        "profile-file-fails-schema", "memory-over-budget", "checkpoint-over-free-disk", "gated-repo-without-token",
        "api-key-too-short",
    } <= ids


def test_the_lab_inventory_itself_passes(tmp_path):
    hosts = labrun.write_inventory(tmp_path / "inv")
    assert inventory_problems(*labrun.inventory_vars(hosts)) == []


# -- every entry --------------------------------------------------------------------------------


@pytest.mark.parametrize("entry", _by_stage("validation"))
def test_validation_refuses_with_the_variable_and_the_fix(entry, tmp_path):
    problems = _problems(entry, tmp_path)
    assert problems, f"{entry['id']}: the inventory was accepted"
    text = _flat("\n".join(problems))
    for expected in entry["expect"]:
        assert _flat(expected) in text, f"{entry['id']}: {expected!r} not in {problems}"
    for secret in entry.get("forbid", []):
        assert secret not in text, f"{entry['id']}: {secret!r} shown"


@pytest.mark.parametrize("entry", _by_stage("arguments") + _by_stage("preflight") + _by_stage("checkpoint-before-write"))
def test_later_stage_entries_pass_validation(entry, tmp_path):
    assert _problems(entry, tmp_path) == []


# -- the helpers the lab test shares ------------------------------------------------------------


def test_write_inventory_applies_each_kind_of_change(tmp_path):
    change = {
        "groups": {"spark_head": ["spark1"], "spark_workers": []},
        "host_vars": {"spark1": {"spark_link[1].interface": "enp9s0f0np0", "extra.nested": 3}},
        "group_vars": {"spark_link_mtu": 1500},
        "profile_overrides": {"memory": {"kv_pool_bytes": 1}},
        "profile_files": {"mine.yml": "extends: lab-standin\n"},
        "extra_vars": {"ignored": "here"},
    }
    hosts = labrun.write_inventory(tmp_path / "inv", change=change)
    groups, hostvars = labrun.inventory_vars(hosts, {"spark_api_key": "x"})
    assert groups["spark_head"] == ["spark1"] and groups["spark_workers"] == []
    assert "spark2" not in hostvars
    spark1 = hostvars["spark1"]
    assert spark1["spark_link"][1] == {"interface": "enP2p1s0f1np1", "address": "192.168.101.10/24"} | {"interface": "enp9s0f0np0"}
    assert spark1["extra"] == {"nested": 3}
    assert spark1["spark_link_mtu"] == 1500 and spark1["spark_profile_overrides"] == {"memory": {"kv_pool_bytes": 1}}
    assert spark1["spark_api_key"] == "x" and "ignored" not in spark1
    # The profile directory comes first, relative to the new inventory; the lab's own is made absolute.
    assert spark1["spark_profile_paths"] == ["profiles", str(REPO / "tests" / "lab" / "profiles")]
    assert (tmp_path / "inv" / "profiles" / "mine.yml").read_text() == "extends: lab-standin\n"
    assert spark1["inventory_dir"] == str(tmp_path / "inv")
    # The connection settings point at the repository's .lab/ directory.
    assert str(REPO / ".lab" / "id_ed25519") == spark1["ansible_ssh_private_key_file"]
    # The lab inventory itself is untouched.
    assert inventory_problems(*labrun.inventory_vars(labrun.LAB_INVENTORY)) == []


def test_set_path_creates_what_is_missing():
    target = {"a": [{"b": 1}]}
    labrun.set_path(target, "a[0].b", 2)
    labrun.set_path(target, "c.d", 3)
    labrun.set_path(target, "plain", 4)
    assert target == {"a": [{"b": 2}], "c": {"d": 3}, "plain": 4}


PROBE_OUTPUT = """## files
/etc/sparkctl d 755 root:root
/etc/sparkctl/fabric.env f 812 1718000000.0 644 root:root
## addresses
lo UNKNOWN 127.0.0.1/8
enp1s0f1np1@if7 UP 192.168.100.10/24
## mtu
lo: 65536
enp1s0f1np1@if7: 9000
## units
sparkctl-ray-head.service loaded active running
## unit files
sparkctl-ray-head.service enabled
## firewall
e3b0c44298fc1c14
"""


def test_probe_parsing_and_diff():
    before = {"spark1": labrun.parse_probe("spark1", PROBE_OUTPUT)}
    same = {"spark1": labrun.parse_probe("spark1", PROBE_OUTPUT)}
    assert before == same and labrun.state_diff(before, same) == []
    assert before["spark1"].mtu == "lo: 65536\nenp1s0f1np1@if7: 9000"
    changed = (PROBE_OUTPUT.replace("812 1718000000.0", "813 1718000001.0").replace("9000", "1500")
               .replace("e3b0c44298fc1c14", "0123456789abcdef"))
    after = {"spark1": labrun.parse_probe("spark1", changed)}
    assert before != after
    diff = labrun.state_diff(before, after)
    assert "spark1: - /etc/sparkctl/fabric.env f 812 1718000000.0 644 root:root" in diff
    assert "spark1: + /etc/sparkctl/fabric.env f 813 1718000001.0 644 root:root" in diff
    assert any(line.startswith("spark1: mtu changed") for line in diff)
    assert any(line.startswith("spark1: firewall changed") for line in diff)


def test_results_table():
    table = labrun.format_table(["id", "refused"], [{"id": "two-heads", "refused": "yes"}, {"id": "x"}])
    assert table.splitlines() == ["id        | refused", "----------+--------", "two-heads | yes", "x         | -"]

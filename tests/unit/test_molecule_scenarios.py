"""The molecule scenarios stay in step with the roles the playbooks run: a scenario per role
(converge, verify, molecule.yml), the whole-site verify importing every role's checks the
default profile's site.yml reaches, and tests/suite.sh running every role scenario."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
MOLECULE = REPO / "molecule"
# Roles with no state of their own to converge: `spark` loads the cluster's defaults.
NOT_A_SCENARIO = {"spark"}
# Roles the whole-site scenario does not run: the image runtime (the default profile is a venv),
# the fabric test, the benchmark and the teardown (their own playbooks, not stages of site.yml).
NOT_IN_THE_WHOLE_SITE = {"engine_image", "fabric_test", "benchmark", "teardown"}
# Roles of the other playbooks that have no scenario yet: listed here so that a gap shows
# and a new role cannot join it unnoticed.
NO_SCENARIO_YET: set[str] = set()
# A stage that ends with another role's step after its own work, not a prerequisite of it: the
# verify stage mirrors what the engine compiled for its requests (roles/jit_cache/tasks/mirror.yml)
# and, once verified, keeps the checkpoints checkpoint_keep and the venvs engine_venv_keep ask for
# (roles/checkpoint/tasks/keep.yml and roles/engine_venv/tasks/keep.yml, only those files).
AFTER_ITS_ROLE = {"verify": {"jit_cache", "checkpoint", "engine_venv"}}
# The whole-site scenario does not run the observe stage's role: the stage is opt-in (the suite runs
# its scenario last on the first lab, OBSERVE_ROLE_SCENARIOS).
NOT_IN_THE_WHOLE_SITE_OPT_IN = {"observe"}


def _roles_in(playbook: Path, seen: set[Path] | None = None) -> set[str]:
    """Every role a playbook runs: `roles:` entries, import_role/include_role, imported playbooks."""
    seen = seen if seen is not None else set()
    if playbook in seen:
        return set()
    seen.add(playbook)
    roles: set[str] = set()
    for play in yaml.safe_load(playbook.read_text()) or []:
        imported = play.get("ansible.builtin.import_playbook")
        if imported:
            roles |= _roles_in((playbook.parent / imported).resolve(), seen)
            continue
        for entry in play.get("roles", []):
            roles.add(entry["role"] if isinstance(entry, dict) else entry)
        for task in play.get("tasks", []):
            for key in ("ansible.builtin.import_role", "ansible.builtin.include_role"):
                if key in task:
                    roles.add(task[key]["name"])
    return roles


def _site_roles() -> set[str]:
    return _roles_in(REPO / "site.yml") - NOT_A_SCENARIO


def _playbook_roles() -> set[str]:
    """Every role of site.yml and of the other playbooks the wrapper runs."""
    roles = _site_roles()
    for playbook in sorted((REPO / "playbooks").glob("*.yml")):
        roles |= _roles_in(playbook)
    return roles - NOT_A_SCENARIO


def _scenarios() -> set[str]:
    return {path.parent.name for path in MOLECULE.glob("*/molecule.yml")} - {"default"}


def test_every_role_has_a_scenario_and_nothing_else_does():
    assert _site_roles(), "no role found in site.yml"
    assert _site_roles() <= _scenarios()
    assert _scenarios() == _playbook_roles() - NO_SCENARIO_YET
    assert NO_SCENARIO_YET <= _playbook_roles(), "a role listed without a scenario is not run by any playbook"


def test_every_scenario_converges_and_verifies_its_role():
    for scenario in sorted(_scenarios()):
        converge = (MOLECULE / scenario / "converge.yml").read_text()
        assert (MOLECULE / scenario / "verify.yml").exists(), scenario
        assert scenario in _roles_in(MOLECULE / scenario / "converge.yml"), f"{scenario}'s converge does not run the role"
        # Its converge runs no other role of the site: prerequisites belong in prepare.yml.
        others = _roles_in(MOLECULE / scenario / "converge.yml") - NOT_A_SCENARIO - {scenario} - AFTER_ITS_ROLE.get(scenario, set())
        assert not others, f"{scenario}'s converge also runs {sorted(others)}"
        assert converge.startswith("---\n"), scenario


def test_the_whole_site_verify_is_every_role_verify_the_default_profile_reaches():
    plays = yaml.safe_load((MOLECULE / "default" / "verify.yml").read_text())
    imported = [play["ansible.builtin.import_playbook"] for play in plays]
    assert all(re.fullmatch(r"\.\./[a-z_]+/verify\.yml", path) for path in imported), imported
    assert {path.split("/")[1] for path in imported} == _scenarios() - NOT_IN_THE_WHOLE_SITE - NOT_IN_THE_WHOLE_SITE_OPT_IN


def test_the_suite_runs_every_role_scenario_once():
    suite = (REPO / "tests" / "suite.sh").read_text()
    listed = []
    for name in ("ROLE_SCENARIOS", "PREPARED_ROLE_SCENARIOS", "LAST_ROLE_SCENARIOS", "OBSERVE_ROLE_SCENARIOS"):
        body = re.search(rf"^{name}=\(([^)]*)\)", suite, flags=re.M).group(1)
        listed += body.split()
    assert sorted(listed) == sorted(_scenarios())


def test_the_steps_after_verify_are_only_the_kernel_cache_mirror_and_the_checkpoint_and_venv_keeps():
    tasks = yaml.safe_load((REPO / "playbooks" / "verify.yml").read_text())[-1]["tasks"]
    imports = [t["ansible.builtin.import_role"] for t in tasks if "ansible.builtin.import_role" in t]
    assert imports[-3:] == [{"name": "jit_cache", "tasks_from": "mirror.yml"},
                            {"name": "checkpoint", "tasks_from": "keep.yml"}, {"name": "engine_venv", "tasks_from": "keep.yml"}]
    assert [i["name"] for i in imports] == ["spark", "verify", "jit_cache", "checkpoint", "engine_venv"]


# What molecule is given another way: the role and collection paths in its environment, the lab's
# inventory on ansible-playbook's command line (.config/molecule/config.yml).
CFG_GIVEN_OTHERWISE = {("defaults", "roles_path"), ("defaults", "collections_path"), ("defaults", "inventory")}


def test_the_scenarios_run_with_the_projects_ansible_cfg():
    """Molecule writes an ansible.cfg of its own; every setting of the project's must be in it with
    the same value (host keys checked, facts not injected as variables, the same SSH masters), so a
    scenario runs a role as ansible-playbook runs it for a user."""
    import configparser

    project = configparser.ConfigParser(interpolation=None)
    project.read(REPO / "ansible.cfg")
    cfg = yaml.safe_load((REPO / ".config" / "molecule" / "config.yml").read_text())["ansible"]["cfg"]

    def same(value):
        text = str(value).strip()
        return {"true": "True", "false": "False"}.get(text.lower(), text)

    missing = [(section, key, value, cfg.get(section, {}).get(key))
               for section in project.sections() for key, value in project.items(section)
               if (section, key) not in CFG_GIVEN_OTHERWISE and same(cfg.get(section, {}).get(key)) != same(value)]
    assert not missing, missing
    # No control path of molecule's own: Ansible's default, as for the project's runs.
    assert cfg["ssh_connection"]["control_path"] == "" and "control_path" not in project["ssh_connection"]


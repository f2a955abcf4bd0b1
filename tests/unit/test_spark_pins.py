"""The spark role pins the values it works out from the profile and the inventory once per host and
run (roles/spark/tasks/validate.yml): a set_fact of each default as it renders. Held here:

- every default of the role that calls one of the collection's profile filters is pinned, and each
  pin is the default itself ("{{ name }}"), so defaults/main.yml stays the one definition;
- nothing else in the project assigns a pinned name where Ansible would rank the pin above it
  (play, block, task or include vars, a role's vars/, another set_fact): that value would be
  silently ignored for the rest of the run.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
SPARK = REPO / "roles" / "spark"
PIN_FILE = SPARK / "tasks" / "validate.yml"
FLAG = "spark_settings_checked"
PROFILE_FILTER = re.compile(r"sparkctl\.spark\.profile_\w+")
# Where plays, tasks and role vars live. Not inventories/: an inventory's values (its `vars:`
# included) are what the pins render from, which is where the role README sends them.
SEARCHED = ("roles", "playbooks", "molecule", "tests/catalogue")


def pinned() -> dict:
    for task in yaml.safe_load(PIN_FILE.read_text(encoding="utf-8")):
        facts = task.get("ansible.builtin.set_fact")
        if isinstance(facts, dict) and FLAG in facts:
            return {name: value for name, value in facts.items() if name != FLAG}
    raise AssertionError(f"{PIN_FILE.relative_to(REPO)} has no set_fact of {FLAG}")


def spark_defaults() -> dict:
    return yaml.safe_load((SPARK / "defaults" / "main.yml").read_text(encoding="utf-8"))


def test_every_default_worked_out_by_a_profile_filter_is_pinned():
    calls_a_filter = {name for name, value in spark_defaults().items()
                      if PROFILE_FILTER.search(yaml.safe_dump(value))}
    assert calls_a_filter, "no default of the spark role calls a profile filter: the pattern is stale"
    assert sorted(calls_a_filter - set(pinned())) == []


def test_each_pin_is_the_default_as_it_renders():
    defaults = spark_defaults()
    for name, value in pinned().items():
        assert name in defaults, f"{name} is pinned but has no default in roles/spark/defaults/main.yml"
        assert value == "{{ " + name + " }}", f"{name} is pinned to {value!r}, not to its default"


def _assignments(node, path=()):
    """(where, name) of every key set in a `vars` mapping or a set_fact, anywhere in a YAML document."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("vars", "ansible.builtin.set_fact", "set_fact") and isinstance(value, dict):
                for name in value:
                    yield "/".join(map(str, path + (key,))), name
            yield from _assignments(value, path + (key,))
    elif isinstance(node, list):
        for index, item in enumerate(node):
            yield from _assignments(item, path + (index,))


def test_no_task_play_include_or_role_vars_assign_a_pinned_name():
    names = set(pinned())
    found = []
    for top in SEARCHED:
        for path in sorted((REPO / top).rglob("*.yml")):
            if path == PIN_FILE or ".venv" in path.parts:
                continue
            try:
                document = yaml.safe_load(path.read_text(encoding="utf-8"))
            except yaml.YAMLError:
                continue  # vault files and templates are not task files
            relative = path.relative_to(REPO)
            if relative.parts[0] == "roles" and relative.parts[2] == "vars":
                found += [f"{relative}: {name}" for name in (document or {}) if name in names]
            found += [f"{relative} ({where}): {name}" for where, name in _assignments(document) if name in names]
    assert found == []

"""The inventory_problems filter called as the validation play calls it: with the role defaults it
falls back on, each read from the role that owns it, as playbooks/validate_inventory.yml names them
(its `sparkctl_inventory_defaults`: "{{ sparkctl_<role>_defaults.<variable> }}")."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from ansible_collections.sparkctl.spark.plugins.filter import inventory_problems as _filter

REPO = Path(__file__).resolve().parents[2]
PLAY = REPO / "playbooks" / "validate_inventory.yml"
_REFERENCE = re.compile(r"^\{\{ sparkctl_(?P<role>[a-z_]+)_defaults\.(?P<name>[a-z_]+) \}\}$")


def _check_task() -> dict:
    tasks = yaml.safe_load(PLAY.read_text())[0]["tasks"]
    return next(task for task in tasks if "sparkctl_inventory_defaults" in task.get("vars", {}))


def play_defaults() -> dict[str, tuple[str, str]]:
    """variable -> (owning role, variable) as the play passes it to the filter."""
    found = {}
    for key, value in _check_task()["vars"]["sparkctl_inventory_defaults"].items():
        match = _REFERENCE.match(value)
        assert match, f"{PLAY}: {key}: {value!r} is not a reference to a role's default"
        found[key] = (match["role"], match["name"])
    return found


def role_defaults() -> dict:
    """The defaults the play gives the filter, read from each owning role's defaults/main.yml."""
    files = {}
    values = {}
    for key, (role, name) in play_defaults().items():
        if role not in files:
            files[role] = yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text())
        values[key] = files[role][name]
    return values


ROLE_DEFAULTS = role_defaults()


def inventory_problems(groups, hostvars):
    return _filter.inventory_problems(groups, hostvars, ROLE_DEFAULTS)

"""Every role documents its variables in three places: defaults/main.yml (the values),
meta/argument_specs.yml (the main entry point's options, which Ansible validates) and the
README's variable table. The three must name the same variables, and where the spec states a
default it must be the value defaults/main.yml sets (a Jinja template there matches anything:
it is worked out at run time)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROLES = Path(__file__).resolve().parents[2] / "roles"
ROLE_NAMES = sorted(p.name for p in ROLES.iterdir() if (p / "meta" / "argument_specs.yml").is_file())

# Mismatches whose fix changes defaults/main.yml or meta/argument_specs.yml. Strict: the test
# fails once the files agree, so the mark goes with the fix.
KNOWN: dict[tuple[str, str], str] = {}

SEPARATOR = re.compile(r"^\|\s*:?-{3,}")
NAME = re.compile(r"`([a-z_][a-z0-9_]*)`")
TEMPLATE = re.compile(r"{{|{%")


def _known(role, check):
    reason = KNOWN.get((role, check))
    return pytest.param(role, marks=pytest.mark.xfail(reason=reason, strict=True)) if reason else role


def params(check):
    return [_known(role, check) for role in ROLE_NAMES]


def defaults(role):
    return yaml.safe_load((ROLES / role / "defaults" / "main.yml").read_text(encoding="utf-8")) or {}


def spec_options(role):
    specs = yaml.safe_load((ROLES / role / "meta" / "argument_specs.yml").read_text(encoding="utf-8"))
    # The spark role's spec is its `validate` entry point, checked once per run (roles/spark/tasks/main.yml).
    entry_points = specs["argument_specs"]
    return (entry_points["main"] if "main" in entry_points else entry_points["validate"]).get("options") or {}


def undefaulted_in_comments(role):
    """Variables a comment line of defaults/main.yml says have "no default": per-host inventory values without a
    default on purpose (spark_link)."""
    text = (ROLES / role / "defaults" / "main.yml").read_text(encoding="utf-8")
    comments = [line for line in text.splitlines() if line.lstrip().startswith("#") and "no default" in line]
    return {name for line in comments for name in re.findall(r"\b[a-z][a-z0-9_]*\b", line)}


def readme_variables(role):
    """The backquoted names in the first column of the README's variable table (the table whose header starts
    with variable | default)."""
    lines = (ROLES / role / "README.md").read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines[:-1]):
        cells = [c.strip().lower() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[:2] == ["variable", "default"] and SEPARATOR.match(lines[i + 1]):
            names = []
            for row in lines[i + 2:]:
                if not row.startswith("|"):
                    break
                names += NAME.findall(row.strip().strip("|").split("|")[0])
            return names
    return []


def same_default(spec_default, value):
    """Whether the spec's default is the value defaults/main.yml sets, a template there matching anything."""
    if isinstance(value, str) and TEMPLATE.search(value):
        return True
    if isinstance(value, dict) and isinstance(spec_default, dict):
        return set(value) == set(spec_default) and all(same_default(spec_default[k], value[k]) for k in value)
    if isinstance(value, list) and isinstance(spec_default, list):
        return len(value) == len(spec_default) and all(same_default(a, b) for a, b in zip(spec_default, value, strict=True))
    return spec_default == value


@pytest.mark.parametrize("role", params("names"))
def test_defaults_and_argument_specs_name_the_same_variables(role):
    spec = spec_options(role)
    # A spec option without a default may be left out of defaults/main.yml only if a comment there names it.
    allowed = {name for name in spec if "default" not in spec[name]} & undefaulted_in_comments(role)
    assert set(defaults(role)) ^ (set(spec) - allowed) == set()


@pytest.mark.parametrize("role", params("readme"))
def test_readme_table_names_the_argument_spec_variables(role):
    names = readme_variables(role)
    assert names, f"roles/{role}/README.md has no | variable | default | meaning | table"
    assert sorted({n for n in names if names.count(n) > 1}) == []
    assert set(names) ^ set(spec_options(role)) == set()


@pytest.mark.parametrize("role", params("defaults"))
def test_argument_spec_defaults_are_the_role_defaults(role):
    values = defaults(role)
    wrong = {
        name: {"argument_specs": option["default"], "defaults": values[name]}
        for name, option in spec_options(role).items()
        if "default" in option and name in values and not same_default(option["default"], values[name])
    }
    assert wrong == {}


def test_no_role_variable_holds_jinja_control_flow():
    """Decisions belong in the collection's filters, where unit tests reach them: a role's defaults and vars
    hold expressions ({{ }}), never Jinja statements ({% %})."""
    found = [f"{path.relative_to(ROLES)}:{number}"
             for path in sorted(ROLES.glob("*/*/*.yml")) if path.parent.name in ("defaults", "vars")
             for number, line in enumerate(path.read_text().splitlines(), start=1) if "{%" in line]
    assert found == []

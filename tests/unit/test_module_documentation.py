"""Every module's DOCUMENTATION, with its doc fragments merged as ansible-doc merges them, names the options its
argument_spec takes, with the same type, default, choices and required flag, and declares its check mode support
the way AnsibleModule is told, its diff and facts support as it behaves, and what it shares with other modules through
the attributes doc fragment only; the top-level README names every module."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pytest
import yaml
from module_runner import captured_argument_spec, documentation, documented_like_spec

MODULES = Path(__file__).resolve().parents[2] / "collections/ansible_collections/sparkctl/spark/plugins/modules"
NAMES = sorted(p.stem for p in MODULES.glob("*.py") if p.stem != "__init__")


@pytest.mark.parametrize("name", NAMES)
def test_documentation_matches_the_argument_spec(name, monkeypatch):
    module = importlib.import_module(f"ansible_collections.sparkctl.spark.plugins.modules.{name}")
    captured = captured_argument_spec(module.main, monkeypatch)
    doc = documentation(module)

    assert documented_like_spec(doc.get("options", {}), captured["argument_spec"]) == []
    check_mode = doc["attributes"]["check_mode"]["support"]
    assert (check_mode != "none") == bool(captured.get("supports_check_mode")), check_mode
    assert doc["attributes"]["platform"]["platforms"] in ("linux", "posix")
    yaml.safe_load(module.EXAMPLES)
    yaml.safe_load(module.RETURN)


ATTRIBUTES = importlib.import_module("ansible_collections.sparkctl.spark.plugins.doc_fragments.attributes").ModuleDocFragment


@pytest.mark.parametrize("name", NAMES)
def test_attributes_come_from_the_shared_fragment(name):
    """The support a module shares with others is stated once, in the attributes fragment;
    a copy in a module would drift from it unnoticed. What the module states itself must
    differ from the fragment (its own details, or diff support the fragment does not give)."""
    module = importlib.import_module(f"ansible_collections.sparkctl.spark.plugins.modules.{name}")
    own = yaml.safe_load(module.DOCUMENTATION)
    fragments = own.get("extends_documentation_fragment") or []
    variants = [f for f in fragments if f.startswith("sparkctl.spark.attributes.")]

    assert "ansible.builtin.action_common_attributes" in fragments
    assert len(variants) == 1, variants
    shared = yaml.safe_load(getattr(ATTRIBUTES, variants[0].rsplit(".", 1)[1].upper()))["attributes"]
    restated = [f"{attribute}.{key}" for attribute, keys in (own.get("attributes") or {}).items()
                for key, value in keys.items() if shared.get(attribute, {}).get(key) == value]
    assert restated == []


# module_utils functions that build a module's diff themselves when it runs with --diff.
DIFF_HELPERS = ("update_record(",)


@pytest.mark.parametrize("name", NAMES)
def test_diff_and_facts_support_match_what_the_module_does(name):
    """The fragment says no diff and no facts; a module that shows a diff or returns facts
    must say so, and only such a module."""
    module = importlib.import_module(f"ansible_collections.sparkctl.spark.plugins.modules.{name}")
    attributes = documentation(module)["attributes"]
    source = inspect.getsource(module)
    shows_diff = "module._diff" in source or any(helper in source for helper in DIFF_HELPERS)
    returns_facts = "ansible_facts" in yaml.safe_load(module.RETURN)

    assert (attributes["diff_mode"]["support"] != "none") == shows_diff
    assert (attributes.get("facts", {}).get("support", "none") != "none") == returns_facts


def test_the_readme_names_every_module():
    readme = (MODULES.parents[5] / "README.md").read_text(encoding="utf-8")
    layout = next(line for line in readme.splitlines() if line.startswith("| `collections/ansible_collections/sparkctl/spark/`"))
    assert [name for name in NAMES if f"`{name}`" not in layout] == []


PLUGINS = MODULES.parent
DOCUMENTED_PLUGINS = sorted(p for kind in ("filter", "test", "callback", "lookup") for p in (PLUGINS / kind).glob("*.py")
                            if "DOCUMENTATION" in p.read_text(encoding="utf-8"))


@pytest.mark.parametrize("path", DOCUMENTED_PLUGINS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_plugins_documentation_is_yaml_ansible_doc_can_read(path):
    """ansible-doc (and ansible-lint, which loads it) reads a plugin's DOCUMENTATION as YAML: a
    description line with ': ' in a plain scalar breaks it, and only a warning says so."""
    namespace = {}
    module = importlib.import_module("ansible_collections.sparkctl.spark.plugins."
                                     f"{path.parent.name}.{path.stem}")
    for part in ("DOCUMENTATION", "EXAMPLES", "RETURN"):
        text = getattr(module, part, None)
        if text is not None:
            namespace[part] = yaml.safe_load(text)
    assert isinstance(namespace["DOCUMENTATION"], dict) and namespace["DOCUMENTATION"].get("name")
    # A list item such as "- Pure evaluation: it never ..." is valid YAML, but a mapping, and
    # ansible-doc fails on it when it formats the text.
    assert _descriptions_that_are_not_text(namespace) == []


def _descriptions_that_are_not_text(node, where="") -> list[str]:
    found = []
    if isinstance(node, dict):
        for key, value in node.items():
            here = f"{where}.{key}" if where else str(key)
            if key in ("description", "short_description", "notes"):
                lines = value if isinstance(value, list) else [value]
                found += [here for line in lines if not isinstance(line, str)]
            else:
                found += _descriptions_that_are_not_text(value, here)
    elif isinstance(node, list):
        for index, item in enumerate(node):
            found += _descriptions_that_are_not_text(item, f"{where}[{index}]")
    return found

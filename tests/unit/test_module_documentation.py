"""Every module's DOCUMENTATION, with its doc fragments merged as ansible-doc merges them, names the options its
argument_spec takes, with the same type, default, choices and required flag, and declares its check mode support
the way AnsibleModule is told; the top-level README names every module."""

from __future__ import annotations

import importlib
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

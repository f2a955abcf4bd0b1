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

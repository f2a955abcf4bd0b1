"""The collection's filters: each one is used by name somewhere in the product (a filter only
unit tests call is code nobody runs, documented as if it mattered), each name is registered
once, each plugin file documents a filter it registers, and every filter the roles and
playbooks call is registered (a filter moved between files keeps its name)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
COLLECTION = REPO / "collections/ansible_collections/sparkctl/spark"
FILTERS = COLLECTION / "plugins" / "filter"
PRODUCT = ["roles", "playbooks", "site.yml", "molecule", "sparkctl", "tests/integration", "inventories",
           "collections/ansible_collections/sparkctl/spark/plugins", "collections/ansible_collections/sparkctl/spark/profiles"]


def _plugin(path):
    return importlib.import_module(f"ansible_collections.sparkctl.spark.plugins.filter.{path.stem}")


PLUGIN_FILES = sorted(p for p in FILTERS.glob("*.py") if p.stem != "__init__")
REGISTERED = [(path, name) for path in PLUGIN_FILES for name in _plugin(path).FilterModule().filters()]


def _product_texts():
    for entry in PRODUCT:
        root = REPO / entry
        for path in [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file()):
            try:
                yield path, path.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue


TEXTS = list(_product_texts())


def _used(name, plugin_file):
    """Called by its full name, or bare after a pipe, anywhere but the file that registers it."""
    pattern = re.compile(rf"sparkctl\.spark\.{name}\b|\|\s*{name}\b")
    return [str(path.relative_to(REPO)) for path, text in TEXTS if path != plugin_file and pattern.search(text)]


@pytest.mark.parametrize("path, name", REGISTERED, ids=[name for _, name in REGISTERED])
def test_every_filter_is_used_by_the_product(path, name):
    assert _used(name, path), f"{name} ({path.name}) is registered but nothing in {', '.join(PRODUCT)} uses it"


def test_every_filter_name_is_registered_once():
    names = [name for _, name in REGISTERED]
    assert sorted({name for name in names if names.count(name) > 1}) == []


@pytest.mark.parametrize("path", PLUGIN_FILES, ids=lambda p: p.stem)
def test_each_plugin_file_documents_a_filter_it_registers(path):
    plugin = _plugin(path)
    assert yaml.safe_load(plugin.DOCUMENTATION)["name"] in plugin.FilterModule().filters()


def test_every_filter_the_product_calls_is_registered():
    called = set()
    for path, text in TEXTS:
        if path.suffix in (".yml", ".yaml", ".j2"):
            called.update(re.findall(r"(?:\|\s*|map\(\s*['\"])sparkctl\.spark\.(\w+)", text))
    assert sorted(called - {name for _, name in REGISTERED}) == []

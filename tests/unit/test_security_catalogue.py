"""tests/catalogue/security.yml: every attacker-controlled input sparkctl must treat as data, refuse
or close, with the tests that try it. Each named test must exist (its file, its function and, for
a parametrized one, the case's id), so an entry cannot outlive its test; open entries say why."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CATALOGUE = REPO / "tests" / "catalogue" / "security.yml"
ENTRIES = yaml.safe_load(CATALOGUE.read_text())
NODE_ID = re.compile(r"^(tests/(?:unit|integration)/test_[a-z0-9_]+\.py)::(test_[A-Za-z0-9_]+)(?:\[(.+)\])?$")


def test_every_entry_is_complete_and_its_id_unique():
    ids = [entry.get("id") for entry in ENTRIES]
    assert len(ids) == len(set(ids)), ids
    for entry in ENTRIES:
        assert re.match(r"^[a-z0-9]+(-[a-z0-9]+)*$", entry["id"]), entry["id"]
        assert entry.get("what") and entry.get("outcome"), entry["id"]
        assert entry.get("status") in ("closed", "open"), entry["id"]
        if entry["status"] == "closed":
            assert entry.get("tests"), f"{entry['id']}: a closed entry names its tests"
        else:
            assert entry.get("why"), f"{entry['id']}: an open entry says why"


def _functions(path: Path) -> set[str]:
    return {node.name for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.FunctionDef)}


@pytest.mark.parametrize("entry", [e for e in ENTRIES if e["status"] == "closed"], ids=lambda e: e["id"])
def test_every_named_test_exists(entry):
    for node_id in entry["tests"]:
        match = NODE_ID.match(node_id)
        assert match, f"{entry['id']}: {node_id!r} is not a test node id"
        path, function, case = REPO / match.group(1), match.group(2), match.group(3)
        assert path.is_file(), f"{entry['id']}: {match.group(1)} is gone"
        assert function in _functions(path), f"{entry['id']}: {function} is gone from {match.group(1)}"
        if case:
            # A case id is written in the test's file (its parametrize) or, for the catalogue-driven
            # lab tests, in a catalogue beside this one.
            texts = [path.read_text()] + [p.read_text() for p in CATALOGUE.parent.glob("*.yml")]
            assert any(case in text for text in texts), f"{entry['id']}: case {case!r} of {function} is gone"

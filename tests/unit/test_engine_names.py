"""Every name sparkctl writes for an engine or reads from one, checked against the engine's own
releases: the manifests tools/engine_manifest.py reads out of each pinned release's wheel
(profiles/engine_flags/manifests). A variable no release reads is a setting the engine never
sees; a series no release registers is an alert that can never fire, a panel that stays empty.

What sparkctl writes is read from the reviewed golden files the renderers are held to
(tests/unit/golden: each shipped and lab profile's engine.env and key file, the fabric
environment), so a new variable in any of them is checked here without a list kept by hand."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible_collections.sparkctl.spark.plugins.plugin_utils import profile_engine

GOLDEN = Path(__file__).parent / "golden"
# A variable's engine, by its prefix (the manifests' env.prefixes).
PREFIX_ENGINES = {prefix: engine for engine in profile_engine.ENGINES
                  for version, (prefixes, _names) in profile_engine.engine_env_names(engine).items()
                  for prefix in prefixes}


def _env_file_names(path):
    return {line.split("=", 1)[0] for line in path.read_text().splitlines() if "=" in line and not line.startswith("#")}


def _written_variables():
    """{variable: [the golden files that write it]} for every variable sparkctl writes."""
    written = {}
    for path in sorted(GOLDEN.glob("profiles/*/env.env")) + sorted(GOLDEN.glob("fabric_env/*.env")):
        for name in _env_file_names(path):
            written.setdefault(name, []).append(str(path.relative_to(GOLDEN)))
    for path in sorted(GOLDEN.glob("profiles/*/secret_files.json")):
        for spec in json.loads(path.read_text()).values():
            if spec.get("format") == "env":
                written.setdefault(spec["key"], []).append(str(path.relative_to(GOLDEN)))
    return written


def _engine_of(name):
    for prefix, engine in PREFIX_ENGINES.items():
        if name.startswith(prefix):
            return engine
    return None


ENGINE_VARIABLES = sorted((name, _engine_of(name)) for name in _written_variables() if _engine_of(name))


def test_the_golden_files_hold_both_engines_variables():
    # The check below is only as good as what it reads.
    assert {"vllm", "sglang"} <= {engine for _name, engine in ENGINE_VARIABLES}
    assert ("VLLM_CACHE_ROOT", "vllm") in ENGINE_VARIABLES and ("VLLM_API_KEY", "vllm") in ENGINE_VARIABLES


@pytest.mark.parametrize("name, engine", ENGINE_VARIABLES)
def test_every_engine_variable_sparkctl_writes_is_read_by_every_release_of_its_engine(name, engine):
    # The same files are written whatever release a node runs, so every manifested release must read it.
    missing = [version for version, (_prefixes, names) in sorted(profile_engine.engine_env_names(engine).items())
               if name not in names]
    assert not missing, (f"{name} (written in {', '.join(_written_variables()[name])}) is read by no "
                         f"{engine} {', '.join(missing)}")

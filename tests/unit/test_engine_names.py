"""Every name sparkctl writes for an engine or reads from one, checked against the engine's own
releases: the manifests tools/engine_manifest.py reads out of each pinned release's wheel
(profiles/engine_flags/manifests). A variable no release reads is a setting the engine never
sees; a series no release registers is an alert that can never fire, a panel that stays empty.

What sparkctl writes is read from the reviewed golden files the renderers are held to
(tests/unit/golden: each shipped and lab profile's engine.env and key file, the fabric
environment), so a new variable in any of them is checked here without a list kept by hand."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from ansible_collections.sparkctl.spark.plugins.module_utils import engine_metrics, engine_names
from ansible_collections.sparkctl.spark.plugins.plugin_utils import profile as P
from ansible_collections.sparkctl.spark.plugins.plugin_utils import profile_engine
from test_profile import REPO, SHIPPED

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


# ----------------------------------------------------------------------------- metrics

# Where an engine's series may be named: the one table (module_utils/engine_metrics.py). The
# dashboard's JSON is that table's output (tools/observe_dashboard.py, held to it by its own test).
ENGINE_SERIES_RE = re.compile(r"\b(?:vllm|sglang):[a-z_][a-z0-9_:]*")
CODE_DIRS = ("roles", "playbooks", "tools", "sparkctl", "collections/ansible_collections/sparkctl/spark/plugins")
MODULE_UTILS = REPO / "collections/ansible_collections/sparkctl/spark/plugins/module_utils"
# The table, and the matching of names (whose docstring shows one).
NAMING_FILES = (MODULE_UTILS / "engine_metrics.py", MODULE_UTILS / "engine_names.py")


@pytest.mark.parametrize("engine", sorted(engine_metrics.ENGINE_METRICS))
def test_every_series_sparkctl_reads_is_registered_by_every_release_of_its_engine(engine):
    releases = profile_engine.engine_metric_series(engine)
    assert releases, engine
    for role, name in sorted(engine_metrics.ENGINE_METRICS[engine].items()):
        missing = [version for version, series in sorted(releases.items()) if name not in series]
        assert not missing, f"{role}: {name} is registered by no {engine} {', '.join(missing)}"


def test_no_engine_series_is_named_outside_the_table():
    named = []
    for top in CODE_DIRS:
        for path in sorted((REPO / top).rglob("*")):
            if (path.suffix not in (".py", ".yml", ".yaml", ".j2") or path in NAMING_FILES or "__pycache__" in path.parts
                    or "manifests" in path.parts):
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            named += [f"{path.relative_to(REPO)}: {name}" for name in ENGINE_SERIES_RE.findall(text) if _a_series(name)]
    assert not named, named


def _a_series(name):
    """Whether name is an engine's series (a registered one, or one shaped like it), not an image
    tag such as lmsysorg/sglang:<tag>."""
    engine = name.split(":", 1)[0]
    registered = set().union(*profile_engine.engine_metric_series(engine).values())
    return name in registered or re.search(r"_(total|bucket|sum|count|seconds|perc|ratio|reqs|usage)$", name) is not None


# ----------------------------------------------------------------------------- log lines

# The lab's real engine (tests/lab/vllm/README.md): its rules are read from a real vLLM's log too.
LAB_REAL_ENGINE = ("lab-vllm", [str(Path(__file__).resolve().parents[1] / "lab" / "profiles")])


def _startup_rules():
    """(profile, engine, release, rule name, regex) of every shipped profile's startup_log rule, and
    of the lab's real vLLM's."""
    rules = []
    for name, paths in [(name, []) for name in SHIPPED] + [LAB_REAL_ENGINE]:
        profile = P.load_profile(name, paths, {})
        engine = profile["engine"]["kind"]
        version = profile_engine.engine_version(profile, engine)
        for rule in profile.get("startup_log") or []:
            rules.append((name, engine, version, rule["name"], rule["regex"]))
    return rules


@pytest.mark.parametrize("profile, engine, version, rule, regex", _startup_rules(),
                         ids=lambda value: value if isinstance(value, str) else "")
def test_every_startup_line_a_shipped_profile_reads_is_one_its_release_prints(profile, engine, version, rule, regex):
    formats = profile_engine.engine_log_formats(engine)
    # An image that does not say which release it runs may run any: every manifested one must print it.
    releases = [version] if version is not None else sorted(formats)
    for release in releases:
        assert release in formats, f"{profile}: {engine} {release} has no manifest (tools/engine_manifest.py)"
        assert engine_names.log_line_possible(regex, formats[release]), (
            f"{profile}: startup_log {rule} ({regex!r}) matches no line {engine} {release} logs")

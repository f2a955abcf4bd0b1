# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Model profiles, what the engine offers: the release a profile runs and that release's flags,
parser names and environment variables (the committed manifests under profiles/engine_flags/),
how its list-valued flags take their values, what the profile's own plugin source registers,
and the packages a venv runtime installs. Pure: files of the collection and of the profile's
plugin source are read (never imported), no host is contacted."""

from __future__ import annotations

import ast
import glob
import json
import os
import re

import yaml

from ansible_collections.sparkctl.spark.plugins.module_utils import engine_names, python_source
from ansible_collections.sparkctl.spark.plugins.module_utils.requirement import requirement_name
from ansible_collections.sparkctl.spark.plugins.plugin_utils.profile_load import (
    COLLECTION_PROFILES, ProfileError, _YAML_LOADER,
)

# How each engine's command line takes its list-valued options (nargs: one occurrence
# with every value; append: the flag once per value): profiles/engine_flags/<engine>.yml.
ENGINE_FLAGS_DIR = os.path.join(COLLECTION_PROFILES, "engine_flags")
LIST_ARITIES = ("nargs", "append")
# Every flag of each pinned engine release (arity, choices), generated from the engine's
# wheel by tools/engine_manifest.py: engine_flags/manifests/<engine>-<version>.json.
ENGINE_MANIFEST_DIR = os.path.join(ENGINE_FLAGS_DIR, "manifests")
# The Ray a venv runtime gets when the topology runs on Ray and the profile pins none:
# vLLM does not depend on Ray (nor offers an extra that pulls it in), so without this
# `<venv>/bin/ray start` does not exist. [default] brings the dashboard and the Jobs
# API the Ray head unit starts on loopback. Bump it together with the firewall's and
# the Ray units' assumptions about this Ray (ports, drain timeout).
RAY_REQUIREMENT = "ray[default]==2.60.0"
RAY_TOPOLOGIES = ("ray_tp", "ray_tp_ep")

ENGINES = ("vllm", "sglang")

_VERSION_RE = re.compile(r"^(\d+)\.(\d+)\.(\d+)")
_MODULE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")

PARSER_SECTIONS = {"tool_call": ("tool-call", "tool_call_parsers"), "reasoning": ("reasoning", "reasoning_parsers")}
# What engine.command may hold ({model_dir} and the like), filled in when the argv is rendered.
_PLACEHOLDER_RE = re.compile(r"\{([a-z_]+)\}")
PLACEHOLDERS = ("venv", "model_dir", "served_model_name", "port", "bind")


def engine_version(profile, kind):
    """The engine release a profile runs: engine.version, else the venv's pin of the engine
    (vllm==X, sglang[all]==X); None when neither says (an image that does not tell)."""
    version = (profile.get("engine") or {}).get("version")
    if isinstance(version, str) and _VERSION_RE.match(version):
        return version
    runtime = profile.get("runtime") if isinstance(profile.get("runtime"), dict) else {}
    venv = runtime.get("venv") if isinstance(runtime.get("venv"), dict) else {}
    for spec in venv.get("packages") or []:
        if isinstance(spec, str) and "==" in spec and requirement_name(spec) == kind:
            return spec.split("==", 1)[1].split(";", 1)[0].strip()
    return None


_MANIFESTS = {}


def _manifest_data(kind):
    """{version: manifest} of every committed manifest of the engine."""
    if kind not in _MANIFESTS:
        found = {}
        for path in sorted(glob.glob(os.path.join(ENGINE_MANIFEST_DIR, f"{kind}-*.json"))):
            with open(path, encoding="utf-8") as handle:
                data = json.load(handle)
            found[data["version"]] = data
        _MANIFESTS[kind] = found
    return _MANIFESTS[kind]


def engine_manifests(kind):
    """{version: {flag: {kind, choices?, negatable?}}} of every committed manifest of the engine."""
    return {version: data["flags"] for version, data in _manifest_data(kind).items()}


def engine_parser_names(kind):
    """{version: {"tool_call": set, "reasoning": set}}: the parser names each manifested release registers."""
    return {version: {section: set(data.get(f"{section}_parsers") or []) for section in PARSER_SECTIONS}
            for version, data in _manifest_data(kind).items()}


def engine_env_names(kind):
    """{version: (prefixes, names)}: the engine's own environment variables each manifested release reads."""
    return {version: (list(data["env"]["prefixes"]), set(data["env"]["names"]))
            for version, data in _manifest_data(kind).items() if data.get("env")}


def engine_metric_series(kind):
    """{version: set of series}: what Prometheus stores of the metrics each manifested release registers."""
    return {version: engine_names.metric_series(data["metrics"])
            for version, data in _manifest_data(kind).items() if "metrics" in data}


def engine_log_formats(kind):
    """{version: [formats]}: the messages each manifested release logs (module_utils/engine_names.py)."""
    return {version: list(data["log_formats"]) for version, data in _manifest_data(kind).items() if "log_formats" in data}


def _for_release(per_version, version):
    """The release's set from a {version: names} map, or every manifested release's together
    when the release is unknown or has no manifest."""
    if version in per_version:
        return set(per_version[version])
    return set().union(*per_version.values())


def _provided(profile, key):
    """The names engine.provides.<key> states (a fork's additions over its release)."""
    provides = (profile.get("engine") or {}).get("provides") or {}
    given = provides.get(key) if isinstance(provides, dict) else None
    return {n for n in (given or []) if isinstance(n, str)}


def _version_key(version):
    return tuple(int(x) for x in _VERSION_RE.match(version).groups()) if _VERSION_RE.match(version) else (0, 0, 0)


def engine_manifest(profile, kind):
    """(label, flags) the profile's engine.args are checked against: the manifest of the release
    it runs, else (release unknown or without a manifest) every flag some manifested release has."""
    manifests = engine_manifests(kind)
    if not manifests:
        return None
    version = engine_version(profile, kind)
    if version in manifests:
        return f"{kind} {version}", manifests[version]
    merged = {}
    for known in sorted(manifests, key=_version_key):
        merged.update(manifests[known])
    releases = ", ".join(sorted(manifests, key=_version_key))
    label = (f"{kind} {version} (no manifest; checked against {releases})" if version
             else f"any {kind} release with a manifest ({releases}; set engine.version to check one)")
    return label, merged


def plugin_source_dirs(profile):
    """Controller directories holding the profile's own engine code: the venv plugin's source
    (a tree mirroring site-packages, relative to the profile file unless absolute, as role
    engine_venv resolves it) and an image's build context."""
    runtime = profile.get("runtime") if isinstance(profile.get("runtime"), dict) else {}
    venv = runtime.get("venv") if isinstance(runtime.get("venv"), dict) else {}
    image = runtime.get("image") if isinstance(runtime.get("image"), dict) else {}
    build = image.get("build") if isinstance(image.get("build"), dict) else {}
    plugin = venv.get("plugin") if isinstance(venv.get("plugin"), dict) else {}
    dirs = []
    for given in (plugin.get("source"), build.get("context")):
        if isinstance(given, str) and given:
            path = os.path.expanduser(given)
            if not os.path.isabs(path):
                path = os.path.join(profile.get("_dir") or COLLECTION_PROFILES, path)
            dirs.append(os.path.normpath(path))
    return dirs


def _python_files(directory):
    for root, subdirs, files in os.walk(directory):
        subdirs.sort()
        for name in sorted(files):
            if name.endswith(".py"):
                yield os.path.join(root, name)


def _parse(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return ast.parse(handle.read(), filename=path)
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None


def plugin_parsers(profile):
    """{"tool_call": set, "reasoning": set}: parser names the profile's own plugin source registers."""
    trees = []
    for directory in plugin_source_dirs(profile):
        for path in _python_files(directory):
            tree = _parse(path)
            if tree is not None:
                trees.append(tree)
    return python_source.registered_parsers(trees)


def registered_parsers(profile):
    """{section: (label, names)}: the parser names a profile may pick, per parsers.<section>: those
    the engine release registers (its manifest; every manifested release when it is unknown),
    plus those the profile's own plugin registers and engine.provides states."""
    kind = (profile.get("engine") or {}).get("kind")
    manifests = engine_parser_names(kind) if kind in ENGINES else {}
    label = (engine_manifest(profile, kind) or (kind, None))[0] if kind in ENGINES else str(kind)
    version = engine_version(profile, kind)
    own = plugin_parsers(profile)
    found = {}
    for section, (_what, provides_key) in PARSER_SECTIONS.items():
        names = _for_release({v: m[section] for v, m in manifests.items()}, version)
        found[section] = (label, names | own[section] | _provided(profile, provides_key))
    return found


def _plugin_modules(profile):
    """{dotted module: file} of the profile's venv plugin source (a tree mirroring site-packages)."""
    runtime = profile.get("runtime") if isinstance(profile.get("runtime"), dict) else {}
    venv = runtime.get("venv") if isinstance(runtime.get("venv"), dict) else {}
    if not isinstance(venv.get("plugin"), dict):
        return {}
    modules = {}
    for directory in plugin_source_dirs({"runtime": {"venv": venv}, "_dir": profile.get("_dir")}):
        for path in _python_files(directory):
            rel = os.path.relpath(path, directory)[:-len(".py")].split(os.sep)
            if rel[-1] == "__init__":
                rel = rel[:-1]
            if rel and all(_MODULE_RE.match(part) for part in rel):
                modules.setdefault(".".join(rel), path)
    return modules


def venv_packages(profile):
    """What the venv runtime installs: the profile's pins, plus RAY_REQUIREMENT when the
    topology runs on Ray and the profile pins no ray of its own."""
    packages = list(((profile.get("runtime") or {}).get("venv") or {}).get("packages") or [])
    kind = (profile.get("topology") or {}).get("kind")
    if kind in RAY_TOPOLOGIES and not any(requirement_name(p) == "ray" for p in packages):
        packages.append(RAY_REQUIREMENT)
    return packages


def _args(profile):
    return (profile.get("engine") or {}).get("args") or {}


def _engine_env(profile):
    return (profile.get("engine") or {}).get("env") or {}


def _flag(key):
    return "--" + key.replace("_", "-")


def _value(value):
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"))
    if isinstance(value, float):
        return repr(value)
    return str(value)


_LIST_FLAGS = {}


def engine_list_flags(engine):
    """{flag in snake_case: 'nargs' | 'append'} for the engine, from engine_flags/<engine>.yml."""
    if engine not in _LIST_FLAGS:
        path = os.path.join(ENGINE_FLAGS_DIR, f"{engine}.yml")
        with open(path, encoding="utf-8") as handle:
            table = (yaml.load(handle, Loader=_YAML_LOADER) or {}).get("list_flags") or {}  # noqa: S506
        bad = {k: v for k, v in table.items() if v not in LIST_ARITIES}
        if bad:
            raise ProfileError(f"{path}: list_flags {bad} must each be one of {', '.join(LIST_ARITIES)}.")
        _LIST_FLAGS[engine] = dict(table)
    return _LIST_FLAGS[engine]

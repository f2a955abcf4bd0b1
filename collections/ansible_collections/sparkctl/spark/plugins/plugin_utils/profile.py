# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Model profiles: one YAML file per served system (engine, runtime, checkpoint,
topology, engine arguments, memory budget, expectations), loaded from the user's
profile directories first and the collection's profiles/ second, merged with the
inventory's overrides, validated, checked against the known engine traps (docs/field-notes.md), and rendered
into the engine's argv, environment and systemd units.

Everything here is pure: no host is contacted, so the validation play can refuse
a profile before any change."""

from __future__ import annotations

import ast
import copy
import difflib
import glob
import ipaddress
import json
import os
import re
import shlex

import yaml

from ansible_collections.sparkctl.spark.plugins.module_utils import engine_gate, firewall, python_source
from ansible_collections.sparkctl.spark.plugins.module_utils.deployment import content_digest
from ansible_collections.sparkctl.spark.plugins.module_utils.link_address import bare_address
from ansible_collections.sparkctl.spark.plugins.module_utils.requirement import requirement_extras, requirement_name
from ansible_collections.sparkctl.spark.plugins.module_utils.units import UNITS, unit_stem

SCHEMA_VERSION = 1
# The collection's root (galaxy.yml in a checkout, MANIFEST.json once installed), and where it
# ships its profiles.
COLLECTION_DIR = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
COLLECTION_PROFILES = os.path.join(COLLECTION_DIR, "profiles")
DEFAULT_PROFILE = "solar-open2-nvfp4-vllm-venv"

GIB = 1024**3
# Usable for one engine rank on a 128 GB GB10 node after DGX OS, Docker and the
# OOM guard: 110-121 GiB in the published recipes; the low end (docs/field-notes.md, "Memory on a GB10 node").
DEFAULT_NODE_BUDGET_BYTES = 110 * GIB
# pip's NCCL 2.28.9 deadlocks cross-node CUDA graph replay; fixed in 2.30.4 (docs/field-notes.md).
NCCL_GRAPH_FIX = (2, 30, 4)
MAX_EXTENDS_DEPTH = 8
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
RUNTIMES = ("image", "venv")
TOPOLOGIES = ("ray_tp", "ray_tp_ep", "sglang_ranks")
ON_MISMATCH = ("warn", "fail")
LINEAR_ATTENTION = ("none", "kda", "gated_delta", "mamba")

# Flags the renderer derives from other sections; setting them in engine.args would
# fight the topology, the API section or the parsers section.
MANAGED_ARGS = {
    "vllm": {
        "model": "the checkpoint directory (cluster.checkpoint_dir)",
        "served_model_name": "api.served_model_name",
        "host": "api.bind (behind the API proxy: 127.0.0.1)",
        "port": "api.port (behind the API proxy: api.engine_port)",
        "api_key": "the API key file (never on argv)",
        "tensor_parallel_size": "topology.tensor_parallel",
        "enable_expert_parallel": "topology.kind: ray_tp_ep",
        "distributed_executor_backend": "topology.kind (ray_tp / ray_tp_ep use Ray)",
        "tool_call_parser": "parsers.tool_call",
        "reasoning_parser": "parsers.reasoning",
        "logits_processors": "parsers.logits_processors",
        "enable_auto_tool_choice": "parsers.auto_tool_choice",
    },
    "sglang": {
        "model_path": "the checkpoint directory (cluster.checkpoint_dir)",
        "served_model_name": "api.served_model_name",
        "host": "api (rank 0 listens on loopback behind the router)",
        "port": "topology.rank0_port",
        "api_key": "the API key file (never on argv)",
        "tp_size": "topology.tensor_parallel",
        "tensor_parallel_size": "topology.tensor_parallel",
        "ep_size": "topology.expert_parallel",
        "nnodes": "topology.nodes",
        "node_rank": "the rank unit of each node",
        "dist_init_addr": "the head's link address and topology.dist_init_port",
        "tool_call_parser": "parsers.tool_call",
        "reasoning_parser": "parsers.reasoning",
        "config": "the API key file (sparkctl passes --config itself)",
    },
}

_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ARG_KEY_RE = re.compile(r"^[a-z0-9][a-z0-9_]*$")
_REPO_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
_VERSION_RE = re.compile(r"^(\d+)\.(\d+)\.(\d+)")
_PLACEHOLDER_RE = re.compile(r"\{([a-z_]+)\}")
_PYTHON_RE = re.compile(r"^3(\.[0-9]+)?$")
_MODULE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_CLASS_PATH_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
# What an engine build adds over the release engine.version names (a fork in an image),
# stated by the profile because no manifest of the fork exists: accepted as registered.
PROVIDES_KEYS = ("tool_call_parsers", "reasoning_parsers", "classes", "env")
PARSER_SECTIONS = {"tool_call": ("tool-call", "tool_call_parsers"), "reasoning": ("reasoning", "reasoning_parsers")}
PLACEHOLDERS = ("venv", "model_dir", "served_model_name", "port", "bind")
# The ports a topology listens on (with their defaults), which api.engine_port must not take.
TOPOLOGY_PORTS = {"ray_port": 6379, "dist_init_port": 25000, "rank0_port": 30000}
TOPOLOGY_DEFAULT_PORTS = {"ray_tp": ("ray_port",), "ray_tp_ep": ("ray_port",),
                          "sglang_ranks": ("dist_init_port", "rank0_port")}
# Behind the API proxy the engine listens here only; the proxy holds api.bind:api.port.
ENGINE_BIND_BEHIND_PROXY = "127.0.0.1"


class ProfileError(Exception):
    """A profile that cannot be loaded or is wrong; the message names the profile, the key and the fix."""


# --------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------


def search_dirs(paths=None, base_dir=None):
    """The user's profile directories (relative ones resolved against base_dir, the
    inventory directory), then the collection's own."""
    dirs = []
    for path in paths or []:
        path = os.path.expanduser(str(path))
        if not os.path.isabs(path) and base_dir:
            path = os.path.join(str(base_dir), path)
        dirs.append(os.path.normpath(path))
    dirs.append(COLLECTION_PROFILES)
    return dirs


def find_profile(name, dirs):
    """Path of <name>.yml (or .yaml) in the first directory holding it."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ProfileError(
            f"profile name {name!r} is not valid: use lowercase letters, digits, '.', '_' and '-', "
            "the file name without .yml (e.g. solar-open2-nvfp4-vllm-venv)."
        )
    for directory in dirs:
        for ext in (".yml", ".yaml"):
            candidate = os.path.join(directory, name + ext)
            if os.path.isfile(candidate):
                return candidate
    known = sorted(available_profiles(dirs))
    raise ProfileError(
        f"profile {name!r} was not found in {', '.join(dirs)}: set spark_model_profile to one of "
        f"{', '.join(known) or '(none)'}, or add {name}.yml to a directory listed in spark_profile_paths."
    )


def available_profiles(dirs):
    names = set()
    for directory in dirs:
        if not os.path.isdir(directory):
            continue
        for entry in os.listdir(directory):
            stem, ext = os.path.splitext(entry)
            if ext in (".yml", ".yaml") and _NAME_RE.match(stem):
                names.add(stem)
    return names


# libyaml's parser where PyYAML was built with it: the profile is read for every task that
# templates a profile-derived variable, and the pure-Python parser was most of that cost.
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _read_yaml(path, name):
    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.load(handle, Loader=_YAML_LOADER)  # noqa: S506 - a safe loader, C or Python
    except yaml.YAMLError as exc:
        raise ProfileError(f"profile {name}: {path} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ProfileError(f"profile {name}: {path} must hold a mapping at the top level.")
    return data


def deep_merge(base, override):
    """Merge override into a copy of base: mappings merge key by key, anything else
    (lists included) replaces, and None deletes the key."""
    result = copy.deepcopy(base) if isinstance(base, dict) else {}
    for key, value in (override or {}).items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = deep_merge(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result


def _load_chain(name, dirs, seen):
    if name in seen:
        raise ProfileError(f"profile {name}: 'extends' loops ({' -> '.join(seen + [name])}); remove one 'extends'.")
    if len(seen) >= MAX_EXTENDS_DEPTH:
        raise ProfileError(f"profile {seen[0]}: 'extends' is nested deeper than {MAX_EXTENDS_DEPTH} levels.")
    path = find_profile(name, dirs)
    data = _read_yaml(path, name)
    parent = data.pop("extends", None)
    if parent is None:
        return data, [path]
    if not isinstance(parent, str):
        raise ProfileError(f"profile {name}: extends: expected the name of another profile, got {parent!r}.")
    base, sources = _load_chain(parent, dirs, seen + [name])
    return deep_merge(base, data), sources + [path]


def load_profile(name, paths=None, overrides=None, base_dir=None):
    """Resolve a profile: the file (after its 'extends' chain) merged with the inventory's
    overrides. The result carries 'name' (the requested profile), '_sources' (files read)
    and '_dir' (the directory of the profile file, where build contexts and plugins live)."""
    dirs = search_dirs(paths, base_dir)
    data, sources = _load_chain(name, dirs, [])
    if overrides is not None and not isinstance(overrides, dict):
        raise ProfileError(f"profile {name}: spark_profile_overrides must be a mapping, got {type(overrides).__name__}.")
    if overrides:
        data = deep_merge(data, overrides)
    data["name"] = name
    data["_sources"] = sources
    data["_dir"] = os.path.dirname(sources[-1])
    return data


# --------------------------------------------------------------------------------------------
# Schema validation
# --------------------------------------------------------------------------------------------


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _type_name(value):
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return repr(value)


class _Checker:
    """Collects schema problems, each prefixed with the profile and the key path."""

    def __init__(self, profile):
        self.profile = profile
        self.name = profile.get("name", "?")
        self.problems = []

    def add(self, path, message):
        self.problems.append(f"profile {self.name}: {path}: {message}")

    def get(self, path, required=True):
        node = self.profile
        for part in path.split("."):
            if not isinstance(node, dict) or part not in node:
                if required:
                    self.add(path, "is missing.")
                return None
            node = node[part]
        return node

    def mapping(self, path, required=True):
        value = self.get(path, required)
        if value is None:
            return None
        if not isinstance(value, dict):
            self.add(path, f"expected a mapping, got {_type_name(value)}.")
            return None
        return value

    def integer(self, path, required=True, minimum=None, value=None):
        value = self.get(path, required) if value is None else value
        if value is None:
            return None
        if not _is_int(value):
            self.add(path, f"expected an integer, got {_type_name(value)}.")
            return None
        if minimum is not None and value < minimum:
            self.add(path, f"expected an integer >= {minimum}, got {value}.")
            return None
        return value

    def number(self, path, required=True, low=None, high=None):
        value = self.get(path, required)
        if value is None:
            return None
        if not _is_number(value):
            self.add(path, f"expected a number, got {_type_name(value)}.")
            return None
        if (low is not None and value <= low) or (high is not None and value > high):
            self.add(path, f"expected a number in ({low}, {high}], got {value}.")
            return None
        return value

    def string(self, path, required=True, choices=None, pattern=None, hint=""):
        value = self.get(path, required)
        if value is None:
            return None
        if not isinstance(value, str) or not value:
            self.add(path, f"expected a non-empty string, got {_type_name(value)}.")
            return None
        if choices and value not in choices:
            self.add(path, f"expected one of {', '.join(choices)}, got {value!r}.")
            return None
        if pattern and not pattern.match(value):
            self.add(path, f"{value!r} is not valid{hint}.")
            return None
        return value

    def strings(self, path, required=True):
        value = self.get(path, required)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            self.add(path, f"expected a list of non-empty strings, got {_type_name(value)}.")
            return None
        return value

    def unknown(self, path, node, known):
        if isinstance(node, dict):
            extra = sorted(set(node) - set(known))
            if extra:
                self.add(path, f"unknown key(s) {', '.join(extra)}; known keys are {', '.join(sorted(known))}.")


TOP_KEYS = (
    "schema_version", "name", "description", "seed", "engine", "runtime", "checkpoint", "model", "topology",
    "nccl", "memory", "startup_log", "smoke", "api", "parsers", "reference", "boot", "cpu_affinity",
    "forbid_env_values", "_sources", "_dir",
)


def _check_engine(c):
    engine = c.mapping("engine")
    if engine is None:
        return None
    c.unknown("engine", engine, ("kind", "version", "command", "args", "env", "provides"))
    kind = c.string("engine.kind", choices=ENGINES)
    _check_version(c, "engine.version", required=False)
    provides = c.mapping("engine.provides", required=False)
    if provides is not None:
        c.unknown("engine.provides", provides, PROVIDES_KEYS)
        given = {key: c.strings(f"engine.provides.{key}", required=False) for key in PROVIDES_KEYS}
        for idx, item in enumerate(given["classes"] or []):
            if not _CLASS_PATH_RE.match(item):
                c.add(f"engine.provides.classes[{idx}]", f"{item!r} is not a full dotted path 'package.module:ClassName'.")
    command = c.get("engine.command", required=False)
    if command is not None:
        if not isinstance(command, list) or not command or not all(isinstance(v, str) and v for v in command):
            c.add("engine.command", f"expected a non-empty list of strings (argv), got {_type_name(command)}.")
        else:
            for word in command:
                for placeholder in _PLACEHOLDER_RE.findall(word):
                    if placeholder not in PLACEHOLDERS:
                        c.add("engine.command", f"unknown placeholder {{{placeholder}}} in {word!r}; known: "
                              f"{', '.join('{' + p + '}' for p in PLACEHOLDERS)}.")
    args = c.mapping("engine.args", required=False) or {}
    manifest = engine_manifest(c.profile, kind) if kind in ENGINES else None
    for key, value in args.items():
        where = f"engine.args.{key}"
        if not isinstance(key, str) or not _ARG_KEY_RE.match(key):
            c.add(where, "argument names are the flag in snake_case (max_model_len for --max-model-len).")
            continue
        if kind in MANAGED_ARGS and key in MANAGED_ARGS[kind]:
            c.add(where, f"is set by sparkctl from {MANAGED_ARGS[kind][key]}; set it there and remove it from engine.args.")
            continue
        if isinstance(value, list):
            _check_list_arg(c, kind, key, value)
        elif not isinstance(value, (str, int, float, bool, dict)) and value is not None:
            c.add(where, f"expected a string, number, boolean, list or mapping, got {_type_name(value)}.")
            continue
        if manifest is not None:
            _check_against_manifest(c, kind, key, value, manifest)
    for key in ("max_model_len", "context_length", "max_num_seqs", "max_num_batched_tokens", "max_running_requests",
                "chunked_prefill_size", "kv_cache_memory_bytes", "speculative_num_steps", "speculative_eagle_topk",
                "speculative_num_draft_tokens"):
        if key in args:
            c.integer(f"engine.args.{key}", value=args[key], minimum=-1 if key == "chunked_prefill_size" else 1)
    for key in ("gpu_memory_utilization", "mem_fraction_static"):
        if key in args:
            if not _is_number(args[key]) or not 0 < args[key] <= 1:
                c.add(f"engine.args.{key}", f"expected a fraction in (0, 1], got {_type_name(args[key])}.")
    env = c.mapping("engine.env", required=False) or {}
    for key, value in env.items():
        if not isinstance(key, str) or not _ENV_NAME_RE.match(key):
            c.add(f"engine.env.{key}", "is not a valid environment variable name.")
        elif value is not None and not isinstance(value, (str, int, float)) or isinstance(value, bool):
            c.add(f"engine.env.{key}", f"expected a string or number, got {_type_name(value)} (quote 'true'/'false').")
        elif value is not None and (re.search(r"[\s\"'$\\`]", str(value)) or str(value) == ""):
            c.add(f"engine.env.{key}", f"{value!r} is empty or holds whitespace, quotes, '$', '`' or '\\', "
                  "which systemd EnvironmentFile and docker --env-file read differently.")
    return kind


def _check_list_arg(c, kind, key, value):
    """A list renders per the flag's own definition (engine_flags/<engine>.yml), so the flag
    must be one the table knows; an empty list would leave a bare nargs flag."""
    where = f"engine.args.{key}"
    if not all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in value):
        c.add(where, "items of a list must be strings or numbers.")
        return
    if not value:
        c.add(where, "is an empty list; remove the key to keep the engine's default.")
        return
    if kind not in ENGINES:
        return
    if key not in engine_list_flags(kind):
        c.add(where, f"{_flag(key)} is not a list-valued {kind} option sparkctl knows "
              f"(profiles/engine_flags/{kind}.yml): give one value, or, if the pinned engine defines the flag "
              "with nargs or action='append', add it to that table with its arity.")


def _check_against_manifest(c, kind, key, value, manifest):
    """The flag exists in the engine release the profile runs, takes the kind of value given,
    and, where the engine lists its choices, one of them."""
    label, flags = manifest
    where = f"engine.args.{key}"
    entry = flags.get(key)
    if entry is None:
        close = difflib.get_close_matches(key, list(flags), n=1, cutoff=0.75)
        hint = (f"did you mean {close[0]} ({_flag(close[0])})?" if close
                else f"check the spelling against `{kind} --help` of that release.")
        c.add(where, f"{_flag(key)} is not an option of {label}: {hint}")
        return
    arity = entry.get("kind")
    if value is None or value is False:
        return
    if value is True:
        if arity not in ("bool", "optional"):
            c.add(where, f"{_flag(key)} takes a value in {label}, not a bare flag: give the value instead of true.")
    elif isinstance(value, list):
        if arity not in LIST_ARITIES and key in engine_list_flags(kind):
            c.add(where, f"{_flag(key)} takes a single value in {label}; give one value, not a list.")
    elif arity == "bool":
        c.add(where, f"{_flag(key)} is a bare flag in {label}: write true (or false to leave it out), not {value!r}.")
    elif entry.get("choices") and not isinstance(value, dict) and _value(value) not in entry["choices"]:
        c.add(where, f"{value!r} is not one of the choices of {_flag(key)} in {label}: "
              f"{', '.join(entry['choices'])}.")


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


def _check_engine_env(c, kind):
    """engine.env names with the engine's own prefix (VLLM_, SGLANG_/SGL_) must be variables the
    release reads (every manifested release's when the release is unknown), or ones
    engine.provides.env states: a misspelled one is otherwise ignored without a word."""
    engine = c.profile.get("engine")
    env = engine.get("env") if isinstance(engine, dict) else None
    manifests = engine_env_names(kind) if kind in ENGINES else {}
    if not isinstance(env, dict) or not manifests:
        return
    version = engine_version(c.profile, kind)
    prefixes = tuple(sorted(_for_release({v: set(release_prefixes) for v, (release_prefixes, _names) in manifests.items()}, version)))
    names = _for_release({v: release_names for v, (_prefixes, release_names) in manifests.items()}, version) | _provided(c.profile, "env")
    if version in manifests:
        verdict = f"{kind} {version} reads no such variable"
    else:
        verdict = (f"no {kind} release with a manifest ({', '.join(sorted(manifests, key=_version_key))}) reads it "
                   "(set engine.version to check against one)")
    for key in env:
        if not isinstance(key, str) or not key.startswith(prefixes) or key in names:
            continue
        close = difflib.get_close_matches(key, sorted(names), n=1, cutoff=0.8)
        hint = f"did you mean {close[0]}? " if close else ""
        c.add(f"engine.env.{key}", f"{verdict}: {hint}fix the name, or, for an engine build that "
              "reads it over its release (a fork in an image), list it in engine.provides.env.")


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


def _check_parser_names(c, kind):
    """parsers.tool_call / parsers.reasoning name a parser the engine will find: one its release
    registers, its own plugin registers, or engine.provides states (a fork's additions)."""
    parsers = c.profile.get("parsers")
    if kind not in ENGINES or not isinstance(parsers, dict) or not engine_parser_names(kind):
        return
    registered = None
    for section, (what, provides_key) in PARSER_SECTIONS.items():
        name = parsers.get(section)
        if not isinstance(name, str):
            continue
        registered = registered or registered_parsers(c.profile)
        label, names = registered[section]
        if name in names:
            continue
        close = difflib.get_close_matches(name, sorted(names), n=3, cutoff=0.6)
        hint = f"did you mean {' or '.join(close)}? " if close else ""
        c.add(f"parsers.{section}", f"{name!r} is not a {what} parser {label} registers: {hint}pick one it registers, "
              f"register it in the profile's plugin (runtime.venv.plugin.source), or, for an engine build that adds it "
              f"over its release (a fork in an image), list it in engine.provides.{provides_key}.")


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


def _check_class_paths(c):
    """Each parsers.logits_processors entry 'package.module:Class' names a class the engine can
    load: defined in the profile's own plugin source (read, never imported), or stated in
    engine.provides.classes for an engine build that ships it. The pinned release's own
    classes are not in its manifest, so those are listed in engine.provides.classes too."""
    parsers = c.profile.get("parsers")
    items = parsers.get("logits_processors") if isinstance(parsers, dict) else None
    if not isinstance(items, list):
        return
    provides = ((c.profile.get("engine") or {}).get("provides") or {})
    declared = [p for p in (provides.get("classes") or []) if isinstance(p, str)] if isinstance(provides, dict) else []
    modules = None
    for idx, item in enumerate(items):
        if not isinstance(item, str) or not _CLASS_PATH_RE.match(item) or item in declared:
            continue
        where = f"parsers.logits_processors[{idx}]"
        modules = _plugin_modules(c.profile) if modules is None else modules
        module, cls = item.split(":", 1)
        if module in modules:
            tree = _parse(modules[module])
            names = python_source.top_level_names(tree) if tree is not None else set()
            if cls in names:
                continue
            close = difflib.get_close_matches(cls, sorted(names), n=1, cutoff=0.6)
            rel = module.replace(".", "/") + ("/__init__.py" if modules[module].endswith("__init__.py") else ".py")
            c.add(where, f"{item!r}: {rel} of the profile's plugin defines no {cls}: "
                  f"{'did you mean ' + close[0] + '?' if close else 'check the class name.'}")
            continue
        top = module.split(".", 1)[0]
        close_modules = difflib.get_close_matches(module, [m for m in modules if m.split(".", 1)[0] == top], n=1,
                                                  cutoff=0.8)
        if close_modules:
            c.add(where, f"{item!r}: no module {module} in the profile's plugin source: did you mean {close_modules[0]}?")
            continue
        close = difflib.get_close_matches(item, declared, n=1, cutoff=0.8)
        hint = f" did you mean {close[0]}?" if close else ""
        c.add(where, f"{item!r} is in neither the profile's plugin source (runtime.venv.plugin.source) nor "
              f"engine.provides.classes, so nothing shows the engine can load it:{hint} fix the path, ship the module in "
              "the plugin, or list the class in engine.provides.classes when the engine build itself has it.")


def _check_runtime(c):
    runtime = c.mapping("runtime")
    if runtime is None:
        return None
    c.unknown("runtime", runtime, ("kind", "image", "venv"))
    kind = c.string("runtime.kind", choices=RUNTIMES)
    if kind == "image":
        image = c.mapping("runtime.image")
        if image is not None:
            c.unknown("runtime.image", image, ("pull", "build", "load", "nccl_version"))
            sources = [k for k in ("pull", "build", "load") if k in image]
            if len(sources) != 1:
                c.add("runtime.image", f"give exactly one of pull, build or load (found {', '.join(sources) or 'none'}).")
            if "pull" in image:
                c.string("runtime.image.pull")
            if "build" in image:
                build = c.mapping("runtime.image.build")
                if build is not None:
                    c.unknown("runtime.image.build", build, ("base", "context", "tag", "build_on"))
                    c.string("runtime.image.build.base")
                    c.string("runtime.image.build.context")
                    c.string("runtime.image.build.tag")
                    c.string("runtime.image.build.build_on", required=False, choices=("head", "each"))
                    context = build.get("context")
                    if isinstance(context, str) and not os.path.isabs(context) and c.profile.get("_dir"):
                        full = os.path.join(c.profile["_dir"], context)
                        if not os.path.isfile(os.path.join(full, "Dockerfile")):
                            c.add("runtime.image.build.context", f"{full} has no Dockerfile; keep the patch context "
                                  "beside the profile (profiles/contexts/<name>/Dockerfile).")
            if "load" in image:
                c.string("runtime.image.load")
            _check_version(c, "runtime.image.nccl_version", required=False)
    elif kind == "venv":
        venv = c.mapping("runtime.venv")
        if venv is not None:
            c.unknown("runtime.venv", venv, ("python", "packages", "extra_index_urls", "find_links", "plugin", "registry"))
            c.string("runtime.venv.python", pattern=_PYTHON_RE,
                     hint=': write "3" for the system python3 or "3.X" for that minor (e.g. "3.12")')
            packages = c.strings("runtime.venv.packages")
            for idx, spec in enumerate(packages or []):
                if "==" not in spec and " @ " not in spec:
                    c.add(f"runtime.venv.packages[{idx}]", f"{spec!r} is not pinned; write name==version so every node "
                          "installs the same build.")
                elif requirement_name(spec) == "ray" and " @ " not in spec and "default" not in requirement_extras(spec):
                    c.add(f"runtime.venv.packages[{idx}]", f"{spec!r} lacks the dashboard and Jobs API the Ray head "
                          f"unit starts; write ray[default]=={spec.split('==', 1)[1].strip()}, or remove it so "
                          f"sparkctl installs {RAY_REQUIREMENT}.")
            c.strings("runtime.venv.extra_index_urls", required=False)
            c.strings("runtime.venv.find_links", required=False)
            plugin = c.mapping("runtime.venv.plugin", required=False)
            if plugin is not None:
                c.unknown("runtime.venv.plugin", plugin, ("source", "replaces", "architecture", "module"))
                c.string("runtime.venv.plugin.source")
                for idx, rel in enumerate(c.strings("runtime.venv.plugin.replaces") or []):
                    norm = os.path.normpath(rel)
                    if os.path.isabs(rel) or norm.startswith("..") or norm.endswith(".orig"):
                        c.add(f"runtime.venv.plugin.replaces[{idx}]", f"{rel!r} must be a path inside site-packages "
                              "(relative, no '..', not a .orig backup), e.g. vllm/model_executor/models/registry.py.")
                c.string("runtime.venv.plugin.architecture")
                c.string("runtime.venv.plugin.module", required=False, pattern=_MODULE_RE, hint=": a dotted module name")
            registry = c.mapping("runtime.venv.registry", required=False)
            if registry is not None:
                # How to list the engine's architectures when it is not stock vLLM or SGLang.
                c.unknown("runtime.venv.registry", registry, ("module", "attribute"))
                c.string("runtime.venv.registry.module", pattern=_MODULE_RE, hint=": a dotted module name")
                c.string("runtime.venv.registry.attribute", pattern=_MODULE_RE,
                         hint=": a dotted attribute of the module, e.g. ModelRegistry.get_supported_archs")
    return kind


def venv_packages(profile):
    """What the venv runtime installs: the profile's pins, plus RAY_REQUIREMENT when the
    topology runs on Ray and the profile pins no ray of its own."""
    packages = list(((profile.get("runtime") or {}).get("venv") or {}).get("packages") or [])
    kind = (profile.get("topology") or {}).get("kind")
    if kind in RAY_TOPOLOGIES and not any(requirement_name(p) == "ray" for p in packages):
        packages.append(RAY_REQUIREMENT)
    return packages


def _check_version(c, path, required=True):
    value = c.get(path, required)
    if value is None:
        return None
    if not isinstance(value, str) or not _VERSION_RE.match(value):
        c.add(path, f"expected a version like '2.30.7' (quoted), got {_type_name(value)}.")
        return None
    return tuple(int(x) for x in _VERSION_RE.match(value).groups())


def _check_checkpoint(c):
    ckpt = c.mapping("checkpoint")
    if ckpt is None:
        return
    c.unknown("checkpoint", ckpt, ("repo_id", "revision", "shards", "size_bytes", "precision", "dir_name",
                                   "quantized_alternatives"))
    c.string("checkpoint.repo_id", pattern=_REPO_ID_RE, hint=" (a hub repo id like 'org/name')")
    c.string("checkpoint.revision")
    c.integer("checkpoint.shards", required=False, minimum=1)
    c.integer("checkpoint.size_bytes", minimum=1)
    c.string("checkpoint.precision", choices=("bf16", "fp16", "fp8", "nvfp4", "mxfp4", "int4"))
    c.string("checkpoint.dir_name", pattern=_NAME_RE, hint=" (lowercase, digits, '.', '_', '-')")
    alternatives = c.get("checkpoint.quantized_alternatives", required=False)
    if alternatives is not None:
        if not isinstance(alternatives, list):
            c.add("checkpoint.quantized_alternatives", f"expected a list of {{repo_id, precision}}, got {_type_name(alternatives)}.")
        else:
            for idx, alt in enumerate(alternatives):
                if not isinstance(alt, dict) or not isinstance(alt.get("repo_id"), str) or not isinstance(alt.get("precision"), str):
                    c.add(f"checkpoint.quantized_alternatives[{idx}]", "expected {repo_id, precision}.")


def _check_topology(c, engine):
    topo = c.mapping("topology")
    if topo is None:
        return
    c.unknown("topology", topo, ("kind", "tensor_parallel", "expert_parallel", "nodes", "dist_init_port",
                                 "rank0_port", "ray_port"))
    kind = c.string("topology.kind", choices=TOPOLOGIES)
    tp = c.integer("topology.tensor_parallel", minimum=1)
    ep = c.integer("topology.expert_parallel", required=False, minimum=1)
    nodes = c.integer("topology.nodes", minimum=1)
    for port in ("dist_init_port", "rank0_port", "ray_port"):
        value = c.integer(f"topology.{port}", required=False, minimum=1)
        if value is not None and value > 65535:
            c.add(f"topology.{port}", f"expected a TCP port (1-65535), got {value}.")
    if kind == "sglang_ranks" and engine not in (None, "sglang"):
        c.add("topology.kind", f"sglang_ranks runs SGLang's own multi-node launcher; engine.kind is {engine!r}: use ray_tp.")
    if kind in ("ray_tp", "ray_tp_ep") and engine == "sglang":
        c.add("topology.kind", "SGLang does not run on Ray here: use sglang_ranks.")
    if kind == "ray_tp_ep" and tp and ep != tp:
        c.add("topology.expert_parallel", f"vLLM's expert parallel size is tensor_parallel x data_parallel = {tp}; "
              f"set expert_parallel: {tp} (got {ep}).")
    if kind == "ray_tp" and ep not in (None, 1):
        c.add("topology.expert_parallel", "ray_tp does not shard experts; use kind: ray_tp_ep or remove expert_parallel.")
    if tp and nodes and tp % nodes:
        c.add("topology.tensor_parallel", f"{tp} ranks do not spread evenly over {nodes} nodes (one GB10 GPU per node).")
    if tp and nodes and tp > nodes:
        c.add("topology.tensor_parallel", f"{tp} ranks need {tp} GPUs; a DGX Spark has one GPU, so set nodes: {tp}.")


def _check_memory(c):
    mem = c.mapping("memory")
    if mem is None:
        return
    c.unknown("memory", mem, ("weights_per_rank_bytes", "kv_pool_bytes", "overhead_bytes", "gpu_memory_utilization",
                              "node_budget_bytes", "notes"))
    c.integer("memory.weights_per_rank_bytes", required=False, minimum=1)
    c.integer("memory.kv_pool_bytes", minimum=1)
    c.integer("memory.overhead_bytes", minimum=0)
    c.number("memory.gpu_memory_utilization", required=False, low=0, high=1)
    c.integer("memory.node_budget_bytes", required=False, minimum=1)


def _check_rest(c):
    log = c.get("startup_log", required=False)
    if log is not None:
        if not isinstance(log, list):
            c.add("startup_log", f"expected a list of {{name, regex, on_mismatch}}, got {_type_name(log)}.")
        else:
            for idx, item in enumerate(log):
                where = f"startup_log[{idx}]"
                if not isinstance(item, dict):
                    c.add(where, "expected a mapping {name, regex, on_mismatch, [expect|min|max]}.")
                    continue
                c.unknown(where, item, ("name", "regex", "expect", "min", "max", "tolerance", "on_mismatch"))
                if not isinstance(item.get("name"), str):
                    c.add(f"{where}.name", "is missing.")
                regex = item.get("regex")
                try:
                    compiled = re.compile(regex) if isinstance(regex, str) else None
                except re.error as exc:
                    c.add(f"{where}.regex", f"is not a valid regular expression: {exc}.")
                    compiled = None
                if compiled is None and not isinstance(regex, str):
                    c.add(f"{where}.regex", "is missing.")
                numeric = any(k in item for k in ("min", "max", "tolerance")) or _is_number(item.get("expect"))
                if compiled is not None and numeric and compiled.groups < 1:
                    c.add(f"{where}.regex", "needs a capture group holding the number to compare.")
                for key in ("min", "max", "tolerance"):
                    if key in item and not _is_number(item[key]):
                        c.add(f"{where}.{key}", f"expected a number, got {_type_name(item[key])}.")
                if item.get("on_mismatch") not in ON_MISMATCH:
                    c.add(f"{where}.on_mismatch", f"expected warn or fail, got {_type_name(item.get('on_mismatch'))}.")
    smoke = c.mapping("smoke")
    if smoke is not None:
        c.unknown("smoke", smoke, ("endpoint", "prompt", "expect", "max_tokens", "chat_template_kwargs"))
        c.string("smoke.endpoint", choices=("completions", "chat"))
        c.string("smoke.prompt")
        c.string("smoke.expect")
        c.integer("smoke.max_tokens", required=False, minimum=1)
    api = c.mapping("api")
    if api is not None:
        c.unknown("api", api, ("port", "engine_port", "served_model_name", "bind", "tool_request_overrides"))
        port = c.integer("api.port", minimum=1)
        if port is not None and port > 65535:
            c.add("api.port", f"expected a TCP port (1-65535), got {port}.")
            port = None
        _check_engine_port(c, port)
        c.string("api.served_model_name")
        bind = c.string("api.bind", required=False)
        if bind is not None and not _is_ip_address(bind):
            c.add("api.bind", f"{bind!r} is not an IP address; nginx (or the engine) listens on it as given: write "
                  "0.0.0.0 (every IPv4 address), :: (every IPv6 address) or one address of the head, e.g. 172.30.77.11.")
        c.mapping("api.tool_request_overrides", required=False)
    parsers = c.mapping("parsers", required=False)
    if parsers is not None:
        c.unknown("parsers", parsers, ("tool_call", "reasoning", "logits_processors", "auto_tool_choice"))
        c.string("parsers.tool_call", required=False)
        c.string("parsers.reasoning", required=False)
        for idx, proc in enumerate(c.strings("parsers.logits_processors", required=False) or []):
            if not _CLASS_PATH_RE.match(proc):
                c.add(f"parsers.logits_processors[{idx}]", f"{proc!r} is not a full dotted path 'package.module:ClassName'.")
        auto = c.get("parsers.auto_tool_choice", required=False)
        if auto is not None and not isinstance(auto, bool):
            c.add("parsers.auto_tool_choice", f"expected true or false, got {_type_name(auto)}.")
    boot = c.mapping("boot", required=False)
    if boot is not None:
        c.unknown("boot", boot, ("first_seconds", "warm_seconds", "timeout_seconds"))
        for key in ("first_seconds", "warm_seconds", "timeout_seconds"):
            c.integer(f"boot.{key}", required=False, minimum=1)
    cpus = c.get("cpu_affinity", required=False)
    if cpus is not None and (not isinstance(cpus, str) or not re.match(r"^\d+(-\d+)?(,\d+(-\d+)?)*$", cpus)):
        c.add("cpu_affinity", f"expected CPU ranges like '5-9,15-19', got {_type_name(cpus)}.")
    forbid = c.mapping("forbid_env_values", required=False)
    for key, values in (forbid or {}).items():
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            c.add(f"forbid_env_values.{key}", "expected a list of forbidden substrings.")
    reference = c.mapping("reference", required=False)
    if reference is not None:
        c.unknown("reference", reference, ("source", "decode_tok_s", "ttft_s", "throughput_tok_s", "notes"))
    model = c.mapping("model", required=False)
    if model is not None:
        c.unknown("model", model, ("architecture", "linear_attention", "parameters", "context_native"))
        c.string("model.linear_attention", required=False, choices=LINEAR_ATTENTION)
    nccl = c.mapping("nccl", required=False)
    if nccl is not None:
        c.unknown("nccl", nccl, ("preload",))
        preload = c.mapping("nccl.preload", required=False)
        if preload is not None:
            c.unknown("nccl.preload", preload, ("version", "path"))
            _check_version(c, "nccl.preload.version")
            path = c.string("nccl.preload.path")
            if path is not None and not path.startswith("/"):
                c.add("nccl.preload.path", f"expected an absolute library path on the nodes, got {path!r}.")


def _check_engine_port(c, port):
    """api.engine_port: where the engine listens on 127.0.0.1 behind the API proxy (default
    api.port + 1). It must be a free TCP port of its own: not the public one, not a topology port."""
    given = c.get("api.engine_port", required=False)
    if given is not None:
        value = c.integer("api.engine_port", minimum=1)
        if value is None:
            return
        if value > 65535:
            c.add("api.engine_port", f"expected a TCP port (1-65535), got {value}.")
            return
    elif port is None:
        return
    else:
        value = port + 1
    where = "api.engine_port" if given is not None else "api.engine_port (default api.port + 1)"
    if value > 65535:
        c.add(where, f"api.port {port} leaves no next port; set api.engine_port to a free port below 65536.")
        return
    if port is not None and value == port:
        c.add(where, f"{value} is api.port, where the API proxy listens; give the engine another port (e.g. {port + 1}).")
        return
    topo = c.profile.get("topology") if isinstance(c.profile.get("topology"), dict) else {}
    for key, default in TOPOLOGY_PORTS.items():
        if key in topo:
            used = topo[key]
        elif key in TOPOLOGY_DEFAULT_PORTS.get(topo.get("kind"), ()):
            used = default
        else:
            continue
        if used == value:
            c.add(where, f"{value} is also topology.{key}; set api.engine_port to a free port.")
            return


def _is_ip_address(text):
    """An IPv4 or IPv6 address as written in a listen directive: no zone, prefix or port."""
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return "%" not in text


_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


def _control_characters(c, node, path):
    """Every string of the profile (keys included) reaches a systemd unit, an environment file,
    nginx's configuration or a request: a line break there starts a new directive (an
    ExecStartPre= line, a listen option), so no control character is taken anywhere."""
    if isinstance(node, dict):
        for key, value in node.items():
            where = f"{path}.{key}" if path else str(key)
            if isinstance(key, str) and _CONTROL_RE.search(key):
                c.add(where, f"the key {key!r} holds a control character; rename it.")
                continue
            _control_characters(c, value, where)
    elif isinstance(node, list):
        for idx, value in enumerate(node):
            _control_characters(c, value, f"{path}[{idx}]")
    elif isinstance(node, str) and _CONTROL_RE.search(node):
        char = _CONTROL_RE.search(node).group(0)
        c.add(path, f"holds a control character ({char!r}) in {node!r}: profile strings are written into systemd units "
              "and nginx's configuration, where a line break starts a new directive; remove it.")


def schema_problems(profile):
    """Problems with the shape of a resolved profile; each names the profile and key path."""
    c = _Checker(profile)
    c.unknown("(top level)", profile, TOP_KEYS)
    _control_characters(c, {k: v for k, v in profile.items() if k not in ("_sources", "_dir")}, "")
    version = profile.get("schema_version")
    if version != SCHEMA_VERSION:
        c.add("schema_version", f"expected {SCHEMA_VERSION}, got {_type_name(version)}.")
    engine = _check_engine(c)
    _check_runtime(c)
    _check_checkpoint(c)
    _check_topology(c, engine)
    _check_memory(c)
    _check_rest(c)
    _check_parser_names(c, engine)
    _check_class_paths(c)
    _check_engine_env(c, engine)
    return c.problems


# --------------------------------------------------------------------------------------------
# Trap rules (engine settings that wedge or crash a node; docs/field-notes.md), judged before any change
# --------------------------------------------------------------------------------------------


def _fmt_bytes(n):
    return f"{n / 1e9:.1f} GB ({n / GIB:.1f} GiB)"


def _args(profile):
    return (profile.get("engine") or {}).get("args") or {}


def _engine_env(profile):
    return (profile.get("engine") or {}).get("env") or {}


def context_tokens(profile):
    args = _args(profile)
    return args.get("max_model_len") or args.get("context_length")


def uses_cuda_graphs(profile):
    args = _args(profile)
    if (profile.get("engine") or {}).get("kind") == "sglang":
        return not args.get("disable_cuda_graph")
    return not args.get("enforce_eager")


def speculative_method(profile):
    args = _args(profile)
    if args.get("speculative_config"):
        spec = args["speculative_config"]
        return spec.get("method", "configured") if isinstance(spec, dict) else "configured"
    if args.get("speculative_algorithm"):
        return str(args["speculative_algorithm"])
    return None


def node_memory_bytes(profile):
    """Per-node need: weights per rank + KV pool + runtime overhead (weights default to the
    checkpoint split evenly over the tensor-parallel ranks)."""
    mem = profile.get("memory") or {}
    weights = mem.get("weights_per_rank_bytes")
    if weights is None:
        size = (profile.get("checkpoint") or {}).get("size_bytes") or 0
        tp = (profile.get("topology") or {}).get("tensor_parallel") or 1
        weights = -(-size // tp)
    return {
        "weights": int(weights),
        "kv_pool": int(mem.get("kv_pool_bytes") or 0),
        "overhead": int(mem.get("overhead_bytes") or 0),
        "budget": int(mem.get("node_budget_bytes") or DEFAULT_NODE_BUDGET_BYTES),
    }


def _nccl_fixed(profile):
    preload = (profile.get("nccl") or {}).get("preload") or {}
    image_nccl = ((profile.get("runtime") or {}).get("image") or {}).get("nccl_version")
    for version in (preload.get("version"), image_nccl):
        match = _VERSION_RE.match(str(version or ""))
        if match and tuple(int(x) for x in match.groups()) >= NCCL_GRAPH_FIX:
            return True
    return False


def trap_problems(profile):
    """The known engine traps (docs/field-notes.md, "Engine traps"), each refused with the reason and the fix."""
    name = profile.get("name", "?")
    engine = (profile.get("engine") or {}).get("kind")
    args = _args(profile)
    env = _engine_env(profile)
    problems = []

    def refuse(message):
        problems.append(f"profile {name}: {message}")

    if str(args.get("load_format", "")).lower() == "dummy":
        refuse("engine.args.load_format: 'dummy' is refused: the dummy initialiser upcasts fp8 parameters to fp16 "
               "(seed 002: the 51.2 GB fp8 PLE table alone needs > 150 GB transiently) and wedges a 128 GB GB10 node; "
               "remove load_format and load the real checkpoint.")
    if args.get("no_ple_offload_embedding"):
        refuse("engine.args.no_ple_offload_embedding is refused: disabling PLE offload pins ~26 GB more per rank on the GPU "
               "side and over-commits unified memory (seed 002); remove it and keep SGLang's automatic offload.")
    for var, forbidden in (profile.get("forbid_env_values") or {}).items():
        value = str(env.get(var, ""))
        for needle in forbidden:
            if needle in value:
                refuse(f"engine.env.{var}={value!r} contains {needle!r}, which this profile forbids (the seed's recipe was "
                       f"never validated with it on GB10); remove it from engine.env.{var}.")
    ctx = context_tokens(profile)
    if engine == "sglang" and _is_int(ctx) and ctx >= 900_000:
        chunk = args.get("chunked_prefill_size")
        if chunk is None or (_is_int(chunk) and (chunk > 1024 or chunk < 0)):
            if chunk is None:
                shown = "unset (SGLang picks a larger default)"
            else:
                shown = "-1 (unchunked)" if _is_int(chunk) and chunk < 0 else chunk
            refuse(f"engine.args.chunked_prefill_size is {shown} at a {ctx:,}-token context: the QSA indexer's fp32 "
                   "workspace grows with chunk x history and 4096 wedged the box (seed 002); set chunked_prefill_size: 1024 "
                   "or lower.")
    linear = (profile.get("model") or {}).get("linear_attention")
    method = speculative_method(profile)
    if linear == "kda" and method:
        refuse(f"speculative decoding ({method}) is refused on a KDA linear-attention model: vLLM's spec-decode path "
               "asserts on the KDA recurrent state on the first token (seed 004, every method); remove "
               f"engine.args.{'speculative_config' if 'speculative_config' in args else 'speculative_algorithm'}.")
    nodes = (profile.get("topology") or {}).get("nodes") or 1
    if nodes > 1 and uses_cuda_graphs(profile) and not _nccl_fixed(profile):
        fix = "engine.args.enforce_eager: true" if engine != "sglang" else "engine.args.disable_cuda_graph: true"
        refuse("cross-node CUDA graphs without an NCCL that fixes the graph-replay deadlock (>= 2.30.4; pip's 2.28.9 hangs "
               f"the first generation, seeds 002/004): set {fix}, or preload a fixed host NCCL with "
               "nccl.preload {version: '2.30.7', path: /abs/libnccl.so.2}.")
    mem = node_memory_bytes(profile)
    total = mem["weights"] + mem["kv_pool"] + mem["overhead"]
    if mem["kv_pool"] and total > mem["budget"]:
        ckpt = profile.get("checkpoint") or {}
        precision = str(ckpt.get("precision", "")).upper()
        msg = (f"memory: {_fmt_bytes(mem['weights'])} of weights per rank + {_fmt_bytes(mem['kv_pool'])} KV pool + "
               f"{_fmt_bytes(mem['overhead'])} overhead = {_fmt_bytes(total)} per node exceeds the node budget of "
               f"{_fmt_bytes(mem['budget'])}")
        if precision in ("BF16", "FP16"):
            alts = ckpt.get("quantized_alternatives") or []
            named = ", ".join(f"{a['repo_id']} ({a['precision'].upper()})" for a in alts if isinstance(a, dict))
            msg += (f": the {precision} checkpoint {ckpt.get('repo_id', '')} does not fit two Sparks; serve a quantized "
                    f"(FP8) checkpoint instead{' such as ' + named if named else ''}, via spark_profile_overrides "
                    "{checkpoint: {repo_id, revision, size_bytes, precision: fp8, ...}, memory: {weights_per_rank_bytes: ...}}.")
        else:
            msg += ": shrink memory.kv_pool_bytes (and the engine's KV argument with it) or the context length."
        refuse(msg)
    kv_arg = args.get("kv_cache_memory_bytes")
    if engine == "vllm" and kv_arg is not None and kv_arg != (profile.get("memory") or {}).get("kv_pool_bytes"):
        refuse(f"engine.args.kv_cache_memory_bytes ({kv_arg}) differs from memory.kv_pool_bytes "
               f"({(profile.get('memory') or {}).get('kv_pool_bytes')}): the budget check would judge the wrong pool; "
               "set both to the same value.")
    return problems


def profile_problems(profile):
    """Schema problems first; traps only on a profile whose shape is sound."""
    problems = schema_problems(profile)
    if problems:
        return problems
    return trap_problems(profile)


def resolve(name, paths=None, overrides=None, base_dir=None):
    """(profile or None, problems): what the validation play needs."""
    try:
        profile = load_profile(name, paths, overrides, base_dir)
    except ProfileError as exc:
        return None, [str(exc)]
    return profile, profile_problems(profile)


# --------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------


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


def list_argv(key, values, engine):
    """A list-valued option as the engine's parser takes it: nargs is ONE occurrence followed by
    every value (a second occurrence would replace the first), append is the flag per value."""
    values = [_value(v) for v in values]
    if not values:
        return []
    if engine_list_flags(engine).get(key) == "append":
        return [word for v in values for word in (_flag(key), v)]
    return [_flag(key)] + values


def args_argv(args, engine):
    """engine.args -> argv: true is a bare flag, false is omitted, a list follows the flag's
    definition in engine_flags/<engine>.yml, a mapping is passed as compact JSON."""
    argv = []
    for key, value in args.items():
        if value is True:
            argv.append(_flag(key))
        elif value is False or value is None:
            continue
        elif isinstance(value, list):
            argv += list_argv(key, value, engine)
        else:
            argv += [_flag(key), _value(value)]
    return argv


def _default_command(engine, runtime):
    if engine == "vllm":
        return ["{venv}/bin/vllm", "serve", "{model_dir}"] if runtime == "venv" else ["vllm", "serve", "{model_dir}"]
    python = "{venv}/bin/python" if runtime == "venv" else "python3"
    return [python, "-m", "sglang.launch_server", "--model-path", "{model_dir}"]


def _fill(words, values):
    return [_PLACEHOLDER_RE.sub(lambda m: str(values[m.group(1)]), w) for w in words]


def _require_cluster(cluster, runtime):
    missing = [k for k in ("head", "workers", "service_user", "checkpoint_dir", "api_key_file") if not cluster.get(k)]
    if runtime == "venv" and not cluster.get("venv_path"):
        missing.append("venv_path")
    if runtime == "image" and not cluster.get("image"):
        missing.append("image")
    if missing:
        raise ProfileError(f"render: the cluster description lacks {', '.join(missing)}.")


def engine_port(profile):
    """The port the engine listens on behind the API proxy: api.engine_port, else api.port + 1."""
    api = profile.get("api") or {}
    return int(api.get("engine_port") or int(api["port"]) + 1)


def api_endpoints(profile, cluster):
    """Who listens where. `public` is what users reach (api.bind:api.port); `engine` is where the
    engine's HTTP server (vLLM's API server, SGLang's router) binds: the same address without the
    API proxy, 127.0.0.1:api.engine_port behind it (cluster['api_proxy'], default true)."""
    api = profile["api"]
    public = {"bind": str(api.get("bind", "0.0.0.0")), "port": int(api["port"])}
    proxy = bool(cluster.get("api_proxy", True))
    engine = {"bind": ENGINE_BIND_BEHIND_PROXY, "port": engine_port(profile)} if proxy else dict(public)
    return {"proxy": proxy, "public": public, "engine": engine}


def engine_argv(profile, cluster, node_rank=0):
    """The argv of the engine process on node `node_rank` (0 = head)."""
    engine = profile["engine"]["kind"]
    runtime = profile["runtime"]["kind"]
    topo = profile["topology"]
    api = profile["api"]
    parsers = profile.get("parsers") or {}
    # {bind} and {port} are where this process listens: behind the API proxy, loopback only.
    listen = api_endpoints(profile, cluster)["engine"]
    values = {
        "venv": cluster.get("venv_path", ""),
        "model_dir": cluster["checkpoint_dir"],
        "served_model_name": api["served_model_name"],
        "port": listen["port"],
        "bind": listen["bind"],
    }
    argv = _fill(profile["engine"].get("command") or _default_command(engine, runtime), values)
    head_ip = bare_address(cluster["head"]["link_ip"])
    if engine == "vllm":
        argv += ["--served-model-name", api["served_model_name"], "--host", listen["bind"], "--port", str(listen["port"])]
        argv += ["--distributed-executor-backend", "ray", "--tensor-parallel-size", str(topo["tensor_parallel"])]
        if topo["kind"] == "ray_tp_ep":
            argv.append("--enable-expert-parallel")
        argv += args_argv(profile["engine"].get("args") or {}, engine)
        if parsers.get("auto_tool_choice"):
            argv.append("--enable-auto-tool-choice")
        if parsers.get("tool_call"):
            argv += ["--tool-call-parser", parsers["tool_call"]]
        if parsers.get("reasoning"):
            argv += ["--reasoning-parser", parsers["reasoning"]]
        argv += list_argv("logits_processors", parsers.get("logits_processors") or [], engine)
        return argv
    # SGLang: every node runs one rank of the same command; rank 0 serves HTTP on
    # loopback behind the router, and reads its API key from a --config file.
    argv += ["--served-model-name", api["served_model_name"], "--tp-size", str(topo["tensor_parallel"])]
    if topo.get("expert_parallel", 1) > 1:
        argv += ["--ep-size", str(topo["expert_parallel"])]
    argv += ["--nnodes", str(topo["nodes"]), "--node-rank", str(node_rank),
             "--dist-init-addr", f"{head_ip}:{topo.get('dist_init_port', 25000)}"]
    if node_rank == 0:
        argv += ["--host", "127.0.0.1", "--port", str(topo.get("rank0_port", 30000)), "--config", cluster["api_key_file"]]
    argv += args_argv(profile["engine"].get("args") or {}, engine)
    if parsers.get("tool_call"):
        argv += ["--tool-call-parser", parsers["tool_call"]]
    if parsers.get("reasoning"):
        argv += ["--reasoning-parser", parsers["reasoning"]]
    return argv


def router_argv(profile, cluster):
    """SGLang's router on the head: the API in front of rank 0 (itself behind the API proxy,
    on loopback, unless the proxy is off)."""
    runtime = profile["runtime"]["kind"]
    python = f"{cluster['venv_path']}/bin/python" if runtime == "venv" else "python3"
    rank0 = f"http://127.0.0.1:{profile['topology'].get('rank0_port', 30000)}"
    listen = api_endpoints(profile, cluster)["engine"]
    return [python, "-m", "sglang_router.launch_router", "--worker-urls", rank0,
            "--host", listen["bind"], "--port", str(listen["port"])]


def ray_argv(profile, cluster, node):
    """`ray start` for the head (node is None) or a worker, every port on the link address."""
    runtime = profile["runtime"]["kind"]
    ray = f"{cluster['venv_path']}/bin/ray" if runtime == "venv" else "ray"
    head_ip = bare_address(cluster["head"]["link_ip"])
    port = profile["topology"].get("ray_port", 6379)
    common = ["--block", "--disable-usage-stats", "--num-gpus=1", "--min-worker-port=10002", "--max-worker-port=19999"]
    if node is None:
        return [ray, "start", "--head", f"--node-ip-address={head_ip}", f"--port={port}",
                # Whoever reaches the dashboard/Jobs API runs code: loopback only.
                "--dashboard-host=127.0.0.1", "--dashboard-port=8265", "--ray-client-server-port=10001"] + common
    return [ray, "start", f"--address={head_ip}:{port}", f"--node-ip-address={bare_address(node['link_ip'])}"] + common


def environment(profile):
    """The engine's own environment (profile engine.env). The fabric environment (NCCL, Gloo,
    UCX, Ray, *_HOST_IP, MAX_JOBS, PATH, LD_PRELOAD) lives in /etc/sparkctl/fabric.env, which
    every sparkctl-* unit reads first, so it is not repeated here."""
    env = {}
    for key, value in _engine_env(profile).items():
        if value is not None:
            env[key] = str(value)
    return env


def secret_files(profile, cluster):
    """How the API key reaches the engine without appearing on argv (`ps`)."""
    if profile["engine"]["kind"] == "vllm":
        # vLLM reads VLLM_API_KEY when --api-key is absent (docs: OpenAI-compatible server).
        return {cluster["api_key_file"]: {"format": "env", "key": "VLLM_API_KEY", "mode": "0600"}}
    # SGLang reads server arguments from a YAML file given with --config.
    return {cluster["api_key_file"]: {"format": "yaml", "key": "api-key", "mode": "0600"}}


def systemd_quote(word):
    """One ExecStart word: '%' and '$' escaped for systemd, quoted when it holds whitespace or quotes."""
    word = str(word).replace("%", "%%").replace("$", "$$")
    if word and not re.search(r"[\s\"'\\;]", word):
        return word
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _exec(argv):
    return " ".join(systemd_quote(w) for w in argv)


def _docker_run(profile, cluster, container, argv, env_files):
    run = ["/usr/bin/docker", "run", "--rm", "--name", container, "--network", "host", "--ipc", "host",
           "--gpus", "all", "--ulimit", "memlock=-1", "--ulimit", "stack=67108864"]
    for env_file in env_files:
        run += ["--env-file", env_file]
    if profile.get("cpu_affinity"):
        run += ["--cpuset-cpus", profile["cpu_affinity"]]
    ckpt = cluster["checkpoint_dir"]
    run += ["-v", f"{ckpt}:{ckpt}:ro"]
    preload = ((profile.get("nccl") or {}).get("preload") or {}).get("path")
    if preload:
        # fabric.env's LD_PRELOAD names a host path: the container sees it at the same place.
        lib_dir = os.path.dirname(preload)
        run += ["-v", f"{lib_dir}:{lib_dir}:ro"]
    run.append(cluster["image"])
    return run + argv


# networkd's waiter (systemd package; /lib is /usr/lib on DGX OS and Debian 12).
NETWORKD_WAIT_ONLINE = "/usr/lib/systemd/systemd-networkd-wait-online"


def link_wait_argv(argv, interface, path_dirs=()):
    """argv behind a /bin/sh that waits until the cable half is routable (networkd) and puts
    path_dirs first on PATH, then execs argv unchanged ("$0" "$@": no re-quoting).

    The wait lives in ExecStart, not ExecStartPre: a Type=simple unit is "started" at once,
    so a node booting without its peer (no carrier) does not stall boot or burn the start
    limit; it logs once a minute until the peer is back. PATH is prepended here because
    fabric.env (an EnvironmentFile, which beats Environment=) spells PATH out without the
    venv, and the processes Ray starts need the venv's ninja besides nvcc."""
    script = ""
    if interface:
        script += (f"until {NETWORKD_WAIT_ONLINE} --interface={interface}:routable --timeout=60; do "
                   f"echo \"sparkctl: waiting for {interface} to be routable\" >&2; sleep 5; done; ")
    if path_dirs:
        script += f"PATH={':'.join(path_dirs)}:$PATH; export PATH; "
    if not script:
        return list(argv)
    return ["/bin/sh", "-c", script + 'exec "$0" "$@"'] + list(argv)


def _unit(description, user, exec_argv, env_files, after=(), requires=(), cpu_affinity=None, docker_name=None,
          timeout=None, restart="on-failure", restart_sec=10, start_limit_burst=3, environment=None, stop_timeout=None,
          memory_gate=None):
    # Ray and the engines bind on every address: the firewall's table must be loaded
    # first (the check is a no-op on a node with the firewall turned off).
    gate = firewall.start_gate_unit_lines()
    deps = " ".join(["network-online.target"] + list(after))
    # A crash loop stops after start_limit_burst starts in 10 minutes instead of
    # re-allocating memory forever.
    lines = ["[Unit]", f"Description={description}", f"After={deps}", "Wants=network-online.target",
             *gate["unit"], "StartLimitIntervalSec=600", f"StartLimitBurst={start_limit_burst}"]
    if requires:
        lines.append(f"Requires={' '.join(requires)}")
        lines.append(f"PartOf={' '.join(requires)}")
    lines += ["", "[Service]", "Type=simple", *gate["service"]]
    if docker_name:
        # The docker CLI runs as root; the container holds the engine and its environment.
        lines.append(f"ExecStartPre=-/usr/bin/docker rm -f {docker_name}")
    elif user:
        lines.append(f"User={user}")
        for env_file in env_files:
            lines.append(f"EnvironmentFile={env_file}")
        if cpu_affinity:
            lines.append(f"CPUAffinity={cpu_affinity}")
        lines += ["LimitMEMLOCK=infinity", "LimitNOFILE=1048576"]
    if memory_gate:
        # The units that allocate the node's unified memory: every start and restart
        # (systemd's own included) first waits for MemAvailable to be back within a margin of
        # the pre-engine baseline, else fails, and the start limit ends the tries
        # (module_utils/engine_gate.py). After the leftover container is removed: it holds memory.
        lines.append(f"ExecStartPre={engine_gate.exec_start_pre(memory_gate)}")
    for key, value in (environment or {}).items():
        lines.append(f"Environment={systemd_quote(f'{key}={value}')}")
    lines.append(f"ExecStart={_exec(exec_argv)}")
    if docker_name:
        lines.append(f"ExecStop=/usr/bin/docker stop {docker_name}")
    lines += [f"Restart={restart}", f"RestartSec={restart_sec}"]
    if timeout:
        lines.append(f"TimeoutStartSec={timeout}")
    if stop_timeout:
        lines.append(f"TimeoutStopSec={stop_timeout}")
    lines += ["", "[Install]", "WantedBy=multi-user.target", ""]
    return "\n".join(lines)


def unit_names(profile):
    """sparkctl's unit names (module_utils/units.py) plus two that follow the profile's topology,
    as render() lays the units out: `api`, the unit serving the API (behind the API proxy), and
    `startup`, the unit whose log holds the engine's startup lines (rank 0's for SGLang)."""
    names = dict(UNITS)
    on_ray = profile["topology"]["kind"] in ("ray_tp", "ray_tp_ep")
    names["api"] = UNITS["engine"] if on_ray else UNITS["sglang_router"]
    names["startup"] = UNITS["engine"] if on_ray else UNITS["sglang_rank"]
    return names


def render(profile, cluster):
    """{argv, env, units, secret_files, api}: argv of the head's engine process, the engine's own
    environment, per host the systemd units (file name -> text), the API key files, and where the
    public API and the engine listen (api_endpoints; cluster['api_proxy'], default true, puts the
    engine on 127.0.0.1:api.engine_port behind the API proxy)."""
    _require_cluster(cluster, profile["runtime"]["kind"])
    name = profile["name"]
    engine = profile["engine"]["kind"]
    runtime = profile["runtime"]["kind"]
    topo = profile["topology"]
    user = cluster["service_user"]
    fabric_env = cluster.get("fabric_env_file", "/etc/sparkctl/fabric.env")
    engine_env = cluster.get("engine_env_file", "/etc/sparkctl/engine.env")
    key_file = cluster["api_key_file"]
    timeout = (profile.get("boot") or {}).get("timeout_seconds")
    head = cluster["head"]["name"]
    workers = list(cluster["workers"])
    units = {head: {}}
    for worker in workers:
        units[worker["name"]] = {}
    argv = engine_argv(profile, cluster, 0)
    image = runtime == "image"

    if topo["kind"] in ("ray_tp", "ray_tp_ep"):
        # Ray actors inherit the raylet's environment: the fabric and engine files go on
        # the Ray units; the API key only on the API server.
        ray_files = [fabric_env, engine_env]
        nodes = [(head, None, UNITS["ray_head"])] + [(w["name"], w, UNITS["ray_worker"]) for w in workers]
        for host, node, unit in nodes:
            ray = ray_argv(profile, cluster, node)
            files = ray_files + ([key_file] if node is None and image else [])
            exec_argv = _docker_run(profile, cluster, unit_stem(unit), ray, files) if image else ray
            # The raylet passes its PATH to every process it starts: the venv's bin (ninja)
            # goes first; nvcc's directory comes with fabric.env's PATH.
            path_dirs = [] if image else [f"{cluster['venv_path']}/bin"]
            exec_argv = link_wait_argv(exec_argv, (node or cluster["head"]).get("interface"), path_dirs)
            role = "head" if node is None else "worker"
            # No memory gate here: a raylet allocates no GPU memory itself; the engine's ranks are
            # Ray actors the engine unit's process places, so gating that unit keeps a held-back
            # engine from allocating on any node, and a gated Ray would only keep a healthy
            # cluster from rejoining (its units restart on their own, with their own limit).
            # Restart=always: Ray must come back however `ray start --block` ended (a
            # clean exit after `ray stop` by hand included). 10 starts in 10 minutes leave room for a
            # worker rejoining a restarted head (GCS "authentication error" for ~60 s).
            units[host][unit] = _unit(
                f"sparkctl Ray {role} for {name}", user, exec_argv, files, docker_name=unit_stem(unit) if image else None,
                cpu_affinity=profile.get("cpu_affinity"), restart="always", restart_sec=5, start_limit_burst=10,
                # Ray 2.60 drains a node for 30 s on SIGTERM; stopping Ray here means the
                # whole cluster goes (stop, recovery), so 5 s is plenty.
                environment=None if image else {"RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "5"}, stop_timeout=30)
        if image:
            # NVIDIA's multi-node guide: the API server runs inside the head's Ray container,
            # which already carries every environment file.
            api_exec = ["/usr/bin/docker", "exec", unit_stem(UNITS["ray_head"])] + argv
            units[head][UNITS["engine"]] = _unit(
                f"sparkctl {engine} API for {name}", None, api_exec, [], after=(UNITS["ray_head"],),
                requires=(UNITS["ray_head"],), timeout=timeout, memory_gate=UNITS["engine"])
        else:
            units[head][UNITS["engine"]] = _unit(
                f"sparkctl {engine} API for {name}", user, argv, [fabric_env, engine_env, key_file],
                after=(UNITS["ray_head"],), requires=(UNITS["ray_head"],),
                cpu_affinity=profile.get("cpu_affinity"), timeout=timeout, memory_gate=UNITS["engine"])
    else:
        for rank, host in enumerate([head] + [w["name"] for w in workers]):
            rank_argv = argv if rank == 0 else engine_argv(profile, cluster, rank)
            # SGLang's key arrives through --config <file>, so no rank needs it in its environment.
            files = [fabric_env, engine_env]
            unit = UNITS["sglang_rank"]
            exec_argv = rank_argv
            if image:
                exec_argv = _docker_run(profile, cluster, unit_stem(unit), rank_argv, files)
                if rank == 0:
                    # --config reads the key file inside the container: mount it read-only.
                    idx = exec_argv.index(cluster["image"])
                    exec_argv = exec_argv[:idx] + ["-v", f"{key_file}:{key_file}:ro"] + exec_argv[idx:]
            units[host][unit] = _unit(
                f"sparkctl SGLang rank {rank}/{topo['nodes']} for {name}", user, exec_argv, files,
                docker_name=unit_stem(unit) if image else None, cpu_affinity=profile.get("cpu_affinity"), timeout=timeout,
                memory_gate=unit)
        router = router_argv(profile, cluster)
        if image:
            router = ["/usr/bin/docker", "run", "--rm", "--name", unit_stem(UNITS["sglang_router"]), "--network", "host",
                      cluster["image"]] + router
        units[head][UNITS["sglang_router"]] = _unit(
            f"sparkctl SGLang router (public API) for {name}", user, router, [],
            after=(UNITS["sglang_rank"],), requires=(UNITS["sglang_rank"],),
            docker_name=unit_stem(UNITS["sglang_router"]) if image else None)
    return {
        "argv": argv,
        "command_line": shlex.join(argv),
        "env": environment(profile),
        "units": units,
        "secret_files": secret_files(profile, cluster),
        "inputs": unit_inputs(profile, cluster),
        "api": api_endpoints(profile, cluster),
    }


def unit_inputs(profile, cluster):
    """Per host and unit, the files a unit reads at its start that systemd does not list as its
    own (a docker --env-file, SGLang's --config key file), besides the EnvironmentFile= ones, so
    a restart can be decided from whether any of them changed after the unit started."""
    fabric_env = cluster.get("fabric_env_file", "/etc/sparkctl/fabric.env")
    engine_env = cluster.get("engine_env_file", "/etc/sparkctl/engine.env")
    key_file = cluster["api_key_file"]
    head = cluster["head"]["name"]
    workers = [w["name"] for w in cluster["workers"]]
    image = profile["runtime"]["kind"] == "image"
    inputs = {host: {} for host in [head] + workers}
    if profile["topology"]["kind"] in ("ray_tp", "ray_tp_ep"):
        # The API server of an image runs inside the head's Ray container: its key is that container's.
        inputs[head][UNITS["ray_head"]] = [fabric_env, engine_env] + ([key_file] if image else [])
        for worker in workers:
            inputs[worker][UNITS["ray_worker"]] = [fabric_env, engine_env]
        inputs[head][UNITS["engine"]] = [] if image else [fabric_env, engine_env, key_file]
    else:
        for host in [head] + workers:
            inputs[host][UNITS["sglang_rank"]] = [fabric_env, engine_env] + ([key_file] if host == head else [])
        inputs[head][UNITS["sglang_router"]] = []
    return inputs


# --- Digests the deployment record keeps ------------------------------------------------


def profile_digest(profile):
    """sha256:<hex> of what the resolved profile says. Keys starting with '_' (_sources, _dir:
    where it was found on this control node) are left out: the same profile read from another
    checkout is the same deployment."""
    return content_digest(dict((key, value) for key, value in profile.items() if not str(key).startswith("_")))


def render_digest(rendered):
    """sha256:<hex> of what render() gives the engine: its argv, environment and every node's
    units (the API key is in a file they name, never in them)."""
    return content_digest({key: rendered.get(key) for key in ("argv", "env", "units")})

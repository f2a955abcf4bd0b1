# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Model profiles, schema validation: the shape of a resolved profile, each problem naming the
profile, the key path and the fix, checked against what the engine release offers
(profile_engine) before any host is touched. Hand-written rather than a JSON Schema: see
profiles/README.md, "Why the schema is checked in Python"."""

from __future__ import annotations

import difflib
import ipaddress
import os
import posixpath
import re

from ansible_collections.sparkctl.spark.plugins.module_utils import python_source, shapes
from ansible_collections.sparkctl.spark.plugins.module_utils.requirement import requirement_extras, requirement_name
from ansible_collections.sparkctl.spark.plugins.plugin_utils.profile_engine import (
    ENGINES, LIST_ARITIES, PARSER_SECTIONS, PLACEHOLDERS, RAY_REQUIREMENT, _MODULE_RE, _PLACEHOLDER_RE,
    _VERSION_RE, _flag, _for_release, _parse, _plugin_modules, _provided, _value, _version_key,
    engine_env_names, engine_list_flags, engine_manifest, engine_parser_names, engine_version,
    registered_parsers,
)
from ansible_collections.sparkctl.spark.plugins.plugin_utils.profile_load import _NAME_RE

SCHEMA_VERSION = 1

RUNTIMES = ("image", "venv")
TOPOLOGIES = ("ray_tp", "ray_tp_ep", "sglang_ranks", "vllm_ranks")
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
        "pipeline_parallel_size": "topology.pipeline_parallel",
        "enable_expert_parallel": "topology.kind: ray_tp_ep",
        "distributed_executor_backend": "topology.kind (ray_tp / ray_tp_ep use Ray, vllm_ranks vLLM's own processes)",
        "nnodes": "topology.nodes",
        "node_rank": "the rank unit of each node",
        "master_addr": "the head's link address",
        "master_port": "topology.master_port",
        "headless": "the workers' rank units",
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
        "pipeline_parallel_size": "topology (one rank per node; sparkctl renders no SGLang pipeline stages)",
        "nnodes": "topology.nodes",
        "node_rank": "the rank unit of each node",
        "dist_init_addr": "the head's link address and topology.dist_init_port",
        "tool_call_parser": "parsers.tool_call",
        "reasoning_parser": "parsers.reasoning",
        "config": "the API key file (sparkctl passes --config itself)",
    },
}

_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ARG_KEY_RE = re.compile(r"^[a-z0-9][a-z0-9_]*$")
_PYTHON_RE = re.compile(r"^3(\.[0-9]+)?$")
_CLASS_PATH_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
# What an engine build adds over the release engine.version names (a fork in an image),
# stated by the profile because no manifest of the fork exists: accepted as registered.
PROVIDES_KEYS = ("tool_call_parsers", "reasoning_parsers", "classes", "env")

# The ports a topology listens on (with their defaults), which api.engine_port must not take.
# ray_metrics_port: each node's Ray metrics agent (`ray start --metrics-export-port`), which the
# observe stage scrapes. guard_port: the rank guards' beacons of vllm_ranks, on the cable
# (module_utils/rank_guard.py).
TOPOLOGY_PORTS = {"ray_port": 6379, "ray_metrics_port": 8080, "dist_init_port": 25000, "rank0_port": 30000,
                  "master_port": 29501, "guard_port": 29590}
TOPOLOGY_DEFAULT_PORTS = {"ray_tp": ("ray_port", "ray_metrics_port"), "ray_tp_ep": ("ray_port", "ray_metrics_port"),
                          "sglang_ranks": ("dist_init_port", "rank0_port"), "vllm_ranks": ("master_port", "guard_port")}


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

    def list_of(self, path, what):
        """(path[i], item) for each item of the optional list at path; nothing when it is absent or,
        with the problem 'expected a list of {what}', not a list. The caller checks each item."""
        value = self.get(path, required=False)
        if value is None:
            return []
        if not isinstance(value, list):
            self.add(path, f"expected a list of {{{what}}}, got {_type_name(value)}.")
            return []
        return [(f"{path}[{idx}]", item) for idx, item in enumerate(value)]

    def unknown(self, path, node, known):
        if isinstance(node, dict):
            extra = sorted(set(node) - set(known))
            if extra:
                self.add(path, f"unknown key(s) {', '.join(extra)}; known keys are {', '.join(sorted(known))}.")


TOP_KEYS = (
    "schema_version", "name", "description", "seed", "engine", "runtime", "checkpoint", "model", "topology",
    "nccl", "memory", "startup_log", "smoke", "api", "parsers", "reference", "benchmark", "boot", "cpu_affinity",
    "forbid_env_values", "_sources", "_dir",
)

# benchmark.slo: the benchmark client's --slo, which the benchmark stage passes on (sparkctl/bench
# goodput.parse_slo reads it the same way). Checked here so a bad objective stops the validation
# play, not a benchmark after the model is served. A unit is required: vLLM's --goodput reads a
# bare number as milliseconds, and guessing either way would set an objective 1000 times off.
SLO_METRICS = ("ttft", "tpot", "itl", "e2e")
_SLO_ITEM_RE = re.compile(r"^(ttft|tpot|itl|e2e|e2el)=([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)(ms|s)$")
SLO_EXAMPLE = "ttft=2s,tpot=100ms"


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
            c.unknown("runtime.image", image, ("pull", "build", "load", "nccl_version", "memlock_bytes"))
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
            c.integer("runtime.image.memlock_bytes", required=False, minimum=1)
    elif kind == "venv":
        venv = c.mapping("runtime.venv")
        if venv is not None:
            c.unknown("runtime.venv", venv, ("python", "packages", "extra_index_urls", "find_links", "no_index", "plugin",
                                             "registry"))
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
            find_links = c.strings("runtime.venv.find_links", required=False)
            no_index = c.get("runtime.venv.no_index", required=False)
            if no_index is not None and not isinstance(no_index, bool):
                c.add("runtime.venv.no_index", f"expected true or false, got {_type_name(no_index)}.")
            elif no_index and not find_links:
                c.add("runtime.venv.no_index", "true installs from runtime.venv.find_links only (pip --no-index), and "
                      "it names none; list the wheel directories or URLs, or remove no_index.")
            elif no_index and venv.get("extra_index_urls"):
                c.add("runtime.venv.no_index", "true leaves every index out (pip --no-index), runtime.venv."
                      "extra_index_urls included; remove one of the two.")
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
    c.string("checkpoint.repo_id", pattern=shapes.REPO_ID, hint=" (a hub repo id like 'org/name')")
    c.string("checkpoint.revision")
    c.integer("checkpoint.shards", required=False, minimum=1)
    c.integer("checkpoint.size_bytes", minimum=1)
    c.string("checkpoint.precision", choices=("bf16", "fp16", "fp8", "nvfp4", "mxfp4", "int4"))
    c.string("checkpoint.dir_name", pattern=_NAME_RE, hint=" (lowercase, digits, '.', '_', '-')")
    for where, alt in c.list_of("checkpoint.quantized_alternatives", "repo_id, precision"):
        if not isinstance(alt, dict) or not isinstance(alt.get("repo_id"), str) or not isinstance(alt.get("precision"), str):
            c.add(where, "expected {repo_id, precision}.")


def _check_topology(c, engine):
    topo = c.mapping("topology")
    if topo is None:
        return
    c.unknown("topology", topo, ("kind", "tensor_parallel", "pipeline_parallel", "expert_parallel", "nodes")
              + tuple(TOPOLOGY_PORTS))
    kind = c.string("topology.kind", choices=TOPOLOGIES)
    tp = c.integer("topology.tensor_parallel", minimum=1)
    pp = c.integer("topology.pipeline_parallel", required=False, minimum=1)
    ep = c.integer("topology.expert_parallel", required=False, minimum=1)
    nodes = c.integer("topology.nodes", minimum=1)
    for port in TOPOLOGY_PORTS:
        value = c.integer(f"topology.{port}", required=False, minimum=1)
        if value is not None and value > 65535:
            c.add(f"topology.{port}", f"expected a TCP port (1-65535), got {value}.")
    if kind == "vllm_ranks":
        master = topo.get("master_port", TOPOLOGY_PORTS["master_port"])
        guard = topo.get("guard_port", TOPOLOGY_PORTS["guard_port"])
        if master == guard:
            c.add("topology.guard_port", f"{guard} is also topology.master_port, where vLLM's store listens; "
                  "give the rank guards another port.")
    if kind == "sglang_ranks" and engine not in (None, "sglang"):
        c.add("topology.kind", f"sglang_ranks runs SGLang's own multi-node launcher; engine.kind is {engine!r}: use ray_tp.")
    if kind in ("ray_tp", "ray_tp_ep") and engine == "sglang":
        c.add("topology.kind", "SGLang does not run on Ray here: use sglang_ranks.")
    if kind == "vllm_ranks" and engine not in (None, "vllm"):
        c.add("topology.kind", f"vllm_ranks runs vLLM's own multi-node launch; engine.kind is {engine!r}: use sglang_ranks.")
    if kind == "vllm_ranks" and tp and ep not in (None, 1, tp):
        c.add("topology.expert_parallel", f"vLLM's expert parallel size is tensor_parallel x data_parallel = {tp}; "
              f"set expert_parallel: {tp} to shard the experts, or remove it (got {ep}).")
    if kind == "ray_tp_ep" and tp and ep != tp:
        c.add("topology.expert_parallel", f"vLLM's expert parallel size is tensor_parallel x data_parallel = {tp}; "
              f"set expert_parallel: {tp} (got {ep}).")
    if kind == "ray_tp" and ep not in (None, 1):
        c.add("topology.expert_parallel", "ray_tp does not shard experts; use kind: ray_tp_ep or remove expert_parallel.")
    if kind == "sglang_ranks" and pp not in (None, 1):
        c.add("topology.pipeline_parallel", "sparkctl renders pipeline stages for vLLM only: use "
              "tensor_parallel across the nodes, or kind: ray_tp or vllm_ranks with engine.kind vllm.")
    # One rank per node: a DGX Spark has one GB10 GPU, so the world (tensor_parallel x
    # pipeline_parallel) is the node count, and nodes is how many Sparks the profile serves on.
    world = tp * (pp or 1) if tp else None
    what = f"{tp} x {pp} (tensor_parallel x pipeline_parallel)" if pp not in (None, 1) else f"{tp}"
    if world and nodes and world % nodes:
        c.add("topology.tensor_parallel", f"{what} ranks do not spread evenly over {nodes} nodes (one GB10 GPU per node).")
    if world and nodes and world > nodes:
        c.add("topology.tensor_parallel", f"{what} ranks need {world} GPUs; a DGX Spark has one GPU, so set nodes: {world}.")


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
    for where, item in c.list_of("startup_log", "name, regex, on_mismatch"):
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


def _check_benchmark(c):
    bench = c.mapping("benchmark", required=False)
    if bench is None:
        return
    c.unknown("benchmark", bench, ("slo",))
    slo = c.string("benchmark.slo", required=False)
    if slo is None:
        return
    items = [part.strip() for part in slo.split(",") if part.strip()]
    if not items:
        c.add("benchmark.slo", f"names no objective; give e.g. {SLO_EXAMPLE!r}, or remove the key.")
    seen = set()
    for item in items:
        match = _SLO_ITEM_RE.match(item.replace(" ", "").lower())
        if not match or float(match.group(2)) <= 0:
            c.add("benchmark.slo", f"{item!r} is not METRIC=VALUE with a unit, e.g. {SLO_EXAMPLE!r} (metrics "
                  f"{', '.join(SLO_METRICS)}; units s or ms; a value above 0).")
            return
        metric = "e2e" if match.group(1) == "e2el" else match.group(1)
        if metric in seen:
            c.add("benchmark.slo", f"{metric} is given twice in {slo!r}; give each metric once.")
            return
        seen.add(metric)


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
# What a path may hold to stand as one plain word wherever sparkctl writes it into a unit: an
# ExecStart= argument, an EnvironmentFile=, the /bin/sh -c line that puts the venv first on PATH,
# a docker -v SOURCE:TARGET. Anything else is read there as more than a letter of the name: a
# shell's $ ` ; & | ( ) < > * ? # ~ quotes and spaces, systemd's % specifiers, docker's ':'.
UNIT_PATH_CHARACTERS = "letters, digits and _ . / @ + -"
_UNIT_PATH_RE = re.compile(r"^[A-Za-z0-9_./@+-]+$")


def unit_path_problem(path):
    """Why `path` cannot be written into a systemd unit as it is, or None: it must be absolute, in
    normal form (no '.', '..', doubled or trailing '/'), and hold no control character (a
    line break starts a new unit directive) and no character outside UNIT_PATH_CHARACTERS."""
    if not isinstance(path, str) or not path:
        return "is not a path"
    control = _CONTROL_RE.search(path)
    if control:
        return (f"holds a control character ({control.group(0)!r}): written into a systemd unit, a line break "
                "starts a new directive")
    unsafe = sorted({char for char in path if not _UNIT_PATH_RE.match(char)})
    if unsafe:
        return f"holds {' '.join(repr(char) for char in unsafe)}, which a shell or systemd reads as more than part of a path"
    if not path.startswith("/"):
        return "is not an absolute path"
    # normpath keeps a leading '//' (POSIX leaves its meaning to the system); Linux reads it as '/'.
    normal = "/" + posixpath.normpath(path).lstrip("/")
    if normal != path:
        return f"is not in normal form ({normal!r} is)"
    return None


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
    _check_benchmark(c)
    _check_parser_names(c, engine)
    _check_class_paths(c)
    _check_engine_env(c, engine)
    return c.problems

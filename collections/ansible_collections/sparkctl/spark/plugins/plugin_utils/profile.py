# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Model profiles: one YAML file per served system (engine, runtime, checkpoint,
topology, engine arguments, memory budget, expectations), loaded from the user's
profile directories first and the collection's profiles/ second, merged with the
inventory's overrides, validated, checked against the known engine traps (docs/field-notes.md), and rendered
into the engine's argv, environment and systemd units.

Everything here is pure: no host is contacted, so the validation play can refuse
a profile before any change.

This module is the one the filters, the API proxy and the tests import; the work lives in
  profile_load    finding, reading and merging profile files,
  profile_engine  what the engine release offers (manifests, list flags, parsers, venv packages),
  profile_schema  the shape of a profile, checked against that release,
  profile_traps   the memory fit and the engine traps,
  profile_render  argv, environment, systemd units and the deployment record's digests,
and each of their public names is importable from here."""

from __future__ import annotations

from ansible_collections.sparkctl.spark.plugins.plugin_utils.profile_load import (
    COLLECTION_DIR, COLLECTION_PROFILES, MAX_EXTENDS_DEPTH, ProfileError, available_profiles,
    deep_merge, find_profile, load_profile, search_dirs,
)
from ansible_collections.sparkctl.spark.plugins.plugin_utils.profile_engine import (
    ENGINES, ENGINE_FLAGS_DIR, ENGINE_MANIFEST_DIR, LIST_ARITIES, PARSER_SECTIONS, PLACEHOLDERS,
    RAY_REQUIREMENT, RAY_TOPOLOGIES, engine_env_names, engine_list_flags, engine_manifest, engine_manifests,
    engine_parser_names, engine_version, plugin_parsers, plugin_source_dirs, registered_parsers, venv_packages,
)
from ansible_collections.sparkctl.spark.plugins.plugin_utils.profile_schema import (
    LINEAR_ATTENTION, MANAGED_ARGS, ON_MISMATCH, PROVIDES_KEYS, RUNTIMES, SCHEMA_VERSION, TOPOLOGIES,
    TOPOLOGY_DEFAULT_PORTS, TOPOLOGY_PORTS, TOP_KEYS, schema_problems,
)
from ansible_collections.sparkctl.spark.plugins.plugin_utils.profile_traps import (
    DEFAULT_NODE_BUDGET_BYTES, GIB, NCCL_GRAPH_FIX, context_tokens, node_memory_bytes, speculative_method,
    trap_problems, uses_cuda_graphs,
)
from ansible_collections.sparkctl.spark.plugins.plugin_utils.profile_render import (
    ENGINE_BIND_BEHIND_PROXY, NETWORKD_WAIT_ONLINE, api_endpoints, args_argv, engine_argv, engine_port, engine_takes_key,
    environment, link_wait_argv, list_argv, profile_digest, ray_argv, render, render_digest, router_argv,
    secret_files, serving_split, systemd_quote, topology_port, unit_inputs, unit_names, venv_digest,
)

__all__ = [
    "COLLECTION_DIR", "COLLECTION_PROFILES", "MAX_EXTENDS_DEPTH", "ProfileError",
    "available_profiles", "deep_merge", "find_profile", "load_profile", "search_dirs", "ENGINES",
    "ENGINE_FLAGS_DIR", "ENGINE_MANIFEST_DIR", "LIST_ARITIES", "PARSER_SECTIONS", "PLACEHOLDERS",
    "RAY_REQUIREMENT", "RAY_TOPOLOGIES", "engine_env_names", "engine_list_flags", "engine_manifest",
    "engine_manifests", "engine_parser_names", "engine_version", "plugin_parsers", "plugin_source_dirs",
    "registered_parsers", "venv_packages", "LINEAR_ATTENTION", "MANAGED_ARGS", "ON_MISMATCH", "PROVIDES_KEYS",
    "RUNTIMES", "SCHEMA_VERSION", "TOPOLOGIES", "TOPOLOGY_DEFAULT_PORTS", "TOPOLOGY_PORTS", "TOP_KEYS",
    "schema_problems", "DEFAULT_NODE_BUDGET_BYTES", "GIB", "NCCL_GRAPH_FIX", "context_tokens",
    "node_memory_bytes", "speculative_method", "trap_problems", "uses_cuda_graphs",
    "ENGINE_BIND_BEHIND_PROXY", "NETWORKD_WAIT_ONLINE", "api_endpoints", "args_argv", "engine_argv",
    "engine_port", "engine_takes_key", "environment", "link_wait_argv", "list_argv", "profile_digest", "ray_argv", "render",
    "render_digest", "router_argv", "secret_files", "serving_split", "systemd_quote", "topology_port", "unit_inputs",
    "unit_names",
    "venv_digest", "profile_problems", "resolve",
]


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

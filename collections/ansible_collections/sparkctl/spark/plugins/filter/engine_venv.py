# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The engine venv role's decisions, in Python: whether the node's Python is the one to
build the venv with, where the profile's local files go, and how to ask the engine in
the venv whether it registers the architecture."""

from __future__ import annotations

import functools

from ansible.errors import AnsibleFilterError
from ansible_collections.sparkctl.spark.plugins.module_utils import venv_plugin, venv_state

DOCUMENTATION = r"""
name: venv_python_check
short_description: Judge the node's Python against the profile's runtime.venv.python
version_added: 0.1.0
description:
  - Takes what the node's Python probe found (the C(python) return value of C(sparkctl.spark.venv_state)) and says
    whether the requested Python is there, which C(python3.X-venv) package it needs, and whether an existing venv
    was built by another Python and must be rebuilt.
  - Companion filters in this file, documented in RETURN, are C(venv_local_sources) (input C(runtime.venv);
    arguments the profile directory and the node's staging directory), C(venv_local_source_problems) (input the
    former's result; argument the plugin's files), C(venv_pip_extra_args) (input the extra index URLs; arguments the
    node-side find_links and whether pip asks no index, C(runtime.venv.no_index)), C(venv_registry) (input the
    engine kind; argument C(runtime.venv.registry) or nothing), C(venv_registry_probe) (input the venv's python;
    arguments registry, architecture, modules to import), C(venv_probe_verdict) (input the registered probe result),
    C(venv_upload_trees) (input the uploads, C({controller, node}) each).
options:
  _input:
    description: The probe's output (C(system), C(requested), C(venv)).
    type: dict
    required: true
  requested:
    description: The profile's C(runtime.venv.python), C("3") for the system python3 or C("3.X") for that minor.
    type: str
    required: true
  host:
    description: The host name the message starts with.
    type: str
    default: ""
"""

EXAMPLES = r"""
- name: Judge the node's Python against the profile
  ansible.builtin.set_fact:
    engine_venv_python_found: "{{ venv_node.python | sparkctl.spark.venv_python_check('3.12', inventory_hostname) }}"

- name: Ask the venv's vLLM whether it registers the plugin's architecture
  ansible.builtin.command:
    argv: >-
      {{ '/opt/sparkctl/venvs/x/bin/python' | sparkctl.spark.venv_registry_probe('vllm' | sparkctl.spark.venv_registry,
         'SolarOpen2ForCausalLM', ['vllm.model_executor.models.solar_open2']) }}
  changed_when: false
  register: probe
"""

RETURN = r"""
_value:
  description:
    - C(venv_python_check) returns C({ok, message, executable, version, venv_package, rebuild_venv}).
    - >-
      C(venv_local_sources) returns C({find_links: [{controller, node}], plugin: {controller, node} | null});
      C(controller) is null for URLs and absolute paths, which are used on the node as they are.
    - C(venv_local_source_problems) returns a list of sentences (empty when every directory and file is there).
    - C(venv_pip_extra_args) returns a string of shell-quoted pip arguments.
    - C(venv_registry) returns C({module, attribute}).
    - C(venv_registry_probe) returns an argv list (the venv's python, C(-c), the probe script, its JSON argument).
    - C(venv_probe_verdict) returns C({ok, message}).
    - C(venv_upload_trees) returns C([{path, checksums}]), the node directory and the SHA-1 of every file of the
      controller's directory by relative path, as the C(venv_state) module's O(trees) takes them.
  type: raw
"""


def _filter(func):
    """Problems the caller must fix surface as filter errors naming the filter."""

    @functools.wraps(func)
    def call(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except (venv_plugin.PluginError, KeyError, TypeError) as exc:
            raise AnsibleFilterError(f"{func.__name__}: {exc}") from exc

    return call


@_filter
def venv_python_check(probe, requested, host=""):
    return venv_plugin.python_check(requested, dict(probe or {}), host)


@_filter
def venv_local_sources(venv_spec, profile_dir, staging_dir):
    return venv_plugin.local_sources(dict(venv_spec or {}), str(profile_dir), str(staging_dir))


@_filter
def venv_local_source_problems(sources, plugin_files=None):
    return venv_plugin.local_source_problems(dict(sources or {}), list(plugin_files or []))


@_filter
def venv_pip_extra_args(extra_index_urls, find_links=None, no_index=False):
    return venv_plugin.pip_extra_args(list(extra_index_urls or []), list(find_links or []), bool(no_index))


@_filter
def venv_registry(engine_kind, override=None):
    return venv_plugin.registry_for(engine_kind, dict(override) if override else None)


@_filter
def venv_registry_probe(python, registry, architecture, imports=None):
    return venv_plugin.probe_argv(str(python), dict(registry), str(architecture), list(imports or []))


@_filter
def venv_probe_verdict(result):
    ok, message = venv_plugin.probe_verdict(result.get("rc", 1), result.get("stdout", ""), result.get("stderr", ""))
    return {"ok": ok, "message": message}


@_filter
def venv_upload_trees(uploads):
    return [{"path": upload["node"], "checksums": venv_state.tree_checksums(str(upload["controller"]))}
            for upload in uploads or []]


class FilterModule:
    def filters(self):
        return {
            "venv_python_check": venv_python_check,
            "venv_local_sources": venv_local_sources,
            "venv_local_source_problems": venv_local_source_problems,
            "venv_pip_extra_args": venv_pip_extra_args,
            "venv_registry": venv_registry,
            "venv_registry_probe": venv_registry_probe,
            "venv_probe_verdict": venv_probe_verdict,
            "venv_upload_trees": venv_upload_trees,
        }

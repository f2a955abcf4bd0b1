"""Run a module's main() the way Ansible does, and read what it printed."""

from __future__ import annotations

import importlib
import json

import pytest
import yaml
from ansible.module_utils.testing import patch_module_args


def run_module(main, args, capsys, raw=False):
    """(exit code, parsed JSON result) of main() with args; raw=True returns the printed text."""
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exit_info:
            main()
    out = capsys.readouterr().out
    return exit_info.value.code, out if raw else json.loads(out)


def captured_argument_spec(main, monkeypatch):
    """The argument_spec and options main() hands to AnsibleModule, without running the module."""
    from ansible.module_utils import basic

    captured = {}

    class Captured(Exception):
        pass

    def init(self, argument_spec, **kwargs):
        captured.update(kwargs, argument_spec=argument_spec)
        raise Captured()

    monkeypatch.setattr(basic.AnsibleModule, "__init__", init)
    with pytest.raises(Captured):
        main()
    return captured


def documented_like_spec(doc_options, spec):
    """Differences between DOCUMENTATION options and an argument_spec (names, type, required, default, choices,
    elements, suboptions), as validate-modules would report them."""
    problems = []
    if set(doc_options) != set(spec):
        problems.append(f"options {sorted(doc_options)} != argument_spec {sorted(spec)}")
    for name in set(doc_options) & set(spec):
        doc, arg = doc_options[name], spec[name]
        for key, fallback in (("type", "str"), ("required", False), ("default", None), ("choices", None), ("elements", None)):
            documented, taken = doc.get(key, fallback), arg.get(key, fallback)
            if key == "choices" and documented and taken:
                # validate-modules compares choices as sets: the order is the documentation's to choose.
                documented, taken = sorted(map(str, documented)), sorted(map(str, taken))
            if documented != taken:
                problems.append(f"{name}.{key}: documented {doc.get(key, fallback)!r}, spec {arg.get(key, fallback)!r}")
        if "suboptions" in doc or "options" in arg:
            problems += [f"{name}.{p}" for p in documented_like_spec(doc.get("suboptions", {}), arg.get("options", {}))]
    return problems


class _FragmentLoader:
    """The part of Ansible's doc-fragment loader that add_fragments uses, for ansible.builtin's fragments and this
    collection's (importable as ansible_collections.sparkctl.spark, as conftest arranges)."""

    PACKAGES = {
        "ansible.builtin.": "ansible.plugins.doc_fragments.",
        "sparkctl.spark.": "ansible_collections.sparkctl.spark.plugins.doc_fragments.",
    }

    def get(self, name):
        for prefix, package in self.PACKAGES.items():
            if name.startswith(prefix) and "." not in name[len(prefix):]:
                try:
                    fragment = importlib.import_module(package + name[len(prefix):]).ModuleDocFragment
                except ModuleNotFoundError:
                    return None
                fragment.ansible_name = name
                return fragment
        return None


def documentation(module):
    """A module's DOCUMENTATION with its extends_documentation_fragment merged in, as ansible-doc renders it."""
    from ansible.utils.plugin_docs import add_fragments

    doc = yaml.safe_load(module.DOCUMENTATION)
    add_fragments(doc, module.__file__, _FragmentLoader(), is_module=True)
    return doc


def fake_tool(monkeypatch, name, state, answer, path_key="path"):
    """Stand AnsibleModule's get_bin_path and run_command in for the one tool a module runs:
    get_bin_path(name) returns state[path_key], run_command appends its argv to state["calls"]
    and returns answer(argv) ((rc, stdout, stderr)); each asserts it is used as the module must."""
    from ansible.module_utils import basic

    def get_bin_path(self, arg, required=False, opt_dirs=None):
        assert arg == name
        return state[path_key]

    def run_command(self, args, check_rc=False, **kwargs):
        assert check_rc is False
        state["calls"].append(list(args))
        return answer(args)

    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", get_bin_path)
    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)

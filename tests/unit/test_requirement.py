"""module_utils/requirement: the one reader of requirement strings (PEP 503 names, extras,
specifiers), shared by the profile's checks, the venv's missing-package test, the runtime
version report, the requirement_name and requirement_pin filters and the lab's tests."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest
from ansible_collections.sparkctl.spark.plugins.filter import profile as profile_filter
from ansible_collections.sparkctl.spark.plugins.filter.requirement import FilterModule
from ansible_collections.sparkctl.spark.plugins.module_utils import runtime_versions as rv
from ansible_collections.sparkctl.spark.plugins.module_utils import venv_plugin as V
from ansible_collections.sparkctl.spark.plugins.module_utils.requirement import (
    canonical_name, distribution_name, requirement_extras, requirement_name, requirement_pin, split_requirement)
from ansible_collections.sparkctl.spark.plugins.plugin_utils import profile as P

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration"))


@pytest.mark.parametrize(
    "name, normalized",
    [("Torch", "torch"), ("flashinfer_python", "flashinfer-python"), ("Flashinfer.Python", "flashinfer-python"),
     ("nvidia_nccl_cu13", "nvidia-nccl-cu13"), ("a--_b", "a-b"), ("Torch_Audio", "torch-audio")],
)
def test_names_are_normalized_per_pep_503(name, normalized):
    assert canonical_name(name) == normalized


@pytest.mark.parametrize(
    "spec, name",
    [("vllm", "vllm"), ("vllm==0.25.1", "vllm"), ("torch==2.11.0+cu130", "torch"), ("vllm[audio]>=0.25", "vllm"),
     ("solar_open2 @ file:///opt/wheels/solar_open2-0.1-py3-none-any.whl", "solar_open2"), ("", None), ("==1", None),
     (None, None), ("-e git+https://example.invalid/x.git#egg=x", None)],
)
def test_the_distribution_name_as_written(spec, name):
    assert distribution_name(spec) == name


@pytest.mark.parametrize(
    "spec, split",
    [("Ray[default]==2.60.0", ("ray", "==2.60.0")), ("ray >= 2.0 ; python_version >= '3.12'", ("ray", ">=2.0")),
     ("sparklab_engine==0.2.0", ("sparklab-engine", "==0.2.0")), ("x @ https://h.invalid/x.whl", ("x", None)),
     ("x@https://h.invalid/x.whl", ("x", None)), ("Flash.Infer", ("flash-infer", None)),
     ("vllm[audio]>=0.25,<0.26", ("vllm", ">=0.25,<0.26"))],
)
def test_split_requirement(spec, split):
    assert split_requirement(spec) == split
    assert requirement_name(spec) == split[0]


def test_extras():
    assert requirement_extras("ray[Default, serve]==2.60.0") == {"default", "serve"}
    assert requirement_extras("ray==2.60.0") == set()


@pytest.mark.parametrize(
    "spec, pin",
    [("Ray[default]==2.60.0", "ray==2.60.0"), ("sparklab_engine==0.2.0", "sparklab-engine==0.2.0"),
     ("Sparklab.Engine == 0.2.0", "sparklab-engine==0.2.0"), ("x @ file:///w/x.whl", "x"), ("X==1.0RC1", "x==1.0rc1"),
     ("-e git+https://example.invalid/x.git#egg=x", "-e git+https://example.invalid/x.git#egg=x")],
)
def test_a_pin_reads_as_pip_freeze_lists_it(spec, pin):
    assert requirement_pin(spec) == pin


def test_the_filters_are_the_shared_functions():
    assert FilterModule().filters() == {"requirement_pin": requirement_pin}


def test_every_reader_agrees():
    """The profile's Ray check, the venv's missing-package test, the version report's names and
    the lab's pins all read a requirement the same way."""
    import labrun

    spec = "Ray[default]==2.60.0"
    profile = profile_filter.profile_load("solar-open2-nvfp4-vllm-venv")
    assert [p for p in P.venv_packages(profile) if requirement_name(p) == "ray"]
    assert V.missing_packages([spec], [{"name": "RAY", "version": "2.60.0"}]) == []
    assert V.missing_packages([spec], [{"name": "ray", "version": "2.59.0"}]) == [spec]
    assert rv.lock_lines([["Sparklab_Engine", "0.2.0"]]) == ["sparklab-engine==0.2.0"]
    assert labrun.pep503_pin(spec) == ("ray", "2.60.0")
    assert labrun.pep503_pin("sparklab_engine==0.2.0") == ("sparklab-engine", "0.2.0")


# A name normalisation written out again: a separators regex (PEP 503's, or the dist-info
# escaping's), in Python or in Jinja.
COPY = re.compile(r"""\[-_\.\]\+|\[-_.\]\+|\[_.-\]\+|\[._-\]\+|\[-.\]\+""")


def _code(path: Path):
    if path.suffix == ".py":
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                yield node.lineno, node.value
    else:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.lstrip().startswith("#"):
                yield number, line


# Checks of the real state that recompute on a node, inside the venv's own Python, what the
# collection computes (the venv's lock hash): a copy on purpose, the other side of the check.
INDEPENDENT_CHECKS = {"molecule/verify/verify.yml"}


def test_nothing_but_the_owner_normalises_a_name():
    owner = REPO / "collections/ansible_collections/sparkctl/spark/plugins/module_utils/requirement.py"
    paths = [p for p in (REPO / "collections").rglob("*.py") if p != owner]
    paths += [p for d in ("roles", "playbooks", "molecule") for p in (REPO / d).rglob("*") if p.suffix in (".yml", ".j2")
              and str(p.relative_to(REPO)) not in INDEPENDENT_CHECKS]
    paths += list((REPO / "tests" / "integration").glob("*.py")) + list((REPO / "sparkctl").rglob("*.py"))
    found = [f"{path.relative_to(REPO)}:{number}" for path in sorted(paths) for number, text in _code(path)
             if COPY.search(text)]
    assert found == []

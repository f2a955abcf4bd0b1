"""sparkctl's systemd unit names have one owner, module_utils/units.py, read by the profile's
renderer, the API proxy, the firewall's start check and revert timer, and, through
spark_units (roles/spark/defaults/main.yml, filter profile_units), by every role and playbook.

The names below are written out on purpose: they are the independent check of what the
owner says and what the renderer writes."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml
from ansible_collections.sparkctl.spark.plugins.filter import api_proxy as api_proxy_filter
from ansible_collections.sparkctl.spark.plugins.filter import profile as profile_filter
from ansible_collections.sparkctl.spark.plugins.module_utils import firewall as F
from ansible_collections.sparkctl.spark.plugins.module_utils.units import UNITS, unit_stem
from test_profile import GOLDEN_CASES, cluster, load

REPO = Path(__file__).resolve().parents[2]
PLUGINS = REPO / "collections" / "ansible_collections" / "sparkctl" / "spark" / "plugins"
UNIT_NAME = re.compile(r"sparkctl-[a-z0-9-]+@?\.(service|socket|timer|target)\b")

EXPECTED = {
    "ray_head": "sparkctl-ray-head.service",
    "ray_worker": "sparkctl-ray-worker.service",
    "engine": "sparkctl-engine.service",
    "vllm_rank": "sparkctl-vllm-rank.service",
    "sglang_rank": "sparkctl-sglang-rank.service",
    "sglang_router": "sparkctl-sglang-router.service",
    "api_proxy": "sparkctl-api-proxy.service",
    "firewall": "sparkctl-firewall.service",
    "firewall_revert": "sparkctl-firewall-revert.timer",
    "rsyncd_socket": "sparkctl-rsyncd.socket",
    "rsyncd": "sparkctl-rsyncd@.service",
}
ENGINE_UNITS = ("ray_head", "ray_worker", "engine", "vllm_rank", "sglang_rank", "sglang_router")


def test_the_owner_names_every_unit():
    assert UNITS == EXPECTED
    # Accept=yes: systemd starts <socket name>@.service per connection.
    assert UNITS["rsyncd"] == unit_stem(UNITS["rsyncd_socket"]) + "@.service"


def _renders():
    for case, (name, overrides) in sorted(GOLDEN_CASES.items()):
        profile = load(name, overrides)
        yield case, profile, profile_filter.profile_render(profile, cluster(profile))


@pytest.mark.parametrize("case, profile, out", list(_renders()), ids=sorted(GOLDEN_CASES))
def test_the_rendered_units_are_the_owners(case, profile, out):
    owned = {UNITS[key] for key in ENGINE_UNITS}
    rendered = {unit for units in out["units"].values() for unit in units}
    assert rendered <= owned, case
    assert {unit for units in out["inputs"].values() for unit in units} == rendered, case
    names = profile_filter.profile_units(profile)
    head = out["units"]["spark1"]
    # The unit the roles wait on for the API, and whose log verify reads, is one the head runs.
    assert names["api"] in head and names["startup"] in head, case
    for text in (t for units in out["units"].values() for t in units.values()):
        assert set(m.group(0) for m in UNIT_NAME.finditer(text)) <= owned | {UNITS["firewall"]}, case


def test_every_engine_unit_is_rendered_by_some_profile():
    rendered = {unit for _, _, out in _renders() for units in out["units"].values() for unit in units}
    assert rendered == {UNITS[key] for key in ENGINE_UNITS}


def test_api_and_startup_follow_the_topology():
    ray = profile_filter.profile_units(load("solar-open2-nvfp4-vllm-venv"))
    sglang = profile_filter.profile_units(load("qwen38-flash-next-nvfp4-sglang"))
    assert (ray["api"], ray["startup"]) == ("sparkctl-engine.service", "sparkctl-engine.service")
    assert (sglang["api"], sglang["startup"]) == ("sparkctl-sglang-router.service", "sparkctl-sglang-rank.service")
    assert {k: v for k, v in ray.items() if k not in ("api", "startup")} == EXPECTED


def test_the_api_proxy_and_the_firewall_use_the_owners_names():
    assert api_proxy_filter.api_proxy_render(load("lab-standin"), {})["unit_name"] == "sparkctl-api-proxy.service"
    assert F.start_gate_unit_lines()["unit"] == ["Wants=sparkctl-firewall.service", "After=sparkctl-firewall.service"]
    assert (F.REVERT_UNIT, F.REVERT_TIMER) == ("sparkctl-firewall-revert", "sparkctl-firewall-revert.timer")


def test_roles_read_the_names_from_spark_units():
    spark = yaml.safe_load((REPO / "roles" / "spark" / "defaults" / "main.yml").read_text())
    assert spark["spark_units"] == "{{ spark_profile | sparkctl.spark.profile_units }}"
    reads = {
        ("ray_cluster", "ray_cluster_head_unit"): "ray_head",
        ("ray_cluster", "ray_cluster_worker_unit"): "ray_worker",
        ("ray_cluster", "ray_cluster_engine_unit"): "engine",
        ("engine_service", "engine_service_api_unit"): "api",
        ("verify", "verify_startup_unit"): "startup",
        ("firewall", "firewall_unit"): "firewall",
    }
    for (role, variable), key in reads.items():
        defaults = yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text())
        assert defaults[variable] == "{{ spark_units.%s }}" % key, (role, variable)


def _code_lines(path: Path):
    """Lines that are not comments: a unit named in a comment explains, it does not decide."""
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.lstrip().startswith("#"):
            yield number, line


def test_no_role_or_playbook_spells_a_unit_name():
    paths = [p for d in ("defaults", "vars", "tasks", "handlers", "templates")
             for p in (REPO / "roles").glob(f"*/{d}/**/*") if p.is_file()]
    paths += sorted((REPO / "playbooks").glob("*.yml")) + [REPO / "site.yml"]
    found = [f"{path.relative_to(REPO)}:{number}: {line.strip()}"
             for path in sorted(paths) for number, line in _code_lines(path) if UNIT_NAME.search(line)]
    assert found == []


def _documentation(tree: ast.Module) -> set[int]:
    """ids of the string constants that document rather than decide: docstrings and the
    DOCUMENTATION, EXAMPLES and RETURN blocks."""
    ids = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            ids.add(id(body[0].value))
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") in ("DOCUMENTATION", "EXAMPLES", "RETURN")
                                                for t in node.targets):
            ids.add(id(node.value))
    return ids


def test_no_plugin_but_the_owner_spells_a_unit_name():
    found = []
    for path in sorted(PLUGINS.rglob("*.py")):
        if path == PLUGINS / "module_utils" / "units.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        documentation = _documentation(tree)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in documentation
                    and UNIT_NAME.search(node.value)):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.value[:80]!r}")
    assert found == []

"""The jit_cache role's mirror destinations (roles/jit_cache/vars/main.yml, jit_cache_worker_specs) and
the decision they feed (jit_cache_mirror_due), as Ansible's own templating evaluates them with the
collection's filters: the same values the role's earlier Jinja loop built (kept below as it was),
for two and three nodes, an idle worker included; and sparkctl.spark.jit_cache_mirror_targets on its
own."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.sparkctl.spark.plugins.filter.jit_cache import jit_cache_mirror_targets
from collection_templating import TemplateFailed, evaluate

ROLE = Path(__file__).resolve().parents[2] / "roles" / "jit_cache"
VARS = yaml.safe_load((ROLE / "vars" / "main.yml").read_text(encoding="utf-8"))
DEFAULTS = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text(encoding="utf-8"))
IDENTITY = "venv-3f0c9e1a2b4d5e6f"

# The role's var before the loop moved into sparkctl.spark.jit_cache_mirror_targets.
OLD_VARS = yaml.safe_load(r"""
jit_cache_worker_specs: >-
  {%- set ns = namespace(specs=[]) -%}
  {%- for host in ansible_play_hosts if host != jit_cache_head and hostvars[host].jit_cache_node is defined -%}
  {%-   set node = hostvars[host].jit_cache_node -%}
  {%-   set ip = (hostvars[host].spark_link | sparkctl.spark.link_ips | first) -%}
  {%-   set ns.specs = ns.specs + [{'name': host, 'target': jit_cache_owner ~ '@' ~ ip ~ ':' ~ node.path ~ '/',
                                    'identity': node.identity, 'digest': node.cache.digest, 'names': node.cache.names}] -%}
  {%- endfor -%}
  {{ ns.specs }}
""")


def _link(node: int) -> list[dict]:
    return [{"interface": ["enp1s0f1np1", "enP2p1s0f1np1"][half], "address": f"192.168.{100 + half}.{10 + node}/24"}
            for half in range(2)]


def _read(digest: str = "d1", names: tuple = ("triton/abc/kernel.cubin",), identity: str = IDENTITY) -> dict:
    """A node's registered result of sparkctl.spark.jit_cache."""
    return {"changed": False, "identity": identity, "path": f"/var/cache/sparkctl/jit/{identity}", "removed": [],
            "foreign": [], "reset": False, "given": [], "relinked": False, "since": None,
            "cache": {"files": len(names), "bytes": 4096 * len(names), "digest": digest, "names": list(names)}}


def _variables(reads: dict, nodes: int, serving: int | None = None, role_vars: dict = VARS) -> dict:
    """reads: host -> its read (a host left out registered none); the head is spark1."""
    names = [f"spark{n + 1}" for n in range(nodes)]
    hostvars = {}
    for n, name in enumerate(names):
        hostvars[name] = {"ansible_host": f"10.0.0.{11 + n}", "spark_link": _link(n)}
        if name in reads:
            hostvars[name]["jit_cache_node"] = reads[name]
    cluster = {"head": {"name": "spark1", "link_ip": "192.168.100.10", "interface": "enp1s0f1np1"},
               "workers": [{"name": name, "link_ip": f"192.168.100.{10 + n}", "interface": "enp1s0f1np1"}
                           for n, name in enumerate(names) if 0 < n < (serving or nodes)],
               "venv_path": "/opt/sparkctl/venv"}
    return {**DEFAULTS, **role_vars, "hostvars": hostvars, "ansible_play_hosts": names, "inventory_hostname": "spark1",
            "spark_cluster": cluster, "spark_service_user": "sparkctl", "spark_profile": {"runtime": {"kind": "venv"}},
            "jit_cache_node": reads.get("spark1", {})}


def _old(variables: dict) -> dict:
    return {**variables, **OLD_VARS}


def _specs(variables: dict) -> list:
    return evaluate("{{ jit_cache_worker_specs }}", variables)


def test_two_nodes_mirror_to_the_worker_over_its_first_cable_half():
    assert _specs(_variables({"spark1": _read("d1"), "spark2": _read("d0", names=())}, 2)) == [{
        "name": "spark2", "target": f"sparkctl@192.168.100.11:/var/cache/sparkctl/jit/{IDENTITY}/",
        "identity": IDENTITY, "digest": "d0", "names": []}]


CASES = {
    "two nodes, the worker's cache empty": (2, None, {"spark1": _read("d1"), "spark2": _read("d0", names=())}),
    "two nodes, the same cache": (2, None, {"spark1": _read("d1"), "spark2": _read("d1")}),
    "three nodes, the idle worker too": (3, 2, {"spark1": _read("d1"), "spark2": _read("d1"), "spark3": _read("d0")}),
    "three nodes, one worker of another runtime": (
        3, None, {"spark1": _read("d1"), "spark2": _read("d2", identity="image-0a1b2c3d"), "spark3": _read("d1")}),
    "three nodes, a worker without a read": (3, None, {"spark1": _read("d1"), "spark3": _read("d0")}),
    "the head's cache empty": (3, None, {"spark1": _read("d0", names=()), "spark2": _read("d1"), "spark3": _read("d1")}),
    "the head without a read": (2, None, {"spark2": _read("d1")}),
}


@pytest.mark.parametrize("nodes, serving, reads", CASES.values(), ids=CASES.keys())
def test_the_specs_and_the_decision_are_what_the_loop_gave(nodes, serving, reads):
    variables = _variables(reads, nodes, serving)
    assert _specs(variables) == _specs(_old(variables))
    assert [spec["name"] for spec in _specs(variables)] == [name for name in sorted(reads) if name != "spark1"]
    if "spark1" in reads:
        due = "{{ jit_cache_mirror_due }}"
        assert evaluate(due, variables) == evaluate(due, _old(variables))


def test_the_mirror_is_due_for_a_worker_of_the_heads_runtime_whose_cache_differs():
    due = "{{ jit_cache_mirror_due }}"
    assert evaluate(due, _variables({"spark1": _read("d1"), "spark2": _read("d1"), "spark3": _read("d0")}, 3)) is True
    assert evaluate(due, _variables({"spark1": _read("d1"), "spark2": _read("d1"), "spark3": _read("d1")}, 3)) is False
    other_runtime = _read("d0", identity="image-0a1b2c3d")
    assert evaluate(due, _variables({"spark1": _read("d1"), "spark2": other_runtime}, 2)) is False


@pytest.mark.parametrize("field", ["path", "identity", "cache", "cache.digest", "cache.names"])
def test_a_worker_read_lacking_a_field_fails_as_before(field):
    broken = _read("d1")
    *parents, key = field.split(".")
    del (broken[parents[0]] if parents else broken)[key]
    variables = _variables({"spark1": _read("d1"), "spark2": broken}, 2)
    for each in (variables, _old(variables)):
        with pytest.raises(TemplateFailed):
            _specs(each)


# --- the filter on its own ----------------------------------------------------------------------


def test_the_filter_leaves_out_the_head_and_hosts_without_a_read_in_play_order():
    specs = jit_cache_mirror_targets(["spark3", "spark1", "spark2"], [_read("d3"), _read("d1"), None],
                                     [_link(2), _link(0), _link(1)], "spark1", "sparkctl")
    assert [(spec["name"], spec["digest"]) for spec in specs] == [("spark3", "d3")]


def test_the_filter_names_the_host_whose_read_lacks_a_field():
    read = _read("d1")
    del read["identity"]
    with pytest.raises(AnsibleFilterError, match="spark2.*identity"):
        jit_cache_mirror_targets(["spark1", "spark2"], [_read("d1"), read], [_link(0), _link(1)], "spark1", "sparkctl")


def test_the_filter_names_the_host_without_a_cable_address():
    with pytest.raises(AnsibleFilterError, match="spark2"):
        jit_cache_mirror_targets(["spark2"], [_read("d1")], [[]], "spark1", "sparkctl")


def test_the_filter_refuses_lists_of_other_hosts():
    with pytest.raises(AnsibleFilterError, match="2 hosts, 1 reads"):
        jit_cache_mirror_targets(["spark1", "spark2"], [None], [_link(0), _link(1)], "spark1", "sparkctl")

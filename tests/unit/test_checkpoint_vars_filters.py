"""The checkpoint role's head and the workers' transfer targets (roles/checkpoint/vars/main.yml), as
Ansible's own templating evaluates them with the collection's filters: the same values the role's
earlier Jinja loop built (kept below as it was), for two and three nodes, an idle worker included,
over the rsync daemons and over ssh; and sparkctl.spark.checkpoint_worker_targets on its own."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.sparkctl.spark.plugins.filter.checkpoint import checkpoint_worker_targets
from collection_templating import TemplateFailed, evaluate

ROLE = Path(__file__).resolve().parents[2] / "roles" / "checkpoint"
VARS = yaml.safe_load((ROLE / "vars" / "main.yml").read_text(encoding="utf-8"))

# The role's vars before the loop moved into sparkctl.spark.checkpoint_worker_targets.
OLD_VARS = yaml.safe_load(r"""
checkpoint_head: "{{ groups['spark_head'][0] }}"
checkpoint_worker_specs: "{{ checkpoint_worker_specs_json | from_json }}"
checkpoint_relay_on: >-
  {{ checkpoint_relay | bool and checkpoint_transport == 'rsyncd'
     and groups['spark_workers'] | reject('equalto', checkpoint_head) | list | length > 1 }}
checkpoint_worker_specs_json: >-
  [{% for worker in groups['spark_workers'] if worker != checkpoint_head %}
  {%- set ips = hostvars[worker]['spark_link'] | sparkctl.spark.link_ips %}
  {%- if checkpoint_transport == 'rsyncd' %}
  {%- set daemon_url = 'rsync://' ~ checkpoint_rsyncd_user ~ '@\\1:' ~ checkpoint_rsyncd_port ~ '/' ~ checkpoint_rsyncd_module ~ '/' %}
  {%- set urls = ips | map('regex_replace', '^(.*)$', daemon_url) | list %}
  {%- else %}
  {%- set urls = ips | map('regex_replace', '^(.*)$', checkpoint_owner ~ '@\\1:' ~ checkpoint_dir ~ '/') | list %}
  {%- endif %}
  {"name": {{ worker | to_json }}, "target": {{ urls[0] | to_json }}, "alternate_targets": {{ urls[1:] | to_json }},
   "relay_source": {{ (checkpoint_owner ~ '@' ~ ips[0] ~ ':' ~ checkpoint_dir ~ '/') | to_json }}}
  {{- "," if not loop.last }}{% endfor %}]
""")


def _link(node: int, halves: int = 2) -> list[dict]:
    """A node's spark_link as the inventory has it: one item per cable half, its own subnet each."""
    interfaces = ["enp1s0f1np1", "enP2p1s0f1np1"]
    return [{"interface": interfaces[half], "address": f"192.168.{100 + half}.{10 + node}/24"} for half in range(halves)]


def _cluster(nodes: int, serving: int) -> dict:
    """spark_cluster as roles/spark pins it (profile_cluster): the head and the serving workers."""
    names = [f"spark{n + 1}" for n in range(nodes)]
    node = {name: {"name": name, "link_ip": f"192.168.100.{10 + n}", "interface": "enp1s0f1np1"}
            for n, name in enumerate(names)}
    return {"head": node[names[0]], "workers": [node[name] for name in names[1:serving]],
            "service_user": "sparkctl", "checkpoint_dir": "/srv/sparkctl/checkpoints/model", "api_proxy": True}


def _variables(nodes: int, transport: str = "rsyncd", relay: bool = True, serving: int | None = None,
               role_vars: dict = VARS, links: dict | None = None) -> dict:
    names = [f"spark{n + 1}" for n in range(nodes)]
    links = links or {}
    hostvars = {name: {"ansible_host": f"10.0.0.{11 + n}", "spark_link": links.get(name, _link(n))}
                for n, name in enumerate(names)}
    return {**role_vars, "groups": {"spark_head": names[:1], "spark_workers": names[1:], "all": names},
            "hostvars": hostvars, "inventory_hostname": names[0], "ansible_play_hosts": names,
            "spark_cluster": _cluster(nodes, serving or nodes), "checkpoint_transport": transport,
            "checkpoint_relay": relay, "checkpoint_owner": "sparkctl", "checkpoint_dir": "/srv/sparkctl/checkpoints/model",
            "checkpoint_rsyncd_user": "sparkctl-mirror", "checkpoint_rsyncd_port": 8730,
            "checkpoint_rsyncd_module": "checkpoint"}


def _old(variables: dict) -> dict:
    return {**variables, **OLD_VARS}


def test_the_head_is_the_clusters_head():
    assert evaluate("{{ checkpoint_head }}", _variables(2)) == "spark1"
    assert evaluate("{{ checkpoint_is_head }}", _variables(3)) is True
    assert evaluate("{{ checkpoint_is_head }}", dict(_variables(3), inventory_hostname="spark3")) is False


def test_two_nodes_over_the_rsync_daemon():
    assert evaluate("{{ checkpoint_worker_specs }}", _variables(2)) == [{
        "name": "spark2",
        "target": "rsync://sparkctl-mirror@192.168.100.11:8730/checkpoint/",
        "alternate_targets": ["rsync://sparkctl-mirror@192.168.101.11:8730/checkpoint/"],
        "relay_source": "sparkctl@192.168.100.11:/srv/sparkctl/checkpoints/model/",
    }]
    assert evaluate("{{ checkpoint_relay_on }}", _variables(2)) is False


def test_three_nodes_with_an_idle_worker_over_ssh():
    """The idle worker (outside the serving set) keeps the checkpoint too: a ready spare."""
    variables = _variables(3, transport="ssh", serving=2)
    assert evaluate("{{ checkpoint_worker_specs }}", variables) == [
        {"name": "spark2", "target": "sparkctl@192.168.100.11:/srv/sparkctl/checkpoints/model/",
         "alternate_targets": ["sparkctl@192.168.101.11:/srv/sparkctl/checkpoints/model/"],
         "relay_source": "sparkctl@192.168.100.11:/srv/sparkctl/checkpoints/model/"},
        {"name": "spark3", "target": "sparkctl@192.168.100.12:/srv/sparkctl/checkpoints/model/",
         "alternate_targets": ["sparkctl@192.168.101.12:/srv/sparkctl/checkpoints/model/"],
         "relay_source": "sparkctl@192.168.100.12:/srv/sparkctl/checkpoints/model/"},
    ]
    assert evaluate("{{ checkpoint_relay_on }}", variables) is False


@pytest.mark.parametrize("nodes, serving", [(2, 2), (3, 3), (3, 2)])
@pytest.mark.parametrize("transport", ["rsyncd", "ssh"])
@pytest.mark.parametrize("relay", [True, False])
def test_the_vars_compute_what_the_loop_computed(nodes, serving, transport, relay):
    new = _variables(nodes, transport=transport, relay=relay, serving=serving)
    for name in ("checkpoint_head", "checkpoint_worker_specs", "checkpoint_relay_on", "checkpoint_rsyncd_allowed_ips"):
        expr = "{{ %s }}" % name
        assert evaluate(expr, new) == evaluate(expr, _old(new)), name


def test_a_single_cable_half_has_no_alternate_target_as_before():
    links = {"spark2": _link(1, halves=1), "spark3": _link(2, halves=1)}
    new = _variables(3, links=links)
    specs = evaluate("{{ checkpoint_worker_specs }}", new)
    assert [spec["alternate_targets"] for spec in specs] == [[], []]
    assert specs == evaluate("{{ checkpoint_worker_specs }}", _old(new))


def test_a_head_listed_among_the_workers_receives_nothing_as_before():
    new = _variables(3)
    new["groups"] = dict(new["groups"], spark_workers=["spark1", "spark2", "spark3"])
    specs = evaluate("{{ checkpoint_worker_specs }}", new)
    assert [spec["name"] for spec in specs] == ["spark2", "spark3"]
    assert specs == evaluate("{{ checkpoint_worker_specs }}", _old(new))
    assert evaluate("{{ checkpoint_relay_on }}", new) is evaluate("{{ checkpoint_relay_on }}", _old(new)) is True


def test_a_single_node_sends_to_no_worker():
    new = _variables(1)
    assert evaluate("{{ checkpoint_worker_specs }}", new) == evaluate("{{ checkpoint_worker_specs }}", _old(new)) == []


def test_a_worker_whose_cable_address_lacks_its_prefix_fails_as_before():
    new = _variables(2, links={"spark2": [{"interface": "enp1s0f1np1", "address": "192.168.100.11"}]})
    for variables in (new, _old(new)):
        with pytest.raises(TemplateFailed, match="prefix"):
            evaluate("{{ checkpoint_worker_specs }}", variables)


# --- the filter on its own ----------------------------------------------------------------------

SETTINGS = dict(owner="sparkctl", checkpoint_dir="/srv/ckpt", rsyncd_user="mirror", rsyncd_port=8730,
                rsyncd_module="checkpoint")


def test_the_filter_keeps_the_workers_order_and_each_halfs_order():
    specs = checkpoint_worker_targets(["spark3", "spark2"], [_link(2), _link(1)], "rsyncd", **SETTINGS)
    assert [spec["name"] for spec in specs] == ["spark3", "spark2"]
    assert specs[0]["target"] == "rsync://mirror@192.168.100.12:8730/checkpoint/"
    assert specs[0]["alternate_targets"] == ["rsync://mirror@192.168.101.12:8730/checkpoint/"]


def test_the_filter_names_each_address_once():
    """A cable half listed twice (the same address) is one target, as spark_link_ips has it."""
    link = _link(1) + [{"interface": "enp1s0f1np1", "address": "192.168.100.11/24"}]
    assert checkpoint_worker_targets(["spark2"], [link], "ssh", **SETTINGS)[0]["alternate_targets"] == [
        "sparkctl@192.168.101.11:/srv/ckpt/"]


def test_the_filter_refuses_a_worker_without_a_cable_plan_naming_it():
    with pytest.raises(AnsibleFilterError, match="spark2"):
        checkpoint_worker_targets(["spark2"], [[]], "rsyncd", **SETTINGS)


def test_the_filter_refuses_plans_that_do_not_match_the_workers():
    with pytest.raises(AnsibleFilterError, match="2 workers but 1"):
        checkpoint_worker_targets(["spark2", "spark3"], [_link(1)], "rsyncd", **SETTINGS)


def test_the_filter_with_no_workers_sends_nowhere():
    assert checkpoint_worker_targets([], [], "rsyncd", **SETTINGS) == []

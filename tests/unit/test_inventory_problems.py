"""The validation play's rules: every bad inventory the issue names is refused,
with the variable named; the lab inventory and the Spark template pass."""

from pathlib import Path

import pytest
import yaml
from inventory_check import inventory_problems

REPO = Path(__file__).resolve().parents[2]


def _cluster(head=("spark1",), workers=("spark2",), **host_overrides):
    plan = {
        "spark1": [("enp1s0f1np1", "192.168.100.10/24"), ("enP2p1s0f1np1", "192.168.101.10/24")],
        "spark2": [("enp1s0f1np1", "192.168.100.11/24"), ("enP2p1s0f1np1", "192.168.101.11/24")],
        "spark3": [("enp1s0f1np1", "192.168.100.12/24"), ("enP2p1s0f1np1", "192.168.101.12/24")],
    }
    groups = {"all": list(head) + list(workers), "spark_head": list(head), "spark_workers": list(workers)}
    hostvars = {}
    for i, host in enumerate(groups["all"]):
        hostvars[host] = {
            "ansible_host": f"10.0.0.{11 + i}",
            "spark_management_network": "10.0.0.0/24",
            "spark_link": [{"interface": n, "address": a} for n, a in plan[host]],
        }
        hostvars[host].update(host_overrides.get(host, {}))
    return groups, hostvars


def _set_address(hostvars, host, half, address):
    hostvars[host]["spark_link"][half]["address"] = address


def _cluster_with(**host_vars):
    """_cluster() with each of host_vars set on every host."""
    groups, hostvars = _cluster()
    for host in hostvars.values():
        host.update(host_vars)
    return groups, hostvars


def test_sound_two_node_inventory_has_no_problem():
    groups, hostvars = _cluster()
    assert inventory_problems(groups, hostvars) == []


def _switch(hostvars):
    for host_vars in hostvars.values():
        host_vars["spark_fabric"] = "switch"
    return hostvars


def test_three_nodes_on_a_switch_are_fine():
    groups, hostvars = _cluster(workers=("spark2", "spark3"))
    assert inventory_problems(groups, _switch(hostvars)) == []


def test_three_nodes_on_a_direct_cable_are_refused_naming_the_fabric_and_the_fix():
    groups, hostvars = _cluster(workers=("spark2", "spark3"))
    problems = inventory_problems(groups, hostvars)
    assert problems == [
        "'spark_fabric' is 'direct' but the cluster has 3 nodes (spark1, spark2, spark3): a direct cable joins exactly "
        "two; set spark_fabric: switch (every node's cable halves on a switch) or keep one head and one worker."
    ]


def test_two_nodes_on_a_switch_are_fine():
    groups, hostvars = _cluster()
    assert inventory_problems(groups, _switch(hostvars)) == []


@pytest.mark.parametrize("fabric", ["ring", "Switch", ["switch"], None])
def test_an_unknown_fabric_is_refused(fabric):
    groups, hostvars = _cluster()
    for host_vars in hostvars.values():
        host_vars["spark_fabric"] = fabric
    problems = inventory_problems(groups, hostvars)
    assert len(problems) == 1
    assert problems[0].startswith("spark1, spark2: 'spark_fabric'")
    assert "set it to 'direct' (one cable between two nodes) or 'switch'" in problems[0]


def test_a_fabric_that_differs_between_hosts_is_refused():
    groups, hostvars = _cluster(workers=("spark2", "spark3"), spark3={"spark_fabric": "direct"})
    hostvars["spark1"]["spark_fabric"] = hostvars["spark2"]["spark_fabric"] = "switch"
    assert inventory_problems(groups, hostvars) == [
        "'spark_fabric' differs between hosts (switch: spark1, spark2; direct: spark3): the nodes share one fabric; "
        "set it once, in group_vars/all."
    ]


@pytest.mark.parametrize(("half", "address", "problem"), [
    pytest.param(1, "192.168.102.12/24",
                 "spark_link[1] addresses are not in one subnet (192.168.101.0/24: spark1, spark2; 192.168.102.0/24: "
                 "spark3): every node on a switch needs an address in each half's subnet.", id="every-node-in-each-subnet"),
    pytest.param(0, "192.168.100.11/24",
                 "spark3: spark_link[0].address 192.168.100.11 is already used by spark2 spark_link[0]: "
                 "every link address must be unique.", id="unique-in-the-shared-subnet"),
])
def test_on_a_switch_the_third_nodes_address_is_judged_against_the_shared_subnet(half, address, problem):
    groups, hostvars = _cluster(workers=("spark2", "spark3"))
    _set_address(_switch(hostvars), "spark3", half, address)
    assert inventory_problems(groups, hostvars) == [problem]


def test_on_a_switch_the_halves_subnets_are_distinct():
    groups, hostvars = _cluster(workers=("spark2", "spark3"))
    for i, host in enumerate(("spark1", "spark2", "spark3")):
        _set_address(_switch(hostvars), host, 1, f"192.168.100.{20 + i}/24")
    problems = inventory_problems(groups, hostvars)
    assert problems == ["spark_link[1] subnet 192.168.100.0/24 overlaps spark_link[0] subnet 192.168.100.0/24: "
                        "give each cable half its own subnet."]


def test_on_a_switch_every_node_needs_every_half():
    groups, hostvars = _cluster(workers=("spark2", "spark3"))
    del _switch(hostvars)["spark3"]["spark_link"][1]
    problems = inventory_problems(groups, hostvars)
    assert any("different number of cable halves per host (spark1=2, spark2=2, spark3=1)" in p for p in problems)


def test_head_group_with_two_hosts_is_refused():
    groups, hostvars = _cluster(head=("spark1", "spark2"), workers=("spark3",))
    problems = inventory_problems(groups, hostvars)
    assert any("'spark_head' has 2 hosts (spark1, spark2)" in p for p in problems)


def test_missing_worker_group_is_refused():
    groups, hostvars = _cluster(workers=())
    problems = inventory_problems(groups, hostvars)
    assert any("'spark_workers' is missing or empty" in p for p in problems)


def test_host_in_both_groups_is_refused():
    groups, hostvars = _cluster(head=("spark1",), workers=("spark1", "spark2"))
    problems = inventory_problems(groups, hostvars)
    assert any("spark1 are in both" in p for p in problems)


def test_duplicate_link_address_names_both_owners():
    groups, hostvars = _cluster()
    _set_address(hostvars, "spark2", 0, "192.168.100.10/24")
    problems = inventory_problems(groups, hostvars)
    assert any("spark2: spark_link[0].address 192.168.100.10 is already used by spark1 spark_link[0]" in p for p in problems)


def test_mismatched_subnets_are_refused():
    groups, hostvars = _cluster()
    _set_address(hostvars, "spark2", 1, "192.168.102.11/24")
    problems = inventory_problems(groups, hostvars)
    assert any(p.startswith("spark_link[1] addresses are not in one subnet") for p in problems)


def test_unknown_interface_name_is_refused_with_the_variable():
    groups, hostvars = _cluster()
    hostvars["spark1"]["spark_link"][0]["interface"] = "eth7"
    problems = inventory_problems(groups, hostvars)
    assert any("spark1: spark_link[0].interface 'eth7' is not a ConnectX-7 port name" in p for p in problems)


def test_interface_pattern_can_be_relaxed():
    groups, hostvars = _cluster_with(spark_link_interface_pattern="")
    hostvars["spark1"]["spark_link"][0]["interface"] = "eth7"
    hostvars["spark2"]["spark_link"][0]["interface"] = "eth7"
    assert inventory_problems(groups, hostvars) == []


@pytest.mark.parametrize("mtu", [100000, 500, "jumbo", True])
def test_invalid_mtu_is_refused(mtu):
    groups, hostvars = _cluster_with(spark_link_mtu=mtu)
    problems = inventory_problems(groups, hostvars)
    assert any("'spark_link_mtu'" in p for p in problems)


def test_link_overlapping_management_network_is_refused():
    groups, hostvars = _cluster_with(spark_management_network="192.168.0.0/16")
    problems = inventory_problems(groups, hostvars)
    assert any("overlaps 'spark_management_network' 192.168.0.0/16" in p for p in problems)


@pytest.mark.parametrize("network", ["fd00::/64", "10.0.0.0/255.255.255.0", "10.0.0.5"])
def test_a_management_network_apart_from_the_cable_passes_whatever_its_form(network):
    assert inventory_problems(*_cluster_with(spark_management_network=network)) == []


def test_management_address_inside_link_subnet_is_refused():
    groups, hostvars = _cluster()
    hostvars["spark2"]["ansible_host"] = "192.168.100.50"
    problems = inventory_problems(groups, hostvars)
    assert any("spark2: 'ansible_host' 192.168.100.50 lies inside the link subnet" in p for p in problems)


@pytest.mark.parametrize(
    "address, reason",
    [
        ("192.168.100.10", "with its prefix length"),
        ("192.168.100.0/24", "network or broadcast"),
        ("192.168.100.300/24", "not a valid IPv4"),
        ("fd00::1/64", "must be IPv4"),
        ("192.168.100.10/32", "/30 or shorter"),
        # What every reader of the plan refuses (module_utils/link_address) is refused here, before any host.
        ("192.168.100.10/24 ", "not a valid IPv4"),
        ("192.168.100.10/ 24", "not a valid IPv4"),
    ],
)
def test_bad_address_forms(address, reason):
    groups, hostvars = _cluster()
    _set_address(hostvars, "spark1", 0, address)
    problems = inventory_problems(groups, hostvars)
    assert any(p.startswith("spark1: spark_link[0].address") and reason in p for p in problems), problems


def test_missing_link_plan_is_refused():
    groups, hostvars = _cluster()
    del hostvars["spark2"]["spark_link"]
    problems = inventory_problems(groups, hostvars)
    assert any("spark2: 'spark_link' is not set" in p for p in problems)


def test_different_number_of_halves_is_refused():
    groups, hostvars = _cluster()
    hostvars["spark2"]["spark_link"].pop()
    problems = inventory_problems(groups, hostvars)
    assert any("different number of cable halves per host (spark1=2, spark2=1)" in p for p in problems)


def test_halves_sharing_one_subnet_are_refused():
    groups, hostvars = _cluster()
    _set_address(hostvars, "spark1", 1, "192.168.100.20/24")
    _set_address(hostvars, "spark2", 1, "192.168.100.21/24")
    problems = inventory_problems(groups, hostvars)
    assert any("spark_link[1] subnet 192.168.100.0/24 overlaps spark_link[0]" in p for p in problems)


@pytest.mark.parametrize(
    "checkpoint, message",
    [
        ({"source": "hub", "repo_id": "nota-ai", "revision": "main"}, "'spark_checkpoint.repo_id' 'nota-ai' is not a hub repo id"),
        ({"source": "hub", "repo_id": "org/name", "revision": ""}, "'spark_checkpoint.revision' is not set"),
        ({"source": "hub", "repo_id": "org/name", "revision": "abc", "allow_patterns": "*.json"},
         "'spark_checkpoint.allow_patterns' must be a list"),
        ({"source": "path", "path": "relative/dir"}, "'spark_checkpoint.path' 'relative/dir' must be the absolute path"),
        ({"source": "s3"}, "'spark_checkpoint.source' 's3' must be 'hub' or 'path'"),
        ("org/name", "'spark_checkpoint' must be a mapping"),
    ],
)
def test_bad_checkpoint_source_is_refused(checkpoint, message):
    groups, hostvars = _cluster_with(spark_checkpoint=checkpoint)
    problems = inventory_problems(groups, hostvars)
    assert any(message in p for p in problems), problems


def test_good_checkpoint_sources_pass():
    groups, hostvars = _cluster()
    for source in ({"source": "hub", "repo_id": "nota-ai/Solar-Open2-250B-Nota-NVFP4", "revision": "0123abc", "allow_patterns": ["*.json"]},
                   {"source": "path", "path": "/data/ckpt"}):
        for host in hostvars.values():
            host["spark_checkpoint"] = source
            host["spark_checkpoint_dir"] = "/srv/models/x"
        assert inventory_problems(groups, hostvars) == []


@pytest.mark.parametrize("keep, refused", [(-1, True), ("two", True), (True, True), (0, False), (2, False), ("3", False)])
def test_engine_venv_keep_must_be_a_count(keep, refused):
    groups, hostvars = _cluster_with(engine_venv_keep=keep)
    said = [p for p in inventory_problems(groups, hostvars) if "'engine_venv_keep'" in p]
    assert bool(said) == refused, said
    assert not said or "or 0 to keep them all" in said[0]


def test_relative_checkpoint_dir_is_refused():
    groups, hostvars = _cluster_with(spark_checkpoint_dir="models/x")
    assert any("'spark_checkpoint_dir' 'models/x' must be an absolute" in p for p in inventory_problems(groups, hostvars))


@pytest.mark.parametrize(
    "ckpt_dir",
    ["/srv", "/", "/etc/", "/usr", "/var", "/boot", "/root", "/home", "/opt", "/srv/../opt", "/home/spark",
     "/home/sparkctl/", "/home/ops/", "/home/x/../ops"],
)
def test_a_system_path_or_an_accounts_home_is_refused(ckpt_dir):
    # Any account's home, the service user's (sparkctl by default, or the one an inventory
    # names) and the SSH login user's alike: the stage writes and cleans its directory.
    groups, hostvars = _cluster_with(spark_checkpoint_dir=ckpt_dir)
    problems = [p for p in inventory_problems(groups, hostvars) if "spark_checkpoint_dir" in p]
    assert len(problems) == 1, problems
    assert f"'spark_checkpoint_dir' {ckpt_dir!r}" in problems[0]
    assert "point spark_checkpoint_dir at a directory of its own" in problems[0]


@pytest.mark.parametrize("ckpt_dir", ["/srv/models/x", "/home/spark/models/x", "/data", "/opt/models"])
def test_a_directory_below_them_is_fine(ckpt_dir):
    groups, hostvars = _cluster_with(spark_checkpoint_dir=ckpt_dir, ansible_user="spark")
    assert inventory_problems(groups, hostvars) == []


def _unit_path_problems(name, value):
    groups, hostvars = _cluster_with(**{name: value})
    return [p for p in inventory_problems(groups, hostvars) if f"'{name}'" in p]


@pytest.mark.parametrize("venv, said", [
    ("/opt/sparkctl/venvs/$(touch /tmp/x)", "holds ' ' '$' '(' ')', which a shell or systemd reads as more than part of a path"),
    ("/opt/sparkctl/venvs/mine\nExecStartPre=/bin/true", "holds a control character ('\\n'): written into a systemd unit, "
                                                         "a line break starts a new directive"),
    ("venvs/mine", "is not an absolute path"),
], ids=["command-substitution", "newline", "relative"])
def test_an_engine_venv_path_unfit_for_a_unit_is_refused_naming_the_variable(venv, said):
    problems = _unit_path_problems("spark_engine_venv_path", venv)
    assert problems == [f"spark1, spark2: 'spark_engine_venv_path' {venv!r} {said}: set it to an absolute path of letters, "
                        "digits and _ . / @ + - only, e.g. /opt/sparkctl/venvs/mine."], problems


@pytest.mark.parametrize("name, value, said", [
    ("spark_checkpoint_dir", "/srv/models/x;id", "holds ';'"),
    ("spark_checkpoint_dir", "/srv/models/./x", "is not in normal form ('/srv/models/x' is)"),
    ("spark_checkpoint_dir", "/srv/models/x:/etc", "holds ':'"),
    ("spark_api_key_file", "/etc/sparkctl/key%h.env", "holds '%'"),
    ("checkpoint_rsyncd_config_file", "/etc/sparkctl/rsyncd.conf --address=0.0.0.0", "holds ' ' '='"),
], ids=["checkpoint-dir-semicolon", "checkpoint-dir-dot", "checkpoint-dir-colon", "api-key-file-specifier", "rsyncd-config-space"])
def test_other_paths_written_into_units_are_refused_naming_the_variable(name, value, said):
    problems = _unit_path_problems(name, value)
    assert len(problems) == 1 and problems[0].startswith(f"spark1, spark2: '{name}' {value!r} {said}"), problems
    assert "set it to an absolute path of letters, digits and _ . / @ + - only, e.g. /" in problems[0]


@pytest.mark.parametrize("name, value", [("spark_engine_venv_path", "/opt/sparkctl/venvs/mine-2.1_rc@x+y"),
                                         ("spark_api_key_file", "/etc/sparkctl/api-key.env"),
                                         ("checkpoint_rsyncd_config_file", "/etc/sparkctl/checkpoint-rsyncd.conf")],
                         ids=["venv", "api-key-file", "rsyncd-config"])
def test_plain_absolute_paths_pass(name, value):
    assert _unit_path_problems(name, value) == []


def _load_inventory(path):
    """Flatten a YAML inventory and its group_vars into (groups, hostvars), as Ansible would for these files."""
    data = yaml.safe_load((path / "hosts.yml").read_text())
    group_vars = {f.stem: yaml.safe_load(f.read_text()) or {} for f in (path / "group_vars").glob("*.yml")}
    # The directory form (group_vars/all/*.yml, read in name order), as the second labs use it.
    for directory in (d for d in (path / "group_vars").iterdir() if d.is_dir()):
        for f in sorted(directory.glob("*.yml")):
            group_vars.setdefault(directory.name, {}).update(yaml.safe_load(f.read_text()) or {})
    groups, host_vars, member_of = {}, {}, {}

    def walk(name, body, chain):
        chain = chain + [name]
        for host, hvars in ((body or {}).get("hosts") or {}).items():
            host_vars[host] = hvars or {}
            member_of[host] = chain
            for group in chain:
                groups.setdefault(group, []).append(host)
        for child, child_body in ((body or {}).get("children") or {}).items():
            walk(child, child_body, chain)

    walk("all", data["all"], [])
    hostvars = {}
    for host, hvars in host_vars.items():
        merged = {}
        for group in member_of[host]:
            merged.update(group_vars.get(group, {}))
        # Ansible sets inventory_dir on every host; relative spark_profile_paths resolve against it.
        hostvars[host] = {**merged, **hvars, "inventory_dir": str(path)}
    return groups, hostvars


@pytest.mark.parametrize("inventory", ["lab", "spark", "lab-switch"])
def test_shipped_inventories_are_sound(inventory):
    groups, hostvars = _load_inventory(REPO / "inventories" / inventory)
    assert inventory_problems(groups, hostvars) == []


def test_profile_needing_more_nodes_than_the_inventory_has_is_refused():
    four = {"topology": {"nodes": 4, "tensor_parallel": 4}}
    groups, hostvars = _cluster(spark1={"spark_profile_overrides": four})
    problems = inventory_problems(groups, hostvars)
    assert any("runs on 4 nodes (topology.nodes) but the inventory has 2" in p for p in problems), problems
    groups, hostvars = _cluster(workers=("spark2", "spark3"),
                                spark1={"spark_profile_overrides": {"topology": {"nodes": 3, "tensor_parallel": 3}}})
    assert not any("topology.nodes" in p for p in inventory_problems(groups, hostvars))


def test_a_malformed_known_bad_entry_of_the_users_is_refused_before_any_host_is_touched():
    # An unquoted version YAML reads as a float (7.10 -> 7.1): refused with the variable and the fix,
    # in the validation play, not at preflight's judge step after every node was read.
    entry = {"id": "my-kernel", "match": {"kernel": {"min": 7.1}}, "reason": "r", "fix": "f"}
    groups, hostvars = _cluster(spark1={"preflight_known_bad_platforms_extra": [entry]},
                                spark2={"preflight_known_bad_platforms_extra": [entry]})
    problems = inventory_problems(groups, hostvars)
    assert len([p for p in problems if "preflight_known_bad_platforms_extra[0]" in p]) == 1, problems
    assert any("spark1, spark2" in p and "quote it" in p for p in problems), problems


def test_a_well_formed_known_bad_entry_of_the_users_passes():
    entry = {"id": "my-kernel", "match": {"kernel": {"prefix": "6.18.44"}}, "reason": "r", "fix": "f"}
    groups, hostvars = _cluster(spark1={"preflight_known_bad_platforms_extra": [entry]},
                                spark2={"preflight_known_bad_platforms_extra": [entry]})
    assert inventory_problems(groups, hostvars) == []


@pytest.mark.parametrize("value", [True, False, "true", "no", "1", 0])
def test_the_kernel_cache_switches_take_what_ansible_reads_as_a_boolean(value):
    from ansible_collections.sparkctl.spark.plugins.filter.inventory_problems import _jit_cache_problems

    assert _jit_cache_problems({"jit_cache_reset": value, "jit_cache_mirror": value}) == []
    assert _jit_cache_problems({"jit_cache_reset": "sometimes"}) == [
        "'jit_cache_reset' 'sometimes' is not a boolean: set it to true or false "
        "(true empties every node's kernel cache before the engine starts)."]

"""What the ssh_mesh role's writes and probes act on (roles/ssh_mesh/vars/main.yml), made by the
collection's filters from the texts identity.yml read once and the identities the peers
published: the sources whose key line authorized_keys lacks (mesh_unauthorized_sources), the
peer addresses known_hosts does not pin yet (mesh_unpinned), and the verify probes
(ssh_probe_plan).

The role's expressions are evaluated by Ansible's own templating with the collection's filters
(collection_templating.evaluate: role_templating.evaluate in a fresh interpreter), each compared
with the Jinja loops the filters replaced (OLD_VARS), on the head and the workers of clusters of
two and three nodes; the filters' edge cases are tested directly."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.sparkctl.spark.plugins.filter import ssh_session as S
from ansible_collections.sparkctl.spark.plugins.filter import stale_mesh_keys as M
from collection_templating import old_and_new

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "ssh_mesh"
VARS = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
DEFAULTS = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
HOME = "/home/sparkctl"
SSH_DIR = HOME + "/.ssh"
CHECKPOINTS = "/srv/sparkctl/models/Solar-Open2-NVFP4"

# The expressions as they were before the filters, kept to check the filters decide the same.
OLD_VARS = yaml.safe_load(r"""
ssh_mesh_unauthorized_sources: >-
  {%- set ns = namespace(nodes=[]) -%}
  {%- for node in ssh_mesh_source_nodes -%}
  {%-   if node.public_key | length > 0
          and not (ssh_mesh_authorized_keys_text | sparkctl.spark.authorized_key_current(node.public_key,
                   node.addresses | sparkctl.spark.mesh_key_options(ssh_mesh_key_options, ssh_mesh_command_roots))) -%}
  {%-     set ns.nodes = ns.nodes + [node] -%}
  {%-   endif -%}
  {%- endfor -%}
  {{ ns.nodes }}
ssh_mesh_unpinned: >-
  {%- set ns = namespace(pairs=[]) -%}
  {%- for pair in ssh_mesh_target_nodes | subelements('addresses') -%}
  {%-   if not (ssh_mesh_known_hosts_text | sparkctl.spark.known_host_current(pair.1, pair.0.host_key)) -%}
  {%-     set ns.pairs = ns.pairs + [pair] -%}
  {%-   endif -%}
  {%- endfor -%}
  {{ ns.pairs }}
ssh_mesh_probes_wanted: |-
  {% set probes = [] %}
  {% for node in ssh_mesh_target_nodes %}
  {% for address in node.addresses %}
  {% set _ = probes.append({'item': {'peer': node.name, 'address': address, 'path': 'link', 'expect': 'ok'},
     'retries': ssh_mesh_verify_retries | int, 'delay': ssh_mesh_verify_delay | int,
     'argv': ['ssh', '-v', '-o', 'BatchMode=yes', '-o', 'ControlPath=none',
              '-o', 'ConnectTimeout=' ~ ssh_mesh_connect_timeout, address, 'true']}) %}
  {% endfor %}
  {% endfor %}
  {% if ssh_mesh_verify_off_link_refused | bool %}
  {% for node in ssh_mesh_target_nodes %}
  {% set _ = probes.append({'item': {'peer': node.name, 'address': node.management_address, 'path': 'management',
     'expect': 'refused'},
     'argv': ['ssh', '-v', '-F', '/dev/null', '-i', ssh_mesh_key_path, '-o', 'IdentitiesOnly=yes', '-o', 'BatchMode=yes',
              '-o', 'PasswordAuthentication=no', '-o', 'KbdInteractiveAuthentication=no', '-o', 'ControlPath=none',
              '-o', 'StrictHostKeyChecking=yes', '-o', 'UserKnownHostsFile=' ~ ssh_mesh_ssh_dir ~ '/known_hosts',
              '-o', 'HostKeyAlias=' ~ node.addresses[0], '-o', 'ConnectTimeout=' ~ ssh_mesh_connect_timeout,
              '-l', node.user, node.management_address, 'true']}) %}
  {% endfor %}
  {% endif %}
  {{ probes }}
""")
COMPARED = tuple(OLD_VARS)


def blob(kind, n):
    """A well-formed ed25519 public key blob, one per (kind, n)."""
    name = b"ssh-ed25519"
    return base64.b64encode(len(name).to_bytes(4, "big") + name + (32).to_bytes(4, "big")
                            + hashlib.sha256(f"{kind}{n}".encode()).digest()).decode()


def addresses(n):
    return [f"192.168.100.{n}", f"192.168.101.{n}"]


def identity(host, n, logs_in):
    """The ssh_mesh_node a node publishes (identity.yml): a public key only on a node that logs in."""
    return {"name": host, "user": "sparkctl",
            "public_key": f"ssh-ed25519 {blob('mesh', n)} sparkctl-mesh@{host}" if logs_in else "",
            "host_key": f"ssh-ed25519 {blob('host', n)}", "addresses": addresses(n),
            "management_address": f"10.20.0.{n}"}


def authorized_line(node, forced=True, extra=()):
    """The line ansible.posix.authorized_key writes for node's key."""
    roots = [os.path.dirname(CHECKPOINTS)] if forced else None
    return M.mesh_key_options(node["addresses"], list(extra), roots) + " " + node["public_key"]


def hashed(host):
    salt = b"0123456789abcdefghij"
    digest = hmac.new(salt, host.encode(), hashlib.sha1).digest()
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"


def read(authorized_keys=None, known_hosts=None):
    """identity.yml's registered node_state read: the service user's ~/.ssh as it is."""
    texts = [{"path": SSH_DIR + "/" + name, "content": content, "checksum": hashlib.sha1(content.encode()).hexdigest()}
             for name, content in (("authorized_keys", authorized_keys), ("known_hosts", known_hosts))
             if content is not None]
    return {"changed": False, "users": {"sparkctl": {"exists": True, "home": HOME}},
            "paths": {SSH_DIR: {"exists": True, "differences": []}, SSH_DIR + "/config": {"exists": False}},
            "texts": texts, "drifted": []}


def mesh(hosts, this_host, state, identities=None, **settings):
    """The variables the role's expressions see on this_host (the first host is the head)."""
    groups = {"spark_head": hosts[:1], "spark_workers": hosts[1:], "all": hosts}
    worker_to_worker = settings.get("ssh_mesh_worker_to_worker", False)
    identities = identities or {host: identity(host, 10 + index, index == 0 or worker_to_worker)
                                for index, host in enumerate(hosts)}
    return {**DEFAULTS, **VARS, "groups": groups, "inventory_hostname": this_host, "ansible_play_hosts": hosts,
            "hostvars": {host: {"ssh_mesh_node": identities[host]} for host in hosts},
            "spark_service_user": "sparkctl", "spark_checkpoint_dir": CHECKPOINTS, "ssh_mesh_state": state, **settings}


TWO = ["spark1", "spark2"]
THREE = ["spark1", "spark2", "spark3"]
HEAD_TWO = identity("spark1", 10, True)
WORKER_TWO = identity("spark2", 11, False)

SCENARIOS = {
    "two nodes, the head, first run": mesh(TWO, "spark1", read()),
    "two nodes, the head, converged": mesh(TWO, "spark1", read(known_hosts="".join(
        f"{address} {WORKER_TWO['host_key']}\n" for address in WORKER_TWO["addresses"]))),
    # One address pinned to the key of a reinstalled worker, the other hashed, a third unrelated.
    "two nodes, the head, stale pins": mesh(TWO, "spark1", read(known_hosts=(
        f"192.168.100.11 ssh-ed25519 {blob('host', 99)}\n"
        f"{hashed('192.168.101.11')} {WORKER_TWO['host_key']}\n"
        f"10.20.0.11 {WORKER_TWO['host_key']}\n"))),
    "two nodes, the head, no off-link probe": mesh(TWO, "spark1", read(), ssh_mesh_verify_off_link_refused="no",
                                                  ssh_mesh_connect_timeout=9, ssh_mesh_verify_retries="4"),
    "two nodes, a worker, first run": mesh(TWO, "spark2", read()),
    "two nodes, a worker, converged": mesh(TWO, "spark2", read(authorized_keys=(
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOperator operator@laptop\n" + authorized_line(HEAD_TWO) + "\n"))),
    # The line a forced-command key left, now that the key is meant to have a whole shell.
    "two nodes, a worker, forced command turned off": mesh(TWO, "spark2", read(
        authorized_keys=authorized_line(HEAD_TWO) + "\n"), ssh_mesh_forced_command=False),
    "two nodes, a worker, extra key options": mesh(TWO, "spark2", read(
        authorized_keys=authorized_line(HEAD_TWO, extra=["pty"]) + "\n"), ssh_mesh_key_options=["pty"]),
    # --check before the head's key exists: nothing to authorize yet.
    "two nodes, a worker, the head's key not made yet": mesh(TWO, "spark2", read(), identities={
        "spark1": identity("spark1", 10, False), "spark2": WORKER_TWO}),
    "three nodes, the head": mesh(THREE, "spark1", read(known_hosts=(
        f"192.168.100.11 {identity('spark2', 11, False)['host_key']}\n"
        f"192.168.101.12,192.168.100.12 {identity('spark3', 12, False)['host_key']}\n"))),
    "three nodes, a worker": mesh(THREE, "spark3", read(authorized_keys=authorized_line(HEAD_TWO) + "\n")),
    # Workers mesh with each other: spark2 logs in to spark3 and authorizes the head and spark3.
    "three nodes, worker to worker": mesh(THREE, "spark2", read(
        authorized_keys=authorized_line(HEAD_TWO) + "\n",
        known_hosts=f"192.168.101.12 {identity('spark3', 12, True)['host_key']}\n"), ssh_mesh_worker_to_worker=True),
}

@pytest.fixture(scope="module")
def evaluated():
    """scenario -> name -> {"new": ..., "old": ...}."""
    return old_and_new(SCENARIOS, COMPARED, OLD_VARS)


def test_the_vars_hold_no_jinja_blocks():
    assert set(OLD_VARS) <= set(VARS)
    assert not [name for name, text in VARS.items() if "{%" in str(text)]


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("name", COMPARED)
def test_each_list_is_the_one_the_jinja_loops_made(evaluated, scenario, name):
    new, old = evaluated[scenario][name]["new"], evaluated[scenario][name]["old"]
    assert "error" not in new, new
    assert new == old
    assert new["kind"] == "list"


def _value(evaluated, scenario, name):
    return evaluated[scenario][name]["new"]["value"]


def _pairs(evaluated, scenario):
    return [(node["name"], address) for node, address in _value(evaluated, scenario, "ssh_mesh_unpinned")]


def test_the_head_pins_what_known_hosts_lacks_and_authorizes_nobody(evaluated):
    assert _pairs(evaluated, "two nodes, the head, first run") == [("spark2", "192.168.100.11"),
                                                                  ("spark2", "192.168.101.11")]
    assert _pairs(evaluated, "two nodes, the head, converged") == []
    assert _pairs(evaluated, "two nodes, the head, stale pins") == [("spark2", "192.168.100.11"),
                                                                   ("spark2", "192.168.101.11")]
    assert _pairs(evaluated, "three nodes, the head") == [("spark2", "192.168.101.11"), ("spark3", "192.168.100.12"),
                                                          ("spark3", "192.168.101.12")]
    for scenario in SCENARIOS:
        if SCENARIOS[scenario]["inventory_hostname"] == "spark1":
            assert _value(evaluated, scenario, "ssh_mesh_unauthorized_sources") == [], scenario


def test_a_worker_authorizes_the_heads_key_until_its_exact_line_is_there(evaluated):
    def names(scenario):
        return [node["name"] for node in _value(evaluated, scenario, "ssh_mesh_unauthorized_sources")]
    assert names("two nodes, a worker, first run") == ["spark1"]
    assert _value(evaluated, "two nodes, a worker, first run", "ssh_mesh_unauthorized_sources") == [HEAD_TWO]
    assert names("two nodes, a worker, converged") == []
    assert names("two nodes, a worker, forced command turned off") == ["spark1"]
    assert names("two nodes, a worker, extra key options") == []
    assert names("two nodes, a worker, the head's key not made yet") == []
    assert names("three nodes, a worker") == []
    assert names("three nodes, worker to worker") == ["spark3"]
    assert _pairs(evaluated, "three nodes, worker to worker") == [("spark3", "192.168.100.12")]


def test_the_head_probes_every_link_address_then_every_management_address(evaluated):
    probes = _value(evaluated, "three nodes, the head", "ssh_mesh_probes_wanted")
    assert [(p["item"]["peer"], p["item"]["address"], p["item"]["path"], p["item"]["expect"]) for p in probes] == [
        ("spark2", "192.168.100.11", "link", "ok"), ("spark2", "192.168.101.11", "link", "ok"),
        ("spark3", "192.168.100.12", "link", "ok"), ("spark3", "192.168.101.12", "link", "ok"),
        ("spark2", "10.20.0.11", "management", "refused"), ("spark3", "10.20.0.12", "management", "refused")]
    assert probes[0] == {"item": {"peer": "spark2", "address": "192.168.100.11", "path": "link", "expect": "ok"},
                         "retries": 2, "delay": 3,
                         "argv": ["ssh", "-v", "-o", "BatchMode=yes", "-o", "ControlPath=none", "-o", "ConnectTimeout=5",
                                  "192.168.100.11", "true"]}
    assert probes[4] == {"item": {"peer": "spark2", "address": "10.20.0.11", "path": "management", "expect": "refused"},
                         "argv": ["ssh", "-v", "-F", "/dev/null", "-i", SSH_DIR + "/sparkctl_ed25519",
                                  "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes", "-o", "PasswordAuthentication=no",
                                  "-o", "KbdInteractiveAuthentication=no", "-o", "ControlPath=none",
                                  "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={SSH_DIR}/known_hosts",
                                  "-o", "HostKeyAlias=192.168.100.11", "-o", "ConnectTimeout=5",
                                  "-l", "sparkctl", "10.20.0.11", "true"]}


def test_a_node_that_logs_in_nowhere_probes_nothing_and_the_off_link_probe_can_be_left_out(evaluated):
    assert _value(evaluated, "two nodes, a worker, first run", "ssh_mesh_probes_wanted") == []
    probes = _value(evaluated, "two nodes, the head, no off-link probe", "ssh_mesh_probes_wanted")
    assert [(p["item"]["path"], p["retries"], p["argv"][7]) for p in probes] == [
        ("link", 4, "ConnectTimeout=9"), ("link", 4, "ConnectTimeout=9")]


# ----------------------------------------------------------------------------- the filters directly

def test_unauthorized_sources_keep_the_source_order_and_skip_keyless_nodes():
    head, other = identity("spark1", 10, True), identity("spark3", 12, True)
    keyless = identity("spark4", 13, False)
    text = authorized_line(other, forced=False) + "\n"
    assert M.mesh_unauthorized_sources([head, keyless, other], text, [], None) == [head]
    assert M.mesh_unauthorized_sources([], text) == [] and M.mesh_unauthorized_sources(None, text) == []


def test_a_keyless_node_needs_no_addresses_but_a_keyed_one_does():
    keyless = dict(identity("spark1", 10, False), addresses=[])
    assert M.mesh_unauthorized_sources([keyless], "") == []
    with pytest.raises(AnsibleFilterError, match="the source's cable addresses"):
        M.mesh_unauthorized_sources([dict(identity("spark1", 10, True), addresses=[])], "")
    with pytest.raises(AnsibleFilterError, match="not a mesh identity"):
        M.mesh_unauthorized_sources([{"name": "spark1"}], "")


def test_unpinned_keeps_each_pair_as_given_and_refuses_what_is_not_one():
    node = identity("spark2", 11, False)
    pairs = [(node, "192.168.100.11"), [node, "192.168.101.11"]]
    assert M.mesh_unpinned(pairs, f"192.168.101.11 {node['host_key']}\n") == [pairs[0]]
    assert M.mesh_unpinned([], "") == [] and M.mesh_unpinned(None, "") == []
    with pytest.raises(AnsibleFilterError, match="not a \\[node with host_key, address\\] pair"):
        M.mesh_unpinned([({"name": "spark2"}, "192.168.100.11")], "")
    with pytest.raises(AnsibleFilterError, match="pair"):
        M.mesh_unpinned([node], "")


def test_the_probe_plan_without_nodes_is_empty_and_refuses_a_node_without_addresses():
    assert S.ssh_probe_plan([], "/k", "/kh", 5, 2, 3) == [] and S.ssh_probe_plan(None, "/k", "/kh", 5, 2, 3) == []
    node = dict(identity("spark2", 11, False), addresses=[])
    # No link address: no link probe, and no address to check the management answer's host key against.
    assert S.ssh_probe_plan([node], "/k", "/kh", 5, 2, 3, False) == []
    with pytest.raises(AnsibleFilterError, match="ssh_probe_plan: not a mesh identity"):
        S.ssh_probe_plan([node], "/k", "/kh", 5, 2, 3, True)


def test_the_probe_items_are_what_the_report_reads():
    node = identity("spark2", 11, False)
    results = [{"item": probe["item"], "rc": 255, "stderr": "Permission denied (publickey)."}
               for probe in S.ssh_probe_plan([node], "/k", "/kh", 5, 2, 3)]
    report = S.ssh_probe_report(results, None, "spark1")
    assert [(r["peer"], r["address"], r["path"], r["expect"], r["status"]) for r in report] == [
        ("spark2", "192.168.100.11", "link", "ok", "fail"), ("spark2", "192.168.101.11", "link", "ok", "fail"),
        ("spark2", "10.20.0.11", "management", "refused", "pass")]

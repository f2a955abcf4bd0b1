"""The host firewall: the nft file of the head and the worker of the lab inventory and of
the real-Sparks template, compared with reviewed golden files under
tests/unit/golden/firewall/ (regenerate with SPARKCTL_UPDATE_GOLDEN=1 and review the
diff); bad values refused naming the variable, in the filter and in the inventory
validation; the live table compared with the rendered one on `nft -j` output recorded
with nft 1.0.6 (Debian bookworm, as on the lab nodes) under tests/unit/fixtures/firewall/.

Where this machine allows it (root, nft, `unshare --net`), the golden files are also
loaded into a throwaway network namespace: never into this machine's own ruleset."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import re
from pathlib import Path

import module_runner
from golden_files import assert_golden_text
import pytest
from ansible.errors import AnsibleFilterError
from ansible.module_utils import basic
from ansible_collections.sparkctl.spark.plugins.filter.firewall import firewall_ruleset
from inventory_check import ROLE_DEFAULTS, inventory_problems
from ansible_collections.sparkctl.spark.plugins.module_utils import firewall as F
from ansible_collections.sparkctl.spark.plugins.plugin_utils import profile as profiles
from ansible_collections.sparkctl.spark.plugins.modules import firewall_state
from test_inventory_problems import _load_inventory

REPO = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).parent / "golden" / "firewall"
FIXTURES = Path(__file__).parent / "fixtures" / "firewall"
LINK = ["enp1s0f1np1", "enP2p1s0f1np1"]
NFT = "/usr/sbin/nft"
UNSHARE = "/usr/bin/unshare"


# --- The rule sets of the shipped inventories ---------------------------------------------


def _role_inputs(inventory, host):
    """The filter's arguments as roles/firewall/defaults/main.yml derives them from the inventory."""
    groups, hostvars = _load_inventory(REPO / "inventories" / inventory)
    hv = hostvars[host]
    profile, problems = profiles.resolve(hv.get("spark_model_profile", ROLE_DEFAULTS["spark_model_profile"]),
                                         hv.get("spark_profile_paths", []), hv.get("spark_profile_overrides", {}),
                                         hv["inventory_dir"])
    assert not problems, problems
    mgmt = hv.get("spark_management_network", "")
    return dict(
        link_interfaces=[item["interface"] for item in hv["spark_link"]],
        ssh_ports=[hv.get("ansible_port", 22)],
        api_port=profile["api"]["port"],
        api_allowed_cidrs=[mgmt] if mgmt else ["0.0.0.0/0", "::/0"],
        is_head=host in groups["spark_head"],
    )


INVENTORY_CASES = {
    "lab-spark1-head": ("lab", "spark1"),
    "lab-spark2-worker": ("lab", "spark2"),
    "spark-spark-a-head": ("spark", "spark-a"),
    "spark-spark-b-worker": ("spark", "spark-b"),
}


def _rendered_cases():
    cases = {name: F.render(**_role_inputs(*where)) for name, where in INVENTORY_CASES.items()}
    # Every option at once: extra ports, IPv4 and IPv6 networks (host bits cleared,
    # duplicates folded), another trusted interface, rate-limited logging.
    cases["options-head"] = F.render(
        LINK, [22, 2222], api_port=8888, is_head=True,
        api_allowed_cidrs=["10.0.0.0/24", "192.168.7.9/16", "10.0.0.0/24", "fd00:1::/64", "2001:db8::1"],
        extra_tcp_ports=[9100, 22], trusted_interfaces=["wg0"], log_drops=True, log_rate="5/second")
    # No management network in the inventory: the API is open to any address of both families.
    cases["any-head"] = F.render(LINK, [22], api_port=8000, is_head=True, api_allowed_cidrs=["0.0.0.0/0", "::/0"])
    # On a switch (spark_fabric: switch): the cable interfaces trust the two peers' addresses only.
    cases["switch-head"] = F.render(LINK, [22], api_port=8000, is_head=True, api_allowed_cidrs=["10.0.0.0/24"],
                                    peer_addresses=SWITCH_PEERS)
    # The observe stage on the Prometheus host (the head): node exporter from its own address, Prometheus
    # from the management network; an entry without sources opens nothing.
    cases["observe-head"] = F.render(LINK, [22], api_port=8000, is_head=True, api_allowed_cidrs=["172.30.77.0/24"],
                                     source_tcp_ports=[
                                         {"port": 9100, "sources": ["172.30.77.11"], "comment": "node exporter from Prometheus"},
                                         {"port": 9090, "sources": ["172.30.77.0/24", "fd00::/64"],
                                          "comment": "Prometheus from firewall_api_allowed_cidrs"},
                                         {"port": 9999, "sources": [], "comment": "closed"}])
    return cases


SWITCH_PEERS = ["192.168.100.11", "192.168.101.11", "192.168.100.12", "192.168.101.12"]


@pytest.mark.parametrize("case", list(INVENTORY_CASES) + ["options-head", "any-head", "switch-head", "observe-head"])
def test_rule_set_matches_golden(case):
    rendered = _rendered_cases()[case]
    assert_golden_text(GOLDEN / f"{case}.nft", rendered)


def test_lab_head_lets_the_controller_call_the_api_and_nothing_else_of_ray():
    text = (GOLDEN / "lab-spark1-head.nft").read_text()
    assert 'iifname { "lo", "enp1s0f1np1", "enP2p1s0f1np1" } accept' in text
    assert "tcp dport 8000 ip saddr 172.30.77.0/24 accept" in text
    assert "tcp dport 22 accept" in text
    for port in ("6379", "8265", "10001", "8730"):
        assert f"dport {port}" not in text
    assert text.rstrip().splitlines()[-3].strip().startswith("counter drop")


def test_on_a_switch_the_cable_interfaces_trust_the_peers_not_the_subnet():
    text = _rendered_cases()["switch-head"]
    assert 'iifname { "lo" } accept comment "trusted: loopback"' in text
    assert ('iifname { "enp1s0f1np1", "enP2p1s0f1np1" } ip saddr { 192.168.100.11, 192.168.101.11, 192.168.100.12, '
            '192.168.101.12 } accept') in text
    # Nothing else trusts the cable interfaces: a stranger on the switch meets the filtered rules.
    assert text.count("enp1s0f1np1") == 2  # the header line and the peers' rule
    assert F.render(LINK, [22]) == F.render(LINK, [22], peer_addresses=None)


@pytest.mark.parametrize("peers, problem", [
    ([], "must be a non-empty list"), (["192.168.100.300"], "'192.168.100.300' (spark_link of another node) is not an address"),
    ("192.168.100.11", "must be a non-empty list"),
])
def test_bad_peer_addresses_are_refused(peers, problem):
    with pytest.raises(F.FirewallError, match=re.escape(problem)):
        F.render(LINK, [22], peer_addresses=peers)


def test_worker_has_no_api_rule():
    text = (GOLDEN / "lab-spark2-worker.nft").read_text()
    assert "8000" not in text and "saddr" not in text.replace("ip6 saddr fe80::/10", "")
    assert "counter drop" in text


def test_file_replaces_only_its_own_table():
    text = F.render(LINK, [22])
    commands = [line for line in text.splitlines() if line and not line.startswith(("#", "\t", "}"))]
    assert commands == ["table inet sparkctl", "delete table inet sparkctl", "table inet sparkctl {"]
    assert "flush" not in text


def test_empty_allowed_list_closes_the_api_port_on_filtered_interfaces():
    text = F.render(LINK, [22], api_port=8000, api_allowed_cidrs=[], is_head=True)
    assert "8000" not in text


def test_digest_follows_the_definition():
    one = F.render(LINK, [22], api_port=8000, api_allowed_cidrs=["10.0.0.0/24"], is_head=True)
    two = F.render(LINK, [22], api_port=8000, api_allowed_cidrs=["10.0.1.0/24"], is_head=True)
    digest = lambda text: F.text_summary(text)[0]  # noqa: E731
    assert digest(one).startswith(F.DIGEST_PREFIX) and digest(one) != digest(two)
    assert digest(one) == digest(F.render(LINK, [22], api_port=8000, api_allowed_cidrs=["10.0.0.0/24"], is_head=True))


# --- Bad values, refused naming the variable --------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, variable",
    [
        ({"api_allowed_cidrs": ["10.0.0.0/33"]}, "'firewall_api_allowed_cidrs'[0] '10.0.0.0/33'"),
        ({"api_allowed_cidrs": ["management"]}, "'firewall_api_allowed_cidrs'[0] 'management'"),
        ({"api_allowed_cidrs": "10.0.0.0/24"}, "'firewall_api_allowed_cidrs' must be a list"),
        ({"extra_tcp_ports": [70000]}, "'firewall_extra_allowed_tcp_ports'[0] 70000 is out of range"),
        ({"extra_tcp_ports": ["http"]}, "'firewall_extra_allowed_tcp_ports'[0] 'http' is not a TCP port"),
        ({"api_port": 0}, "'firewall_api_port' 0 is out of range"),
        ({"trusted_interfaces": ['wg0"; accept']}, "'firewall_trusted_interfaces'[0]"),
        ({"log_rate": "lots"}, "'firewall_log_rate' 'lots'"),
        ({"ssh_ports": []}, "'firewall_ssh_ports' is empty"),
        ({"ssh_ports": [True]}, "'firewall_ssh_ports'[0] True is not a TCP port"),
        ({"source_tcp_ports": [{"port": 9100, "sources": ["prometheus-host"]}]},
         "'firewall_source_tcp_ports[0].sources'[0] 'prometheus-host'"),
        ({"source_tcp_ports": [{"port": 0, "sources": []}]}, "'firewall_source_tcp_ports[0].port' 0 is out of range"),
        ({"source_tcp_ports": [{"port": 9100, "sources": [], "comment": 'x" accept'}]}, "'firewall_source_tcp_ports'[0].comment"),
        ({"source_tcp_ports": [{"sources": []}]}, "must be a mapping with port"),
        ({"source_tcp_ports": {"port": 9100}}, "'firewall_source_tcp_ports' must be a list"),
    ],
)
def test_bad_values_are_refused_naming_the_variable(kwargs, variable):
    args = dict(link_interfaces=LINK, ssh_ports=[22], api_port=8000, api_allowed_cidrs=["10.0.0.0/24"], is_head=True)
    args.update(kwargs)
    with pytest.raises(F.FirewallError) as info:
        F.render(**args)
    assert any(variable in p for p in info.value.problems), info.value.problems
    with pytest.raises(AnsibleFilterError, match="The firewall cannot be rendered"):
        firewall_ruleset(args.pop("link_interfaces"), args.pop("ssh_ports"), **args)


def test_filter_renders_what_the_module_utils_render():
    assert firewall_ruleset(LINK, ["22"], api_port="8000", api_allowed_cidrs=["10.0.0.0/24"], is_head="true") == \
        F.render(LINK, [22], api_port=8000, api_allowed_cidrs=["10.0.0.0/24"], is_head=True)


def test_inventory_validation_refuses_bad_firewall_values_once_with_the_hosts():
    groups, hostvars = _load_inventory(REPO / "inventories" / "lab")
    for host in hostvars.values():  # as group_vars/all.yml would set them
        host["firewall_api_allowed_cidrs"] = ["172.30.77.0/24", "172.30.277.0/24"]
        host["firewall_extra_allowed_tcp_ports"] = [9100, 65536]
    hostvars["spark2"]["ansible_port"] = 0
    problems = inventory_problems(groups, hostvars)
    cidr = [p for p in problems if "firewall_api_allowed_cidrs" in p]
    assert cidr == [cidr[0]] and cidr[0].startswith("spark1, spark2: 'firewall_api_allowed_cidrs'[1] '172.30.277.0/24'")
    assert any(p.startswith("spark1, spark2: 'firewall_extra_allowed_tcp_ports'[1] 65536 is out of range") for p in problems)
    assert any(p.startswith("spark2: 'ansible_port' 0 is out of range") for p in problems)


@pytest.mark.parametrize("inventory", ["lab", "spark"])
def test_shipped_inventories_have_no_firewall_problem(inventory):
    groups, hostvars = _load_inventory(REPO / "inventories" / inventory)
    assert [p for p in inventory_problems(groups, hostvars) if "firewall" in p or "ansible_port" in p] == []


# --- The live table against the rendered one (recorded nft 1.0.6 output) -------------------


def _fixture(name):
    return (FIXTURES / name).read_text()


def _with_counters(text, packets=17, nbytes=1020):
    """The recorded table with traffic counted: what a node shows after a while."""
    doc = json.loads(text)
    for obj in doc["nftables"]:
        for expr in obj.get("rule", {}).get("expr", []):
            if "counter" in expr:
                expr["counter"] = {"packets": packets, "bytes": nbytes}
    return json.dumps(doc)


class FakeNft:
    """Answers the commands table_state runs from recorded output."""

    def __init__(self, tables="tables.json", live="head-live.json", live_text="head-live.txt", scratch="head-scratch.json",
                 scratch_rc=0, scratch_err=""):
        self.answers = {"tables": tables, "live": live, "live_text": live_text, "scratch": scratch}
        self.scratch_rc, self.scratch_err = scratch_rc, scratch_err
        self.calls = []

    def __call__(self, argv, data=None):
        self.calls.append((argv, data))
        if argv[0] == UNSHARE:
            assert argv[1:3] == ["--net", "--"] and data is not None
            if self.scratch_rc:
                return self.scratch_rc, "", self.scratch_err
            return 0, _fixture(self.answers["scratch"]), ""
        if argv[1:] == ["-j", "list", "tables"]:
            return 0, _fixture(self.answers["tables"]), ""
        if argv[1:] == ["-j", "list", "table", "inet", "sparkctl"]:
            return 0, _with_counters(_fixture(self.answers["live"])), ""
        if argv[1:] == ["list", "table", "inet", "sparkctl"]:
            return 0, _fixture(self.answers["live_text"]), ""
        raise AssertionError(f"unexpected command {argv}")


HEAD = _fixture("head.nft")


def test_converged_table_is_in_sync_despite_counters_and_handles():
    fake = FakeNft()
    state = F.table_state(fake, NFT, HEAD, UNSHARE)
    assert state == {"present": True, "in_sync": True, "method": "canonical", "differences": []}
    # Only reads on the host: the candidate is loaded inside the scratch namespace alone.
    host_commands = [argv for argv, _ in fake.calls if argv[0] == NFT]
    assert all(argv[1] in ("-j", "list") and "list" in argv for argv in host_commands)


def test_missing_table_is_reported():
    state = F.table_state(FakeNft(tables="tables-without-sparkctl.json"), NFT, HEAD, UNSHARE)
    assert state["present"] is False and state["in_sync"] is False
    assert state["differences"] == ["table inet sparkctl is not loaded"]


def test_deleted_rule_is_named_by_its_comment():
    state = F.table_state(FakeNft(live="head-live-icmpv6-deleted.json"), NFT, HEAD, UNSHARE)
    assert state["differences"] == ["chain input: rule 5 'ping, ICMPv6 errors, neighbour discovery' is missing"]


def test_changed_policy_is_reported():
    state = F.table_state(FakeNft(live="head-live-policy-drop.json"), NFT, HEAD, UNSHARE)
    assert state["differences"] == ["chain input: policy 'drop' (expected 'accept')"]


def test_rule_added_by_hand_is_reported():
    state = F.table_state(FakeNft(live="head-live-gcs-opened.json"), NFT, HEAD, UNSHARE)
    assert len(state["differences"]) == 1
    assert state["differences"][0].startswith("chain input: unexpected rule at position 1:")
    assert "6379" in state["differences"][0]


def test_rule_edited_in_place_is_reported():
    live = json.loads(_fixture("head-live.json"))
    rule = next(o["rule"] for o in live["nftables"] if o.get("rule", {}).get("comment", "").startswith("API port"))
    rule["expr"][1]["match"]["right"]["prefix"]["addr"] = "0.0.0.0"
    model = F.normalise(F.parse_json(json.dumps(live)))
    lines = F.differences(model, F.normalise(F.parse_json(_fixture("head-scratch.json"))))
    assert lines == ["chain input: rule 8 'API port from firewall_api_allowed_cidrs (IPv4)' differs from the rendered one"]


def test_without_a_namespace_the_comments_still_find_drift():
    unavailable = dict(scratch_rc=1, scratch_err="unshare: unshare failed: Operation not permitted\n")
    assert F.table_state(FakeNft(**unavailable), NFT, HEAD, UNSHARE) == \
        {"present": True, "in_sync": True, "method": "comments", "differences": []}
    deleted = F.table_state(FakeNft(live_text="head-live-icmpv6-deleted.txt", **unavailable), NFT, HEAD, UNSHARE)
    assert deleted["differences"] == ["rule 5 'ping, ICMPv6 errors, neighbour discovery' is missing"]
    opened = F.table_state(FakeNft(live_text="head-live-gcs-opened.txt", **unavailable), NFT, HEAD, None)
    assert opened["differences"] == ["unexpected rule at position 1: without a comment"]
    other_version = F.render(LINK, [22], api_port=8000, api_allowed_cidrs=["10.9.0.0/16"], is_head=True)
    changed = F.table_state(FakeNft(**unavailable), NFT, other_version, UNSHARE)
    assert changed["method"] == "comments" and "another version of the rule set" in changed["differences"][0]
    absent = F.table_state(FakeNft(tables="tables-without-sparkctl.json", **unavailable), NFT, HEAD, UNSHARE)
    assert absent["differences"] == ["table inet sparkctl is not loaded"]


def test_a_candidate_nft_refuses_is_an_error_not_drift():
    bad = FakeNft(scratch_rc=1, scratch_err="/dev/stdin:12:36-40: Error: Service out of range\n")
    with pytest.raises(F.FirewallStateError, match="does not load"):
        F.table_state(bad, NFT, HEAD, UNSHARE)


def test_without_content_only_presence_is_read():
    fake = FakeNft()
    assert F.table_state(fake, NFT) == {"present": True, "in_sync": None, "method": None, "differences": []}
    assert len(fake.calls) == 1


def test_recorded_text_and_rendered_file_summarise_alike():
    assert F.text_summary(_fixture("head-live.txt")) == F.text_summary(HEAD)


# --- The module ------------------------------------------------------------------------------------


def _systemctl_show(active):
    """A stand-in for the one `systemctl show` the module makes: each unit asked for in the given ActiveState
    (inactive and not found when not listed)."""

    def show(argv):
        assert argv[:2] == ["systemctl", "show"]
        blocks = []
        for name in argv[argv.index("--") + 1:]:
            state = active.get(name)
            blocks.append(f"Id={name}\nLoadState={'loaded' if state else 'not-found'}\nActiveState={state or 'inactive'}\n"
                          f"SubState=dead\nUnitFileState={'enabled' if state else ''}\nMainPID=0\nNeedDaemonReload=no\n")
        return 0, "\n".join(blocks), ""

    return show


def _module_node(monkeypatch, nft_answers, active=None, nft_present=True):
    """Run the module against FakeNft for nft and a systemctl stand-in for the units."""
    show = _systemctl_show(active or {})
    calls = []

    def run_command(self, argv, data=None, **kw):
        calls.append(argv)
        return show(argv) if argv[0] == "systemctl" else nft_answers(argv, data)

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda self, name, *a, **kw: UNSHARE)
    monkeypatch.setattr(firewall_state.os, "access", lambda path, mode: nft_present)
    return calls


def test_module_reports_state_and_changes_nothing(monkeypatch, capsys):
    _module_node(monkeypatch, FakeNft(live="head-live-policy-drop.json"))
    code, result = module_runner.run_module(firewall_state.main, {"content": HEAD, "_ansible_check_mode": True}, capsys)
    assert code == 0 and result["changed"] is False
    assert result["present"] is True and result["in_sync"] is False and result["method"] == "canonical"
    assert result["differences"] == ["chain input: policy 'drop' (expected 'accept')"]
    assert result["nft_installed"] is True and result["revert_pending"] is False
    assert result["drifted"] == [] and result["paths"] == {} and result["units"] == {}


def test_module_reports_a_node_without_nft_instead_of_failing(monkeypatch, capsys):
    calls = _module_node(monkeypatch, FakeNft(), nft_present=False)
    code, result = module_runner.run_module(firewall_state.main, {"content": HEAD}, capsys)
    assert code == 0, result
    assert result["nft_installed"] is False and result["present"] is False and result["in_sync"] is False
    assert result["differences"] == ["table inet sparkctl is not loaded: /usr/sbin/nft is missing (nftables is not installed)"]
    assert all(argv[0] == "systemctl" for argv in calls)
    # Without a rule set to compare, only presence is asked for.
    code, result = module_runner.run_module(firewall_state.main, {}, capsys)
    assert result["present"] is False and result["in_sync"] is None and result["differences"] == []


def test_module_reads_the_role_s_files_and_units_in_the_same_run(monkeypatch, capsys, tmp_path):
    rule_set = tmp_path / "firewall.nft"
    rule_set.write_text(HEAD)
    os.chmod(rule_set, 0o644)
    calls = _module_node(monkeypatch, FakeNft(), active={"sparkctl-firewall.service": "active"})
    args = {"content": HEAD,
            "paths": [{"path": str(rule_set), "checksum": hashlib.sha1(HEAD.encode()).hexdigest(), "mode": "0600"},
                      {"path": str(tmp_path / "unit"), "state": "absent"},
                      {"path": str(tmp_path / "wants"), "state": "directory"}],
            "units": [{"name": "sparkctl-firewall.service", "enabled": True, "started": True},
                      {"name": "gone.service", "enabled": False, "started": True}]}
    code, result = module_runner.run_module(firewall_state.main, args, capsys)
    assert code == 0 and result["changed"] is False and result["in_sync"] is True
    assert result["drifted"] == [str(rule_set), str(tmp_path / "wants"), "gone.service"]
    assert result["node_differences"][str(rule_set)] == ["mode 0644, should be 0600"]
    assert result["paths"][str(rule_set)]["checksum"] == hashlib.sha1(HEAD.encode()).hexdigest()
    assert set(result["units"]) == {"sparkctl-firewall.service", "gone.service"}
    assert result["units"]["sparkctl-firewall.service"]["active_state"] == "active"
    # One systemctl call for the units and the revert timer together.
    shows = [argv for argv in calls if argv[0] == "systemctl"]
    assert len(shows) == 1 and shows[0][-3:] == ["sparkctl-firewall.service", "gone.service", F.REVERT_TIMER]


@pytest.mark.parametrize("state, pending", [("active", True), ("inactive", False), ("failed", False)])
def test_module_says_whether_a_revert_is_still_pending(monkeypatch, capsys, state, pending):
    _module_node(monkeypatch, FakeNft(), active={F.REVERT_TIMER: state} if state != "inactive" else {})
    code, result = module_runner.run_module(firewall_state.main, {"content": HEAD}, capsys)
    assert code == 0 and result["revert_pending"] is pending
    # The timer is read, not reported among the role's units.
    assert result["units"] == {}
    # Asked for by name, it is both.
    code, result = module_runner.run_module(firewall_state.main, {"units": [{"name": F.REVERT_TIMER}]}, capsys)
    assert result["revert_pending"] is pending and set(result["units"]) == {F.REVERT_TIMER}


# --- With the real nft, in a throwaway network namespace --------------------------------------


def _scratch_namespace_usable():
    if os.geteuid() != 0 or not os.access(NFT, os.X_OK) or not shutil.which("unshare"):
        return False
    probe = subprocess.run(["unshare", "--net", "--", NFT, "list", "tables"], capture_output=True, timeout=20)
    return probe.returncode == 0


real_nft = pytest.mark.skipif(not _scratch_namespace_usable(), reason="needs root, nft and unshare --net")

_IN_NAMESPACE = r"""
import json, subprocess, sys
from ansible_collections.sparkctl.spark.plugins.module_utils import firewall as F

def run(argv, data=None):
    p = subprocess.run(argv, input=None if data is None else data + "\n", capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr

path, nft, unshare = sys.argv[1:4]
text = open(path).read()
out = {"before": F.table_state(run, nft, text, unshare)}
out["load"] = run([nft, "-f", path])[0]
out["loaded"] = F.table_state(run, nft, text, unshare)
out["comments"] = F.table_state(run, nft, text, None)
run([nft, "add", "table", "ip", "nat"])  # someone else's table
out["reload"] = run([nft, "-f", path])[0]
out["other_table_kept"] = run([nft, "list", "table", "ip", "nat"])[0] == 0
run([nft, "flush", "chain", "inet", "sparkctl", "input"])
out["flushed"] = F.table_state(run, nft, text, unshare)
print(json.dumps(out))
"""


@real_nft
@pytest.mark.parametrize("case", list(INVENTORY_CASES) + ["options-head", "any-head", "observe-head"])
def test_golden_files_load_and_compare_in_a_scratch_namespace(case):
    env = dict(os.environ, PYTHONPATH=str(REPO / "collections"))
    proc = subprocess.run(["unshare", "--net", "--", sys.executable, "-c", _IN_NAMESPACE, str(GOLDEN / f"{case}.nft"), NFT,
                           shutil.which("unshare")], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["before"]["differences"] == ["table inet sparkctl is not loaded"]
    assert out["load"] == 0 and out["reload"] == 0 and out["other_table_kept"]
    assert out["loaded"] == {"present": True, "in_sync": True, "method": "canonical", "differences": []}
    assert out["comments"]["in_sync"] is True
    assert out["flushed"]["in_sync"] is False and len(out["flushed"]["differences"]) >= 3
    assert all("is missing" in line for line in out["flushed"]["differences"])


# --- A changed table is loaded with an automatic revert --------------------------------------


class _FakeNode:
    """nft, systemctl and systemd-run as the revert needs them; records every argv."""

    def __init__(self, live_table=None, fail=()):
        self.live = live_table
        self.calls = []
        self.files = {}
        self.timer_active = False
        self.fail = set(fail)

    def run(self, argv, data=None):
        self.calls.append(list(argv))
        for prefix in self.fail:
            if " ".join(argv).startswith(prefix):
                return 1, "", f"{prefix}: refused"
        if argv[1:] == ["-j", "list", "tables"]:
            tables = [{"table": {"family": "inet", "name": "sparkctl"}}] if self.live else []
            return 0, json.dumps({"nftables": [{"metainfo": {}}] + tables}), ""
        if argv[1:3] == ["-s", "list"]:
            return 0, self.live, ""
        if argv[0].endswith("systemd-run"):
            self.timer_active = True
            return 0, "Running timer as unit: sparkctl-firewall-revert.timer", ""
        if argv[:2] == ["systemctl", "is-active"]:
            return (0 if self.timer_active else 3), "", ""
        if argv[:2] == ["systemctl", "stop"]:
            self.timer_active = False
            return 0, "", ""
        if argv[1:2] == ["-f"]:
            self.live = self.files[argv[2]]
            return 0, "", ""
        return 0, "", ""

    def write(self, path, text):
        self.files[path] = text


LIVE = "table inet sparkctl {\n\tchain input {\n\t\ttype filter hook input priority filter; policy accept;\n\t}\n}\n"


def _arm(node, content="table inet sparkctl\ndelete table inet sparkctl\ntable inet sparkctl { }\n", seconds=60):
    return F.arm_and_load(node.run, node.write, NFT, content, "/run/sparkctl/c.nft", "/run/sparkctl/r.nft", seconds,
                          systemd_run="/usr/bin/systemd-run", systemctl="systemctl")


def test_the_revert_is_armed_before_the_new_table_is_loaded():
    node = _FakeNode(live_table=LIVE)
    result = _arm(node)
    assert result == {"previous_present": True, "revert_unit": "sparkctl-firewall-revert.timer", "revert_seconds": 60}
    arm = next(i for i, argv in enumerate(node.calls) if argv[0].endswith("systemd-run"))
    load = node.calls.index([NFT, "-f", "/run/sparkctl/c.nft"])
    assert arm < load
    assert "--on-active=60s" in node.calls[arm] and node.calls[arm][-3:] == [NFT, "-f", "/run/sparkctl/r.nft"]
    # The revert file restores exactly the table that was live, in one transaction.
    assert node.files["/run/sparkctl/r.nft"] == "table inet sparkctl\ndelete table inet sparkctl\n" + LIVE
    assert node.timer_active


def test_without_a_table_before_the_revert_deletes_it():
    node = _FakeNode(live_table=None)
    assert _arm(node)["previous_present"] is False
    assert node.files["/run/sparkctl/r.nft"] == "table inet sparkctl\ndelete table inet sparkctl\n"


def test_nothing_is_loaded_when_the_timer_cannot_be_armed():
    node = _FakeNode(live_table=LIVE, fail=("/usr/bin/systemd-run",))
    with pytest.raises(F.FirewallStateError, match="cannot arm the revert timer"):
        _arm(node)
    assert [NFT, "-f", "/run/sparkctl/c.nft"] not in node.calls
    assert node.live == LIVE


def test_a_too_short_window_is_refused():
    with pytest.raises(F.FirewallStateError, match="firewall_revert_seconds"):
        _arm(_FakeNode(), seconds=2)
    assert F.inventory_problems({"firewall_revert_seconds": 2})[0].startswith("'firewall_revert_seconds' 2")
    assert F.inventory_problems({"firewall_revert_seconds": 60}) == []


def test_the_confirmation_cancels_a_pending_revert_and_says_when_none_was_pending():
    node = _FakeNode(live_table=LIVE)
    _arm(node)
    assert F.confirm(node.run, check_mode=True) is True and node.timer_active
    assert F.confirm(node.run) is True and not node.timer_active
    # The timer fired before the confirmation (or nothing was armed): nothing pending.
    assert F.confirm(node.run) is False


def test_list_problems_say_the_whole_sentence():
    assert F.port_problems("p", None) == []
    assert F.port_problems("p", 22) == ["'p' must be a list of TCP ports (1-65535), e.g. [9100], got 22."]
    assert F.port_problems("p", [22, "x", 0]) == ["'p'[1] 'x' is not a TCP port number (1-65535).",
                                                   "'p'[2] 0 is out of range: a TCP port is 1-65535."]
    assert F.cidr_problems("c", "10.0.0.0/8") == [
        "'c' must be a list of IPv4/IPv6 networks, e.g. ['10.0.0.0/24', 'fd00::/64'], got '10.0.0.0/8'."]
    assert F.cidr_problems("c", ["10.0.0.0/8", 7]) == [
        "'c'[1] 7 is not an IPv4 or IPv6 network: write it like 10.0.0.0/24 or fd00::/64 "
        "(a single address is a /32 or /128); 0.0.0.0/0 and ::/0 mean any."]
    assert F.interface_problems("i", "eth0") == ["'i' must be a list of interface names, got 'eth0'."]
    assert F.interface_problems("i", ["eth0", ".."]) == [
        "'i'[1] '..' is not a network interface name (1-15 of A-Z a-z 0-9 _ . : -)."]

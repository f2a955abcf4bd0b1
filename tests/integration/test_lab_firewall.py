"""The host firewall on the two-node lab (roles/firewall), after site.yml converged.

From the control node (this process: plain sockets to the nodes' management
addresses, the lab's docker bridge, 172.30.77.0/24 in the default lab) Ray's GCS, the raylets' and
the dashboard agents' ports time out (dropped, and counted by the drop rule),
although they listen on every address; over the cable the other node reaches
them. ssh and the head's API port answer from the control node. A table deleted
by hand is back by itself at once; a firewall unit stopped is back after one run of
playbooks/provision.yml, which changes nothing but the firewall on that node and nothing at all on the next run (check mode on the
converged lab is the whole-site one of test_lab_check_mode.py). Other tables (docker's DNS NAT inside the
nodes) are never touched. A `systemctl restart nftables` or reload (whose config flushes the
whole ruleset) brings the table back within moments without a run, Ray untouched; the rsync
daemon's socket refuses to start while the firewall is on but its table is not
loaded; a rule set that drops sshd (firewall_ssh_ports without its port) reverts by
itself and the run fails naming firewall_ssh_ports.

Ray 2.60 cannot bind those ports to the cable address (docs/field-notes.md), which is why
the firewall exists."""

from __future__ import annotations

import json
import socket
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import pytest
from labrun import management_address, node_exec

pytestmark = pytest.mark.lab

HOSTS = ("spark1", "spark2")
MGMT = {node: management_address(node) for node in HOSTS}
CABLE = {"spark1": "192.168.100.10", "spark2": "192.168.100.11"}
PEER = {"spark1": "spark2", "spark2": "spark1"}
API_PORT = 8000
TIMEOUT = 2.0
DROP_COMMENT = "everything else"

# Run on a node: every TCP socket listening on a wildcard address, classified by process
# (Ray's GCS, raylet, dashboard agent, workers; anything else is "other").
_LISTENERS = r"""
import json, re, subprocess
found = []
for line in subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True, check=True).stdout.splitlines():
    fields, pid = line.split(), re.search(r"pid=(\d+)", line)
    if len(fields) < 5 or not pid:
        continue
    host, _, port = fields[3].rpartition(":")
    host = host.strip("[]").split("%")[0]
    if host not in ("0.0.0.0", "*", "::"):
        continue
    try:
        comm = open(f"/proc/{pid.group(1)}/comm").read().strip()
        cmdline = open(f"/proc/{pid.group(1)}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        continue
    if comm == "gcs_server":
        kind = "gcs"
    elif comm == "raylet":
        kind = "raylet"
    # Ray 2.60 runs the dashboard agent as a process titled ray::DashboardAgent (comm keeps 15 bytes).
    elif "dashboard/agent.py" in cmdline or comm.startswith("ray::DashboardA"):
        kind = "agent"
    elif "default_worker.py" in cmdline or comm.startswith("ray::"):
        kind = "worker"
    else:
        kind = "other"
    found.append({"kind": kind, "port": int(port), "comm": comm})
print(json.dumps(found))
"""

# Run on a node: connect to argv[1]:argv[2] and say how it went.
_PROBE = r"""
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])).close()
    print("open")
except socket.timeout:
    print("timeout")
except ConnectionRefusedError:
    print("refused")
except OSError as exc:
    print(f"error {exc}")
"""


def _probe(host: str, port: int, timeout: float = TIMEOUT) -> str:
    """From the control node: open, refused (nothing listens), timeout (dropped) or error."""
    try:
        socket.create_connection((host, port), timeout=timeout).close()
        return "open"
    except socket.timeout:
        return "timeout"
    except ConnectionRefusedError:
        return "refused"
    except OSError as exc:
        return f"error {exc}"


def _probe_from(node: str, host: str, port: int) -> str:
    return node_exec(node, "python3", "-c", _PROBE, host, str(port), str(TIMEOUT)).stdout.strip()


def _listeners(node: str) -> list[dict]:
    return json.loads(node_exec(node, "python3", "-c", _LISTENERS).stdout)


# Long-lived Ray listeners (workers come and go with their tasks).
STABLE = ("gcs", "raylet", "agent")


def _ray_ports(node: str, kinds=STABLE) -> list[int]:
    """Wildcard ports of the given kinds on node; the GCS (head), the raylet and the dashboard agent must be there."""
    listeners = _listeners(node)
    found = {item["kind"] for item in listeners}
    expected = {"raylet", "agent"} | ({"gcs"} if node == "spark1" else set())
    assert expected <= found, f"{node}: sockets listening on a wildcard address: {listeners}"
    return sorted({item["port"] for item in listeners if item["kind"] in kinds})


def _filtered_ports(node: str) -> list[int]:
    """Every wildcard port the firewall must drop on the management side: all but ssh and the head's API."""
    _ray_ports(node)  # Ray's own listeners must be among them
    allowed = {22} | ({API_PORT} if node == "spark1" else set())
    return sorted({item["port"] for item in _listeners(node)} - allowed)


def _drop_count(node: str) -> int:
    doc = json.loads(node_exec(node, "nft", "-j", "list", "table", "inet", "sparkctl").stdout)
    for obj in doc["nftables"]:
        rule = obj.get("rule")
        if rule and rule.get("comment", "").startswith(DROP_COMMENT):
            return next(e["counter"]["packets"] for e in rule["expr"] if "counter" in e)
    raise AssertionError(f"{node}: no drop rule in table inet sparkctl")


def _other_tables(node: str) -> set[str]:
    out = node_exec(node, "nft", "list", "tables").stdout
    return {line.strip() for line in out.splitlines() if line.strip() and line.strip() != "table inet sparkctl"}


def _table_loaded(node: str) -> bool:
    return "table inet sparkctl" in node_exec(node, "nft", "list", "tables").stdout


def _provision(run_site, *extra):
    return run_site(*extra, playbook="playbooks/provision.yml")


@pytest.fixture(scope="module")
def converged(site_converged):
    # site.yml once for the session (conftest.py); this module leaves the cluster as it found it.
    return site_converged


def test_firewall_unit_and_file_are_in_place(converged):
    for node in HOSTS:
        assert _table_loaded(node), node
        assert node_exec(node, "systemctl", "is-enabled", "sparkctl-firewall.service").stdout.strip() == "enabled"
        assert node_exec(node, "systemctl", "is-active", "sparkctl-firewall.service").stdout.strip() == "active"
        assert node_exec(node, "stat", "-c", "%a %U", "/etc/sparkctl/firewall.nft").stdout.split() == ["600", "root"]


def test_ray_ports_are_dropped_on_the_management_network(converged):
    for node in HOSTS:
        ports = _filtered_ports(node)
        before = _drop_count(node)
        with ThreadPoolExecutor(max_workers=8) as pool:
            results = dict(zip(ports, pool.map(partial(_probe, MGMT[node]), ports), strict=True))
        assert all(result == "timeout" for result in results.values()), f"{node} {MGMT[node]}: {results}"
        # Dropped by sparkctl's rule, not lost elsewhere: the counter moved by at least one SYN per port.
        assert _drop_count(node) >= before + len(ports), node


def test_ray_ports_are_reachable_over_the_cable(converged):
    for node in HOSTS:
        ports = _ray_ports(node)
        results = {port: _probe_from(PEER[node], CABLE[node], port) for port in ports}
        assert all(result == "open" for result in results.values()), f"{PEER[node]} -> {node} {CABLE[node]}: {results}"
    # The worker joins the head's GCS over the cable: the address the Ray units use.
    assert _probe_from("spark2", CABLE["spark1"], 6379) == "open"


def test_ssh_and_the_api_answer_from_the_control_node(converged):
    for node in HOSTS:
        with socket.create_connection((MGMT[node], 22), timeout=5) as conn:
            conn.settimeout(5)
            assert conn.recv(64).startswith(b"SSH-"), node
    # No proxy from the environment: the request must go straight to the node.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"http://{MGMT['spark1']}:{API_PORT}/health", timeout=10) as answer:
        assert answer.status == 200


def test_a_deleted_table_is_back_by_itself_and_a_stopped_firewall_after_one_provision_run(converged, run_site):
    others = {node: _other_tables(node) for node in HOSTS}
    raylet = _ray_ports("spark2", kinds=("raylet",))[0]
    # Deleted by hand: the firewall unit's watcher loads it again at once, without a run.
    node_exec("spark2", "nft", "delete", "table", "inet", "sparkctl")
    assert _wait_for_table("spark2") and _probe(MGMT["spark2"], raylet) == "timeout"
    # The unit stopped (its stop deletes the table): the raylet is open to the management network,
    # the firewall is what closed it, and one run of the provision stage starts it again.
    node_exec("spark2", "systemctl", "stop", "sparkctl-firewall.service")
    assert _probe(MGMT["spark2"], raylet) == "open"

    repair = _provision(run_site)
    assert repair.rc == 0, repair.output[-5000:]
    changed = repair.changed_tasks("spark2")
    assert changed and all(task.startswith("firewall : ") for task in changed), changed
    assert repair.changed("spark1") == 0, repair.changed_tasks("spark1")
    assert _table_loaded("spark2")
    assert _probe(MGMT["spark2"], raylet) == "timeout"
    # Only sparkctl's table was replaced.
    assert {node: _other_tables(node) for node in HOSTS} == others

    quiet = _provision(run_site)
    assert quiet.rc == 0, quiet.output[-5000:]
    assert all(quiet.changed(h) == 0 for h in HOSTS), {h: quiet.changed_tasks(h) for h in HOSTS}


# The firewall unit's main process loads the table again the moment nftables.service's flush
# deletes it (roles/firewall/files/sparkctl-firewall-watch): it is back within milliseconds, and
# the wait only keeps a broken watcher from failing the test on a busy machine for the wrong reason.
TABLE_BACK_SECONDS = 30.0


def _wait_for_table(node: str, seconds: float = TABLE_BACK_SECONDS) -> bool:
    deadline = time.monotonic() + seconds
    while not _table_loaded(node):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)
    return True


def _restore_after_nftables(node: str, nat: str) -> None:
    """Put the lab back as site.yml left it: nftables.service inactive (its stop flushes the
    ruleset again; the firewall's watcher loads its table back), docker's DNS NAT table, the
    firewall."""
    node_exec(node, "systemctl", "stop", "nftables.service", check=False)
    node_exec(node, "sh", "-c", 'printf "%s" "$1" | nft -f -', "sh", nat)
    node_exec(node, "systemctl", "start", "sparkctl-firewall.service")


def test_a_restarted_nftables_brings_the_table_back_without_a_run(converged):
    node, gcs = "spark1", 6379
    assert _probe(MGMT[node], gcs) == "timeout"
    # /etc/nftables.conf starts with `flush ruleset`: docker's DNS NAT goes too, put back below.
    nat = node_exec(node, "nft", "-s", "list", "table", "ip", "nat").stdout
    ray = node_exec(node, "systemctl", "show", "-p", "MainPID", "--value", "sparkctl-ray-head.service").stdout.strip()
    try:
        node_exec(node, "systemctl", "restart", "nftables.service")
        assert _wait_for_table(node), f"table inet sparkctl not back within {TABLE_BACK_SECONDS:.0f} s of restarting nftables"
        assert _probe(MGMT[node], gcs) == "timeout"
        # A reload runs the same flushing config.
        node_exec(node, "systemctl", "reload", "nftables.service")
        assert _wait_for_table(node), f"table inet sparkctl not back within {TABLE_BACK_SECONDS:.0f} s of reloading nftables"
        assert _probe(MGMT[node], gcs) == "timeout"
        # Ray was neither stopped nor restarted with the firewall.
        assert node_exec(node, "systemctl", "show", "-p", "MainPID", "--value",
                         "sparkctl-ray-head.service").stdout.strip() == ray
    finally:
        _restore_after_nftables(node, nat)
    assert _table_loaded(node) and _probe(MGMT[node], gcs) == "timeout"


# A firewall whose start fails (at boot: a rule set the kernel refuses), as a runtime drop-in; a
# runtime mask would not do: the unit's file in /etc/systemd/system wins over /run.
FIREWALL_BROKEN = "/run/systemd/system/sparkctl-firewall.service.d/sparklab-broken.conf"


def test_the_rsync_daemon_does_not_start_without_the_table(converged):
    node, socket_unit = "spark2", "sparkctl-rsyncd.socket"
    try:
        node_exec(node, "systemctl", "stop", socket_unit)
        # The firewall unable to start (first: any unit's Wants= may start it again at any moment),
        # then stopped (its stop deletes the table): the socket's Wants= tries it, then its own
        # check refuses.
        node_exec(node, "sh", "-c", f"mkdir -p {FIREWALL_BROKEN.rsplit('/', 1)[0]} && "
                  f"printf '[Service]\\nExecStartPre=\\nExecStartPre=/bin/false\\n' > {FIREWALL_BROKEN} && systemctl daemon-reload")
        node_exec(node, "systemctl", "stop", "sparkctl-firewall.service")
        assert not _table_loaded(node)
        started = node_exec(node, "systemctl", "start", socket_unit, check=False)
        assert started.returncode != 0
        assert not _table_loaded(node)
        journal = node_exec(node, "journalctl", "-u", socket_unit, "-n", "20", "--no-pager").stdout
        assert "the firewall is enabled but table inet sparkctl is not loaded" in journal
    finally:
        node_exec(node, "sh", "-c", f"rm -f {FIREWALL_BROKEN} && systemctl daemon-reload")
        node_exec(node, "systemctl", "reset-failed", "sparkctl-firewall.service", check=False)
        node_exec(node, "systemctl", "restart", "sparkctl-firewall.service")
        node_exec(node, "systemctl", "reset-failed", socket_unit, check=False)
        node_exec(node, "systemctl", "start", socket_unit)
    assert _table_loaded(node)
    assert node_exec(node, "systemctl", "is-active", socket_unit).stdout.strip() == "active"


def test_a_rule_set_that_drops_sshd_reverts_by_itself(converged, run_site):
    before = {node: node_exec(node, "nft", "-s", "list", "table", "inet", "sparkctl").stdout for node in HOSTS}
    files = {node: node_exec(node, "sha256sum", "/etc/sparkctl/firewall.nft").stdout for node in HOSTS}
    # sshd listens on 22 only: a firewall opening 2222 instead drops the next SSH connection.
    run = _provision(run_site, "--tags", "firewall", "-e", json.dumps({"firewall_ssh_ports": [2222],
                                                                       "firewall_revert_seconds": 15}))
    assert run.rc != 0
    assert "firewall_ssh_ports" in run.output and "the previous table was put back" in run.output, run.output[-4000:]
    for node in HOSTS:
        # Reachable again from the management network, with the table and file it had.
        with socket.create_connection((MGMT[node], 22), timeout=5) as conn:
            conn.settimeout(5)
            assert conn.recv(64).startswith(b"SSH-"), node
        assert node_exec(node, "nft", "-s", "list", "table", "inet", "sparkctl").stdout == before[node]
        assert node_exec(node, "sha256sum", "/etc/sparkctl/firewall.nft").stdout == files[node]
        assert node_exec(node, "systemctl", "is-active", "sparkctl-firewall-revert.timer", check=False).stdout.strip() != "active"

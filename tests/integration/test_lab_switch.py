"""Three and more Sparks on a switch: site.yml on the switch lab (inventories/lab-switch, or a copy
of it named by SPARKLAB_INVENTORY; tests/lab/README.md, "Three and more nodes on a switch").

Marker `switch` (not `lab`): the suite has no lab of three nodes, so these run by hand against one:
    python tests/lab/sparklab up --nodes 3 --topology switch && python tests/lab/sparklab -i inventories/lab-switch hub start
    SPARKLAB_INVENTORY=$PWD/inventories/lab-switch python -m pytest tests/integration/test_lab_switch.py -m switch

Every stage with N nodes: the converged re-run changes nothing; each node's cable halves carry
their address at MTU 9000; a full-MTU no-fragment ping reaches every peer on every half; each
node's fabric environment names its own RoCE GID index; the head logs in to every worker over
every half with the mesh key; the firewall trusts the peers' addresses on the shared subnet, not
the subnet (a stranger on the switch does not reach Ray's GCS, a peer does); Ray has the serving set's nodes and
GPUs; every node runs the same versions of the stack; and the workers relay the checkpoint to each
other (the head sends each shard once) and end with the head's bytes.

Profiles across N nodes: the two-node lab profile serves on spark1 and spark2 and spark3 idles
(said in the run, a row in verify, no Ray worker there; Ray has two nodes and two GPUs); the
three-node lab profile (lab-standin-3) serves across all three (Ray three nodes, three GPUs), and
switching back stops and disables spark3's Ray worker."""

from __future__ import annotations

import functools
import ipaddress
import json
import re
import subprocess
import time

import pytest
from labrun import lab_plan, node_exec, serving_venv

pytestmark = pytest.mark.switch

GCS_PORT = 6379
SSH_PORT = 22
# A stranger on the switch: an address in the first half's subnet that no node has, put on the
# switch stand-in's own bridge for the one test that needs it.
STRANGER_HOST = 99


@functools.cache
def _venv() -> str:
    """The venv the lab's two-node profile serves from (one path on every node), read from the head's
    engine unit at the first test, which runs that profile; the three-node test reads its own."""
    return serving_venv(lab_plan().head.name)


@pytest.fixture(scope="module")
def plan():
    plan = lab_plan()
    if plan.topology != "switch" or len(plan.nodes) < 3:
        pytest.skip(f"{plan.inventory} is not a lab of three or more nodes on a switch: "
                    "set SPARKLAB_INVENTORY to inventories/lab-switch (or a copy) and bring it up")
    return plan


@pytest.fixture(scope="module")
def converged(plan, site_converged):
    return site_converged


def test_the_converged_rerun_changes_nothing_on_any_node(plan, converged):
    assert {n.name for n in plan.nodes} <= set(converged.recap)
    assert all(counters.get("changed") == 0 for counters in converged.recap.values()), converged.recap


def test_every_half_has_its_address_at_mtu_9000(plan, converged):
    for node in plan.nodes:
        links = {link["ifname"]: link for link in json.loads(node_exec(node.name, "ip", "-j", "addr", "show").stdout)}
        for link in node.links:
            got = links[link.interface]
            assert got["mtu"] == 9000, (node.name, link.interface)
            assert link.address in [f"{a['local']}/{a['prefixlen']}" for a in got["addr_info"] if a["family"] == "inet"]


def test_a_jumbo_ping_reaches_every_peer_on_every_half(plan, converged):
    failed = []
    for node in plan.nodes:
        for peer in plan.nodes:
            if peer is node:
                continue
            for mine, theirs in zip(node.links, peer.links, strict=True):
                ping = node_exec(node.name, "ping", "-M", "do", "-s", "8972", "-c", "1", "-W", "2", "-I", mine.interface,
                                 theirs.ip, check=False)
                if ping.returncode != 0:
                    failed.append(f"{node.name} {mine.interface} -> {peer.name} {theirs.ip}")
    assert not failed


def test_each_node_uses_its_own_gid_index(plan, converged):
    assert len({n.gid_index for n in plan.nodes}) == len(plan.nodes)  # the fixtures differ per node
    for node in plan.nodes:
        env = node_exec(node.name, "cat", "/etc/sparkctl/fabric.env").stdout
        assert re.search(rf"^NCCL_IB_GID_INDEX=\"?{node.gid_index}\"?$", env, re.M), (node.name, env)


def test_the_head_logs_in_to_every_worker_over_every_half(plan, converged):
    head = plan.head
    for worker in plan.nodes[1:]:
        for link in worker.links:
            login = node_exec(head.name, "runuser", "-u", plan.user, "--", "ssh", "-o", "BatchMode=yes",
                              "-o", "ConnectTimeout=5", link.ip, "hostname", check=False)
            assert login.returncode == 0 and login.stdout.strip() == worker.name, (link.ip, login.stderr)


def _connects(argv: list[str]) -> bool:
    return subprocess.run(argv, capture_output=True, timeout=30).returncode == 0


def test_on_the_switch_the_firewall_trusts_the_peers_not_the_subnet(plan, converged):
    head = plan.head
    half0 = ipaddress.ip_interface(head.links[0].address).network
    stranger = f"{half0.network_address + STRANGER_HOST}/{half0.prefixlen}"
    assert stranger.split("/")[0] not in {n.links[0].ip for n in plan.nodes}
    table = node_exec(head.name, "nft", "list", "table", "inet", "sparkctl").stdout
    peers = sorted(ip for n in plan.nodes[1:] for ip in (link.ip for link in n.links))
    assert all(ip in table for ip in peers) and '"trusted: the cluster peers on the switch"' in table
    def probe(port):
        return ["bash", "-c", f"exec 3<>/dev/tcp/{head.links[0].ip}/{port}"]

    # A peer reaches the head's GCS over the switch.
    assert node_exec(plan.nodes[1].name, "timeout", "5", *probe(GCS_PORT), check=False).returncode == 0
    # A stranger on the same switch, in the same subnet, does not.
    ns = plan.switch_netns
    subprocess.run(["ip", "-n", ns, "addr", "add", stranger, "dev", "half0"], check=True)
    try:
        # The stranger reaches the head (sshd, open on every interface), but not Ray's GCS.
        assert _connects(["ip", "netns", "exec", ns, "timeout", "5", *probe(SSH_PORT)])
        assert not _connects(["ip", "netns", "exec", ns, "timeout", "5", *probe(GCS_PORT)])
    finally:
        subprocess.run(["ip", "-n", ns, "addr", "del", stranger, "dev", "half0"], check=False)


def _ray_nodes_and_gpus(plan, venv: str, want: int) -> tuple[tuple[int, float], str]:
    """(alive nodes, GPUs) as `ray status` on the head counts them, waiting up to a minute for `want`."""
    gcs = f"{plan.head.links[0].ip}:{GCS_PORT}"
    seen, text = None, ""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        proc = node_exec(plan.head.name, "runuser", "-u", plan.user, "--", f"{venv}/bin/ray", "status",
                         f"--address={gcs}", check=False)
        text = proc.stdout + proc.stderr
        active = text.split("Active:", 1)[1].split("Pending:", 1)[0] if "Active:" in text else ""
        gpus = re.search(r"^\s*[0-9.]+/([0-9.]+) GPU", text, re.M)
        seen = (len(re.findall(r"^\s*1 node_[0-9a-f]+", active, re.M)), float(gpus.group(1)) if gpus else 0.0)
        if seen == (want, float(want)):
            break
        time.sleep(3)
    return seen, text


def _unit_state(node: str, unit: str) -> tuple[str, str]:
    active = node_exec(node, "systemctl", "is-active", unit, check=False).stdout.strip()
    enabled = node_exec(node, "systemctl", "is-enabled", unit, check=False).stdout.strip()
    return active, enabled


def _verify_rows(report_dir) -> list[tuple[str, str]]:
    report = json.loads((report_dir / "verify.json").read_text())
    return [(row["mark"], row["what"]) for row in report["rows"]]


def test_the_two_node_profile_serves_on_the_head_and_the_first_worker_the_rest_idle(plan, converged, report_dir):
    """lab-standin needs two nodes (topology.nodes): spark1 and spark2 serve, the other workers idle,
    which the run says, verify reports (a row per idle node) and Ray counts (two nodes, two GPUs)."""
    serving, idle = plan.nodes[:2], plan.nodes[2:]
    seen, text = _ray_nodes_and_gpus(plan, _venv(), len(serving))
    assert seen == (len(serving), float(len(serving))), text
    for node in idle:
        assert _unit_state(node.name, "sparkctl-ray-worker.service")[0] != "active", node.name
    assert f"idle: {', '.join(n.name for n in idle)} (provisioned" in " ".join(converged.output.split())
    rows = _verify_rows(report_dir)
    assert ("PASS", "serving") in rows
    assert [what for mark, what in rows if mark == "idle"] == [f"node {n.name}" for n in idle]


def test_every_node_runs_the_same_versions(plan, converged):
    versions = {}
    for node in plan.nodes:
        proc = node_exec(node.name, "runuser", "-u", plan.user, "--", f"{_venv()}/bin/python", "-c",
                         "import importlib.metadata as m; print(m.version('ray'), m.version('sparklab-engine'))", check=False)
        versions[node.name] = proc.stdout.strip() or proc.stderr.strip()
    assert len(set(versions.values())) == 1, versions


CHECKPOINT = "/srv/sparkctl/models/lab-standin"


def test_the_workers_relay_the_checkpoint_and_every_copy_is_the_heads(plan, converged, run_site):
    """The checkpoint stage with the shards gone from every worker: the head sends each shard to one
    worker, which sends it on (checkpoint_relay), and every node ends with the head's bytes."""
    head, workers = plan.nodes[0], plan.nodes[1:]
    shards = node_exec(head.name, "sh", "-c", f"cd {CHECKPOINT} && ls *.safetensors").stdout.split()
    for worker in workers:
        node_exec(worker.name, "sh", "-c", f"rm -f {CHECKPOINT}/*.safetensors")

    run = run_site(playbook="playbooks/checkpoint.yml")
    assert run.rc == 0, run.output[-6000:]

    # The transfer's own result, as async_status read it: the newest job file of the service user.
    newest = f"cat \"$(ls -td /home/{plan.user}/.ansible_async/* | head -1)\""
    result = json.loads(node_exec(head.name, "sh", "-c", newest).stdout)
    relayed = result["relayed"]
    names = {w.name for w in workers}
    assert set(relayed) == names
    for name, files in relayed.items():
        assert files and set(files) <= set(shards), (name, files)
        assert set(files.values()) <= names - {name}, "fed by another worker"
    # Each shard reached the first worker of its chain from the head and every other worker by relay.
    assert sum(len(files) for files in relayed.values()) == len(shards) * (len(workers) - 1)
    sums = {node.name: node_exec(node.name, "sh", "-c", f"cd {CHECKPOINT} && sha256sum *.safetensors").stdout
            for node in plan.nodes}
    assert len(set(sums.values())) == 1, sums


def test_the_three_node_profile_serves_across_every_node_and_back(plan, converged, run_site, report_dir):
    """lab-standin-3 (the stand-in across three Ray nodes) serves on every node: Ray has three nodes
    and three GPUs, verify reports no idle node. Back to lab-standin, the third node idles again: its
    Ray worker is stopped and disabled, and Ray has two nodes."""
    if len(plan.nodes) != 3:
        pytest.skip("the three-node profile needs exactly three nodes to leave none idle")
    third = plan.nodes[2]
    run = run_site("-e", "spark_model_profile=lab-standin-3")
    assert run.rc == 0, run.output[-6000:]
    seen, text = _ray_nodes_and_gpus(plan, serving_venv(plan.head.name), 3)
    assert seen == (3, 3.0), text
    assert _unit_state(third.name, "sparkctl-ray-worker.service") == ("active", "enabled")
    rows = _verify_rows(report_dir)
    assert ("PASS", "serving") in rows and not [what for mark, what in rows if mark == "idle"]

    back = run_site()
    assert back.rc == 0, back.output[-6000:]
    # Stopped, disabled, and not left in the failed state `ray start --block` ends in when stopped.
    assert _unit_state(third.name, "sparkctl-ray-worker.service") == ("inactive", "disabled")
    # The idle node's stop is a change once: the next run finds nothing to do anywhere.
    quiet = run_site("--tags", "serve")
    assert quiet.rc == 0 and all(c.get("changed") == 0 for c in quiet.recap.values()), quiet.recap
    seen, text = _ray_nodes_and_gpus(plan, _venv(), 2)
    assert seen == (2, 2.0), text
    assert [what for mark, what in _verify_rows(report_dir) if mark == "idle"] == [f"node {third.name}"]

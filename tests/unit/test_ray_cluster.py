"""The ray_cluster role's decisions: judging Ray's state API (recorded from the lab's
real cluster: healthy, a worker raylet SIGKILLed and restarted, a worker stopped), the
degraded-cluster reasons, leftover engine processes found by exact name or argv only
and ended by PID (never a PID another process has taken over), the raylet's node id."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.sparkctl.spark.plugins.filter import ray_cluster as F
from ansible_collections.sparkctl.spark.plugins.module_utils import ray_cluster as R
from ansible_collections.sparkctl.spark.plugins.modules import engine_leftovers, ray_cluster_facts
from module_runner import run_module

FIXTURES = Path(__file__).parent / "fixtures" / "ray_state"
EXPECTED = [{"name": "spark1", "ip": "192.168.100.10", "gpus": 1.0},
            {"name": "spark2", "ip": "192.168.100.11", "gpus": 1.0}]
CLUSTER = {"head": {"name": "spark1", "link_ip": "192.168.100.10"},
           "workers": [{"name": "spark2", "link_ip": "192.168.100.11/24"}]}


def recorded(name):
    return R.normalize_nodes(json.loads((FIXTURES / f"{name}.json").read_text()))


def test_healthy_cluster_has_two_nodes_and_two_gpus():
    result = R.assess(recorded("healthy"), EXPECTED)
    assert result["healthy"] and result["gpus_total"] == 2.0 and result["nodes_alive"] == 2
    assert result["summary"] == "2/2 nodes, 2/2 GPUs registered"
    assert [n["head"] for n in result["alive"] if n["ip"] == "192.168.100.10"] == [True]


def test_a_restarted_raylet_leaves_a_dead_record_that_is_history():
    result = R.assess(recorded("worker_raylet_restarted"), EXPECTED)
    assert result["healthy"] and result["dead"] == []


def test_a_stopped_worker_is_named_with_its_gpu():
    result = R.assess(recorded("worker_stopped"), EXPECTED)
    assert not result["healthy"]
    assert result["missing"] == [{"name": "spark2", "ip": "192.168.100.11", "gpus": 1.0}]
    assert "missing node(s) spark2 (192.168.100.11) with 1 GPU" in result["summary"]
    assert "1/2 nodes, 1/2 GPUs" in result["summary"]


def test_a_ghost_record_of_a_killed_raylet_is_not_taken_for_the_new_one():
    nodes = recorded("healthy")
    worker = next(n for n in nodes if n["ip"] == "192.168.100.11")
    # The node now runs a new raylet whose id the GCS does not know yet.
    expected = [dict(EXPECTED[0]), dict(EXPECTED[1], node_id="f" * 56)]
    result = R.assess(nodes, expected)
    assert not result["healthy"] and result["duplicated"] == ["192.168.100.11"]
    assert result["missing"][0]["ip"] == "192.168.100.11"
    # Once registered under the current id it is healthy.
    expected[1]["node_id"] = worker["node_id"]
    assert R.assess(nodes, expected)["healthy"]


def test_two_alive_records_for_one_address_are_not_settled():
    nodes = recorded("healthy")
    twin = dict(next(n for n in nodes if n["ip"] == "192.168.100.11"), node_id="x")
    result = R.assess(nodes + [twin], EXPECTED)
    assert not result["healthy"] and "registered more than once" in result["summary"]


def test_too_few_gpus_is_named():
    nodes = recorded("healthy")
    for node in nodes:
        node["gpus"] = 0.0 if node["ip"] == "192.168.100.11" else node["gpus"]
    result = R.assess(nodes, EXPECTED)
    assert result["short_gpus"] == [{"name": "spark2", "ip": "192.168.100.11", "have": 0.0, "want": 1.0}]
    assert "spark2 (192.168.100.11) registered 0 of 1 GPUs" in result["summary"]


def test_unreachable_gcs_is_reported_with_the_reason():
    result = R.assess([], EXPECTED, "cannot connect to the GCS at 192.168.100.10:6379: refused")
    assert not result["healthy"] and not result["reachable"]
    assert result["summary"].startswith("the Ray GCS did not answer: cannot connect")


def test_query_nodes_says_at_once_when_nothing_listens(unused_tcp_port):
    nodes, error = R.query_nodes(f"127.0.0.1:{unused_tcp_port}", timeout=2)
    assert nodes == [] and error.startswith(f"cannot connect to the GCS at 127.0.0.1:{unused_tcp_port}")


# A stand-in for Ray's state API in a throwaway venv: list_nodes returns the recorded healthy
# cluster as dataclass records, the way ray.util.state's NodeState comes.
FAKE_STATE_API = """
import dataclasses, json, os
@dataclasses.dataclass
class NodeState:
    node_id: str = None
    node_ip: str = None
    state: str = None
    is_head_node: bool = False
    resources_total: dict = None
    state_message: str = None
    labels: dict = None
def list_nodes(address, limit, timeout, raise_on_missing_output):
    if os.path.exists(os.path.join(os.path.dirname(__file__), "unreachable")):
        raise ConnectionError("Failed to connect to GCS at address " + address)
    records = json.load(open(os.path.join(os.path.dirname(__file__), "recorded.json")))
    fields = [f.name for f in dataclasses.fields(NodeState)]
    return [NodeState(**dict((k, v) for k, v in r.items() if k in fields)) for r in records]
"""


@pytest.fixture
def python_with_fake_ray(tmp_path):
    import subprocess
    import sys

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    state = next(venv.glob("lib/python3*/site-packages")) / "ray" / "util" / "state"
    state.mkdir(parents=True)
    for package in (state.parent.parent, state.parent):
        (package / "__init__.py").write_text("")
    (state / "__init__.py").write_text(FAKE_STATE_API)
    (state / "recorded.json").write_text((FIXTURES / "healthy.json").read_text())
    return venv / "bin" / "python", state


@pytest.fixture
def listening_port():
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def _run(argv):
    import subprocess

    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    return done.returncode, done.stdout, done.stderr


def test_an_image_runtime_asks_the_state_api_from_the_python_that_holds_ray(python_with_fake_ray, listening_port):
    python, _state = python_with_fake_ray
    nodes, error = R.query_nodes(f"127.0.0.1:{listening_port}", timeout=5, python_argv=[str(python)], run_command=_run)
    assert error is None
    assert nodes == recorded("healthy")
    assert R.assess(nodes, EXPECTED)["healthy"]


def test_a_state_api_that_fails_in_that_python_is_reported_with_its_last_line(python_with_fake_ray, listening_port):
    python, state = python_with_fake_ray
    (state / "unreachable").write_text("")
    nodes, error = R.query_nodes(f"127.0.0.1:{listening_port}", timeout=5, python_argv=[str(python)], run_command=_run)
    assert nodes == []
    assert error == f"{python}: ConnectionError: Failed to connect to GCS at address 127.0.0.1:{listening_port}"


def test_output_that_is_not_a_node_list_is_an_error(listening_port):
    nodes, error = R.query_nodes(f"127.0.0.1:{listening_port}", timeout=5, python_argv=["docker", "exec", "c", "python3"],
                                 run_command=lambda argv: (0, "Welcome to the container\n", ""))
    assert nodes == [] and error == "docker exec c python3 printed no node list: 'Welcome to the container'"


@pytest.fixture
def unused_tcp_port():
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ----------------------------------------------------------------------------- degraded reasons

UNITS = {"spark1": {"unit": "sparkctl-ray-head.service", "state": "running", "ip": "192.168.100.10"},
         "spark2": {"unit": "sparkctl-ray-worker.service", "state": "running", "ip": "192.168.100.11"}}


def test_a_healthy_cluster_needs_no_recovery():
    assert F.ray_cluster_degraded(R.assess(recorded("healthy"), EXPECTED), UNITS) == []


def test_stopped_units_are_not_degraded_just_not_started():
    units = {h: dict(u, state="stopped") for h, u in UNITS.items()}
    assert F.ray_cluster_degraded(None, units) == []


def test_an_active_worker_that_is_not_registered_is_degraded():
    reasons = F.ray_cluster_degraded(R.assess(recorded("worker_stopped"), EXPECTED), UNITS)
    assert reasons == ["spark2: sparkctl-ray-worker.service is active but its node 192.168.100.11 is not registered alive"]


def test_unreachable_gcs_and_failed_units_are_degraded():
    units = dict(UNITS, spark2=dict(UNITS["spark2"], state="failed"))
    reasons = F.ray_cluster_degraded(R.assess([], EXPECTED, "RpcError: timed out"), units)
    assert reasons == ["GCS unreachable: RpcError: timed out",
                       "spark2: sparkctl-ray-worker.service failed (start limit or crash)"]


def test_leftovers_count_only_while_the_engine_is_stopped():
    leftovers = {"spark2": [{"pid": 42, "title": "VLLM::EngineCore"}]}
    healthy = R.assess(recorded("healthy"), EXPECTED)
    assert F.ray_cluster_degraded(healthy, UNITS, leftovers, False) == [
        "spark2: leftover engine process 42 (VLLM::EngineCore) with the engine stopped"]
    assert F.ray_cluster_degraded(healthy, UNITS, leftovers, True) == []


def test_degraded_refuses_a_wrong_input():
    with pytest.raises(AnsibleFilterError, match="units must be a mapping"):
        F.ray_cluster_degraded(None, [])


def test_expected_nodes_from_the_cluster_description():
    assert F.ray_cluster_expected(CLUSTER) == EXPECTED
    with_ids = F.ray_cluster_expected(CLUSTER, 1, {"spark2": "abc", "spark1": None})
    assert "node_id" not in with_ids[0] and with_ids[1]["node_id"] == "abc"
    with pytest.raises(AnsibleFilterError, match="profile_cluster"):
        F.ray_cluster_expected({"workers": []})


def test_engine_prefix_stops_at_the_checkpoint():
    argv = ["/v/bin/python", "-m", "sparklab_engine", "serve", "/srv/m", "--port", "8000"]
    assert F.ray_cluster_engine_prefix(argv, "/srv/m") == argv[:5]
    assert F.ray_cluster_engine_prefix(argv, "/elsewhere") == argv


# ----------------------------------------------------------------------------- processes

def proc(pid, comm, argv, start=100):
    return {"pid": pid, "comm": comm, "argv": argv, "start": start}


PROCS = [
    proc(1, "systemd", ["/sbin/init"]),
    proc(10, "VLLM::EngineCor", ["VLLM::EngineCore"]),
    proc(11, "python3", ["/v/bin/python", "-m", "sparklab_engine", "serve", "/srv/m", "--port", "8000"]),
    proc(12, "grep", ["grep", "VLLM::EngineCore"]),
    proc(13, "bash", ["bash", "-c", "/v/bin/python -m sparklab_engine serve /srv/m"]),
    proc(14, "python3", ["/v/bin/python", "-m", "sparklab_engine", "serve", "/srv/other"]),
    proc(15, "sleep", ["VLLM::EngineCore 3600"]),
    proc(16, "raylet", ["/v/raylet", "--raylet_socket_name=x", "--node_id=abc123", "--node_ip_address=1.2.3.4"]),
]


def test_leftovers_match_exact_names_titles_and_argv_prefixes_only():
    found = R.find_leftovers(PROCS, ["VLLM::EngineCore"], [["/v/bin/python", "-m", "sparklab_engine", "serve", "/srv/m"]])
    assert [(p["pid"], p["matched"]) for p in found] == [(10, "name"), (11, "argv"), (15, "name")]


def test_no_names_and_no_prefixes_find_nothing():
    assert R.find_leftovers(PROCS) == []


def test_local_raylet_node_id():
    assert R.local_raylets(PROCS) == [{"pid": 16, "node_id": "abc123"}]


def _fake_proc(root, pid, state="S", start=555, comm="sleep", argv=("VLLM::EngineCore",)):
    d = root / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    fields = [state] + ["0"] * 18 + [str(start)] + ["0"] * 10
    (d / "stat").write_text(f"{pid} ({comm}) " + " ".join(fields) + "\n")
    (d / "comm").write_text(comm + "\n")
    (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")


def test_read_processes_and_start_time(tmp_path):
    _fake_proc(tmp_path, 77, start=4242, argv=("VLLM::EngineCore", "x"))
    (tmp_path / "self").mkdir()
    procs = R.read_processes(str(tmp_path))
    assert procs == [{"pid": 77, "comm": "sleep", "argv": ["VLLM::EngineCore", "x"], "start": 4242}]


def test_end_processes_terms_then_kills_and_spares_a_reused_pid(tmp_path):
    _fake_proc(tmp_path, 20, start=1)
    _fake_proc(tmp_path, 21, start=2)
    _fake_proc(tmp_path, 22, start=3)
    found = [{"pid": 20, "start": 1}, {"pid": 21, "start": 2}, {"pid": 22, "start": 999}]
    sent = []

    def kill(pid, sig):
        sent.append((pid, sig))
        if pid == 20 and sig == signal.SIGTERM:  # 20 obeys SIGTERM (becomes a zombie)
            _fake_proc(tmp_path, 20, state="Z", start=1)

    result = R.end_processes(found, str(tmp_path), term_timeout=0.3, kill=kill, sleep=lambda s: None)
    # 22 has another start time: another process owns that PID now.
    assert sent == [(20, signal.SIGTERM), (21, signal.SIGTERM), (21, signal.SIGKILL)]
    assert result == [{"pid": 20, "signal": "TERM"}, {"pid": 21, "signal": "TERM"}, {"pid": 21, "signal": "KILL"}]


def test_engine_leftovers_module_reports_in_check_mode(tmp_path, capsys):
    _fake_proc(tmp_path, 30, comm="VLLM::EngineCor", argv=("VLLM::EngineCore",))
    code, out = run_module(engine_leftovers.main, {"names": ["VLLM::EngineCore"], "state": "absent",
                                                   "proc_root": str(tmp_path), "_ansible_check_mode": True}, capsys)
    assert code == 0 and out["changed"] is True and [p["pid"] for p in out["processes"]] == [30]
    assert out["signalled"] == []


def test_ray_cluster_facts_fails_with_what_is_missing(monkeypatch, capsys):
    asked = []

    def query(address, timeout, python_argv, run_command):
        asked.append(python_argv)
        return recorded("worker_stopped"), None

    monkeypatch.setattr(ray_cluster_facts, "query_nodes", query)
    code, out = run_module(ray_cluster_facts.main, {"address": "192.168.100.10:6379", "expected": EXPECTED,
                                                    "fail_on_incomplete": True,
                                                    "python_argv": ["/usr/bin/docker", "exec", "sparkctl-ray-head", "python3"]},
                           capsys)
    assert asked == [["/usr/bin/docker", "exec", "sparkctl-ray-head", "python3"]]
    assert code == 1 and out["failed"]
    assert "missing node(s) spark2 (192.168.100.11) with 1 GPU" in out["msg"]

"""The preflight verdict on recorded facts: a healthy GB10 passes; each broken
precondition fails with the numbers and a fix; the report marks unjudged hosts."""

import copy

import pytest
from ansible_collections.sparkctl.spark.plugins.plugin_utils.preflight_checks import (
    preflight_checks,
    preflight_lines,
    preflight_report,
    preflight_summary,
)
from test_gpu_facts import GB10_FACTS

GIB = 1024**3

HEALTHY_GB10 = {
    "distribution": "Ubuntu",
    "distribution_version": "24.04",
    "architecture": "aarch64",
    "service_mgr": "systemd",
    "user": "spark",
    "become": {"rc": 0, "stdout": "0"},
    # What gpu_facts reads from the GB10's recorded nvidia-smi output.
    "gpu": copy.deepcopy(GB10_FACTS),
    "link": {
        "interfaces": {
            "enp1s0f1np1": {"exists": True, "operstate": "up", "mtu": 9000, "rdma_device": "rocep1s0f1"},
            "enP2p1s0f1np1": {"exists": True, "operstate": "up", "mtu": 9000, "rdma_device": "roceP2p1s0f1"},
        },
        "missing": [],
        # A Spark's four RDMA devices (two per ConnectX-7 port pair) and the connection manager.
        "rdma_char_devices": ["rdma_cm", "uverbs0", "uverbs1", "uverbs2", "uverbs3"],
    },
    "host": {
        "meminfo": {"mem_total_bytes": int(121.69 * GIB), "mem_available_bytes": int(113 * GIB)},
        "disks": {"/srv/models": {"path": "/srv/models", "checked_path": "/srv", "free_bytes": 3000 * GIB}},
        "ports": {"6379": {"in_use": False, "holders": []}, "8000": {"in_use": False, "holders": []}},
        "systemd": {"pid1_comm": "systemd", "version": 255},
    },
}

REQUIREMENTS = {
    "model_name": "solar-open2",
    "supported_distributions": [{"name": "Ubuntu", "min_version": "24.04"}],
    "supported_architectures": ["aarch64"],
    "systemd_min_version": "249",
    "gpu_required": True,
    "gpu_name_pattern": "GB10",
    "gpu_compute_caps": ["12.1"],
    "driver_min_major": "580",
    "cuda_major": "13",
    "mem_total_min_bytes": str(109 * GIB),
    "mem_available_min_bytes": str(109 * GIB),
    "disk_path": "/srv/models",
    "checkpoint_size_bytes": str(153 * GIB),
    "disk_reserve_bytes": str(10 * GIB),
    "link_interfaces": ["enp1s0f1np1", "enP2p1s0f1np1"],
    "rdma_required": True,
    "ports": [{"port": 6379, "name": "ray-gcs"}, {"port": 8000, "name": "openai-api"}],
    "port_owner_allowed_units": "^sparkctl-",
}


def _by_id(results):
    return {r["id"]: r for r in results}


def _broken(**changes):
    facts = copy.deepcopy(HEALTHY_GB10)
    for path, value in changes.items():
        node = facts
        keys = path.split("__")
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = value
    return facts


def test_healthy_gb10_passes_every_check():
    results = preflight_checks(HEALTHY_GB10, REQUIREMENTS)
    failed = [r for r in results if r["status"] == "fail"]
    assert failed == []
    ids = {r["id"] for r in results}
    assert {"os.distribution", "gpu.driver", "memory.available", "disk.checkpoint", "link.enp1s0f1np1", "rdma.enP2p1s0f1np1",
            "port.6379", "access.sudo"} <= ids
    assert all(r["fix"] == "" for r in results if r["status"] == "pass")


def test_old_driver_fails_with_the_version_and_a_fix():
    facts = _broken(gpu__driver_version="550.54.15", gpu__driver_major=550)
    result = _by_id(preflight_checks(facts, REQUIREMENTS))["gpu.driver"]
    assert result["status"] == "fail"
    assert "550.54.15 is older than 580" in result["detail"]
    assert "Update the NVIDIA driver" in result["fix"]


@pytest.mark.parametrize(
    "changes, failed, said, skipped",
    [
        ({"gpu__present": False, "gpu__gpus": [], "gpu__error": "nvidia-smi not found"},
         "gpu.present", "nvidia-smi not found", "gpu.driver"),
        ({"link__interfaces__enP2p1s0f1np1": {"exists": False}},
         "link.enP2p1s0f1np1", "enP2p1s0f1np1 does not exist", "rdma.enP2p1s0f1np1"),
    ],
    ids=["gpu", "link interface"],
)
def test_a_missing_device_fails_naming_it_and_skips_its_details(changes, failed, said, skipped):
    results = _by_id(preflight_checks(_broken(**changes), REQUIREMENTS))
    assert results[failed]["status"] == "fail"
    assert said in results[failed]["detail"]
    assert skipped not in results


def test_wrong_compute_capability_fails():
    facts = copy.deepcopy(HEALTHY_GB10)
    facts["gpu"]["gpus"][0].update(name="NVIDIA H100 80GB HBM3", compute_cap="9.0")
    results = _by_id(preflight_checks(facts, REQUIREMENTS))
    assert results["gpu.model"]["status"] == "fail"
    assert results["gpu.compute_cap"]["status"] == "fail"
    assert "9.0 is not one of 12.1" in results["gpu.compute_cap"]["detail"]


def test_absent_nvcc_is_skipped_but_wrong_nvcc_fails():
    absent = _by_id(preflight_checks(_broken(gpu__cuda_toolkit_major=None), REQUIREMENTS))
    assert absent["gpu.cuda_toolkit"]["status"] == "skip"
    wrong = _by_id(preflight_checks(_broken(gpu__cuda_toolkit_major=12, gpu__cuda_toolkit_version="12.8"), REQUIREMENTS))
    assert wrong["gpu.cuda_toolkit"]["status"] == "fail"
    assert "CUDA 12.8" in wrong["gpu.cuda_toolkit"]["detail"]


def _disk_check(**disk):
    """The disk.checkpoint result with the checkpoint file system's facts changed."""
    facts = copy.deepcopy(HEALTHY_GB10)
    facts["host"]["disks"]["/srv/models"].update(disk)
    return _by_id(preflight_checks(facts, REQUIREMENTS))["disk.checkpoint"]


def test_too_little_disk_fails_with_both_numbers():
    result = _disk_check(free_bytes=100 * GIB)
    assert result["status"] == "fail"
    assert "100.0 GiB free at /srv < 163.0 GiB needed" in result["detail"]


def test_checkpoint_already_in_place_needs_only_the_reserve():
    result = _disk_check(free_bytes=20 * GIB, used_bytes=150 * GIB)
    assert result["status"] == "pass"
    assert result["detail"] == "20.0 GiB free at /srv >= 13.0 GiB (150.0 GiB of it already in place)"
    result = _disk_check(free_bytes=20 * GIB, used_bytes=100 * GIB)
    assert result["status"] == "fail"
    assert "20.0 GiB free at /srv < 63.0 GiB needed for the checkpoint (100.0 GiB of it already in place)" in result["detail"]


def test_memory_below_the_model_budget_fails():
    facts = copy.deepcopy(HEALTHY_GB10)
    facts["host"]["meminfo"]["mem_available_bytes"] = 40 * GIB
    results = _by_id(preflight_checks(facts, REQUIREMENTS))
    assert results["memory.total"]["status"] == "pass"
    assert results["memory.available"]["status"] == "fail"
    assert "MemAvailable 40.0 GiB < 109.0 GiB that solar-open2 needs" in results["memory.available"]["detail"]


def test_memory_results_whole():
    facts = copy.deepcopy(HEALTHY_GB10)
    facts["host"]["meminfo"] = {"mem_total_bytes": 100 * GIB}
    results = _by_id(preflight_checks(facts, dict(REQUIREMENTS, mem_total_min_bytes=101 * GIB)))
    total, available = results["memory.total"], results["memory.available"]
    assert (total["status"], total["detail"], total["fix"]) == (
        "fail", "MemTotal 100.0 GiB < 101.0 GiB that solar-open2 needs per node (with the OOM guard margin).",
        "Pick a smaller or more quantized model profile, or add nodes so each holds less.")
    assert (available["status"], available["detail"], available["fix"]) == (
        "fail", "/proc/meminfo had no MemAvailable.", "Check the node's kernel.")
    healthy = _by_id(preflight_checks(HEALTHY_GB10, REQUIREMENTS))["memory.total"]
    assert (healthy["status"], healthy["fix"]) == ("pass", "") and healthy["detail"].startswith("MemTotal 121.7 GiB >= ")


def test_link_without_rdma_device_fails():
    facts = copy.deepcopy(HEALTHY_GB10)
    facts["link"]["interfaces"]["enp1s0f1np1"]["rdma_device"] = None
    result = _by_id(preflight_checks(facts, REQUIREMENTS))["rdma.enp1s0f1np1"]
    assert result["status"] == "fail"
    assert "fall back to TCP" in result["detail"]


@pytest.mark.parametrize("devices, detail", [
    ([], "/dev/infiniband holds no uverbs device: NCCL cannot open the RDMA devices"),
    (["rdma_cm"], "/dev/infiniband holds no uverbs device (only rdma_cm): NCCL cannot open"),
])
def test_a_node_without_the_rdma_device_nodes_fails(devices, detail):
    facts = copy.deepcopy(HEALTHY_GB10)
    facts["link"]["rdma_char_devices"] = devices
    result = _by_id(preflight_checks(facts, REQUIREMENTS))["rdma.devices"]
    assert result["status"] == "fail" and result["detail"].startswith(detail), result
    assert "modprobe ib_uverbs mlx5_ib" in result["fix"]
    healthy = _by_id(preflight_checks(HEALTHY_GB10, REQUIREMENTS))["rdma.devices"]
    assert (healthy["status"], healthy["detail"]) == ("pass", "rdma_cm, uverbs0, uverbs1, uverbs2, uverbs3")
    # Not judged where no RDMA is required, nor on facts read before the device nodes were.
    assert "rdma.devices" not in _by_id(preflight_checks(facts, dict(REQUIREMENTS, rdma_required=False)))
    del facts["link"]["rdma_char_devices"]
    assert "rdma.devices" not in _by_id(preflight_checks(facts, REQUIREMENTS))


def test_port_held_by_a_foreign_process_fails_but_own_unit_passes():
    facts = copy.deepcopy(HEALTHY_GB10)
    facts["host"]["ports"]["6379"] = {
        "in_use": True,
        "holders": [{"address": "0.0.0.0", "pid": 812, "process": "redis-server", "unit": "redis-server.service"}],
    }
    facts["host"]["ports"]["8000"] = {
        "in_use": True,
        "holders": [{"address": "0.0.0.0", "pid": 900, "process": "python3", "unit": "sparkctl-engine.service"}],
    }
    results = _by_id(preflight_checks(facts, REQUIREMENTS))
    assert results["port.6379"]["status"] == "fail"
    assert "redis-server (pid 812, redis-server.service) on 0.0.0.0" in results["port.6379"]["detail"]
    assert results["port.8000"]["status"] == "pass"
    assert "sparkctl-engine.service" in results["port.8000"]["detail"]


def test_a_port_held_in_sparkctls_container_passes_and_in_another_container_fails():
    # An image runtime's Ray and engine run in containers named after their units: their cgroup is
    # the container's (docker-<id>.scope), not the unit's, on a re-run of a serving cluster.
    facts = copy.deepcopy(HEALTHY_GB10)
    scope = "docker-" + "a" * 64 + ".scope"
    facts["host"]["ports"]["6379"] = {
        "in_use": True,
        "holders": [{"address": "::", "pid": 7517, "process": "gcs_server", "unit": scope,
                     "container": "sparkctl-ray-head"}],
    }
    facts["host"]["ports"]["8000"] = {
        "in_use": True,
        "holders": [{"address": "0.0.0.0", "pid": 900, "process": "python3", "unit": scope, "container": "open-webui"}],
    }
    results = _by_id(preflight_checks(facts, REQUIREMENTS))
    assert results["port.6379"]["status"] == "pass", results["port.6379"]
    assert "sparkctl-ray-head.service (container sparkctl-ray-head)" in results["port.6379"]["detail"]
    assert results["port.8000"]["status"] == "fail", results["port.8000"]


def test_sudo_failure_reports_the_reason():
    facts = _broken(become={"failed": True, "msg": "Missing sudo password"})
    result = _by_id(preflight_checks(facts, REQUIREMENTS))["access.sudo"]
    assert result["status"] == "fail"
    assert "spark cannot become root: Missing sudo password" in result["detail"]


@pytest.mark.parametrize(
    "dist, version, expected",
    [("Ubuntu", "24.04", "pass"), ("Ubuntu", "22.04", "fail"), ("CentOS", "9", "fail")],
)
def test_distribution_rules(dist, version, expected):
    facts = _broken(distribution=dist, distribution_version=version)
    assert _by_id(preflight_checks(facts, REQUIREMENTS))["os.distribution"]["status"] == expected


def test_non_systemd_pid1_fails():
    facts = _broken(service_mgr="sysvinit")
    facts["host"]["systemd"]["pid1_comm"] = "init"
    result = _by_id(preflight_checks(facts, REQUIREMENTS))["os.systemd"]
    assert result["status"] == "fail"
    assert "PID 1 is init" in result["detail"]


def test_lines_and_summary():
    facts = _broken(gpu__driver_major=550, gpu__driver_version="550.54.15")
    results = preflight_checks(facts, REQUIREMENTS)
    summary = preflight_summary(results)
    assert summary["fail"] == 1
    assert summary["pass"] == len(results) - 1
    lines = preflight_lines(results, statuses=["fail"], with_fix=True)
    assert lines == [f"[FAIL] gpu.driver: driver 550.54.15 is older than 580. -> Fix: {_by_id(results)['gpu.driver']['fix']}"]


def test_report_marks_unjudged_hosts_and_overall_verdict():
    good = preflight_checks(HEALTHY_GB10, REQUIREMENTS)
    hostvars = {"spark1": {"preflight_results": good}, "spark2": {}}
    report = preflight_report(["spark1", "spark2"], hostvars)
    assert report["ok"] is False
    assert report["hosts"]["spark1"]["ok"] is True
    assert report["hosts"]["spark2"] == {"ok": False, "judged": False, "summary": {}, "checks": []}
    assert preflight_report(["spark1"], hostvars)["ok"] is True


# --- The firewall's SSH ports against where sshd listens -------------------------------------

SSH_REQ = dict(REQUIREMENTS, firewall_enabled=True, firewall_ssh_ports=[22], ssh_port=22, ssh_connection=True)


def _ssh(sshd_ports, **req):
    facts = copy.deepcopy(HEALTHY_GB10)
    facts["host"]["sshd_ports"] = sshd_ports
    return _by_id(preflight_checks(facts, dict(SSH_REQ, **req))).get("ssh.firewall_ports")


def test_ssh_ports_that_match_sshd_pass():
    assert _ssh([22])["status"] == "pass"
    assert _ssh([22, 2222], firewall_ssh_ports=[22, 2222])["status"] == "pass"


def test_a_firewall_that_would_drop_sshd_fails_naming_the_variable_and_the_fix():
    result = _ssh([22], firewall_ssh_ports=[2222])
    assert result["status"] == "fail"
    assert "sshd listens on 22, none of firewall_ssh_ports [2222]" in result["detail"]
    assert "Ansible connects to port 22 (ansible_port)" in result["detail"]
    assert "firewall_ssh_ports: [22]" in result["fix"]


def test_sshd_on_another_port_than_the_firewall_opens_fails():
    result = _ssh([2222], firewall_ssh_ports=[22])
    assert result["status"] == "fail" and "sshd listens on 2222" in result["detail"]
    assert "firewall_ssh_ports: [22, 2222]" in result["fix"]


def test_unreadable_sshd_ports_warn_and_a_disabled_firewall_is_not_judged():
    assert _ssh(None)["status"] == "warn"
    assert _ssh([22], firewall_ssh_ports=[2222], firewall_enabled=False) is None
    assert _ssh([22], firewall_ssh_ports=[2222], ssh_connection=False) is None
    # Requirements without the firewall's ports (an older caller) add no check.
    facts = copy.deepcopy(HEALTHY_GB10)
    facts["host"]["sshd_ports"] = [22]
    assert "ssh.firewall_ports" not in _by_id(preflight_checks(facts, REQUIREMENTS))

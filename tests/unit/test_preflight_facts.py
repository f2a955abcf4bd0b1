"""sparkctl.spark.preflight_facts: the node preflight judges, read with one module run (OS facts
through Ansible's collectors, the SSH user behind become, and the GPU, link and host readers)."""

from __future__ import annotations

import os
import platform

import module_runner
import pytest
from ansible.module_utils import basic
from ansible_collections.sparkctl.spark.plugins.module_utils import preflight
from ansible_collections.sparkctl.spark.plugins.modules import preflight_facts
from test_host_facts import make_proc

KIB = 1024


@pytest.mark.parametrize("text, uid", [("1000\n", 1000), ("4294967295", None), (None, None), ("x", None), ("", None)])
def test_loginuid(text, uid):
    assert preflight.parse_loginuid(text) == uid


def names(uid):
    return {1000: "nvidia"}.get(uid)


@pytest.mark.parametrize("environ, euid, loginuid, user", [
    # Without become the run's own user is the SSH user, as setup's user_id was.
    ({"SUDO_USER": "ignored"}, 1000, 1000, "me"),
    ({"SUDO_USER": "nvidia"}, 0, None, "nvidia"),
    # su and other become methods: the session's login uid.
    ({}, 0, 1000, "nvidia"),
    ({}, 0, 4242, "me"),
    ({}, 0, None, "me"),
])
def test_login_user(environ, euid, loginuid, user):
    assert preflight.login_user(environ, euid, loginuid, names, lambda: "me") == user


@pytest.fixture
def bare_node(monkeypatch, tmp_path):
    """A node without nvidia-smi, ip or systemctl, and a recorded /proc."""
    monkeypatch.setattr(preflight_facts, "PROC_ROOT", str(make_proc(tmp_path / "proc", {})))
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda self, name, required=False, opt_dirs=None: None)
    monkeypatch.setattr(basic.AnsibleModule, "run_command", lambda self, args, **kwargs: (1, "", "not here"))
    (tmp_path / "sys" / "class" / "net").mkdir(parents=True)
    return tmp_path


def test_module_reads_the_whole_node_in_one_run(bare_node, capsys):
    rc, result = module_runner.run_module(preflight_facts.main, {
        "interfaces": ["enp1s0f1np1"],
        "disk_paths": [str(bare_node / "ckpt")],
        "ports": [8000],
        "sysfs_root": str(bare_node / "sys"),
    }, capsys)

    assert rc == 0 and result["changed"] is False and not result.get("failed")
    assert set(result["os"]) == {"distribution", "distribution_version", "architecture", "service_mgr", "kernel"}
    assert result["os"]["architecture"]
    assert result["os"]["kernel"] == platform.release()
    # No fwupdmgr on the node: nothing run, nothing claimed.
    assert result["firmware"] == {"checked": False, "error": None, "fwupdmgr": None, "updates": []}
    assert result["euid"] == os.geteuid()
    assert result["user"]
    facts = result["ansible_facts"]
    assert set(facts) == {"spark_gpu_facts", "spark_link_facts", "spark_host_facts"}
    assert facts["spark_gpu_facts"]["present"] is False and facts["spark_gpu_facts"]["error"] == "nvidia-smi not found"
    assert facts["spark_link_facts"]["missing"] == ["enp1s0f1np1"]
    assert facts["spark_host_facts"]["meminfo"]["mem_total_bytes"] == 125489508 * KIB
    assert facts["spark_host_facts"]["disks"][str(bare_node / "ckpt")]["checked_path"] == str(bare_node)
    assert set(facts["spark_host_facts"]["ports"]) == {"8000"}


def test_module_in_check_mode_reads_the_same(bare_node, capsys):
    rc, result = module_runner.run_module(preflight_facts.main, {"_ansible_check_mode": True}, capsys)

    assert rc == 0 and result["changed"] is False
    assert result["ansible_facts"]["spark_link_facts"]["missing"] == []
    assert result["ansible_facts"]["spark_host_facts"]["disks"] == {}

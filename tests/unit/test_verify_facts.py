"""sparkctl.spark.verify_facts: a node's part of the verify verdict read with one module run
(the runtime versions, memory, and on the head the key file, the engine unit and its startup facts)."""

from __future__ import annotations

import json
import stat
import sys

import module_runner
import pytest
from ansible.module_utils import basic
from ansible_collections.sparkctl.spark.plugins.module_utils import deployment as records
from ansible_collections.sparkctl.spark.plugins.modules import verify_facts
from test_host_facts import make_proc

KIB = 1024
UNIT = "sparkctl-engine.service"
RULES = [{"name": "kv_cache_tokens", "regex": r"GPU KV cache size: ([\d,]+) tokens", "min": 1000, "on_mismatch": "fail"}]


@pytest.fixture
def node(monkeypatch, tmp_path):
    """No nvidia-smi; systemctl answers from the test; journalctl prints one startup line."""
    state = {"active": "active\n", "invocation": "abc\n", "calls": []}
    journalctl = tmp_path / "journalctl"
    journalctl.write_text(f"#!{sys.executable}\nprint('INFO GPU KV cache size: 65,536 tokens')\n")
    journalctl.chmod(journalctl.stat().st_mode | stat.S_IXUSR)

    def run_command(self, argv, check_rc=False, **kwargs):
        state["calls"].append(list(argv))
        if argv[:2] == ["/usr/bin/systemctl", "show"]:
            return 0, state["active"] if "ActiveState" in argv else state["invocation"], ""
        return 1, "", "not here"

    def get_bin_path(self, name, required=False, opt_dirs=None):
        return {"systemctl": "/usr/bin/systemctl", "journalctl": str(journalctl)}.get(name)

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", get_bin_path)
    monkeypatch.setattr(verify_facts, "PROC_ROOT", str(make_proc(tmp_path / "proc", {})))
    return state


def run(capsys, **args):
    return module_runner.run_module(verify_facts.main, dict({"runtime_kind": "venv", "venv_path": "/nonexistent"}, **args),
                                    capsys)


def test_a_worker_reports_versions_and_memory(node, capsys):
    rc, result = run(capsys, packages=["torch"])

    assert rc == 0 and result["changed"] is False and not result.get("failed")
    assert result["versions"]["driver"] is None and result["versions"]["packages"] == {"torch": None}
    assert "nvidia-smi: nvidia-smi not found" in result["problems"]
    assert result["meminfo"]["mem_total_bytes"] == 125489508 * KIB
    assert result["api_key_file"] is None and result["unit"] is None
    assert result["startup"] == {} and result["startup_error"] is None
    assert node["calls"] == []


def test_the_head_reports_its_key_unit_and_startup_facts(node, capsys, tmp_path):
    key = tmp_path / "api-key.env"
    key.write_text("SPARKCTL_API_KEY=secret\n")

    rc, result = run(capsys, api_key_file=str(key), startup_unit=UNIT, startup_rules=RULES)

    assert rc == 0 and not result.get("failed")
    assert result["api_key_file"] == {"path": str(key), "exists": True}
    assert result["unit"] == {"name": UNIT, "active_state": "active"}
    assert result["startup_error"] is None
    assert result["startup"]["invocation_id"] == "abc" and result["startup"]["lines_read"] == 1
    assert result["startup"]["failed_rules"] == []
    assert result["startup"]["startup"][0]["value"] == 65536
    assert "secret" not in str(result)


def test_a_stopped_engine_is_reported_not_failed(node, capsys):
    node.update(active="inactive\n", invocation="\n")

    rc, result = run(capsys, api_key_file="/nonexistent/key", startup_unit=UNIT, startup_rules=RULES)

    assert rc == 0 and not result.get("failed")
    assert result["api_key_file"]["exists"] is False
    assert result["startup"] == {}
    assert result["startup_error"].startswith(f"{UNIT} is not running (systemd has no current invocation of it)")


def test_check_mode_reads_no_log_of_an_inactive_unit(node, capsys):
    node.update(active="inactive\n", invocation="\n")

    rc, result = run(capsys, startup_unit=UNIT, startup_rules=RULES, _ansible_check_mode=True)

    assert rc == 0 and result["startup"] == {} and result["startup_error"] is None
    assert result["unit"]["active_state"] == "inactive"


def test_without_rules_no_log_is_read(node, capsys):
    rc, result = run(capsys, startup_unit=UNIT)

    assert rc == 0 and result["startup"] == {} and result["unit"]["active_state"] == "active"
    assert not any("InvocationID" in call for call in node["calls"])


def test_rules_need_a_unit(node, capsys):
    rc, result = run(capsys, startup_rules=RULES)

    assert rc == 1 and "startup_rules needs startup_unit" in result["msg"]


def a_record():
    """A record as the verify stage builds one."""
    return records.build_record(
        profile_name="lab-standin", profile_digest="sha256:" + "2" * 64,
        checkpoint={"source": "hub", "repo_id": "org/model", "revision": "main"}, checkpoint_commit="a" * 40,
        runtime_kind="venv", versions={"venv_lock_sha256": "3" * 64, "packages": {"vllm": "0.25.1"}}, image_ref="",
        engine_kind="vllm", engine_package_name="vllm", engine_config_digest="sha256:" + "4" * 64,
        sparkctl_version="0.1.0", verify_status="passed", now="2026-05-04T10:11:12Z")


def test_the_node_record_and_the_heads_checkpoint_manifest_are_read(node, capsys, tmp_path):
    record = a_record()
    (tmp_path / "deployment.json").write_text(json.dumps(record))
    manifest = {"version": 1, "source": "hub", "repo_id": "org/model", "revision": "main", "commit": "a" * 40,
                "total_bytes": 3, "files": {"model.safetensors": {"size": 3, "sha256": "b" * 64}}}
    (tmp_path / ".sparkctl-manifest.json").write_text(json.dumps(manifest))

    rc, result = run(capsys, deployment_file=str(tmp_path / "deployment.json"),
                     checkpoint_manifest_file=str(tmp_path / ".sparkctl-manifest.json"))

    assert rc == 0 and result["deployment"] == record and result["deployment_problem"] is None
    # Where the checkpoint came from; its file list stays the checkpoint stage's.
    assert result["checkpoint_manifest"] == {"source": "hub", "repo_id": "org/model", "revision": "main", "commit": "a" * 40}


def test_no_record_no_manifest_and_a_broken_record(node, capsys, tmp_path):
    rc, result = run(capsys, deployment_file=str(tmp_path / "none.json"),
                     checkpoint_manifest_file=str(tmp_path / "none-manifest.json"))
    assert rc == 0 and result["deployment"] is None and result["deployment_problem"] is None
    assert result["checkpoint_manifest"] is None

    (tmp_path / "broken.json").write_text("{")
    rc, result = run(capsys, deployment_file=str(tmp_path / "broken.json"))
    assert rc == 0 and result["deployment"] is None and "not JSON" in result["deployment_problem"]
    assert result["checkpoint_manifest"] is None


# The checkpoint directory is the engine's service user's to write: what the record takes from its
# manifest is checked against its shape, and a value that is not of it fails the read, naming the
# file and the field, before anything records it.
HOSTILE = "{{ lookup('pipe', 'id > /tmp/owned') }}"


@pytest.mark.parametrize("field", ["commit", "revision", "repo_id"])
def test_a_manifest_value_not_of_its_shape_fails_the_read_naming_file_and_field(node, capsys, tmp_path, field):
    manifest = {"version": 1, "source": "hub", "repo_id": "org/model", "revision": "main", "commit": "a" * 40,
                "total_bytes": 3, "files": {}}
    manifest[field] = HOSTILE
    path = tmp_path / ".sparkctl-manifest.json"
    path.write_text(json.dumps(manifest))

    rc, result = run(capsys, checkpoint_manifest_file=str(path))

    assert rc == 1 and result["failed"] is True
    assert f"{path}: {field}: " in result["msg"] and "nothing was recorded" in result["msg"]
    assert result["problems"] == [f"{path}: {field}: {records.shapes.shown(HOSTILE)} is not "
                                  f"{records.shapes.SHAPE_WORDS[dict(records.MANIFEST_SHAPES)[field]]}"]


def test_a_path_sources_manifest_without_a_commit_is_read(node, capsys, tmp_path):
    path = tmp_path / ".sparkctl-manifest.json"
    path.write_text(json.dumps({"version": 1, "source": "path", "path": "/srv/m", "commit": None, "files": {}}))
    rc, result = run(capsys, checkpoint_manifest_file=str(path))
    assert rc == 0 and result["checkpoint_manifest"]["commit"] is None


def test_a_distributions_version_not_of_its_shape_fails_the_read(node, capsys, monkeypatch):
    def versions(module, **kwargs):
        return {"versions": {"venv_lock_sha256": "3" * 64, "packages": {"vllm": HOSTILE}}, "problems": [],
                "nccl_preload": None}

    monkeypatch.setattr(verify_facts, "read_runtime_versions", versions)
    rc, result = run(capsys, packages=["vllm"])
    assert rc == 1 and "the runtime's versions (/nonexistent): packages.vllm: " in result["msg"]


def test_a_node_record_not_of_its_shape_is_no_record(node, capsys, tmp_path):
    record = dict(a_record(), recorded_at=HOSTILE)
    (tmp_path / "deployment.json").write_text(json.dumps(record))
    rc, result = run(capsys, deployment_file=str(tmp_path / "deployment.json"))
    assert rc == 0 and result["deployment"] is None
    assert "recorded_at: " in result["deployment_problem"] and "not a record of sparkctl's" in result["deployment_problem"]

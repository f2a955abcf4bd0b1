"""The deployment record: built by the sparkctl.spark.deployment filter from what the verify stage
read, kept on every node by sparkctl.spark.deployment_record. The same deployment is the same
record (a re-verify changes nothing, its first-recorded time stays); a new one replaces it."""

from __future__ import annotations

import copy
import json
import os
import stat
import tomllib
from pathlib import Path

import module_runner
import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.sparkctl.spark.plugins.filter import deployment as deployment_filter
from ansible_collections.sparkctl.spark.plugins.module_utils import deployment as records
from ansible_collections.sparkctl.spark.plugins.modules import deployment_record
from ansible_collections.sparkctl.spark.plugins.plugin_utils import profile as profiles

import sparkctl

REPO = Path(__file__).resolve().parents[2]
LOCK = "4f1d8a6c0b2e9d7f3a5c8e1b0d2f4a6c8e0b2d4f6a8c0e2b4d6f8a0c2e4b6d8f"
COMMIT = "3f1e0c2a9b8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f"
FIRST = "2026-05-04T10:11:12Z"
LATER = "2026-06-01T08:00:00Z"


def profile(name="solar-open2-nvfp4-vllm-venv", **changes):
    loaded = profiles.load_profile(name)
    loaded.update(changes)
    return loaded


def head_facts(lock=LOCK, commit=COMMIT, vllm="0.25.1"):
    """The head's verify_facts result, as far as the record reads it."""
    return {"versions": {"venv_lock_sha256": lock, "image_id": None, "image_context_hash": None,
                         "packages": {"vllm": vllm, "ray": "2.60.0", "torch": "2.10.0"}},
            "checkpoint_manifest": {"source": "hub", "repo_id": "upstage/Solar-Open2-250B-NVFP4", "revision": "main",
                                    "commit": commit}}


CHECKPOINT = {"source": "hub", "repo_id": "upstage/Solar-Open2-250B-NVFP4", "revision": "main", "allow_patterns": []}
RENDERED = {"argv": ["vllm", "serve", "/srv/model"], "env": {"A": "1"}, "units": {"spark1": {"u.service": "[Unit]\n"}},
            "secret_files": {}, "api": {}}


def build(node=None, prof=None, status="passed", now=FIRST, existing=None, rendered=RENDERED, packages=None):
    return deployment_filter.deployment(node or head_facts(), prof or profile(), rendered, CHECKPOINT, status, now,
                                        packages=["vllm", "ray", "torch"] if packages is None else packages,
                                        existing=existing)


# --- the filter -------------------------------------------------------------------------------


def test_the_record_names_every_fact_from_its_owner():
    prof = profile()
    record = build(prof=prof)

    assert record["profile"] == {"name": "solar-open2-nvfp4-vllm-venv", "sha256": profiles.profile_digest(prof)}
    assert record["checkpoint"] == {"source": "hub", "repo_id": "upstage/Solar-Open2-250B-NVFP4", "revision": "main",
                                    "commit": COMMIT}
    assert record["runtime"] == {"kind": "venv", "id": LOCK, "venv_lock_sha256": LOCK}
    assert record["engine"] == {"kind": "vllm", "package": "vllm", "version": "0.25.1",
                                "config_sha256": profiles.render_digest(RENDERED)}
    assert record["sparkctl_version"] == sparkctl.__version__
    assert (record["recorded_at"], record["verify_status"]) == (FIRST, "passed")
    assert record["deployment_id"] == records.deployment_id(record)
    assert record["deployment_id"].startswith("sha256:") and len(record["deployment_id"]) == 71


@pytest.mark.parametrize("status", ["failed", "failed_ignored"])
def test_a_failed_verify_records_nothing(status):
    assert build(status=status) is None


def test_a_re_verify_keeps_the_first_recorded_time_and_status():
    first = build(now=FIRST)
    again = build(now=LATER, status="passed_with_warnings", existing=[first, None])

    assert again == first


@pytest.mark.parametrize("change", [
    {"prof": "solar-open2-nvfp4-vllm-venv-256k"},
    {"node": head_facts(lock="0" * 64)},
    {"node": head_facts(commit="1" * 40)},
    {"node": head_facts(vllm="0.25.2")},
    {"rendered": dict(RENDERED, argv=["vllm", "serve", "/srv/model", "--max-num-seqs", "8"])},
])
def test_a_new_identity_is_a_new_record_with_its_own_time(change):
    first = build(now=FIRST)
    if "prof" in change:
        change = dict(change, prof=profile(change["prof"]))
    switched = build(now=LATER, existing=[first], **change)

    assert switched["deployment_id"] != first["deployment_id"]
    assert switched["recorded_at"] == LATER


def test_the_profiles_digest_ignores_where_it_was_found():
    prof = profile()
    moved = dict(prof, _dir="/elsewhere", _sources=["/elsewhere/x.yml"])

    assert profiles.profile_digest(moved) == profiles.profile_digest(prof)
    assert profiles.profile_digest(dict(prof, description="other")) != profiles.profile_digest(prof)


def test_the_render_digest_covers_argv_env_and_units_only():
    assert profiles.render_digest(dict(RENDERED, api={"proxy": True})) == profiles.render_digest(RENDERED)
    assert profiles.render_digest(dict(RENDERED, env={"A": "2"})) != profiles.render_digest(RENDERED)


def test_packages_given_as_the_profile_pins_them_name_the_engine_by_its_distribution():
    # verify_version_packages holds requirements as the profile states them; runtime_versions
    # keys what it read by distribution name.
    node = head_facts()
    node["versions"]["packages"] = {"sparklab-engine": "0.2.0", "ray": "2.60.0", "torch": "2.10.0"}
    record = build(node=node, packages=["sparklab-engine==0.2.0", "ray[default]==2.60.0", "torch"])
    assert (record["engine"]["package"], record["engine"]["version"]) == ("sparklab-engine", "0.2.0")
    record = build(packages=["vllm==0.25.1", "ray[default]==2.60.0", "torch"])
    assert (record["engine"]["package"], record["engine"]["version"]) == ("vllm", "0.25.1")


def test_an_image_runtime_records_the_image_id_and_the_engine_version_read_inside_it():
    prof = profile("solar-open2-nvfp4-ngc-ep")
    # What verify read inside the running container (runtime_versions, image_container).
    node = {"versions": {"image_id": "sha256:" + "9" * 64, "image_context_hash": "sha256:" + "8" * 64,
                         "packages": {"vllm": "0.12.0+nv26.01", "torch": "2.10.0a0"}},
            "checkpoint_manifest": head_facts()["checkpoint_manifest"]}
    record = deployment_filter.deployment(node, prof, RENDERED, CHECKPOINT, "passed", FIRST, packages=["vllm", "torch"],
                                          image="nvcr.io/nvidia/vllm:26.01-py3")

    assert record["runtime"] == {"kind": "image", "id": "sha256:" + "9" * 64, "image": "nvcr.io/nvidia/vllm:26.01-py3",
                                 "image_context_hash": "sha256:" + "8" * 64}
    assert (record["engine"]["package"], record["engine"]["version"]) == ("vllm", "0.12.0+nv26.01")
    # The container did not answer: the record says so with null, the image id still identifies the runtime.
    unread = dict(node, versions=dict(node["versions"], packages={"vllm": None, "torch": None}))
    record = deployment_filter.deployment(unread, prof, RENDERED, CHECKPOINT, "passed", FIRST, packages=["vllm", "torch"],
                                          image="nvcr.io/nvidia/vllm:26.01-py3")
    assert (record["engine"]["package"], record["engine"]["version"]) == ("vllm", None)


@pytest.mark.parametrize("field, facts", [
    ("checkpoint.commit", head_facts(commit="{{ lookup('pipe', 'id') }}")),
    ("engine.version", head_facts(vllm="0.25.1{{ 7*7 }}")),
    ("runtime.id", head_facts(lock="{% raw %}")),
])
def test_a_value_read_from_the_head_not_of_its_shape_is_never_recorded(field, facts):
    with pytest.raises(AnsibleFilterError, match=r"not of their shape: .*\b%s: " % field.replace(".", r"\.")):
        build(node=facts)


def test_a_node_record_not_of_its_shape_lends_nothing():
    first = build()
    # A node's record of the same deployment with a time that is not one: the new record keeps its own.
    forged = dict(first, recorded_at="{{ now() }}", verify_status="passed_with_warnings")
    settled = build(now="2026-06-01T00:00:00Z", existing=[forged])
    assert settled["recorded_at"] == "2026-06-01T00:00:00Z" and settled["verify_status"] == "passed"


def test_a_passing_verify_without_a_runtime_identity_is_an_error():
    with pytest.raises(AnsibleFilterError, match="venv lock hash"):
        build(node=head_facts(lock=None))


def test_a_path_checkpoint_records_its_path():
    record = deployment_filter.deployment(head_facts(commit=None), profile(), RENDERED,
                                          {"source": "path", "path": "/data/ckpt"}, "passed", FIRST)
    assert record["checkpoint"] == {"source": "path", "path": "/data/ckpt"}


@pytest.mark.parametrize("names, kind, expected", [
    (["vllm", "ray", "torch"], "vllm", "vllm"),
    (["ray", "sglang", "torch"], "sglang", "sglang"),
    # The lab's stand-in: the profile lists its engine first.
    (["sparklab-engine", "ray", "torch"], "vllm", "sparklab-engine"),
    ([], "vllm", None),
])
def test_the_engine_is_the_distribution_named_like_it_else_the_first(names, kind, expected):
    assert records.engine_package(names, kind) == expected


def test_the_history_name_sorts_by_time_and_names_the_deployment():
    record = build(now=FIRST)
    name = deployment_filter.deployment_history_name(record)

    assert name == "20260504T101112Z-%s.json" % record["deployment_id"][7:19]


def test_the_recorded_sparkctl_version_is_the_wrappers_and_the_packages():
    """The record names the collection's version; the wrapper and its package declare the same one."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert deployment_filter.collection_version() == sparkctl.__version__ == pyproject["project"]["version"]


def test_an_installed_collection_reads_its_manifest(tmp_path):
    (tmp_path / "MANIFEST.json").write_text(json.dumps({"collection_info": {"version": "1.2.3"}}))
    assert deployment_filter.collection_version(str(tmp_path)) == "1.2.3"


# --- the module ---------------------------------------------------------------------------------


def run(capsys, **args):
    return module_runner.run_module(deployment_record.main, args, capsys)


def mode_of(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_writes_the_record_readable_by_everyone(tmp_path, capsys):
    path = tmp_path / "sparkctl" / "deployment.json"
    record = build()

    rc, result = run(capsys, path=str(path), record=record)

    assert rc == 0 and result["changed"] is True and result["new_deployment"] is True
    assert result["previous"] is None and result["problem"] is None
    assert json.loads(path.read_text()) == record == result["record"]
    assert mode_of(path) == 0o644
    assert sorted(os.listdir(path.parent)) == ["deployment.json"]


def test_the_same_deployment_again_changes_nothing_and_keeps_its_time(tmp_path, capsys):
    path = tmp_path / "deployment.json"
    first = build(now=FIRST)
    run(capsys, path=str(path), record=first)
    before = path.stat().st_mtime_ns

    rc, result = run(capsys, path=str(path), record=build(now=LATER, status="passed_with_warnings"))

    assert rc == 0 and result["changed"] is False and result["new_deployment"] is False
    assert result["record"] == first and path.stat().st_mtime_ns == before


def test_a_new_deployment_replaces_the_record(tmp_path, capsys):
    path = tmp_path / "deployment.json"
    first = build(now=FIRST)
    run(capsys, path=str(path), record=first)
    switched = build(node=head_facts(lock="0" * 64), now=LATER)

    rc, result = run(capsys, path=str(path), record=switched, _ansible_diff=True)

    assert rc == 0 and result["changed"] is True and result["new_deployment"] is True
    assert result["previous"] == first and json.loads(path.read_text()) == switched
    assert LOCK in result["diff"]["before"] and "0" * 64 in result["diff"]["after"]


def test_check_mode_shows_the_diff_and_writes_nothing(tmp_path, capsys):
    path = tmp_path / "deployment.json"

    rc, result = run(capsys, path=str(path), record=build(), _ansible_check_mode=True, _ansible_diff=True)

    assert rc == 0 and result["changed"] is True and not path.exists()
    assert result["diff"]["before"] == "" and json.loads(result["diff"]["after"]) == build()


def test_a_record_opened_to_writers_is_closed_again(tmp_path, capsys):
    path = tmp_path / "deployment.json"
    run(capsys, path=str(path), record=build())
    path.chmod(0o666)

    rc, result = run(capsys, path=str(path), record=build())

    assert rc == 0 and result["changed"] is True and mode_of(path) == 0o644


def test_a_file_that_is_not_a_record_is_replaced_and_named(tmp_path, capsys):
    path = tmp_path / "deployment.json"
    path.write_text("not json")

    rc, result = run(capsys, path=str(path), record=build())

    assert rc == 0 and result["changed"] is True and "not JSON" in result["problem"]
    assert json.loads(path.read_text()) == build()


def test_a_record_whose_id_is_not_its_identitys_is_refused(tmp_path, capsys):
    tampered = copy.deepcopy(build())
    tampered["profile"]["name"] = "other"

    rc, result = run(capsys, path=str(tmp_path / "deployment.json"), record=tampered)

    assert rc == 1 and "is not the digest of its identity" in result["msg"]
    assert not (tmp_path / "deployment.json").exists()


def test_the_role_defaults_name_the_modules_path():
    defaults = yaml.safe_load((REPO / "roles" / "verify" / "defaults" / "main.yml").read_text())
    assert defaults["verify_deployment_file"] == records.NODE_RECORD_PATH

"""The container-image runtime's logic: the build-context hash that labels images, the stale
entries of a staged context, docker-save archives, and daemon.json for the NVIDIA runtime
(compared with reviewed golden files in tests/unit/golden/docker_daemon/; regenerate with
SPARKCTL_UPDATE_GOLDEN=1 and review the diff)."""

import io
import json
import os
import shutil
import tarfile
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.sparkctl.spark.plugins.filter.engine_image import (
    docker_daemon_json,
    image_context,
    image_context_stale,
)
from ansible_collections.sparkctl.spark.plugins.module_utils import engine_image
from ansible_collections.sparkctl.spark.plugins.modules import image_archive_info, image_context as image_context_module
from module_runner import run_module
from golden_files import assert_golden_text

GOLDEN = Path(__file__).parent / "golden" / "docker_daemon"
REPO = Path(__file__).resolve().parents[2]
SHIPPED_CONTEXT = REPO / "collections/ansible_collections/sparkctl/spark/profiles/contexts/qwen38-flash-next-sglang"


@pytest.fixture
def context(tmp_path):
    root = tmp_path / "ctx"
    (root / "patches").mkdir(parents=True)
    (root / "Dockerfile").write_text("ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nCOPY patches/ /opt/patches/\n")
    (root / "patches" / "fix.py").write_text("print('patched')\n")
    (root / "patches" / "apply.sh").write_text("#!/bin/sh\n")
    os.chmod(root / "patches" / "apply.sh", 0o755)
    os.chmod(root / "patches" / "fix.py", 0o644)
    os.chmod(root / "Dockerfile", 0o644)
    return root


def h(path, base="base:1"):
    return engine_image.context_hash(path, base)["hash"]


# --- the context hash -----------------------------------------------------------------------
def test_listing_and_format(context):
    result = engine_image.context_hash(context, "base:1")
    assert result["hash"].startswith("sha256:") and len(result["hash"]) == 71
    assert result["files"] == ["Dockerfile", "patches/apply.sh", "patches/fix.py"]
    assert result["dirs"] == ["patches"]
    assert result["bytes"] == sum(p.stat().st_size for p in context.rglob("*") if p.is_file())


def test_same_tree_elsewhere_with_other_mtimes_hashes_the_same(context, tmp_path):
    copy = tmp_path / "elsewhere" / "staged"
    shutil.copytree(context, copy)
    for p in copy.rglob("*"):
        os.utime(p, (1_000_000, 1_000_000))
    assert h(copy) == h(context)


def test_hash_is_pinned_for_a_known_tree(tmp_path):
    # A change of scheme must be deliberate: every image would rebuild once.
    root = tmp_path / "fixed"
    root.mkdir()
    (root / "Dockerfile").write_text("FROM scratch\n")
    os.chmod(root / "Dockerfile", 0o644)
    assert h(root, "") == h(root, "")
    entry = {"mode": "0644", "path": "Dockerfile", "sha256": engine_image._file_digest(root / "Dockerfile"), "size": 13, "type": "file"}
    expected = json.dumps({"base": "", "entries": [entry], "scheme": "sparkctl-context-hash/1"}, sort_keys=True, separators=(",", ":"))
    import hashlib
    assert h(root, "") == "sha256:" + hashlib.sha256(expected.encode()).hexdigest()


@pytest.mark.parametrize("change", ["edit", "chmod", "rename", "add_file", "add_empty_dir", "remove"])
def test_every_kind_of_change_changes_the_hash(context, change):
    before = h(context)
    target = context / "patches" / "fix.py"
    if change == "edit":
        target.write_text("print('patched twice')\n")
    elif change == "chmod":
        os.chmod(target, 0o600)
    elif change == "rename":
        target.rename(context / "patches" / "fix2.py")
    elif change == "add_file":
        (context / "extra.txt").write_text("")
    elif change == "add_empty_dir":
        (context / "empty").mkdir()
    elif change == "remove":
        target.unlink()
    assert h(context) != before


def test_base_reference_is_part_of_the_hash(context):
    assert h(context, "base:1") != h(context, "base:2")


def test_a_symlink_hashes_like_the_file_it_points_to(context, tmp_path):
    outside = tmp_path / "shared.py"
    outside.write_text("print('patched')\n")
    os.chmod(outside, 0o644)
    before = h(context)
    (context / "patches" / "fix.py").unlink()
    (context / "patches" / "fix.py").symlink_to(outside)
    assert h(context) == before


def test_missing_context_is_an_error(tmp_path):
    with pytest.raises(engine_image.ContextError, match="is not a directory"):
        engine_image.context_hash(tmp_path / "nope")
    with pytest.raises(AnsibleFilterError, match="image_context: build context"):
        image_context(str(tmp_path / "nope"), "x")


def test_shipped_context_hashes(tmp_path):
    result = image_context(str(SHIPPED_CONTEXT), "lmsysorg/sglang:qwen38flashnext")
    assert "Dockerfile" in result["files"]
    copy = tmp_path / "c"
    shutil.copytree(SHIPPED_CONTEXT, copy)
    assert image_context(str(copy), "lmsysorg/sglang:qwen38flashnext")["hash"] == result["hash"]


# --- the staged copy ------------------------------------------------------------------------------
def test_stale_entries_deepest_first(context):
    ctx = engine_image.context_hash(context)
    root = "/var/lib/sparkctl/image-context/p"
    found = [f"{root}/Dockerfile", f"{root}/patches", f"{root}/patches/fix.py", f"{root}/old",
             f"{root}/old/gone.py", f"{root}/patches/old.py", "/elsewhere/x", root]
    assert image_context_stale([{"path": p} for p in found], root + "/", ctx) == [
        f"{root}/old/gone.py", f"{root}/patches/old.py", f"{root}/old"]
    assert image_context_stale([], root, ctx) == []


# --- docker-save archives ---------------------------------------------------------------------------
def _archive(path, manifest, compress=""):
    data = json.dumps(manifest).encode()
    with tarfile.open(path, "w:" + compress) as tar:
        info = tarfile.TarInfo("manifest.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return path


HEX = "ab" * 32


def test_archive_classic_and_oci_layouts(tmp_path):
    classic = _archive(tmp_path / "c.tar", [{"Config": f"{HEX}.json", "RepoTags": ["a/b:1"], "Layers": []}])
    oci = _archive(tmp_path / "o.tar.gz", [{"Config": f"blobs/sha256/{HEX}", "RepoTags": None}], "gz")
    assert engine_image.archive_images(classic) == [{"id": f"sha256:{HEX}", "repo_tags": ["a/b:1"]}]
    assert engine_image.archive_images(oci) == [{"id": f"sha256:{HEX}", "repo_tags": []}]


def test_archive_errors(tmp_path):
    (tmp_path / "plain.txt").write_text("not a tar")
    with pytest.raises(engine_image.ContextError, match="cannot read image archive"):
        engine_image.archive_images(tmp_path / "plain.txt")
    no_manifest = tmp_path / "n.tar"
    with tarfile.open(no_manifest, "w"):
        pass
    with pytest.raises(engine_image.ContextError, match="no manifest.json"):
        engine_image.archive_images(no_manifest)
    bad = _archive(tmp_path / "b.tar", [{"Config": "weird"}])
    with pytest.raises(engine_image.ContextError, match="unexpected config blob"):
        engine_image.archive_images(bad)


# --- modules ---------------------------------------------------------------------------------------------
def test_image_context_module(context, capsys):
    expected = h(context)
    rc, result = run_module(image_context_module.main, {"path": str(context), "base": "base:1", "expect": expected}, capsys)
    assert rc == 0 and result["hash"] == expected and result["changed"] is False
    (context / "patches" / "fix.py").write_text("drifted\n")
    rc, result = run_module(image_context_module.main, {"path": str(context), "base": "base:1", "expect": expected}, capsys)
    assert rc == 1 and result["failed"] and "re-run to stage it again" in result["msg"]


def test_image_archive_info_module(tmp_path, capsys):
    path = _archive(tmp_path / "c.tar", [{"Config": f"{HEX}.json", "RepoTags": ["a/b:1"]}])
    rc, result = run_module(image_archive_info.main, {"path": str(path)}, capsys)
    assert rc == 0 and result["images"] == [{"id": f"sha256:{HEX}", "repo_tags": ["a/b:1"]}]
    rc, result = run_module(image_archive_info.main, {"path": str(tmp_path / "missing.tar")}, capsys)
    assert rc == 1 and "cannot read image archive" in result["msg"]


# --- daemon.json ---------------------------------------------------------------------------------------------
NVIDIA = "/usr/bin/nvidia-container-runtime"
DAEMON_CASES = {
    # A node with the toolkit and no daemon.json: what `nvidia-ctk runtime configure --runtime=docker` writes.
    "fresh-nvidia": ("", dict(nvidia_runtime_path=NVIDIA)),
    # DGX OS style file with other keys kept, the runtime made the default (--set-as-default).
    "existing-nvidia-default": (
        json.dumps({"log-driver": "json-file", "log-opts": {"max-size": "10m"},
                    "runtimes": {"crun": {"path": "/usr/bin/crun"}}}),
        dict(nvidia_runtime_path=NVIDIA, set_default_runtime=True)),
    # The toolkit plus inventory settings, one of them removing a key.
    "nvidia-and-settings": (
        json.dumps({"runtimes": {"nvidia": {"path": "nvidia-container-runtime", "args": ["--debug"]}},
                    "default-runtime": "nvidia", "debug": True}),
        dict(nvidia_runtime_path=NVIDIA, settings={"exec-opts": ["native.cgroupdriver=cgroupfs"], "debug": None})),
}


@pytest.mark.parametrize("case", list(DAEMON_CASES))
def test_daemon_json_matches_golden(case):
    current, kwargs = DAEMON_CASES[case]
    rendered = docker_daemon_json(current, **kwargs)
    assert_golden_text(GOLDEN / f"{case}.json", rendered)


def test_daemon_json_semantics():
    fresh = json.loads(docker_daemon_json("", NVIDIA))
    assert fresh == {"runtimes": {"nvidia": {"path": NVIDIA, "args": []}}}
    # Without --set-as-default the default runtime stays as found.
    kept = json.loads(docker_daemon_json('{"default-runtime": "runc"}', NVIDIA))
    assert kept["default-runtime"] == "runc"
    # No toolkit and no settings: the file's content is unchanged (the lab's case).
    assert json.loads(docker_daemon_json('{"a": 1}')) == {"a": 1}
    assert docker_daemon_json("") == "{}\n"
    # Rendering is a fixed point: applying it to its own output changes nothing.
    once = docker_daemon_json("", NVIDIA, True, {"x": 1})
    assert docker_daemon_json(once, NVIDIA, True, {"x": 1}) == once


@pytest.mark.parametrize("text,match", [("{nope", "not valid JSON"), ("[1]", "must hold a JSON object")])
def test_daemon_json_refuses_unreadable_files(text, match):
    with pytest.raises(AnsibleFilterError, match=match):
        docker_daemon_json(text, NVIDIA)

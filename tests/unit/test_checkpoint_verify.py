"""sparkctl.spark.checkpoint_verify: a checkpoint tree in, a problem report (and a stamp) out.

The checkpoints are real safetensors files written by the small stdlib writer below, from
the public format description (8-byte little-endian header length, JSON header, data).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import struct

import module_runner
import pytest
from ansible.module_utils import basic
from ansible_collections.sparkctl.spark.plugins.module_utils import (
    checkpoint,
    checkpoint_errors,
    checkpoint_manifest,
    checkpoint_safetensors,
    checkpoint_stamp,
    checkpoint_tree,
)
from ansible_collections.sparkctl.spark.plugins.modules import checkpoint_verify

INDEX = "model.safetensors.index.json"
SHARDS = ["model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors"]
STAMP = ".sparkctl-verified.json"

# Bits per element, written out here rather than imported so the writer checks the reader.
BITS = {"F32": 32, "BF16": 16, "U8": 8, "F8_E4M3": 8, "I64": 64, "F4": 4}


# --- a stdlib safetensors writer ----------------------------------------------------------------


def raw_safetensors(header, data):
    """Header dict + data bytes -> file bytes; the header is padded with spaces to 8 bytes like the reference writer."""
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def safetensors_bytes(tensors, metadata=None):
    """tensors: {name: (dtype, shape)}; data is a deterministic byte pattern per tensor."""
    header = {"__metadata__": metadata} if metadata else {}
    data = b""
    for name, (dtype, shape) in tensors.items():
        elements = 1
        for dim in shape:
            elements *= dim
        payload = bytes((index * 31 + len(name)) % 251 for index in range(elements * BITS[dtype] // 8))
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [len(data), len(data) + len(payload)]}
        data += payload
    return raw_safetensors(header, data)


def shard_tensors(number):
    return {
        "model.layers.%d.mlp.weight_packed" % number: ("U8", [8, 16]),
        "model.layers.%d.mlp.weight_scale" % number: ("F8_E4M3", [8, 2]),
        "model.layers.%d.mlp.weight_global_scale" % number: ("F32", [1]),
        "model.layers.%d.input_layernorm.weight" % number: ("BF16", [16]),
    }


def write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def file_manifest(root, rels, size_only=()):
    manifest = {}
    for rel in rels:
        data = (root / rel).read_bytes()
        manifest[rel] = {"size": len(data), "sha256": None if rel in size_only else hashlib.sha256(data).hexdigest()}
    return manifest


@pytest.fixture
def ckpt(tmp_path):
    """A three-shard checkpoint with an index and a config; manifest as the hub would give it
    (sha256 for the LFS files, size only for config.json)."""
    root = tmp_path / "ckpt"
    weight_map = {}
    for number, shard in enumerate(SHARDS, start=1):
        tensors = shard_tensors(number)
        write(root / shard, safetensors_bytes(tensors, metadata={"format": "pt"}))
        weight_map.update(dict((name, shard) for name in tensors))
    write(root / INDEX, json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map}, indent=2).encode())
    write(root / "config.json", b'{"architectures": ["SolarOpen2ForCausalLM"]}\n')
    manifest = file_manifest(root, SHARDS + [INDEX, "config.json"], size_only=("config.json",))
    return root, manifest


def verify(root, manifest=None, **kwargs):
    kwargs.setdefault("racy_window_ns", 0)
    normalized = checkpoint_manifest.normalize_manifest(manifest) if manifest is not None else None
    return checkpoint.verify_checkpoint(str(root), manifest=normalized, **kwargs)


def kinds(result):
    return sorted((problem["file"], problem["kind"]) for problem in result["problems"])


def flip_byte(path, offset=-1, keep_mtime=False):
    before = os.stat(path)
    with open(path, "r+b") as handle:
        handle.seek(offset, os.SEEK_END if offset < 0 else os.SEEK_SET)
        value = handle.read(1)
        handle.seek(-1, os.SEEK_CUR)
        handle.write(bytes([value[0] ^ 0xFF]))
    if keep_mtime:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    else:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))


# --- a clean checkpoint and the stamp -----------------------------------------------------------


def test_clean_checkpoint_passes_and_writes_a_stamp(ckpt):
    root, manifest = ckpt

    result = verify(root, manifest)

    assert result["ok"] is True
    assert result["problems"] == []
    assert result["files"] == 5
    assert result["bytes"] == sum(entry["size"] for entry in manifest.values())
    assert result["rehashed"] == sorted(SHARDS + [INDEX])
    assert result["skipped_hash"] == []
    assert result["stamp_written"] is True
    stamp = json.loads((root / STAMP).read_text())
    assert stamp["version"] == 1
    digest = checkpoint_manifest.manifest_digest(checkpoint_manifest.normalize_manifest(manifest))
    assert stamp["manifest_digest"] == result["manifest_digest"] == digest
    assert sorted(stamp["files"]) == sorted(manifest)
    first = stamp["files"][SHARDS[0]]
    assert first["sha256"] == manifest[SHARDS[0]]["sha256"]
    assert (first["size"], first["mtime_ns"]) == (manifest[SHARDS[0]]["size"], os.stat(root / SHARDS[0]).st_mtime_ns)
    assert stamp["files"]["config.json"]["sha256"] is None
    assert stat.S_IMODE(os.stat(root / STAMP).st_mode) == 0o644
    assert sorted(os.listdir(root)) == sorted(SHARDS + [INDEX, "config.json", STAMP])  # no temp file left


def test_converged_rerun_skips_hashing_and_leaves_the_stamp_alone(ckpt):
    root, manifest = ckpt
    verify(root, manifest)
    stamp_before = os.stat(root / STAMP)

    result = verify(root, manifest)

    assert result["ok"] is True
    assert result["rehashed"] == []
    assert result["skipped_hash"] == sorted(SHARDS + [INDEX])
    assert result["stamp_written"] is False
    assert result["stamp_would_change"] is False
    assert os.stat(root / STAMP).st_mtime_ns == stamp_before.st_mtime_ns


def test_touched_file_is_rehashed_and_the_stamp_updated(ckpt):
    root, manifest = ckpt
    verify(root, manifest)
    before = os.stat(root / SHARDS[1])
    os.utime(root / SHARDS[1], ns=(before.st_atime_ns, before.st_mtime_ns + 5_000_000_000))

    result = verify(root, manifest)

    assert result["ok"] is True
    assert result["rehashed"] == [SHARDS[1]]
    assert result["skipped_hash"] == sorted([SHARDS[0], SHARDS[2], INDEX])
    assert result["stamp_written"] is True
    assert json.loads((root / STAMP).read_text())["files"][SHARDS[1]]["mtime_ns"] == before.st_mtime_ns + 5_000_000_000
    assert verify(root, manifest)["rehashed"] == []


def test_flipped_byte_with_restored_mtime_is_still_caught(ckpt):
    """Size and mtime match the stamp, but the write changed ctime: the stamp does not vouch for it."""
    root, manifest = ckpt
    verify(root, manifest)
    flip_byte(root / SHARDS[2], keep_mtime=True)

    result = verify(root, manifest)

    assert result["rehashed"] == [SHARDS[2]]
    assert kinds(result) == [(SHARDS[2], "sha256")]
    assert "expected %s" % manifest[SHARDS[2]]["sha256"] in result["problems"][0]["detail"]


def test_stamp_of_another_manifest_is_not_trusted(ckpt):
    root, manifest = ckpt
    verify(root, manifest)
    manifest["config.json"]["sha256"] = hashlib.sha256((root / "config.json").read_bytes()).hexdigest()

    result = verify(root, manifest)

    assert result["skipped_hash"] == []
    assert result["rehashed"] == sorted(SHARDS + [INDEX, "config.json"])
    assert result["stamp_written"] is True


def test_stamp_copied_to_another_node_is_not_trusted(ckpt, tmp_path):
    """rsync -a keeps sizes and mtimes; inodes and ctimes differ, so the copy is hashed again."""
    root, manifest = ckpt
    verify(root, manifest)
    copy = tmp_path / "worker"
    shutil.copytree(root, copy, copy_function=shutil.copy2)

    result = verify(copy, manifest)

    assert result["ok"] is True
    assert result["skipped_hash"] == []
    assert result["rehashed"] == sorted(SHARDS + [INDEX])


def test_file_changed_moments_before_hashing_is_not_stamped(ckpt):
    """Racy window: a file written just before its hash could change again within the same timestamp tick."""
    root, manifest = ckpt

    # A wide window so that a slow test machine cannot push the files out of it.
    first = verify(root, manifest, racy_window_ns=60_000_000_000)
    stamped = json.loads((root / STAMP).read_text())["files"]
    second = verify(root, manifest)

    assert first["ok"] and first["stamp_written"]
    assert sorted(stamped) == ["config.json"]
    assert second["rehashed"] == sorted(SHARDS + [INDEX])
    assert second["stamp_written"] is True
    assert verify(root, manifest)["skipped_hash"] == sorted(SHARDS + [INDEX])


@pytest.mark.parametrize(
    "ctime_ns, started_ns, racy",
    [
        (10_000_000_001, 10_050_000_000, True),  # changed 49 ms before the hash started: same tick possible
        (10_000_000_001, 10_200_000_000, False),
        (10_000_000_000, 11_500_000_000, True),  # whole-second ctime: a 1-2 s granularity filesystem
        (10_000_000_000, 12_000_000_001, False),
        (10_300_000_000, 10_000_000_000, True),  # ctime after the hash started
    ],
)
def test_racy_window(ctime_ns, started_ns, racy):
    assert checkpoint_stamp.is_racy(ctime_ns, started_ns) is racy


def test_file_changing_while_hashed_is_reported_incomplete(ckpt, monkeypatch):
    root, manifest = ckpt
    real_sha256_file = checkpoint_stamp.sha256_file

    def writer_still_busy(path, chunk_bytes=checkpoint_stamp.HASH_CHUNK_BYTES):
        if path.endswith(SHARDS[0]):
            os.utime(path, ns=(0, os.stat(path).st_mtime_ns + 1))
        return real_sha256_file(path, chunk_bytes)

    monkeypatch.setattr(checkpoint_stamp, "sha256_file", writer_still_busy)

    result = verify(root, manifest)

    assert kinds(result) == [(SHARDS[0], "incomplete")]
    assert result["stamp_written"] is False


def test_check_mode_writes_nothing_and_reports_the_stamp_it_would_write(ckpt):
    root, manifest = ckpt

    result = verify(root, manifest, check_mode=True)

    assert result["ok"] is True
    assert (result["stamp_written"], result["stamp_would_change"]) == (False, True)
    assert not (root / STAMP).exists()


def test_check_mode_leaves_an_outdated_stamp_as_it_is(ckpt):
    root, manifest = ckpt
    verify(root, manifest)
    stamp_bytes = (root / STAMP).read_bytes()
    before = os.stat(root / SHARDS[0])
    os.utime(root / SHARDS[0], ns=(before.st_atime_ns, before.st_mtime_ns + 1))

    result = verify(root, manifest, check_mode=True)

    assert result["rehashed"] == [SHARDS[0]]
    assert (result["stamp_written"], result["stamp_would_change"]) == (False, True)
    assert (root / STAMP).read_bytes() == stamp_bytes


def test_write_stamp_false_uses_but_never_writes_the_stamp(ckpt):
    root, manifest = ckpt

    assert verify(root, manifest, write_stamp=False)["stamp_written"] is False
    assert not (root / STAMP).exists()
    verify(root, manifest)
    assert verify(root, manifest, write_stamp=False)["skipped_hash"] == sorted(SHARDS + [INDEX])


def test_stamp_elsewhere(ckpt, tmp_path):
    root, manifest = ckpt
    stamp_file = tmp_path / "state" / "ckpt.json"
    stamp_file.parent.mkdir()

    verify(root, manifest, stamp_file=str(stamp_file))

    assert stamp_file.exists() and not (root / STAMP).exists()
    assert verify(root, manifest, stamp_file=str(stamp_file))["rehashed"] == []


def test_failing_run_keeps_the_previous_stamp(ckpt):
    root, manifest = ckpt
    verify(root, manifest)
    stamp_bytes = (root / STAMP).read_bytes()
    flip_byte(root / SHARDS[0])

    result = verify(root, manifest)

    assert result["ok"] is False
    assert result["stamp_written"] is False
    assert (root / STAMP).read_bytes() == stamp_bytes
    # Once repaired, only the repaired file is hashed again.
    flip_byte(root / SHARDS[0])
    assert verify(root, manifest)["rehashed"] == [SHARDS[0]]


def test_unreadable_stamp_means_hash_everything(ckpt):
    root, manifest = ckpt
    (root / STAMP).write_text("{not json")

    result = verify(root, manifest)

    assert result["rehashed"] == sorted(SHARDS + [INDEX])
    assert result["stamp_written"] is True
    assert json.loads((root / STAMP).read_text())["version"] == 1


def test_stamp_with_a_wrong_mode_is_rewritten(ckpt):
    root, manifest = ckpt
    verify(root, manifest)
    os.chmod(root / STAMP, 0o600)

    result = verify(root, manifest)

    assert result["stamp_written"] is True
    assert stat.S_IMODE(os.stat(root / STAMP).st_mode) == 0o644


# --- sizes and hashes ---------------------------------------------------------------------------


def test_truncated_shard_fails_size_and_header(ckpt):
    root, manifest = ckpt
    data = (root / SHARDS[1]).read_bytes()
    (root / SHARDS[1]).write_bytes(data[:-10])

    result = verify(root, manifest)

    assert result["ok"] is False
    assert kinds(result) == [(SHARDS[1], "header"), (SHARDS[1], "size")]
    by_kind = dict((problem["kind"], problem["detail"]) for problem in result["problems"])
    assert by_kind["size"] == "is %d bytes, expected %d" % (len(data) - 10, len(data))
    assert "end past the" in by_kind["header"]
    assert SHARDS[1] not in result["rehashed"]  # a wrong size is not worth hashing
    assert result["stamp_written"] is False


def test_flipped_byte_same_size_fails_sha256_only(ckpt):
    root, manifest = ckpt
    flip_byte(root / SHARDS[0])

    result = verify(root, manifest)

    assert kinds(result) == [(SHARDS[0], "sha256")]
    actual = hashlib.sha256((root / SHARDS[0]).read_bytes()).hexdigest()
    assert result["problems"][0]["detail"] == "content differs: sha256 %s, expected %s" % (actual, manifest[SHARDS[0]]["sha256"])


def test_size_only_entries_are_not_hashed(ckpt):
    root, manifest = ckpt
    flip_byte(root / "config.json", offset=0)

    assert verify(root, manifest)["ok"] is True
    (root / "config.json").write_bytes(b"{}\n")
    assert kinds(verify(root, manifest)) == [("config.json", "size")]


def test_hash_false_checks_sizes_and_structure_only(ckpt):
    root, manifest = ckpt
    flip_byte(root / SHARDS[0])

    result = verify(root, manifest, hash_files=False)

    assert result["ok"] is True
    assert (result["rehashed"], result["skipped_hash"], result["stamp_written"]) == ([], [], False)
    assert not (root / STAMP).exists()


def test_hash_false_still_refuses_a_wrong_size(ckpt):
    root, manifest = ckpt
    with open(root / SHARDS[1], "ab") as handle:
        handle.write(b"x")

    result = verify(root, manifest, hash_files=False)

    assert (SHARDS[1], "size") in kinds(result)
    assert result["rehashed"] == []


@pytest.mark.parametrize(
    "stamp_file, rel, expected",
    [
        ("/ckpt/.sparkctl-verified.json", ".sparkctl-verified.json", True),
        ("/ckpt/.sparkctl-verified.json", ".sparkctl-verified.json.a1b2.tmp", True),
        ("/ckpt/.sparkctl-verified.json", ".sparkctl-verified.json.a1b2", False),
        ("/ckpt/.sparkctl-verified.json", "sub/.sparkctl-verified.json", False),
        ("/ckpt/meta/stamp.json", "meta/stamp.json.x.tmp", True),
        ("/ckpt/meta/stamp.json", "stamp.json.x.tmp", False),
    ],
)
def test_stamp_matcher_knows_the_stamp_and_its_temp_files(stamp_file, rel, expected):
    assert checkpoint.stamp_matcher("/ckpt", stamp_file)(rel) is expected


def test_missing_manifest_file(ckpt):
    root, manifest = ckpt
    (root / "config.json").unlink()

    result = verify(root, manifest)

    assert result["problems"] == [
        {"file": "config.json", "kind": "missing", "detail": "expected %d bytes, not present" % manifest["config.json"]["size"]}
    ]


@pytest.mark.parametrize("jobs", [1, 2, 4])
def test_parallel_hashing_gives_the_same_report(ckpt, jobs):
    root, manifest = ckpt
    flip_byte(root / SHARDS[1])
    (root / SHARDS[2]).write_bytes((root / SHARDS[2]).read_bytes()[:100])

    result = verify(root, manifest, jobs=jobs, write_stamp=False)
    reference = verify(root, manifest, jobs=1, write_stamp=False)

    for key in ("ok", "problems", "files", "bytes", "rehashed", "skipped_hash"):
        assert result[key] == reference[key]
    assert kinds(result) == [(SHARDS[1], "sha256"), (SHARDS[2], "header"), (SHARDS[2], "size")]


def test_sha256_file_streams_in_chunks(tmp_path):
    path = tmp_path / "blob"
    data = os.urandom(3 * 1024 + 17)
    path.write_bytes(data)

    hexdigest, info = checkpoint_stamp.sha256_file(str(path), chunk_bytes=1024)

    assert hexdigest == hashlib.sha256(data).hexdigest()
    assert info.size == len(data)


def test_sha256_file_refuses_a_symlink(tmp_path):
    (tmp_path / "real").write_bytes(b"x")
    (tmp_path / "link").symlink_to(tmp_path / "real")

    with pytest.raises(OSError):
        checkpoint_stamp.sha256_file(str(tmp_path / "link"))


# --- leftovers, symlinks, extra files -----------------------------------------------------------


@pytest.mark.parametrize(
    "leftover, detail",
    [
        ("model-00003-of-00003.safetensors.incomplete", "unfinished download or copy (.incomplete file)"),
        ("model-00001-of-00003.safetensors.part", "unfinished download or copy (.part file)"),
        ("config.json.tmp", "unfinished download or copy (.tmp file)"),
        (".model-00002-of-00003.safetensors.Xa9QbZ", "rsync temporary file of model-00002-of-00003.safetensors"),
    ],
)
def test_transfer_leftovers_are_incomplete(ckpt, leftover, detail):
    root, manifest = ckpt
    write(root / leftover, b"partial")

    result = verify(root, manifest)

    assert result["ok"] is False
    assert result["problems"] == [{"file": leftover, "kind": "incomplete", "detail": detail}]
    assert result["files"] == 5  # leftovers are not counted as checkpoint files
    assert result["stamp_written"] is False


@pytest.mark.parametrize("partial_dir", [".~tmp~", ".rsync-partial"])
def test_rsync_partial_dirs_are_incomplete(ckpt, partial_dir):
    root, manifest = ckpt
    write(root / partial_dir / SHARDS[0], b"half a shard")

    result = verify(root, manifest)

    assert kinds(result) == [(partial_dir, "incomplete")]


def test_what_the_manifest_does_not_own_is_extra_never_broken(ckpt, tmp_path):
    """A directory shared with other models: their leftovers, indexes, symlinks and unreadable
    shards are someone else's. Reported as extra (a warning), never as a checkpoint problem that a
    caller would repair by deleting."""
    root, manifest = ckpt
    write(root / "other/model.safetensors", b"garbage, not safetensors")
    write(root / "other/model.safetensors.index.json", b'{"weight_map": {"w": "missing.safetensors"}}')
    write(root / "other/.rsync-partial/x", b"theirs")
    write(root / "sub/blob.part", b"theirs")
    write(root / "notes.txt.tmp", b"theirs")
    (root / "latest").symlink_to(tmp_path)

    result = verify(root, manifest)

    assert result["ok"] is True, result["summary"]
    assert kinds(result) == [
        ("latest", "extra"), ("notes.txt.tmp", "extra"), ("other/.rsync-partial", "extra"), ("other/model.safetensors", "extra"),
        ("other/model.safetensors.index.json", "extra"), ("sub/blob.part", "extra")]


def test_a_file_stored_in_git_is_checked_by_its_git_blob_sha1(ckpt):
    root, manifest = ckpt
    data = (root / "config.json").read_bytes()
    manifest["config.json"]["git_blob_sha1"] = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    assert verify(root, manifest)["ok"] is True
    flip_byte(root / "config.json", offset=3, keep_mtime=True)

    result = verify(root, manifest)

    assert kinds(result) == [("config.json", "sha256")]
    assert "git blob sha1" in result["problems"][0]["detail"]


def test_full_rehashes_what_the_stamp_vouches_for(ckpt):
    root, manifest = ckpt
    assert verify(root, manifest)["stamp_written"] is True
    assert verify(root, manifest)["rehashed"] == []

    full = verify(root, manifest, full=True)

    assert full["ok"] is True and full["rehashed"] == sorted(SHARDS + [INDEX]) and full["skipped_hash"] == []


def test_leftovers_are_found_without_a_manifest_too(ckpt):
    root, _manifest = ckpt
    write(root / "model-00001-of-00003.safetensors.incomplete", b"")

    assert kinds(verify(root)) == [("model-00001-of-00003.safetensors.incomplete", "incomplete")]


def test_hidden_file_with_a_dotted_suffix_is_not_an_rsync_temp(ckpt):
    root, manifest = ckpt
    write(root / ".notes.abcdef", b"mine")

    assert kinds(verify(root, manifest)) == [(".notes.abcdef", "extra")]


def test_symlinked_shard_is_named_not_followed(ckpt, tmp_path):
    root, manifest = ckpt
    blob = tmp_path / "blobs" / "0d8e"
    blob.parent.mkdir()
    os.replace(root / SHARDS[0], blob)
    (root / SHARDS[0]).symlink_to(blob)

    result = verify(root, manifest)

    assert result["ok"] is False
    assert kinds(result) == [(SHARDS[0], "symlink")]
    assert str(blob) in result["problems"][0]["detail"]
    assert SHARDS[0] not in result["rehashed"]


def test_symlinked_directory_is_not_walked(ckpt, tmp_path):
    root, manifest = ckpt
    elsewhere = tmp_path / "elsewhere"
    write(elsewhere / "stray.incomplete", b"")
    (root / "extra_dir").symlink_to(elsewhere)

    assert kinds(verify(root)) == [("extra_dir", "symlink")]
    assert kinds(verify(root, manifest)) == [("extra_dir", "extra")], "not the manifest's: someone else's symlink"


def test_checkpoint_root_may_itself_be_a_symlink(ckpt, tmp_path):
    root, manifest = ckpt
    (tmp_path / "current").symlink_to(root)

    assert verify(tmp_path / "current", manifest)["ok"] is True


def test_extra_file_is_reported_without_failing_by_default(ckpt):
    root, manifest = ckpt
    write(root / "README.md", b"# model card\n")

    result = verify(root, manifest)

    assert result["ok"] is True
    assert result["problems"] == [{"file": "README.md", "kind": "extra", "detail": "13 bytes, not in the manifest"}]
    assert result["stamp_written"] is True


def test_extra_file_fails_when_asked(ckpt):
    root, manifest = ckpt
    write(root / "README.md", b"# model card\n")

    result = verify(root, manifest, extra_files="fail")

    assert result["ok"] is False
    assert kinds(result) == [("README.md", "extra")]
    assert result["stamp_written"] is False


@pytest.fixture
def single_file_ckpt(tmp_path):
    """A checkpoint of one model.safetensors and no index, as small models ship."""
    root = tmp_path / "single"
    write(root / "model.safetensors", safetensors_bytes(shard_tensors(1)))
    write(root / "config.json", b'{"architectures": ["LlamaForCausalLM"]}\n')
    return root, file_manifest(root, ["model.safetensors", "config.json"])


def test_stray_safetensors_is_refused_where_no_index_filters_them(single_file_ckpt):
    """Without an index the engines load every *.safetensors at the top of the directory."""
    root, manifest = single_file_ckpt
    write(root / "adapter.safetensors", safetensors_bytes({"w": ("F32", [2])}))

    result = verify(root, manifest)

    assert result["ok"] is False
    assert kinds(result) == [("adapter.safetensors", "stray")]
    detail = result["problems"][0]["detail"]
    assert "every *.safetensors" in detail and "move %s out of %s" % (root / "adapter.safetensors", root) in detail


@pytest.mark.parametrize(
    "rel, kind",
    [
        # The engines' glob falls through to *.bin and *.pt only when no *.safetensors is at the top.
        ("pytorch_model.bin", "extra"),
        ("consolidated.00.pth", "extra"),
        ("model-q4_k_m.gguf", "extra"),
        ("lora/adapter_model.safetensors", "extra"),
        # vLLM takes a consolidated*.safetensors anywhere in the tree for a Mistral-format checkpoint.
        ("original/consolidated.safetensors", "stray"),
        ("mtp.safetensors", "stray"),
    ],
)
def test_only_weights_an_engine_would_load_are_stray(single_file_ckpt, rel, kind):
    root, manifest = single_file_ckpt
    write(root / rel, b"x" * 16)

    result = verify(root, manifest)

    assert kinds(result) == [(rel, kind)]
    assert result["ok"] is (kind == "extra")


def test_bin_and_pt_files_are_stray_in_a_checkpoint_without_safetensors(tmp_path):
    root = tmp_path / "bin"
    write(root / "pytorch_model.bin", b"torch pickle")
    write(root / "config.json", b"{}")
    manifest = file_manifest(root, ["pytorch_model.bin", "config.json"])
    for rel in ("pytorch_model-old.bin", "quantized.pt", "training_args.bin", "optimizer.pt", "sub/other.bin"):
        write(root / rel, b"theirs")

    result = verify(root, manifest)

    assert kinds(result) == [("optimizer.pt", "extra"), ("pytorch_model-old.bin", "stray"), ("quantized.pt", "stray"),
                             ("sub/other.bin", "extra"), ("training_args.bin", "extra")]


def test_stray_symlink_to_weights_is_refused(single_file_ckpt, tmp_path):
    """The engines' glob follows a symlink."""
    root, manifest = single_file_ckpt
    write(tmp_path / "elsewhere.safetensors", safetensors_bytes({"w": ("F32", [2])}))
    (root / "more.safetensors").symlink_to(tmp_path / "elsewhere.safetensors")

    result = verify(root, manifest)

    assert kinds(result) == [("more.safetensors", "stray")]
    assert result["problems"][0]["detail"].startswith("symlink to %s, not in the manifest; " % (tmp_path / "elsewhere.safetensors"))


def test_default_ignores_hub_bookkeeping_and_own_files(ckpt):
    root, manifest = ckpt
    write(root / ".cache/huggingface/download/model-00001-of-00003.safetensors.incomplete", b"")
    write(root / ".cache/huggingface/.gitignore", b"*\n")
    write(root / ".sparkctl-mirror.lock", b"")

    assert verify(root, manifest)["problems"] == []


def test_custom_ignore_drops_paths_from_tree_and_manifest(ckpt):
    root, manifest = ckpt
    write(root / "original/consolidated.00.pth", b"x" * 10)
    manifest["original/params.json"] = {"size": 3, "sha256": None}

    assert kinds(verify(root, manifest)) == [("original/consolidated.00.pth", "extra"), ("original/params.json", "missing")]
    assert verify(root, manifest, ignore=[".sparkctl-*", "original/**"])["problems"] == []


@pytest.mark.parametrize(
    "patterns, rel, expected",
    [
        ([".sparkctl-*"], ".sparkctl-verified.json", True),
        ([".sparkctl-*"], "sub/.sparkctl-verified.json", True),
        ([".cache/**"], ".cache", True),
        ([".cache/**"], ".cache/huggingface/download/x.incomplete", True),
        ([".cache/**"], "sub/.cache/x", False),
        (["**/.cache/**"], "sub/.cache/x", True),
        (["*.md"], "docs/README.md", True),
        (["docs/*.md"], "docs/sub/README.md", False),
        (["docs/**/*.md"], "docs/sub/README.md", True),
        (["docs/**/*.md"], "docs/README.md", True),
        (["model-0000[12]-*"], "model-00002-of-00003.safetensors", True),
        (["model-0000[!12]-*"], "model-00002-of-00003.safetensors", False),
        (["?.bin"], "a.bin", True),
        ([], "anything", False),
    ],
)
def test_ignore_patterns(patterns, rel, expected):
    assert checkpoint_tree.compile_ignore(patterns)(rel) is expected


# --- the index ----------------------------------------------------------------------------------


def test_shard_missing_from_the_tree_is_named_without_a_manifest(ckpt):
    root, _manifest = ckpt
    (root / SHARDS[2]).unlink()

    result = verify(root)

    assert result["problems"] == [{"file": SHARDS[2], "kind": "missing", "detail": "listed in the weight_map of %s, not present" % INDEX}]


def test_shard_missing_is_reported_once_with_a_manifest(ckpt):
    root, manifest = ckpt
    (root / SHARDS[2]).unlink()

    assert kinds(verify(root, manifest)) == [(SHARDS[2], "missing")]


def test_stale_shard_beside_the_index_is_named(ckpt):
    root, _manifest = ckpt
    write(root / "model-00004-of-00004.safetensors", safetensors_bytes({"w": ("F32", [2])}))

    result = verify(root)

    assert result["ok"] is False
    assert kinds(result) == [("model-00004-of-00004.safetensors", "index")]
    assert INDEX in result["problems"][0]["detail"]


def test_stale_shard_with_a_manifest_is_stray(ckpt):
    root, manifest = ckpt
    write(root / "model-00004-of-00004.safetensors", safetensors_bytes({"w": ("F32", [2])}))

    result = verify(root, manifest)

    assert result["ok"] is False
    assert kinds(result) == [("model-00004-of-00004.safetensors", "stray")]
    assert "not in the weight_map of %s" % INDEX in result["problems"][0]["detail"]


def test_manifest_may_list_a_safetensors_file_the_index_does_not(ckpt):
    """Mistral-style repos ship consolidated.safetensors next to the indexed shards."""
    root, manifest = ckpt
    write(root / "consolidated.safetensors", safetensors_bytes({"w": ("F32", [2])}))
    manifest.update(file_manifest(root, ["consolidated.safetensors"]))

    assert verify(root, manifest)["problems"] == []


def test_index_shards_are_deduplicated():
    index = {"weight_map": {"a": "s1.safetensors", "b": "s1.safetensors", "c": "./s2.safetensors"}}

    assert checkpoint_safetensors.index_shards(json.dumps(index).encode()) == ["s1.safetensors", "s2.safetensors"]


@pytest.mark.parametrize(
    "content, detail",
    [
        (b"{", "not valid JSON"),
        (b"[]", "has no weight_map"),
        (b'{"weight_map": {}}', "has no weight_map"),
        (b'{"weight_map": {"a": "model.bin"}}', "is not a .safetensors file name"),
        (b'{"weight_map": {"a": "../other/model.safetensors"}}', "points outside the checkpoint"),
        (b'{"weight_map": {"a": "/abs/model.safetensors"}}', "is not a .safetensors file name"),
    ],
)
def test_unusable_index_is_an_index_problem(ckpt, content, detail):
    root, _manifest = ckpt
    (root / INDEX).write_bytes(content)

    result = verify(root)

    assert [(problem["file"], problem["kind"]) for problem in result["problems"]][0] == (INDEX, "index")
    assert detail in result["problems"][0]["detail"]


def test_index_in_a_subfolder_is_checked_against_its_own_folder(ckpt):
    root, _manifest = ckpt
    write(root / "vision/model-00001-of-00001.safetensors", safetensors_bytes({"w": ("F32", [2])}))
    write(
        root / "vision" / INDEX, json.dumps({"weight_map": {"w": "model-00001-of-00001.safetensors", "v": "model-x.safetensors"}}).encode()
    )

    assert kinds(verify(root)) == [("vision/model-x.safetensors", "missing")]


def test_single_file_checkpoint_without_index_passes(tmp_path):
    write(tmp_path / "model.safetensors", safetensors_bytes({"w": ("F32", [4])}))

    assert verify(tmp_path)["ok"] is True


def test_directory_without_shards_or_manifest_fails(tmp_path):
    write(tmp_path / "config.json", b"{}")

    assert kinds(verify(tmp_path)) == [(".", "missing")]


def test_missing_directory_lists_every_manifest_file(ckpt, tmp_path):
    _root, manifest = ckpt

    result = verify(tmp_path / "absent", manifest)

    assert result["ok"] is False
    assert kinds(result) == sorted([(".", "missing")] + [(rel, "missing") for rel in manifest])
    assert (result["files"], result["stamp_written"]) == (0, False)


def test_path_that_is_a_file_is_an_error(tmp_path):
    (tmp_path / "file").write_bytes(b"")

    with pytest.raises(checkpoint_errors.CheckpointError, match="is not a directory"):
        verify(tmp_path / "file")


# --- safetensors headers ------------------------------------------------------------------------


def good_header():
    return {
        "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
        "b": {"dtype": "U8", "shape": [4], "data_offsets": [24, 28]},
    }


def header_problem(header, data_len=28):
    return checkpoint_safetensors.safetensors_header_problem(json.dumps(header).encode(), data_len)


def test_written_files_parse(tmp_path):
    path = tmp_path / "x.safetensors"
    path.write_bytes(safetensors_bytes(dict(shard_tensors(1), extra=("I64", [3, 0]), packed=("F4", [4, 6]))))

    assert checkpoint_safetensors.safetensors_file_problem(str(path), path.stat().st_size) is None


@pytest.mark.parametrize(
    "mutate, data_len, detail",
    [
        (lambda h: h["a"].update(dtype="F12"), 28, "tensor 'a': unknown dtype 'F12'"),
        (lambda h: h["a"].update(shape=[2, -3]), 28, "tensor 'a': shape [2, -3] is not a list of non-negative integers"),
        (lambda h: h["a"].update(shape="2x3"), 28, "is not a list of non-negative integers"),
        (lambda h: h["a"].update(data_offsets=[0]), 28, "tensor 'a': data_offsets [0] is not [begin, end]"),
        (lambda h: h["a"].update(data_offsets=[8, 4]), 28, "are not 0 <= begin <= end"),
        (lambda h: h["b"].update(data_offsets=[24, 40]), 28, "tensor 'b': data_offsets [24, 40] end past the 28-byte data section"),
        (lambda h: h["a"].update(shape=[2, 2]), 28, "tensor 'a': data_offsets [0, 24] span 24 bytes, F32 x [2, 2] needs 16"),
        (lambda h: h["b"].update(data_offsets=[20, 24], shape=[4]), 28, "overlaps the previous tensor"),
        (
            lambda h: h.update(c={"dtype": "U8", "shape": [2], "data_offsets": [30, 32]}),
            32,
            "2 bytes at data offset 28 belong to no tensor",
        ),
        (lambda h: None, 30, "tensors cover 28 bytes but the data section has 30 (2 trailing bytes)"),
        (lambda h: h.update(c={"dtype": "F4", "shape": [3], "data_offsets": [28, 29]}), 29, "F4 x [3] is not a whole number of bytes"),
        (lambda h: h.update(__metadata__={"format": 1}), 28, "__metadata__ must map strings to strings"),
        (lambda h: h.update(c=[1, 2]), 28, "tensor 'c': entry is not an object"),
    ],
)
def test_header_defects(mutate, data_len, detail):
    header = good_header()
    mutate(header)

    assert detail in header_problem(header, data_len)


def test_header_extras_that_are_fine():
    header = dict(good_header(), __metadata__={"format": "pt"}, empty={"dtype": "BF16", "shape": [0, 5], "data_offsets": [28, 28]})

    assert header_problem(header) is None
    assert checkpoint_safetensors.safetensors_header_problem(b"{}      ", 0) is None


@pytest.mark.parametrize(
    "header_bytes, detail",
    [
        (b"\x00\x00\x00\x00", "header does not start with '{'"),
        (b'{"a": 1', "header is not valid JSON"),
        (b"{\xff}", "header is not UTF-8"),
        (b'{"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}, "a": {}}', "duplicate key 'a'"),
    ],
)
def test_header_text_defects(header_bytes, detail):
    assert detail in checkpoint_safetensors.safetensors_header_problem(header_bytes, 1)


@pytest.mark.parametrize(
    "content, detail",
    [
        (b"\x05\x00", "file is 2 bytes, shorter than the 8-byte header length"),
        (struct.pack("<Q", 200_000_000) + b"{}", "header length 200000000 is over 100000000 bytes"),
        (struct.pack("<Q", 64) + b"{}", "header length 64 runs past the end of the 10-byte file"),
        (b"\x00" * 64, "header does not start with '{'"),
    ],
)
def test_file_level_header_defects(tmp_path, content, detail):
    path = tmp_path / "x.safetensors"
    path.write_bytes(content)

    assert detail in checkpoint_safetensors.safetensors_file_problem(str(path), len(content))


def test_header_with_offsets_out_of_range_in_the_tree(ckpt):
    """The file matches its manifest entry (the source itself is broken); only the header check sees it."""
    root, manifest = ckpt
    header = {"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 64]}}
    write(root / SHARDS[0], raw_safetensors(header, b"\x00" * 16))
    manifest.update(file_manifest(root, [SHARDS[0]]))

    result = verify(root, manifest)

    assert kinds(result) == [(SHARDS[0], "header")]
    assert result["problems"][0]["detail"] == "tensor 'w': data_offsets [0, 64] end past the 16-byte data section (truncated file?)"


# --- the manifest -------------------------------------------------------------------------------


def test_manifest_normalization():
    digest = "AB" * 32
    manifest = checkpoint_manifest.normalize_manifest(
        {"files": {"./a.safetensors": {"size": "12", "sha256": "sha256:" + digest, "mtime_ns": 5}, "b/c.json": {"size": 0}}, "version": 1}
    )

    assert manifest == {"a.safetensors": {"size": 12, "sha256": "ab" * 32}, "b/c.json": {"size": 0, "sha256": None}}


def test_a_file_named_files_is_not_taken_for_a_wrapper():
    assert checkpoint_manifest.normalize_manifest({"files": {"size": 3, "sha256": None}}) == {"files": {"size": 3, "sha256": None}}


def test_manifest_digest_ignores_key_order():
    first = {"a": {"size": 1, "sha256": None}, "b": {"size": 2, "sha256": None}}
    second = {"b": {"size": 2, "sha256": None}, "a": {"size": 1, "sha256": None}}

    assert checkpoint_manifest.manifest_digest(first) == checkpoint_manifest.manifest_digest(second)
    assert checkpoint_manifest.manifest_digest(None) is None


@pytest.mark.parametrize(
    "raw, message",
    [
        ([], "must be a mapping"),
        ({}, "lists no files"),
        ({"/etc/passwd": {"size": 1}}, "relative to the checkpoint"),
        ({"../x": {"size": 1}}, "points outside the checkpoint"),
        ({"a": 5}, "must be a mapping with size and sha256"),
        ({"a": {"size": -1}}, "size must be a non-negative integer"),
        ({"a": {"size": True}}, "size must be a non-negative integer"),
        ({"a": {"size": 1, "sha256": "abc"}}, "is not 64 hex digits"),
        ({"a": {"size": 1, "sha256": 5}}, "must be a hex string or null"),
        ({"a": {"size": 1}, "./a": {"size": 1}}, "names 'a' twice"),
    ],
)
def test_bad_manifests_are_refused(raw, message):
    with pytest.raises(checkpoint_errors.CheckpointError, match=message):
        checkpoint_manifest.normalize_manifest(raw)


def test_problem_lines_and_summary():
    problems = [{"file": "f%d" % number, "kind": "missing", "detail": "gone"} for number in range(12)]

    assert checkpoint.problem_line(problems[0]) == "f0: missing: gone"
    message = checkpoint.summarize("/m", problems)
    assert message.startswith("checkpoint /m failed verification with 12 problems: f0: missing: gone; f1: missing: gone")
    assert message.endswith("f9: missing: gone (and 2 more)")


# --- the module ---------------------------------------------------------------------------------


def run_module(args, capsys):
    return module_runner.run_module(checkpoint_verify.main, args, capsys)


@pytest.fixture
def no_racy_window(monkeypatch):
    """Files in these tests are written moments before they are hashed."""
    monkeypatch.setattr(checkpoint_stamp, "RACY_WINDOW_NS", 0)


def test_module_first_run_writes_the_stamp_second_run_changes_nothing(ckpt, capsys, no_racy_window):
    root, manifest = ckpt

    rc, first = run_module({"path": str(root), "manifest": manifest}, capsys)
    rc2, second = run_module({"path": str(root), "manifest": manifest}, capsys)

    assert (rc, first["changed"], first["ok"], first["stamp_written"]) == (0, True, True, True)
    assert first["rehashed"] == sorted(SHARDS + [INDEX])
    assert (rc2, second["changed"], second["ok"], second["stamp_written"]) == (0, False, True, False)
    assert (second["rehashed"], second["skipped_hash"]) == ([], sorted(SHARDS + [INDEX]))
    assert set(second) >= {
        "ok",
        "problems",
        "summary",
        "files",
        "bytes",
        "rehashed",
        "skipped_hash",
        "stamp_written",
        "elapsed",
        "stamp_file",
    }
    assert "path" not in second and "owner" not in second  # no file attributes of the directory mixed in
    assert second["stamp_file"] == str(root / STAMP)
    assert isinstance(second["elapsed"], float)


def test_module_check_mode_reports_the_change_and_writes_nothing(ckpt, capsys, no_racy_window):
    root, manifest = ckpt

    rc, result = run_module({"path": str(root), "manifest": manifest, "_ansible_check_mode": True}, capsys)

    assert (rc, result["changed"], result["ok"], result["stamp_written"]) == (0, True, True, False)
    assert not (root / STAMP).exists()


def test_module_fails_naming_every_problem(ckpt, capsys, no_racy_window):
    root, manifest = ckpt
    flip_byte(root / SHARDS[0])
    (root / SHARDS[1]).write_bytes((root / SHARDS[1]).read_bytes()[:50])
    write(root / "model-00003-of-00003.safetensors.incomplete", b"")

    rc, result = run_module({"path": str(root), "manifest": manifest, "jobs": 1}, capsys)

    assert rc == 1
    assert result["failed"] is True
    assert result["changed"] is False
    assert result["ok"] is False
    assert result["msg"].startswith("checkpoint %s failed verification with 4 problems: " % root)
    for name in (SHARDS[0], SHARDS[1], "model-00003-of-00003.safetensors.incomplete"):
        assert name in result["msg"]
    assert [line.split(": ")[:2] for line in result["summary"]] == [
        [SHARDS[0], "sha256"],
        [SHARDS[1], "header"],
        [SHARDS[1], "size"],
        ["model-00003-of-00003.safetensors.incomplete", "incomplete"],
    ]
    assert not (root / STAMP).exists()


def test_module_returns_the_report_when_told_not_to_fail(ckpt, capsys, no_racy_window):
    root, manifest = ckpt
    (root / SHARDS[2]).unlink()

    rc, result = run_module({"path": str(root), "manifest": manifest, "fail_on_problems": False}, capsys)

    assert rc == 0
    assert "failed" not in result
    assert (result["ok"], result["changed"]) == (False, False)
    assert result["problems"] == [{"file": SHARDS[2], "kind": "missing", "detail": "listed in the weight_map of %s, not present" % INDEX}]


def test_module_reads_a_manifest_file_and_warns_about_extra_files(ckpt, tmp_path, capsys, no_racy_window, monkeypatch):
    # Recorded at the source: once a test has imported controller code, ansible-core sends
    # module warnings to its Display instead of the result.
    warnings = []
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda self, warning, **kwargs: warnings.append(warning))
    root, manifest = ckpt
    manifest_file = tmp_path / "manifest.json"
    manifest_file.write_text(json.dumps({"files": manifest}))
    write(root / "README.md", b"card")

    rc, result = run_module({"path": str(root), "manifest_file": str(manifest_file)}, capsys)

    assert (rc, result["ok"], result["changed"]) == (0, True, True)
    assert warnings == ["1 file in %s not in the manifest, left in place: README.md" % root]


def test_module_keeps_the_users_other_files_with_a_warning(ckpt, capsys, no_racy_window, monkeypatch):
    """A LoRA adapter directory and notes beside the checkpoint are no engine's weights: they stay,
    named in the warning, and the verification passes."""
    warnings = []
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda self, warning, **kwargs: warnings.append(warning))
    root, manifest = ckpt
    write(root / "notes.md", b"# what I tried\n")
    write(root / "lora/adapter_model.safetensors", safetensors_bytes({"lora_A": ("BF16", [4, 2])}))
    write(root / "lora/adapter_config.json", b"{}")

    rc, result = run_module({"path": str(root), "manifest": manifest}, capsys)

    assert (rc, result["ok"]) == (0, True), result.get("msg")
    assert result["foreign"] == ["lora/adapter_config.json", "lora/adapter_model.safetensors", "notes.md"]
    assert warnings == ["3 files in %s not in the manifest, left in place: "
                        "lora/adapter_config.json, lora/adapter_model.safetensors, notes.md" % root]


def test_module_refuses_a_stray_shard_naming_it_and_the_fix(ckpt, capsys, no_racy_window):
    root, manifest = ckpt
    write(root / "notes.md", b"mine")
    write(root / "model-00009-of-00009.safetensors", safetensors_bytes({"w": ("F32", [2])}))

    rc, result = run_module({"path": str(root), "manifest": manifest}, capsys)

    assert (rc, result["ok"]) == (1, False)
    assert "move %s out of %s" % (root / "model-00009-of-00009.safetensors", root) in result["msg"]
    assert "model-00009-of-00009.safetensors: stray: " in result["msg"]
    assert [line.split(": ")[:2] for line in result["summary"]] == [
        ["model-00009-of-00009.safetensors", "stray"], ["notes.md", "extra"]]
    assert result["foreign"] == ["notes.md"]


def test_module_extra_files_fail(ckpt, capsys, no_racy_window):
    root, manifest = ckpt
    write(root / "README.md", b"card")

    rc, result = run_module({"path": str(root), "manifest": manifest, "extra_files": "fail"}, capsys)

    assert rc == 1
    assert result["msg"].endswith("README.md: extra: 4 bytes, not in the manifest")


def test_module_missing_directory_fails_with_the_problem(tmp_path, capsys):
    rc, result = run_module({"path": str(tmp_path / "absent"), "hash": False}, capsys)

    assert rc == 1
    assert result["problems"] == [
        {"file": ".", "kind": "missing", "detail": "checkpoint directory %s does not exist" % (tmp_path / "absent")}
    ]


@pytest.mark.parametrize(
    "args, message",
    [
        ({"manifest": {"a": {"size": -1}}}, "size must be a non-negative integer"),
        ({"manifest_file": "/nonexistent/manifest.json"}, "cannot read manifest_file /nonexistent/manifest.json"),
        ({"jobs": 0}, "jobs must be 1 or more"),
        ({"manifest": {"a": {"size": 1}}, "manifest_file": "/x.json"}, "mutually exclusive"),
        ({"extra_files": "delete"}, "value of extra_files must be one of"),
    ],
)
def test_module_refuses_bad_arguments(ckpt, capsys, args, message):
    root, _manifest = ckpt

    rc, result = run_module(dict(args, path=str(root)), capsys)

    assert rc == 1
    assert message in result["msg"]


def test_module_refuses_a_manifest_file_that_is_not_json(ckpt, tmp_path, capsys):
    root, _manifest = ckpt
    (tmp_path / "m.json").write_text("size: 1")

    rc, result = run_module({"path": str(root), "manifest_file": str(tmp_path / "m.json")}, capsys)

    assert rc == 1
    assert "is not JSON" in result["msg"]

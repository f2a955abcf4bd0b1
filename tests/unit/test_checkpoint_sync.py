"""sparkctl.spark.checkpoint_sync: hub stand-in -> head directory -> worker directories, real rsync.

Everything stays on this machine: the hub is tests/lab/hub/hubstub.py on 127.0.0.1, the
workers are local directories (or `fake:` targets reached through a script standing in for ssh,
which runs the mesh key's forced command locally, as a worker's sshd would, and through it rsync's
server side or the relay). Checkpoints are a few MiB.
"""

from __future__ import annotations

import filecmp
import json
import os
import shutil
import sys
from pathlib import Path

import module_runner
import pytest
from ports import free_port, wait_listening
from ansible_collections.sparkctl.spark.plugins.module_utils import (
    checkpoint,
    checkpoint_errors,
    checkpoint_hub,
    checkpoint_lock,
    checkpoint_manifest,
    checkpoint_rsync,
    checkpoint_stamp,
    checkpoint_sync,
    checkpoint_tree,
)
from ansible_collections.sparkctl.spark.plugins.modules import checkpoint_sync as checkpoint_sync_module

from hubstub import HubStub  # tests/lab/hub, on sys.path through conftest.py
from make_checkpoint import shard_name

pytestmark = [
    pytest.mark.skipif(shutil.which("rsync") is None, reason="rsync is not installed (apt-get install rsync)"),
    pytest.mark.usefixtures("loopback_only", "hf"),
]

REPO_ID = "sparklab/tiny-llama"
TOKEN = "hf_stub_sync_0123456789"
MIB = 1 << 20
# The stand-in (conftest.py's ckpt, stub and hub) serves this checkpoint and requires TOKEN.
HUB_CHECKPOINT = {"shards": 4, "shard_bytes": MIB, "seed": 11}
HUB_TOKEN = TOKEN
OWN = (".sparkctl-", ".cache")


def tree(root: Path) -> dict[str, Path]:
    """Checkpoint files under root, own bookkeeping excluded."""
    return {
        p.relative_to(root).as_posix(): p
        for p in root.rglob("*")
        if (p.is_file() or p.is_symlink()) and not p.relative_to(root).parts[0].startswith(OWN)
    }


def assert_identical(source: Path, copy: Path) -> None:
    expected, got = tree(source), tree(copy)
    assert sorted(got) == sorted(expected), copy
    for name, path in expected.items():
        assert not got[name].is_symlink(), name
        assert filecmp.cmp(path, got[name], shallow=False), f"{copy}: {name}"


def workers(tmp_path: Path, names=("w1", "w2"), prefix=""):
    return [{"name": n, "target": f"{prefix}{tmp_path / n}/"} for n in names]


def hub_source(server, **extra):
    return {"type": "hub", "repo_id": REPO_ID, "revision": "main", "endpoint": server.url, **extra}


def make_sync(tmp_path, server, **kwargs):
    kwargs.setdefault("workers", workers(tmp_path))
    kwargs.setdefault("token", TOKEN)
    kwargs.setdefault("racy_window_ns", 0)
    source = kwargs.pop("source", None) or hub_source(server)
    return checkpoint_sync.CheckpointSync(source, str(tmp_path / "head"), **kwargs)


def content_gets(server) -> int:
    return sum(entry["gets"] for entry in server.stats()["files"].values())


# The mesh key's forced command (roles/ssh_mesh/files/sparkctl-mesh-command), as a worker runs it.
MESH_COMMAND = Path(__file__).resolve().parents[2] / "roles" / "ssh_mesh" / "files" / "sparkctl-mesh-command"

# A stand-in for ssh: drops the host and, as sshd does for the mesh key, runs the forced command
# here with the command in SSH_ORIGINAL_COMMAND and the test's directory as its one root, so every
# rsync server and relay the head starts passes the allow-list. With a `cut` file next to it holding
# a count, that many connections are cut: the server gets the first 200 kB of the sender's stream
# and is then terminated, as when a link drops mid-file.
FAKE_RSH = """#!PYTHON
import os, subprocess, sys, threading, time
here = os.path.dirname(os.path.abspath(__file__))
command = " ".join(sys.argv[2:])
forced = [sys.executable, "MESH_COMMAND", "--root", os.path.dirname(here)]
env = dict(os.environ, SSH_ORIGINAL_COMMAND=command)
try:
    left = int(open(os.path.join(here, "cut")).read().strip() or 0)
except OSError:
    left = 0
if left <= 0:
    os.execve(sys.executable, forced, env)
with open(os.path.join(here, "cut"), "w") as handle:
    handle.write(str(left - 1))
server = subprocess.Popen(forced, stdin=subprocess.PIPE, env=env)
cut = threading.Event()


def pump():
    budget = 200000
    while budget > 0:
        chunk = os.read(0, min(65536, budget))
        if not chunk:
            break
        server.stdin.write(chunk)
        server.stdin.flush()
        budget -= len(chunk)
    cut.set()


threading.Thread(target=pump, daemon=True).start()
while server.poll() is None and not cut.wait(0.02):
    pass
if server.poll() is not None:
    os._exit(server.returncode)  # a small file went through before the cut
time.sleep(0.1)
server.terminate()
server.wait()
os._exit(12)
""".replace("PYTHON", sys.executable).replace("MESH_COMMAND", str(MESH_COMMAND))


@pytest.fixture
def fake_rsh(tmp_path):
    script = tmp_path / "rsh" / "fake-ssh"
    script.parent.mkdir()
    script.write_text(FAKE_RSH)
    script.chmod(0o755)
    return script


# --- clean run, converged re-run ----------------------------------------------------------------


def test_clean_run_then_converged_rerun(hub, ckpt, tmp_path):
    first = make_sync(tmp_path, hub).run()

    head = tmp_path / "head"
    assert first["failures"] == []
    assert first["changed"] is True and first["commit"] == hub.commit
    assert_identical(ckpt, head)
    for name in ("w1", "w2"):
        assert_identical(ckpt, tmp_path / name)
        assert sorted(first["mirrored"][name]) == sorted(tree(ckpt))
        assert first["deleted"][name] == []
    assert sorted(first["downloaded"]) == sorted(tree(ckpt))
    assert first["files"] == len(tree(ckpt)) and first["bytes"] == sum(p.stat().st_size for p in tree(ckpt).values())
    assert not [p for p in head.rglob("*") if p.is_symlink()]

    # The manifest is what checkpoint_verify takes, and the stamp written here satisfies it.
    manifest = json.loads((head / ".sparkctl-manifest.json").read_text())
    assert (manifest["repo_id"], manifest["revision"], manifest["commit"]) == (REPO_ID, "main", hub.commit)
    assert manifest["total_bytes"] == first["bytes"]
    normalized = checkpoint_manifest.normalize_manifest(manifest)
    report = checkpoint.verify_checkpoint(str(head), manifest=normalized, write_stamp=False)
    assert report["ok"] and report["rehashed"] == [], report
    for name in ("w1", "w2"):
        assert checkpoint.verify_checkpoint(str(tmp_path / name), manifest=normalized, extra_files="fail")["ok"]
    progress = json.loads((head / ".sparkctl-progress.json").read_text())
    assert progress["phase"] == "done" and progress["downloaded"] == first["files"]
    assert progress["workers"]["w1"] == {"files_done": first["files"], "bytes_done": first["bytes"], "in_flight": []}

    hub.reset()
    rehash = []
    real_hash = checkpoint_sync.sha256_file
    second_sync = make_sync(tmp_path, hub)
    try:
        checkpoint_sync.sha256_file = lambda path: rehash.append(path) or real_hash(path)
        second = second_sync.run()
    finally:
        checkpoint_sync.sha256_file = real_hash
    assert second["failures"] == [] and second["changed"] is False
    assert second["downloaded"] == [] and second["mirrored"] == {"w1": [], "w2": []}
    assert second["deleted"] == {"w1": [], "w2": []}
    assert content_gets(hub) == 0 and hub.stats()["by_route"] == {"model_info": 1}
    assert rehash == [], "the stamp vouches for every head file"
    # One dry run per worker found nothing missing: no per-file rsync was started.
    assert not [e for e in second_sync.progress.events if e[1] == "mirror-start"]


# --- interrupted download -----------------------------------------------------------------------


def test_cut_mid_file_fails_the_run_and_the_rerun_fetches_only_that_file(hf, big_ckpt, tmp_path):
    shard = shard_name(2, 2)
    with HubStub(big_ckpt, REPO_ID) as server:
        # Every GET of the shard is cut at 11 MiB and the client's resume is refused: both
        # tries of the first run fail on that file.
        server.set_faults(cut_after_bytes=11 * MIB, cut_path=shard, cut_times=0,
                          fail_status=503, fail_path=shard, fail_times=0, fail_only_ranges=True)
        first = make_sync(tmp_path, server, token=None).run()
        assert len(first["failures"]) == 1 and first["failures"][0].startswith("download %s: " % shard)
        assert not (tmp_path / "head" / shard).exists()
        # The good files were still mirrored, but no final pass (no deletion on a worker while the head is incomplete).
        assert shard_name(1, 2) in first["mirrored"]["w1"]
        assert first["deleted"] == {"w1": [], "w2": []}
        assert server.stats()["files"][shard]["cuts"] == 2

        server.reset()
        second = make_sync(tmp_path, server, token=None).run()
        stats = server.stats()
    assert second["failures"] == [] and second["downloaded"] == [shard]
    assert second["mirrored"] == {"w1": [shard], "w2": [shard]}
    assert list(stats["files"]) == [shard] and stats["files"][shard]["full_gets"] == 1
    for name in ("head", "w1", "w2"):
        assert_identical(big_ckpt, tmp_path / name)
    assert not list((tmp_path / "head").rglob("*.incomplete"))


def test_bad_file_on_the_head_is_replaced(hub, ckpt, tmp_path):
    make_sync(tmp_path, hub).run()
    victim = tmp_path / "head" / shard_name(3, 4)
    data = bytearray(victim.read_bytes())
    data[-1] ^= 0xFF
    victim.write_bytes(bytes(data))  # same size; the huggingface_hub metadata still says "up to date"
    (tmp_path / "head" / "stale.bin").write_bytes(b"old")  # not the checkpoint's: stays, reported
    hub.reset()

    result = make_sync(tmp_path, hub).run()

    assert result["failures"] == [] and result["downloaded"] == [shard_name(3, 4)]
    assert result["removed_on_head"] == [] and result["foreign"] == ["stale.bin"]
    (tmp_path / "head" / "stale.bin").unlink()
    assert result["mirrored"] == {"w1": [shard_name(3, 4)], "w2": [shard_name(3, 4)]}
    for name in ("head", "w1", "w2"):
        assert_identical(ckpt, tmp_path / name)


# --- mirror -------------------------------------------------------------------------------------


def test_interrupted_mirror_is_resumed_by_a_rerun(hub, ckpt, tmp_path, fake_rsh):
    targets = workers(tmp_path, prefix="fake:")
    (fake_rsh.parent / "cut").write_text("1000")  # every connection of the first run is cut
    first = make_sync(tmp_path, hub, workers=targets, rsync_rsh=str(fake_rsh)).run()
    assert first["failures"] and all(line.startswith("worker w") for line in first["failures"])
    assert any("rsync exit" in line for line in first["failures"])
    assert first["downloaded"], "the head finished regardless"
    partial = [p for p in (tmp_path / "w1").rglob("*") if p.is_file() and p.stat().st_size < 1 * MIB and "safetensors" in p.name]
    assert partial, "the cut left partial shards on the worker (in .rsync-partial)"

    (fake_rsh.parent / "cut").write_text("0")
    hub.reset()
    second = make_sync(tmp_path, hub, workers=targets, rsync_rsh=str(fake_rsh)).run()
    assert second["failures"] == [] and second["changed"] is True
    assert second["downloaded"] == [] and content_gets(hub) == 0
    for name in ("w1", "w2"):
        assert_identical(ckpt, tmp_path / name)
        assert not list((tmp_path / name).rglob(".rsync-partial")), "partial dirs are cleaned up"


def test_truncated_and_extra_files_on_a_worker_are_repaired(hub, ckpt, tmp_path):
    make_sync(tmp_path, hub).run()
    w1 = tmp_path / "w1"
    (w1 / shard_name(2, 4)).write_bytes((ckpt / shard_name(2, 4)).read_bytes()[:1000])
    (w1 / "model-00009-of-00009.safetensors.incomplete").write_bytes(b"x")
    (w1 / "old").mkdir()
    (w1 / "old" / "shard.bin").write_bytes(b"y")
    (w1 / ".sparkctl-verified.json").write_text("{}")  # the worker's own stamp stays
    hub.reset()

    result = make_sync(tmp_path, hub).run()

    assert result["failures"] == [] and result["changed"] is True and result["downloaded"] == []
    assert result["mirrored"] == {"w1": [shard_name(2, 4)], "w2": []}
    # Files no manifest of this directory listed are someone else's: they stay.
    assert result["deleted"] == {"w1": [], "w2": []}
    assert (w1 / "model-00009-of-00009.safetensors.incomplete").read_bytes() == b"x"
    assert (w1 / "old" / "shard.bin").read_bytes() == b"y"
    for extra in ("model-00009-of-00009.safetensors.incomplete", "old/shard.bin"):
        (w1 / extra).unlink()
    assert_identical(ckpt, w1)
    assert (w1 / ".sparkctl-verified.json").exists()


def test_rsync_exit_23_fails_naming_the_worker(hub, ckpt, tmp_path):
    blocker = tmp_path / "w2" / "config.json"
    blocker.mkdir(parents=True)
    (blocker / "keep").write_text("a directory where a file must go")

    result = make_sync(tmp_path, hub, delete_extraneous=False).run()

    assert [line for line in result["failures"] if "w1" in line] == []
    (failure,) = result["failures"]
    assert failure.startswith("worker w2: config.json: rsync exit 23: ")
    assert "could not make way for new regular file: config.json" in failure
    assert_identical(ckpt, tmp_path / "w1")


def test_streaming_overlaps_download_and_mirror(hub, ckpt, tmp_path):
    hub.set_faults(throttle_bytes_per_s=6 * MIB)
    sync = make_sync(tmp_path, hub, download_workers=1)
    result = sync.run()

    assert result["failures"] == []
    events = sync.progress.events
    first_copy = min(t for t, kind, _ in events if kind == "mirror-start")
    last_download = max(t for t, kind, _ in events if kind == "download-done")
    assert first_copy < last_download, "the first worker copy starts before the last download ends"
    timings = result["timings"]
    assert timings["overlap_s"] > 0.1 and timings["download_s"] > 0.5
    assert set(timings) == {"manifest_s", "download_s", "mirror_s", "total_s", "overlap_s"}


# --- check mode, secrets, path sources ----------------------------------------------------------


def test_check_mode_reports_and_writes_nothing(hub, ckpt, tmp_path):
    result = make_sync(tmp_path, hub, check_mode=True).run()
    assert result["changed"] is True and sorted(result["downloaded"]) == sorted(tree(ckpt))
    assert sorted(result["mirrored"]["w1"]) == sorted(tree(ckpt))
    assert not (tmp_path / "head").exists() and not (tmp_path / "w1").exists()
    assert content_gets(hub) == 0

    make_sync(tmp_path, hub).run()
    (tmp_path / "w1" / shard_name(1, 4)).unlink()
    (tmp_path / "w2" / "extra.txt").write_text("x")
    snapshot = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")}
    hub.reset()
    drifted = make_sync(tmp_path, hub, check_mode=True).run()
    assert drifted["changed"] is True and drifted["downloaded"] == []
    assert drifted["mirrored"] == {"w1": [shard_name(1, 4)], "w2": []}
    assert drifted["deleted"] == {"w1": [], "w2": []}, "extra.txt is not the checkpoint's"
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")} == snapshot
    assert content_gets(hub) == 0


def run_module(args, capsys):
    return module_runner.run_module(checkpoint_sync_module.main, args, capsys, raw=True)


def test_module_never_shows_the_token(hub, tmp_path, capsys):
    args = {"source": hub_source(hub), "token": TOKEN, "dest": str(tmp_path / "head"), "workers": workers(tmp_path)}
    rc, out = run_module(args, capsys)
    result = json.loads(out)
    assert rc == 0 and result["changed"] is True and hub.stats()["auth"]["ok"] > 0
    assert TOKEN not in out
    for path in (tmp_path / "head").glob(".sparkctl-*"):
        assert TOKEN not in path.read_text(), path

    # A wrong token: the failure message does not carry it either.
    rc, out = run_module(dict(args, token="hf_wrong_secret_42"), capsys)
    assert rc == 1 and "hf_wrong_secret_42" not in out and "cannot read the file list" in json.loads(out)["msg"]


def test_path_source(ckpt, tmp_path, capsys, monkeypatch):
    source = tmp_path / "src"
    shutil.copytree(ckpt, source)
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # a path source needs the stdlib only
    args = {"source": {"type": "path", "path": str(source)}, "dest": str(tmp_path / "head"), "workers": workers(tmp_path)}

    rc, out = run_module(args, capsys)
    first = json.loads(out)
    assert rc == 0 and first["changed"] is True and first["commit"] is None
    assert sorted(first["downloaded"]) == sorted(tree(ckpt))
    for name in ("head", "w1", "w2"):
        assert_identical(ckpt, tmp_path / name)

    rc, out = run_module(args, capsys)
    assert rc == 0 and json.loads(out)["changed"] is False

    # Serving the directory in place: nothing is copied on the head, the workers are already right.
    in_place = dict(args, source={"type": "path", "path": str(tmp_path / "head")})
    rc, out = run_module(in_place, capsys)
    assert rc == 0 and json.loads(out)["changed"] is False
    manifest = json.loads((tmp_path / "head" / ".sparkctl-manifest.json").read_text())
    assert manifest["files"] == checkpoint_manifest.path_manifest(str(ckpt))[0]["files"]


def test_path_source_in_place_trusts_the_tree_it_was_hashed_from(ckpt, tmp_path, monkeypatch):
    """Serving the destination itself: the manifest was hashed from this tree a moment ago, so
    no file is hashed a second time, and the stamp takes the source stamp's entries."""
    head = tmp_path / "head"
    shutil.copytree(ckpt, head)
    (head / checkpoint_stamp.STAMP_NAME).unlink(missing_ok=True)

    def no_second_hash(self, rel):
        raise AssertionError("hashed again: %s" % rel)

    monkeypatch.setattr(checkpoint_sync.CheckpointSync, "_check_file", no_second_hash)
    result = make_sync(tmp_path, None, source={"type": "path", "path": str(head)}).run()

    assert result["failures"] == [] and result["downloaded"] == []
    manifest = json.loads((head / ".sparkctl-manifest.json").read_text())["files"]
    stamp = json.loads((head / checkpoint_stamp.STAMP_NAME).read_text())["files"]
    assert sorted(stamp) == sorted(manifest)
    assert all(stamp[rel]["sha256"] == manifest[rel]["sha256"] for rel in manifest)


# --- the rsync daemon transport -----------------------------------------------------------------
# Real `rsync --daemon` processes on 127.0.0.1, configured like the workers' sparkctl-rsyncd
# (module `checkpoint`, auth user + secrets file, hosts allow), each serving the same directory:
# two daemons stand for the two cable halves of one worker.

DAEMON_USER = "sparkctl-mirror"
DAEMON_SECRET = "daemon-secret-4f9c1e"


@pytest.fixture
def daemons(tmp_path):
    import os
    import subprocess

    served = tmp_path / "wd"
    served.mkdir()
    secrets = tmp_path / "rsyncd.secrets"
    secrets.write_text(f"{DAEMON_USER}:{DAEMON_SECRET}\n")
    secrets.chmod(0o600)
    running = []
    for index in range(2):
        port = free_port()
        log = tmp_path / f"rsyncd-{index}.log"
        conf = tmp_path / f"rsyncd-{index}.conf"
        conf.write_text(
            f"uid = {os.getuid()}\ngid = {os.getgid()}\nuse chroot = no\nnumeric ids = yes\n"
            f"log file = {log}\npid file = {tmp_path}/rsyncd-{index}.pid\n"
            f"[checkpoint]\npath = {served}\nread only = no\nwrite only = yes\nlist = no\n"
            f"auth users = {DAEMON_USER}\nsecrets file = {secrets}\nhosts allow = 127.0.0.1\nhosts deny = *\n"
        )
        process = subprocess.Popen(["rsync", "--daemon", "--no-detach", f"--config={conf}", "--address=127.0.0.1", f"--port={port}"])
        running.append((process, port, log))
    for process, port, _ in running:
        if not wait_listening(port, process):
            pytest.fail("the test rsync daemon did not start")
    yield served, [(port, log) for _, port, log in running]
    for process, _, _ in running:
        process.terminate()
        process.wait(timeout=10)


def _password_file(tmp_path, secret=DAEMON_SECRET, mode=0o600):
    path = tmp_path / "rsyncd.password"
    path.write_text(secret + "\n")
    path.chmod(mode)
    return path


def _daemon_worker(ports):
    urls = [f"rsync://{DAEMON_USER}@127.0.0.1:{port}/checkpoint/" for port, _ in ports]
    return {"name": "w1", "target": urls[0], "alternate_targets": urls[1:]}


def test_daemon_transport_spreads_streams_over_every_target(hub, ckpt, tmp_path, daemons):
    served, ports = daemons
    worker = _daemon_worker(ports)
    result = make_sync(tmp_path, hub, workers=[worker], streams=2, rsync_password=DAEMON_SECRET).run()

    assert result["failures"] == [] and result["changed"] is True
    assert_identical(ckpt, served)
    for port, log in ports:
        text = log.read_text()
        assert DAEMON_SECRET not in text
        assert f"rsync to checkpoint/ from {DAEMON_USER}@" in text, f"daemon on port {port} served no authenticated copy:\n{text}"

    hub.reset()
    again = make_sync(tmp_path, hub, workers=[worker], streams=2, rsync_password=DAEMON_SECRET).run()
    assert again["failures"] == [] and again["changed"] is False


def test_daemon_wrong_secret_fails_naming_the_worker_and_hides_the_secret(hub, ckpt, tmp_path, daemons):
    _, ports = daemons
    wrong = "not-the-daemon-secret"
    result = make_sync(tmp_path, hub, workers=[_daemon_worker(ports)], rsync_password=wrong).run()

    assert result["failures"]
    assert all(line.startswith("worker w1: ") for line in result["failures"])
    assert any("auth failed" in line for line in result["failures"])
    assert not any(wrong in line for line in result["failures"])


def test_daemon_target_needs_a_secret_and_one_transport(tmp_path):
    daemon = {"name": "w1", "target": "rsync://u@127.0.0.1:1/checkpoint/"}
    with pytest.raises(checkpoint_errors.SyncError, match="no rsync_password"):
        checkpoint_sync.CheckpointSync({"type": "path", "path": str(tmp_path)}, str(tmp_path / "d"), workers=[daemon])
    mixed = dict(daemon, alternate_targets=["u@127.0.0.1:/x/"])
    with pytest.raises(checkpoint_errors.SyncError, match="mixes rsync:// and ssh"):
        checkpoint_sync.CheckpointSync({"type": "path", "path": str(tmp_path)}, str(tmp_path / "d"), workers=[mixed], rsync_password="x")


def test_password_file_must_be_private_and_non_empty(tmp_path):
    assert checkpoint_rsync.read_password_file(str(_password_file(tmp_path))) == DAEMON_SECRET
    with pytest.raises(checkpoint_errors.SyncError, match="must be 0600"):
        checkpoint_rsync.read_password_file(str(_password_file(tmp_path, mode=0o644)))
    with pytest.raises(checkpoint_errors.SyncError, match="is empty"):
        checkpoint_rsync.read_password_file(str(_password_file(tmp_path, secret="")))
    with pytest.raises(checkpoint_errors.SyncError, match="cannot read"):
        checkpoint_rsync.read_password_file(str(tmp_path / "absent"))


def test_module_reads_the_daemon_secret_from_its_file(hub, ckpt, tmp_path, daemons, capsys):
    served, ports = daemons
    args = {
        "source": hub_source(hub),
        "token": TOKEN,
        "dest": str(tmp_path / "head"),
        "workers": [_daemon_worker(ports)],
        "rsync_password_file": str(_password_file(tmp_path)),
    }
    rc, out = run_module(args, capsys)
    assert rc == 0, out
    assert_identical(ckpt, served)
    assert DAEMON_SECRET not in out

    # A world-readable secret is refused before anything is copied.
    rc, out = run_module(dict(args, rsync_password_file=str(_password_file(tmp_path, mode=0o644))), capsys)
    assert rc == 1 and "must be 0600" in json.loads(out)["msg"] and DAEMON_SECRET not in out


def test_manifest_only_reads_sizes_and_writes_nothing(hub, ckpt, tmp_path):
    expected = sum(p.stat().st_size for p in tree(ckpt).values())

    result = make_sync(tmp_path, hub, manifest_only=True).run()

    assert result["changed"] is False and result["failures"] == []
    assert result["bytes"] == expected and result["files"] == len(tree(ckpt))
    assert not (tmp_path / "head").exists() and not (tmp_path / "w1").exists()
    assert content_gets(hub) == 0, "the hub's metadata, not the files"


def test_manifest_only_for_a_path_source_does_not_hash(ckpt, tmp_path, monkeypatch):
    def no_hashing(*args, **kwargs):
        raise AssertionError("manifest_only must not hash the source")

    monkeypatch.setattr(checkpoint_manifest, "sha256_file", no_hashing)
    source = {"type": "path", "path": str(ckpt)}
    result = checkpoint_sync.CheckpointSync(source, str(tmp_path / "dest"), manifest_only=True).run()

    assert result["bytes"] == sum(p.stat().st_size for p in tree(ckpt).values())
    assert not (tmp_path / "dest").exists()


# --- the hub out of reach -----------------------------------------------------------------------

OFFLINE = "connection refused by 127.0.0.1"


def _offline_source(server, revision="main"):
    # Any request would fail: the endpoint is a closed port (and the reason says the hub is out of reach).
    return hub_source(server, revision=revision, endpoint=f"http://127.0.0.1:{free_port()}")


def test_an_unreachable_hub_still_verifies_and_mirrors_a_complete_checkpoint(hub, ckpt, tmp_path):
    make_sync(tmp_path, hub, source=hub_source(hub, revision=hub.commit)).run()
    w1, head = tmp_path / "w1", tmp_path / "head"
    (w1 / shard_name(3, 4)).write_bytes((ckpt / shard_name(3, 4)).read_bytes()[:1000])
    manifest_before = (head / ".sparkctl-manifest.json").read_bytes()
    hub.reset()

    result = make_sync(tmp_path, hub, source=_offline_source(hub, hub.commit), hub_unreachable=OFFLINE).run()

    assert result["failures"] == [] and result["offline"] is True
    assert result["notes"] == [], "a pinned commit is exact: nothing to warn about"
    assert result["downloaded"] == [] and result["mirrored"] == {"w1": [shard_name(3, 4)], "w2": []}
    assert result["commit"] == hub.commit
    assert_identical(ckpt, w1)
    assert (head / ".sparkctl-manifest.json").read_bytes() == manifest_before
    assert hub.stats()["by_route"] == {}, "the hub was not asked"


def test_an_unreachable_hub_with_a_branch_revision_warns_that_it_may_have_moved(hub, ckpt, tmp_path):
    make_sync(tmp_path, hub).run()

    result = make_sync(tmp_path, hub, source=_offline_source(hub, "main"), hub_unreachable=OFFLINE).run()

    assert result["failures"] == [] and result["changed"] is False and result["offline"] is True
    assert len(result["notes"]) == 1
    assert "'main' may have moved" in result["notes"][0] and hub.commit in result["notes"][0]
    assert "spark_checkpoint.revision" in result["notes"][0]


def test_an_unreachable_hub_cannot_replace_a_file_the_head_lost(hub, ckpt, tmp_path):
    make_sync(tmp_path, hub).run()
    (tmp_path / "head" / shard_name(2, 4)).unlink()
    (tmp_path / "w1" / "stray.bin").write_bytes(b"x")

    result = make_sync(tmp_path, hub, source=_offline_source(hub), hub_unreachable=OFFLINE).run()

    assert result["failures"] == [
        f"download {shard_name(2, 4)}: missing or damaged on the head, and the hub is out of reach ({OFFLINE})"]
    # Never delete on a worker while the head is incomplete: the worker may hold the good copy.
    assert (tmp_path / "w1" / "stray.bin").exists() and (tmp_path / "w1" / shard_name(2, 4)).exists()


def test_an_unreachable_hub_without_an_earlier_manifest_says_the_first_download_needs_it(hub, tmp_path):
    with pytest.raises(checkpoint_errors.SyncError) as refused:
        make_sync(tmp_path, hub, source=_offline_source(hub), hub_unreachable=OFFLINE).run()
    message = str(refused.value)
    assert OFFLINE in message and "holds no manifest of an earlier run" in message
    assert f"the first download of {REPO_ID}@main needs the hub" in message
    assert not (tmp_path / "w1").exists()


@pytest.mark.parametrize("kept", [{"revision": "v2"}, {"repo_id": "sparklab/other"}, {"source": "path"}])
def test_an_unreachable_hub_refuses_the_manifest_of_another_checkpoint(hub, ckpt, tmp_path, kept):
    make_sync(tmp_path, hub).run()
    manifest_file = tmp_path / "head" / ".sparkctl-manifest.json"
    manifest_file.write_text(json.dumps(dict(json.loads(manifest_file.read_text()), **kept)))

    with pytest.raises(checkpoint_errors.SyncError) as refused:
        make_sync(tmp_path, hub, source=_offline_source(hub), hub_unreachable=OFFLINE).run()
    assert f"not {REPO_ID}@main: the new checkpoint needs the hub" in str(refused.value)


def test_an_unreachable_hub_and_a_broken_manifest_fail_naming_the_file(hub, ckpt, tmp_path):
    make_sync(tmp_path, hub).run()
    manifest_file = tmp_path / "head" / ".sparkctl-manifest.json"
    manifest_file.write_text("{not json")

    with pytest.raises(checkpoint_errors.SyncError) as refused:
        make_sync(tmp_path, hub, source=_offline_source(hub), hub_unreachable=OFFLINE).run()
    assert f"the earlier run's manifest {manifest_file} cannot be used" in str(refused.value)


def test_the_module_passes_the_reason_on_and_warns(hub, ckpt, tmp_path, capsys, monkeypatch):
    from ansible.module_utils import basic

    warned = []
    # Where a warning goes depends on whether controller code was imported in this process: catch it at the source.
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda self, warning, **kwargs: warned.append(warning))
    make_sync(tmp_path, hub).run()
    args = {"source": _offline_source(hub), "dest": str(tmp_path / "head"), "workers": workers(tmp_path),
            "hub_unreachable": OFFLINE}
    rc, out = run_module(args, capsys)
    result = json.loads(out)
    assert rc == 0, result
    assert result["offline"] is True and result["changed"] is False
    assert any("may have moved" in note for note in result["notes"])
    assert warned == result["notes"]


def test_a_path_source_ignores_the_hubs_state(ckpt, tmp_path):
    result = make_sync(tmp_path, None, source={"type": "path", "path": str(ckpt)}, hub_unreachable=OFFLINE).run()
    assert result["failures"] == [] and result["offline"] is False
    assert json.loads((tmp_path / "head" / ".sparkctl-manifest.json").read_text())["source"] == "path"


# --- only what sparkctl owns is deleted -----------------------------------------------------------

FOREIGN = {
    "notes.txt": b"a user's notes\n",
    "download.part": b"someone else's unfinished download",
    "other-model/model.safetensors": b"not a checkpoint sparkctl made" * 64,
    "other-model/model.safetensors.index.json": b'{"weight_map": {"w": "model-00001-of-00009.safetensors"}}',
}


def _plant(root: Path, files=FOREIGN) -> dict[Path, bytes]:
    planted = {}
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        planted[path] = data
    return planted


def test_files_sparkctl_does_not_own_are_left_in_place_and_reported(hub, ckpt, tmp_path):
    # A non-empty directory without a manifest on every node: adopted, nothing deleted.
    planted = {}
    for name in ("head", "w1", "w2"):
        planted.update(_plant(tmp_path / name))
    planted.update(_plant(tmp_path / "head", {"only-on-the-head.bin": b"head"}))

    first = make_sync(tmp_path, hub).run()
    hub.reset()
    second = make_sync(tmp_path, hub).run()

    for result in (first, second):
        assert result["failures"] == []
        assert result["removed_on_head"] == [] and result["deleted"] == {"w1": [], "w2": []}
        assert sorted(result["foreign"]) == sorted(list(FOREIGN) + ["only-on-the-head.bin"])
        assert any(f"5 files in {tmp_path / 'head'} are not part of the checkpoint" in note for note in result["notes"])
    for path, data in planted.items():
        assert path.read_bytes() == data, path
    assert not (tmp_path / "w1" / "only-on-the-head.bin").exists(), "the head's other files are not mirrored"
    # The workers' copies verify, their other files reported as extra, never as broken checkpoint files.
    normalized = checkpoint_manifest.normalize_manifest(json.loads((tmp_path / "head" / ".sparkctl-manifest.json").read_text()))
    report = checkpoint.verify_checkpoint(str(tmp_path / "w1"), manifest=normalized, write_stamp=False)
    assert report["ok"], report["summary"]
    assert sorted(p["file"] for p in report["problems"]) == sorted(FOREIGN) and {p["kind"] for p in report["problems"]} == {"extra"}


def test_only_files_an_earlier_manifest_listed_are_deleted(hub, ckpt, tmp_path):
    make_sync(tmp_path, hub).run()
    manifest_file = tmp_path / "head" / ".sparkctl-manifest.json"
    earlier = json.loads(manifest_file.read_text())
    earlier["files"]["sub/old-shard.safetensors"] = {"size": 3, "sha256": "0" * 64}  # an earlier revision had it
    manifest_file.write_text(json.dumps(earlier))
    planted = {}
    for name in ("head", "w1", "w2"):
        _plant(tmp_path / name, {"sub/old-shard.safetensors": b"old"})
        planted.update(_plant(tmp_path / name, {"sub/mine.txt": b"the user's"}))
    hub.reset()

    result = make_sync(tmp_path, hub).run()

    assert result["failures"] == []
    assert result["removed_on_head"] == ["sub/old-shard.safetensors"]
    assert result["deleted"] == {"w1": ["sub/old-shard.safetensors"], "w2": ["sub/old-shard.safetensors"]}
    for name in ("head", "w1", "w2"):
        assert not (tmp_path / name / "sub" / "old-shard.safetensors").exists()
    for path, data in planted.items():
        assert path.read_bytes() == data, path


# --- one transfer per directory at a time, leftovers cleaned under the lock -------------------------

HOLD_LOCK = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
os.ftruncate(fd, 0)
os.write(fd, b"%d\\n" % os.getpid())
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


def _hold_lock(dest: Path, seconds: float):
    import subprocess

    dest.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(dest / checkpoint_lock.LOCK_NAME), str(seconds)],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_a_second_transfer_fails_naming_the_holders_pid(hub, ckpt, tmp_path):
    holder = _hold_lock(tmp_path / "head", 60)
    try:
        with pytest.raises(checkpoint_errors.SyncError) as refused:
            make_sync(tmp_path, hub, lock_timeout=1).run()
    finally:
        holder.kill()
        holder.wait()
    message = str(refused.value)
    assert f"PID {holder.pid}" in message and str(tmp_path / "head" / checkpoint_lock.LOCK_NAME) in message
    assert content_gets(hub) == 0 and not (tmp_path / "w1").exists(), "nothing was transferred"


def test_a_second_transfer_waits_for_the_first(hub, ckpt, tmp_path):
    holder = _hold_lock(tmp_path / "head", 1.5)
    try:
        sync = make_sync(tmp_path, hub, lock_timeout=30)
        result = sync.run()
    finally:
        holder.wait()
    assert result["failures"] == []
    waits = [text for _, kind, text in sync.progress.events if kind == "lock-wait"]
    assert waits and f"PID {holder.pid}" in waits[0]
    assert_identical(ckpt, tmp_path / "w1")


def test_leftovers_of_a_killed_transfer_are_removed_at_start(hub, ckpt, tmp_path):
    make_sync(tmp_path, hub).run()
    head = tmp_path / "head"
    leftovers = _plant(head, {
        ".cache/huggingface/download/Zm9v.0123abcd.incomplete": b"half a shard",
        ".cache/huggingface/download/sub/YmFy.4567ef.incomplete": b"another half",
        shard_name(1, 4) + ".incomplete": b"x",
    })
    hub.reset()

    result = make_sync(tmp_path, hub).run()

    assert result["failures"] == [] and result["downloaded"] == []
    assert not [path for path in leftovers if path.exists()]
    assert sorted(result["removed_on_head"]) == sorted(p.relative_to(head).as_posix() for p in leftovers)


# --- files stored in git are content-checked --------------------------------------------------------


def test_git_stored_files_keep_their_blob_sha1_and_a_flipped_byte_is_found(hub, ckpt, tmp_path):
    make_sync(tmp_path, hub).run()
    manifest = json.loads((tmp_path / "head" / ".sparkctl-manifest.json").read_text())
    normalized = checkpoint_manifest.normalize_manifest(manifest)
    assert normalized["config.json"]["sha256"] is None
    assert normalized["config.json"]["git_blob_sha1"] == manifest["files"]["config.json"]["git_blob_sha1"]
    config = tmp_path / "w1" / "config.json"
    before = config.stat()
    data = bytearray(config.read_bytes())
    data[2] ^= 0x01
    config.write_bytes(bytes(data))
    import os

    os.utime(config, ns=(before.st_atime_ns, before.st_mtime_ns))

    report = checkpoint.verify_checkpoint(str(tmp_path / "w1"), manifest=normalized, write_stamp=False)

    assert [(p["file"], p["kind"]) for p in report["problems"]] == [("config.json", "sha256")]
    assert "git blob sha1" in report["problems"][0]["detail"]


# --- a corrupt copy in the hub cache ------------------------------------------------------------------


def test_a_corrupt_copy_in_the_hub_cache_is_downloaded_again(hub, ckpt, tmp_path):
    import huggingface_hub

    cached = Path(huggingface_hub.hf_hub_download(REPO_ID, shard_name(2, 4), revision=hub.commit, endpoint=hub.url, token=TOKEN))
    blob = cached.resolve()
    try:
        data = bytearray(blob.read_bytes())
        data[-1] ^= 0xFF
        blob.write_bytes(bytes(data))  # the cache's copy is bad; huggingface_hub copies it without a check
        hub.reset()

        result = make_sync(tmp_path, hub).run()

        assert result["failures"] == []
        assert_identical(ckpt, tmp_path / "head")
        assert_identical(ckpt, tmp_path / "w1")
    finally:
        blob.unlink()


# --- a full re-hash on request ----------------------------------------------------------------------


def test_verify_full_rehashes_the_head_despite_the_stamp(hub, ckpt, tmp_path):
    make_sync(tmp_path, hub).run()
    hub.reset()
    rehash = []
    real_hash = checkpoint_sync.sha256_file
    try:
        checkpoint_sync.sha256_file = lambda path: rehash.append(path) or real_hash(path)
        result = make_sync(tmp_path, hub, verify_full=True).run()
    finally:
        checkpoint_sync.sha256_file = real_hash
    assert result["failures"] == [] and result["changed"] is False
    lfs = [rel for rel, entry in json.loads((tmp_path / "head" / ".sparkctl-manifest.json").read_text())["files"].items()
           if entry["sha256"]]
    assert sorted(Path(p).name for p in rehash) == sorted(Path(rel).name for rel in lfs)


def test_through_the_daemon_only_what_an_earlier_manifest_listed_is_deleted(hub, ckpt, tmp_path, daemons):
    served, ports = daemons
    worker = [_daemon_worker(ports)]
    make_sync(tmp_path, hub, workers=worker, rsync_password=DAEMON_SECRET).run()
    manifest_file = tmp_path / "head" / ".sparkctl-manifest.json"
    earlier = json.loads(manifest_file.read_text())
    earlier["files"]["old-shard.safetensors"] = {"size": 3, "sha256": "0" * 64}
    manifest_file.write_text(json.dumps(earlier))
    _plant(served, {"old-shard.safetensors": b"old"})
    planted = _plant(served, FOREIGN)
    hub.reset()

    result = make_sync(tmp_path, hub, workers=worker, rsync_password=DAEMON_SECRET).run()

    assert result["failures"] == [] and result["deleted"] == {"w1": ["old-shard.safetensors"]}
    assert not (served / "old-shard.safetensors").exists()
    for path, data in planted.items():
        assert path.read_bytes() == data, path


@pytest.mark.parametrize("patterns", [None, [], "*.json", ["*.safetensors"], ["sub/"], ["sub\\"], ["*.JSON"],
                                      ["config.json", "sub/*.bin"], [".cache/*"]])
def test_the_files_a_transfer_takes_are_huggingface_hubs_allow_patterns_less_the_bookkeeping(patterns):
    from huggingface_hub.utils import filter_repo_objects

    names = ["config.json", "model-00001-of-00002.safetensors", "sub/a.bin", "sub/deeper/b.bin", "README.md",
             ".sparkctl-manifest.json", ".cache/huggingface/x.lock", "Tokenizer.JSON"]
    ignored = checkpoint_tree.compile_ignore(checkpoint_tree.DEFAULT_IGNORE)
    expected = [name for name in filter_repo_objects(names, allow_patterns=patterns or None) if not ignored(name)]
    assert checkpoint_hub.select_repo_files(names, patterns) == expected


# --- relay: a worker holding a verified file feeds the next -----------------------------------


@pytest.mark.parametrize("nodes", [2, 3, 4])
def test_relay_plan_has_the_head_send_each_file_once_and_spreads_the_sending(nodes):
    names = [f"spark{n}" for n in range(2, nodes + 1)]
    files = [(f"model-{i:05d}.safetensors", True) for i in range(12)] + [("config.json", False)]
    plan = checkpoint_sync.relay_plan(names, files)

    assert sorted(plan) == sorted(rel for rel, _ in files)
    assert plan["config.json"] == dict.fromkeys(names), "a file without a sha256 comes from the head"
    sent = dict.fromkeys(["head"] + names, 0)
    for rel, feeders in plan.items():
        assert sorted(feeders) == names, "every worker gets every file from exactly one feeder"
        # Following the feeders from each worker ends at the head: a chain, no cycle.
        for name in names:
            seen, node = set(), name
            while node is not None:
                assert node not in seen, (rel, feeders)
                seen.add(node)
                node = feeders[node]
        if rel == "config.json":
            continue
        from_head = [name for name, feeder in feeders.items() if feeder is None]
        assert len(from_head) == 1, "the head sends a relayable file once"
        for feeder in feeders.values():
            sent["head" if feeder is None else feeder] += 1
    shards = len(files) - 1
    assert sent["head"] == shards
    # Every worker but the chain's last sends each file once; the turning order spreads that evenly.
    per_worker = [sent[name] for name in names]
    assert sum(per_worker) == shards * (len(names) - 1)
    assert max(per_worker) - min(per_worker) <= 1, per_worker


def test_relay_plan_with_one_worker_is_the_head_alone():
    assert checkpoint_sync.relay_plan(["spark2"], [("a", True), ("b", True)]) == {"a": {"spark2": None}, "b": {"spark2": None}}


def relay_workers(tmp_path, names=("w1", "w2", "w3")):
    return [{"name": n, "target": f"{tmp_path / n}/", "relay_source": f"fake:{tmp_path / n}/"} for n in names]


def test_relay_mirrors_through_the_workers_and_the_head_sends_each_shard_once(hub, ckpt, tmp_path, fake_rsh):
    result = make_sync(tmp_path, hub, workers=relay_workers(tmp_path), relay=True, rsync_rsh=str(fake_rsh)).run()

    assert result["failures"] == [], result["failures"]
    for name in ("w1", "w2", "w3"):
        assert_identical(ckpt, tmp_path / name)
    manifest = json.loads((tmp_path / "head" / ".sparkctl-manifest.json").read_text())
    plan = checkpoint_sync.relay_plan(["w1", "w2", "w3"], [(rel, bool(e.get("sha256"))) for rel, e in manifest["files"].items()])
    expected = {name: {rel: feeders[name] for rel, feeders in plan.items() if feeders[name]} for name in ("w1", "w2", "w3")}
    assert result["relayed"] == expected
    assert sum(len(files) for files in expected.values()) == 2 * len([r for r in plan if any(plan[r].values())]) > 0


def test_relay_never_sends_on_a_copy_that_differs_from_the_manifest(hub, ckpt, tmp_path, fake_rsh):
    make_sync(tmp_path, hub, workers=relay_workers(tmp_path), relay=True, rsync_rsh=str(fake_rsh)).run()
    manifest = json.loads((tmp_path / "head" / ".sparkctl-manifest.json").read_text())
    plan = checkpoint_sync.relay_plan(["w1", "w2", "w3"], [(rel, bool(e.get("sha256"))) for rel, e in manifest["files"].items()])
    rel = next(r for r, feeders in plan.items() if feeders["w2"] == "w1")
    # w1's copy goes bad keeping its size and times (rsync's quick check sees nothing); w2 lost its copy.
    bad = tmp_path / "w1" / rel
    st = bad.stat()
    data = bytearray(bad.read_bytes())
    data[100] ^= 0xFF
    bad.write_bytes(bytes(data))
    os.utime(bad, ns=(st.st_atime_ns, st.st_mtime_ns))
    (tmp_path / "w2" / rel).unlink()

    sync = make_sync(tmp_path, hub, workers=relay_workers(tmp_path), relay=True, rsync_rsh=str(fake_rsh))
    result = sync.run()

    assert result["failures"] == []
    assert result["mirrored"]["w2"] == [rel] and result["relayed"]["w2"] == {}, "w2's copy came from the head"
    assert filecmp.cmp(tmp_path / "head" / rel, tmp_path / "w2" / rel, shallow=False)
    refused = [text for _t, kind, text in sync.progress.events if kind == "relay-failed"]
    assert len(refused) == 1 and "differs from the manifest's sha256" in refused[0], refused


def test_relay_needs_every_workers_source_and_the_daemon_secret(tmp_path):
    no_source = [{"name": "w1", "target": "/x/"}, {"name": "w2", "target": "/y/"}]
    with pytest.raises(checkpoint_errors.SyncError, match="relay_source"):
        checkpoint_sync.CheckpointSync({"type": "path", "path": "/x"}, str(tmp_path), workers=no_source, relay=True)
    daemons = [{"name": n, "target": f"rsync://u@10.0.0.{i}:8730/checkpoint/", "relay_source": f"s@10.0.0.{i}:/x/"}
               for i, n in enumerate(("w1", "w2"))]
    with pytest.raises(checkpoint_errors.SyncError, match="relay_password_file"):
        checkpoint_sync.CheckpointSync({"type": "path", "path": "/x"}, str(tmp_path), workers=daemons, relay=True, rsync_password="p")
    bad = [dict(w, relay_source="no-path") for w in daemons]
    with pytest.raises(checkpoint_errors.SyncError, match="not \\[user@\\]host"):
        checkpoint_sync.CheckpointSync({"type": "path", "path": "/x"}, str(tmp_path), workers=bad, relay=True,
                                       rsync_password="p", relay_password_file="/p")

"""The modules that run as root inside directories the service user can write (the kernel cache,
the checkpoints, its home) against what that account can plant there: a symlink or a hard link
to a file outside, a FIFO, a directory swapped for a link between root's look and root's act.
Each test builds the attack in tmp_path and checks that a file outside the tree (owned by another
account, 12345) keeps its owner, mode and content. The service user is `nobody` here.

Only the modules' and module_utils' own entry points are used (no module_utils/safe_walk.py), so
the same tests run against the code from before the fix (where they fail)."""

from __future__ import annotations

import json
import os
import pwd
import signal
import stat

import module_runner
import pytest
from ansible_collections.sparkctl.spark.plugins.module_utils import checkpoint_store as checkpoint_store_utils
from ansible_collections.sparkctl.spark.plugins.module_utils import files, jit_cache, node_state
from ansible_collections.sparkctl.spark.plugins.modules import checkpoint_store, node_baseline, node_teardown
from ansible_collections.sparkctl.spark.plugins.modules import jit_cache as jit_cache_module

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="files of other accounts need root")

OTHER = 12345          # the owner of the files outside the tree (root's /etc/shadow, say)
SERVICE = "nobody"     # the unprivileged account the engine runs as
LOCK = "c" * 64


@pytest.fixture
def service():
    entry = pwd.getpwnam(SERVICE)
    return entry.pw_uid, entry.pw_gid


def victim(path, content=b"secret\n"):
    """A file outside the tree, owned by OTHER, mode 0600."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    os.chown(path, OTHER, OTHER)
    os.chmod(path, 0o600)
    return path


def intact(path, content=b"secret\n"):
    st = os.lstat(path)
    return (stat.S_ISREG(st.st_mode) and (st.st_uid, st.st_gid) == (OTHER, OTHER)
            and stat.S_IMODE(st.st_mode) == 0o600 and path.read_bytes() == content)


def owned_by(path, ids):
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, *ids)
    return path


# ------------------------------------------------------------------------------ the kernel cache


@pytest.fixture
def base(tmp_path, monkeypatch):
    monkeypatch.setattr(jit_cache, "BASE_DIR", str(tmp_path / "jit"))
    return tmp_path / "jit"


def run_jit(capsys, **args):
    return module_runner.run_module(jit_cache_module.main, dict({"runtime_kind": "image", "runtime_id": LOCK,
                                                                  "owner": SERVICE}, **args), capsys)


def test_a_hard_link_to_a_file_outside_is_not_given_to_the_service_user(base, tmp_path, capsys):
    assert run_jit(capsys)[0] == 0
    outside = victim(tmp_path / "etc" / "shadow")
    os.link(outside, base / "current" / "triton" / "kernel.so")
    code, result = run_jit(capsys, state="read")
    assert intact(outside)
    assert code == 0 and str(base / ("image-" + LOCK) / "triton" / "kernel.so") not in result["given"], result


def test_the_marker_is_not_written_through_a_link_the_service_user_planted(base, tmp_path, capsys, service):
    assert run_jit(capsys)[0] == 0
    identity = base / ("image-" + LOCK)
    outside = victim(tmp_path / "etc" / "sudoers")
    (identity / jit_cache.MARKER).unlink()
    os.symlink(outside, identity / jit_cache.MARKER)
    code, result = run_jit(capsys)
    assert intact(outside)
    marker = os.lstat(identity / jit_cache.MARKER)
    assert code == 0 and result["changed"] and stat.S_ISREG(marker.st_mode) and (marker.st_uid, marker.st_gid) == service
    assert jit_cache.read_marker(str(identity))["runtime_id"] == LOCK


class Hung(Exception):
    pass


def test_a_fifo_for_a_marker_does_not_hang_root(base, tmp_path, capsys):
    assert run_jit(capsys)[0] == 0
    identity = base / ("image-" + LOCK)
    (identity / jit_cache.MARKER).unlink()
    os.mkfifo(identity / jit_cache.MARKER)

    def hung(_signum, _frame):
        raise Hung()

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(5)
    try:
        assert jit_cache.read_marker(str(identity)) is None
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_a_reset_does_not_empty_a_directory_outside_linked_in(base, tmp_path, capsys):
    assert run_jit(capsys)[0] == 0
    outside = victim(tmp_path / "srv" / "data" / "keep.bin")
    os.symlink(outside.parent, base / "current" / "vllm" / "data")
    os.symlink(outside, base / "current" / "vllm" / "file")
    code, result = run_jit(capsys, reset=True)
    assert code == 0 and result["reset"] and intact(outside)
    assert os.listdir(base / "current" / "vllm") == []


# ------------------------------------------------------------------------------ the checkpoints


def make_checkpoint(root, name, ids):
    path = owned_by(root / name, ids)
    sub = owned_by(path / "sub", ids)
    (sub / "shard.safetensors").write_bytes(b"\0" * 64)
    (path / "config.json").write_text("{}")
    manifest = {"sub/shard.safetensors": {"size": 64, "sha256": None}, "config.json": {"size": 2, "sha256": None}}
    (path / ".sparkctl-manifest.json").write_text(json.dumps(manifest))
    (path / ".sparkctl-created").write_text("Created by sparkctl\n")
    return path


def run_store(capsys, tmp_path, current, **args):
    return module_runner.run_module(checkpoint_store.main, dict(
        {"root": str(tmp_path / "models"), "current": str(tmp_path / "models" / current),
         "served_file": str(tmp_path / "lib" / "served.json"), "keep": 1, "state": "absent"}, **args), capsys)


def swap_after_listing(monkeypatch, swap):
    """The service user's move between the module's listing of a checkpoint and its removal (the
    module counts the listed files' bytes in between)."""
    listed_bytes = checkpoint_store.store.directory_bytes

    def counted_then_swapped(path, rel_files):
        total = listed_bytes(path, rel_files)
        swap(path)
        return total

    monkeypatch.setattr(checkpoint_store.store, "directory_bytes", counted_then_swapped)


def test_a_subdirectory_swapped_for_a_link_does_not_take_root_outside(tmp_path, capsys, monkeypatch, service):
    models = owned_by(tmp_path / "models", service)
    make_checkpoint(models, "a", service)
    make_checkpoint(models, "b", service)
    outside = victim(tmp_path / "etc" / "shard.safetensors")

    def swap(path):
        os.rename(os.path.join(path, "sub"), os.path.join(path, "sub.moved"))
        os.symlink(outside.parent, os.path.join(path, "sub"))

    swap_after_listing(monkeypatch, swap)
    run_store(capsys, tmp_path, "a")
    assert intact(outside)


def test_a_checkpoint_swapped_for_a_link_does_not_take_root_outside(tmp_path, capsys, monkeypatch, service):
    models = owned_by(tmp_path / "models", service)
    make_checkpoint(models, "a", service)
    make_checkpoint(models, "b", service)
    # Another account's model store holding the same names (the link's target is the account's choice).
    theirs = tmp_path / "data" / "model"
    outside = [victim(theirs / rel) for rel in (".sparkctl-created", ".sparkctl-manifest.json", "config.json",
                                                 "sub/shard.safetensors")]

    def swap(path):
        os.rename(path, path + ".moved")
        os.symlink(theirs, path)

    swap_after_listing(monkeypatch, swap)
    run_store(capsys, tmp_path, "a")
    assert all(intact(path) for path in outside)


def test_a_checkpoint_is_still_removed_when_nothing_is_planted(tmp_path, capsys, service):
    models = owned_by(tmp_path / "models", service)
    make_checkpoint(models, "a", service)
    make_checkpoint(models, "b", service)
    code, out = run_store(capsys, tmp_path, "a")
    assert code == 0 and out["removed"] == [str(models / "b")] and sorted(os.listdir(models)) == ["a"]


# ------------------------------------------------------------------------------ reads as root


def test_a_text_read_as_root_is_not_read_through_a_link_in_the_service_users_home(tmp_path, service):
    ssh = owned_by(tmp_path / "home" / "sparkctl" / ".ssh", service)
    os.chown(ssh.parent, *service)
    outside = victim(tmp_path / "etc" / "shadow")
    os.symlink(outside, ssh / "known_hosts")
    texts = node_state.read_texts([str(ssh / "known_hosts")])
    assert len(texts) == 1 and texts[0]["content"] is None and texts[0]["checksum"] is None
    assert intact(outside)


def test_a_json_file_read_as_root_is_not_read_through_a_link_the_service_user_planted(tmp_path, service):
    checkpoint = owned_by(tmp_path / "models" / "m", service)
    outside = victim(tmp_path / "root" / "config.json", b'{"auths": {"registry": "token"}}')
    os.symlink(outside, checkpoint / ".sparkctl-fit.json")
    assert files.read_json_object(str(checkpoint / ".sparkctl-fit.json")) is None


def test_an_atomic_write_as_root_does_not_follow_a_directory_link_the_service_user_planted(tmp_path, service):
    home = owned_by(tmp_path / "home" / "sparkctl", service)
    elsewhere = tmp_path / "etc"
    elsewhere.mkdir()
    os.symlink(elsewhere, home / ".ssh")
    with pytest.raises(OSError):
        files.write_file_atomic(str(home / ".ssh" / "authorized_keys"), b"ssh-ed25519 AAAA\n", 0o600)
    assert os.listdir(elsewhere) == []


# ------------------------------------------------------------------------------ the teardown

@pytest.fixture
def no_commands(monkeypatch):
    """The teardown runs no command here but dpkg's list (empty: no package to purge)."""
    from ansible.module_utils import basic

    def refuse(self, argv, **_kwargs):
        if os.path.basename(str(argv[0])) == "dpkg-query":
            return 0, "", ""
        raise AssertionError("the teardown ran %r" % (argv,))

    monkeypatch.setattr(basic.AnsibleModule, "run_command", refuse)


def run_teardown(capsys, tmp_path, baseline, **args):
    record = tmp_path / "var/lib/sparkctl/baseline.json"
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps(dict({"paths": {}, "files": {}, "parents": {}, "packages": []}, **baseline)))
    return module_runner.run_module(node_teardown.main, dict({"path": str(record), "remove_record": False}, **args), capsys)


def test_the_teardown_never_unlinks_through_a_checkpoint_directory_swapped_for_a_link(tmp_path, capsys, service, no_commands,
                                                                                      monkeypatch):
    checkpoint = owned_by(tmp_path / "srv/models/x", service)
    owned_by(checkpoint / "sub", service)
    (checkpoint / "sub" / "tokenizer.json").write_text("x")
    (checkpoint / checkpoint_store_utils.MANIFEST_NAME).write_text(
        json.dumps({"sub/tokenizer.json": {"size": 1, "sha256": None}}))
    outside = victim(tmp_path / "etc" / "tokenizer.json")
    listed = node_teardown.sparkctl_files

    def listed_then_swapped(path, manifest_path=None):
        # Between root's listing and root's unlink, the account puts a link where sub/ was.
        found = listed(path, manifest_path)
        (checkpoint / "sub" / "tokenizer.json").unlink()
        (checkpoint / "sub").rmdir()
        os.symlink(outside.parent, checkpoint / "sub")
        return found

    monkeypatch.setattr(node_teardown, "sparkctl_files", listed_then_swapped)
    code, result = run_teardown(capsys, tmp_path, {"paths": {str(checkpoint): False}},
                                purge_dirs=[{"path": str(checkpoint)}])
    assert intact(outside), result
    assert os.path.islink(checkpoint / "sub") or not os.path.lexists(checkpoint / "sub")


def test_the_teardown_does_not_rewrite_a_file_through_a_link_in_the_service_users_home(tmp_path, capsys, service, no_commands):
    home = owned_by(tmp_path / "home/sparkctl", service)
    mesh_line = b"ssh-ed25519 AAAA sparkctl-mesh@spark1\n"
    outside = victim(tmp_path / "root/.ssh/authorized_keys", b"ssh-ed25519 BBBB admin\n" + mesh_line)
    os.symlink(outside.parent, home / ".ssh")
    keys = str(home / ".ssh/authorized_keys")
    code, result = run_teardown(capsys, tmp_path, {"files": {keys: {"existed": False}}},
                                strip=[{"path": keys, "markers": ["sparkctl-mesh@"]}])
    assert intact(outside, b"ssh-ed25519 BBBB admin\n" + mesh_line), result
    assert code != 0 and "authorized_keys" in result["msg"], result


def test_the_teardown_does_not_remove_a_recorded_path_through_a_link_the_account_planted(tmp_path, capsys, service, no_commands):
    home = owned_by(tmp_path / "home/sparkctl", service)
    outside = victim(tmp_path / "etc/sparkctl-cache/secret")
    os.symlink(tmp_path / "etc", home / ".cache")
    code, result = run_teardown(capsys, tmp_path, {"paths": {str(home / ".cache/sparkctl-cache"): False}}, remove_record=True)
    assert intact(outside), result
    assert code != 0 and ".cache" in result["msg"], result


def test_the_baseline_does_not_copy_a_file_outside_through_a_link_in_the_service_users_home(tmp_path, capsys, service,
                                                                                            no_commands):
    home = owned_by(tmp_path / "home/sparkctl", service)
    owned_by(home / ".ssh", service)
    outside = victim(tmp_path / "etc/shadow")
    os.symlink(outside, home / ".ssh/authorized_keys")
    backups = tmp_path / "var/lib/sparkctl/backup"
    code, result = module_runner.run_module(node_baseline.main, {
        "path": str(tmp_path / "var/lib/sparkctl/baseline.json"), "backup_dir": str(backups),
        "files": [str(home / ".ssh/authorized_keys")]}, capsys)
    assert code == 0, result
    copied = [path.read_bytes() for path in backups.rglob("*") if path.is_file()] if backups.exists() else []
    assert b"secret\n" not in copied, copied
    assert intact(outside)
    assert result["baseline"]["files"][str(home / ".ssh/authorized_keys")]["backup"] is None, result

"""module_utils/safe_walk.py: resolving, walking, chowning, reading, writing and removing as root
inside directories another account can write, never through a link that account could plant,
including links swapped in between a look and an act (simulated by wrapping the look)."""

from __future__ import annotations

import errno
import os
import stat

import pytest
from ansible_collections.sparkctl.spark.plugins.module_utils import files, safe_walk

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="files of other accounts need root")
OTHER = 12345       # owns what lies outside the tree
SERVICE = 23456     # the unprivileged account that writes the tree


def victim(path, content=b"secret\n"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    if ROOT:
        os.chown(path, OTHER, OTHER)
    os.chmod(path, 0o600)
    return path


def intact(path, content=b"secret\n"):
    st = os.lstat(path)
    return (stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600 and path.read_bytes() == content
            and (not ROOT or (st.st_uid, st.st_gid) == (OTHER, OTHER)))


def untrusted(path):
    """A directory the service user owns."""
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, SERVICE, SERVICE)
    return path


def swap_after_look(monkeypatch, name, swap):
    """Run swap() right after safe_walk's lstat of name: the account's move between look and act."""
    look = safe_walk.lstat_at

    def looked_then_swapped(dir_fd, entry):
        st = look(dir_fd, entry)
        if entry == name and st is not None:
            swap()
        return st

    monkeypatch.setattr(safe_walk, "lstat_at", looked_then_swapped)


# ------------------------------------------------------------------------------ resolving


def test_open_dir_follows_a_link_in_a_directory_only_root_can_write(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "f").write_text("x")
    os.symlink("real", tmp_path / "link")
    fd = safe_walk.open_dir(str(tmp_path / "link"))
    try:
        assert os.listdir(fd) == ["f"]
    finally:
        os.close(fd)
    assert safe_walk.read_file(str(tmp_path / "link" / "f")) == b"x"


@needs_root
@pytest.mark.parametrize("where", ["last", "middle"])
def test_a_link_in_a_directory_another_account_owns_is_not_followed(tmp_path, where):
    outside = victim(tmp_path / "etc" / "shadow")
    home = untrusted(tmp_path / "home")
    os.symlink(outside.parent, home / "d")
    os.symlink(outside, home / "f")
    with pytest.raises(safe_walk.UnsafePathError):
        safe_walk.open_dir(str(home / "d"))
    with pytest.raises(safe_walk.UnsafePathError):
        safe_walk.read_file(str(home / ("f" if where == "last" else "d/shadow")))
    assert intact(outside)


def test_a_link_in_a_group_writable_directory_is_not_followed(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o775)
    victim(tmp_path / "etc" / "shadow")
    os.symlink(tmp_path / "etc" / "shadow", shared / "f")
    with pytest.raises(safe_walk.UnsafePathError):
        safe_walk.read_file(str(shared / "f"))


def test_open_dir_says_what_is_missing_or_not_a_directory(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileNotFoundError):
        safe_walk.open_dir(str(tmp_path / "none"))
    with pytest.raises(FileNotFoundError):
        safe_walk.open_dir(str(tmp_path / "none" / "deeper"))
    with pytest.raises(NotADirectoryError):
        safe_walk.open_dir(str(tmp_path / "file"))
    fd = safe_walk.open_dir("/")
    os.close(fd)


def test_a_link_loop_ends(tmp_path):
    os.symlink("b", tmp_path / "a")
    os.symlink("a", tmp_path / "b")
    with pytest.raises(OSError) as raised:
        safe_walk.open_dir(str(tmp_path / "a"))
    assert raised.value.errno == errno.ELOOP


def test_relative_paths_and_dot_dot_resolve_as_the_kernel_does(tmp_path, monkeypatch):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "f").write_text("x")
    monkeypatch.chdir(tmp_path)
    assert safe_walk.read_file("a/b/../f") == b"x"
    os.symlink("../f", tmp_path / "a" / "b" / "up")
    assert safe_walk.read_file(str(tmp_path / "a" / "b" / "up")) == b"x"


# ------------------------------------------------------------------------------ reading


def test_only_a_regular_file_is_read_and_dev_null_reads_empty(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(OSError) as raised:
        safe_walk.read_file(str(tmp_path / "fifo"))   # returns at once: no writer is waited for
    assert raised.value.errno == errno.EINVAL
    with pytest.raises(IsADirectoryError):
        safe_walk.read_file(str(tmp_path))
    os.symlink("/dev/null", tmp_path / "masked.conf")
    assert safe_walk.read_file(str(tmp_path / "masked.conf")) == b""
    (tmp_path / "big").write_bytes(b"x" * 100)
    with pytest.raises(OSError) as raised:
        safe_walk.read_file(str(tmp_path / "big"), limit=10)
    assert raised.value.errno == errno.EFBIG
    content, st = safe_walk.read_file_state(str(tmp_path / "big"))
    assert content == b"x" * 100 and st.st_size == 100


def test_read_file_at_never_follows_the_name(tmp_path):
    victim(tmp_path / "etc" / "shadow")
    os.symlink(tmp_path / "etc" / "shadow", tmp_path / "marker")
    fd = safe_walk.open_dir(str(tmp_path))
    try:
        with pytest.raises(safe_walk.UnsafePathError):
            safe_walk.read_file_at(fd, "marker")
    finally:
        os.close(fd)


# ------------------------------------------------------------------------------ walking


def test_walk_lists_every_entry_without_following_links(tmp_path):
    (tmp_path / "t" / "d" / "e").mkdir(parents=True)
    (tmp_path / "t" / "d" / "e" / "f").write_text("x")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret").write_text("x")
    os.symlink(tmp_path / "outside", tmp_path / "t" / "dirlink")
    os.symlink("nowhere", tmp_path / "t" / "dangling")
    fd = safe_walk.open_dir(str(tmp_path / "t"))
    try:
        seen = [(e.rel, e.is_dir(), e.is_dir_link()) for e in safe_walk.walk(fd)]
    finally:
        os.close(fd)
    assert seen == [("d", True, False), ("d/e", True, False), ("d/e/f", False, False), ("dangling", False, False),
                    ("dirlink", False, True)]


@needs_root
def test_walk_skips_a_directory_swapped_for_a_link_after_its_look(tmp_path, monkeypatch):
    tree = untrusted(tmp_path / "t")
    (tree / "d").mkdir()
    (tree / "d" / "own").write_text("x")
    victim(tmp_path / "etc" / "shadow")

    def swap():
        os.rename(tree / "d", tree / "d.moved")
        os.symlink(tmp_path / "etc", tree / "d")

    swap_after_look(monkeypatch, "d", swap)
    fd = safe_walk.open_dir(str(tree))
    try:
        rels = [e.rel for e in safe_walk.walk(fd)]
    finally:
        os.close(fd)
    # The names were read before the move: d is looked at, found a link when opened, and skipped.
    assert rels == []


# ------------------------------------------------------------------------------ chown


@needs_root
def test_chown_tree_gives_the_tree_and_nothing_outside(tmp_path):
    tree = tmp_path / "cache"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "k.so").write_text("k")
    os.mkfifo(tree / "fifo")
    outside = victim(tmp_path / "etc" / "shadow")
    outside_dir = tmp_path / "etc"
    os.chown(outside_dir, OTHER, OTHER)
    os.symlink(outside, tree / "link")
    os.symlink(outside_dir, tree / "dirlink")
    os.link(outside, tree / "sub" / "hard")
    fd = safe_walk.open_dir(str(tree))
    try:
        would, _refused = safe_walk.chown_tree(fd, SERVICE, SERVICE, str(tree), apply=False)
        assert os.lstat(tree / "sub").st_uid == 0
        given, refused = safe_walk.chown_tree(fd, SERVICE, SERVICE, str(tree))
    finally:
        os.close(fd)
    assert given == would == [str(tree)] + [str(tree / rel) for rel in ("dirlink", "fifo", "link", "sub", "sub/k.so")]
    assert refused == [(str(tree / "sub" / "hard"), "a file with other hard links")]
    for rel in ("", "sub", "sub/k.so", "fifo", "link", "dirlink"):
        assert os.lstat(tree / rel if rel else tree).st_uid == SERVICE, rel
    assert intact(outside) and os.stat(outside_dir).st_uid == OTHER


@needs_root
def test_chown_tree_never_gives_a_device_node(tmp_path):
    tree = tmp_path / "cache"
    tree.mkdir()
    try:
        os.mknod(tree / "disk", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("no mknod here")
    fd = safe_walk.open_dir(str(tree))
    try:
        given, refused = safe_walk.chown_tree(fd, SERVICE, SERVICE, str(tree))
    finally:
        os.close(fd)
    assert given == [str(tree)] and refused == [(str(tree / "disk"), "a device node")]
    assert os.lstat(tree / "disk").st_uid == 0


@needs_root
def test_chown_tree_does_not_give_a_file_swapped_for_a_hard_link_after_its_look(tmp_path, monkeypatch):
    tree = tmp_path / "cache"
    tree.mkdir()
    (tree / "k.so").write_text("k")
    os.chown(tree / "k.so", OTHER, OTHER)
    outside = victim(tmp_path / "etc" / "shadow")

    def swap():
        os.unlink(tree / "k.so")
        os.link(outside, tree / "k.so")
        os.unlink(outside)          # one name left: the check that catches it is the inode's

    swap_after_look(monkeypatch, "k.so", swap)
    fd = safe_walk.open_dir(str(tree))
    try:
        given, refused = safe_walk.chown_tree(fd, SERVICE, SERVICE, str(tree))
    finally:
        os.close(fd)
    assert refused == [(str(tree / "k.so"), "changed while it was read")] and given == [str(tree)]
    assert os.lstat(tree / "k.so").st_uid == OTHER


# ------------------------------------------------------------------------------ removing


def test_clear_dir_removes_links_not_what_they_point_to(tmp_path):
    tree = tmp_path / "cache"
    (tree / "a" / "b").mkdir(parents=True)
    (tree / "a" / "b" / "f").write_text("x")
    (tree / ".marker").write_text("keep")
    outside = victim(tmp_path / "etc" / "shadow")
    os.symlink(outside.parent, tree / "dirlink")
    os.symlink(outside, tree / "link")
    fd = safe_walk.open_dir(str(tree))
    try:
        assert safe_walk.clear_dir(fd, keep=(".marker",)) == 3
    finally:
        os.close(fd)
    assert os.listdir(tree) == [".marker"] and intact(outside)


@needs_root
def test_remove_at_unlinks_a_directory_swapped_for_a_link_instead_of_entering_it(tmp_path, monkeypatch):
    tree = untrusted(tmp_path / "cache")
    (tree / "old" / "d").mkdir(parents=True)
    outside = victim(tmp_path / "etc" / "shadow")

    def swap():
        os.rename(tree / "old" / "d", tree / "d.moved")
        os.symlink(outside.parent, tree / "old" / "d")

    swap_after_look(monkeypatch, "d", swap)
    fd = safe_walk.open_dir(str(tree))
    try:
        safe_walk.remove_at(fd, "old")
    finally:
        os.close(fd)
    assert sorted(os.listdir(tree)) == ["d.moved"] and intact(outside)


@needs_root
def test_remove_tree_does_not_follow_a_parent_the_account_swapped_for_a_link(tmp_path):
    models = untrusted(tmp_path / "models")
    outside = victim(tmp_path / "etc" / "m" / "weights")
    os.symlink(tmp_path / "etc", models / "link")
    with pytest.raises(safe_walk.UnsafePathError):
        safe_walk.remove_tree(str(models / "link" / "m"))
    assert intact(outside)
    (models / "m" / "d").mkdir(parents=True)
    safe_walk.remove_tree(str(models / "m"))
    safe_walk.remove_tree(str(models / "link"))
    assert os.listdir(models) == [] and intact(outside)


def test_unlink_rel_never_follows_a_link_on_the_way(tmp_path):
    tree = tmp_path / "ckpt"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "x").write_text("x")
    outside = victim(tmp_path / "etc" / "x")
    os.symlink(outside.parent, tree / "via")
    fd = safe_walk.open_dir(str(tree))
    try:
        with pytest.raises(NotADirectoryError):
            safe_walk.unlink_rel(fd, "via/x")
        with pytest.raises(OSError):
            safe_walk.unlink_rel(fd, "../etc/x")
        assert safe_walk.lstat_rel(fd, "sub/x").st_size == 1
        safe_walk.unlink_rel(fd, "sub/x")
    finally:
        os.close(fd)
    assert not (tree / "sub" / "x").exists() and intact(outside)


def test_prune_tree_removes_only_empty_directories_and_never_follows_a_link(tmp_path):
    tree = tmp_path / "ckpt"
    (tree / "empty" / "deeper").mkdir(parents=True)
    (tree / "full").mkdir()
    (tree / "full" / "f").write_text("x")
    (tmp_path / "elsewhere" / "empty").mkdir(parents=True)
    os.symlink(tmp_path / "elsewhere", tree / "link")
    safe_walk.prune_tree(str(tree))
    assert sorted(os.listdir(tree)) == ["full", "link"] and (tmp_path / "elsewhere" / "empty").is_dir()
    os.unlink(tree / "link")
    os.unlink(tree / "full" / "f")
    safe_walk.prune_tree(str(tree))
    assert not tree.exists()
    safe_walk.prune_tree(str(tree))     # nothing there: no error


# ------------------------------------------------------------------------------ writing


def test_write_file_at_replaces_a_link_and_leaves_its_target_alone(tmp_path):
    outside = victim(tmp_path / "etc" / "sudoers")
    os.symlink(outside, tmp_path / "marker")
    fd = safe_walk.open_dir(str(tmp_path))
    try:
        safe_walk.write_file_at(fd, "marker", b"{}\n", 0o644, (os.getuid(), os.getgid()))
    finally:
        os.close(fd)
    st = os.lstat(tmp_path / "marker")
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o644 and (tmp_path / "marker").read_bytes() == b"{}\n"
    assert intact(outside) and sorted(os.listdir(tmp_path)) == ["etc", "marker"]


@needs_root
def test_write_file_atomic_gives_the_file_its_owner_before_it_is_in_place(tmp_path):
    home = untrusted(tmp_path / "home")
    files.write_file_atomic(str(home / "authorized_keys"), b"key\n", 0o600, (SERVICE, SERVICE))
    st = os.lstat(home / "authorized_keys")
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (SERVICE, SERVICE, 0o600)
    assert os.listdir(home) == ["authorized_keys"]

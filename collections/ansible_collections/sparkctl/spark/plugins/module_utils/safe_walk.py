# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""File operations a module running as root makes inside directories another account can write.

The engine, Ray and the checkpoint mirror run as an unprivileged account whose code is not
trusted (a model's trust_remote_code runs as it). In a directory it can write (the kernel cache,
a checkpoint directory, its home) it can plant a symlink or a hard link, or swap a directory for
a symlink between root's check and root's use, so that a chown, a write, a read or an unlink by
path lands outside. Everything here acts relative to directories opened once:

* a path is resolved from ``/`` one component at a time; a symlink is followed only where the
  directory holding it is trusted (owned by root or by this process's user, and writable by no
  group and no other), so the links an administrator made keep working and none the account
  planted is ever followed (UnsafePathError, an OSError, instead);
* below an opened directory every entry is reached with ``dir_fd=`` and ``O_NOFOLLOW``
  (``os.stat(..., follow_symlinks=False)``, ``os.open(..., O_NOFOLLOW)``, ``os.unlink(name,
  dir_fd=...)``), and a file is chowned through a descriptor of the file itself, so a name that
  changes between the look and the act can only fail, never reach elsewhere.

Linux only (``O_DIRECTORY``, ``O_NOFOLLOW``, ``dir_fd``). Descriptors are closed by whoever opened
them: the functions that return one say so.
"""

from __future__ import annotations

import errno
import os
import stat

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
# A directory we only pass through or stat: O_PATH needs no read permission (a 0711 home).
_PASS_DIR = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC
# A directory we list, chown or act in.
_READ_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC
# A file we read or chown: never through a link, never blocking on a FIFO, never a terminal.
_READ_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | _CLOEXEC
_MAX_LINKS = 40
# /dev/null (a drop-in masked by a link to it reads as empty).
_DEV_NULL = os.makedev(1, 3)


class UnsafePathError(OSError):
    """A path that would be reached through a symlink another account could have placed."""


def is_trusted_dir(st):
    """Whether a directory (its stat) can only be changed by root or by this process's user:
    a symlink found in it was placed by one of them."""
    return st.st_uid in (0, os.geteuid()) and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _components(path):
    return [part for part in path.split("/") if part not in ("", ".")]


def _reopen(fd, name, flags):
    new = os.open(name, flags, dir_fd=fd)
    os.close(fd)
    return new


def _resolve(path, follow_final=True):
    """(fd of the directory holding path's last component, that name), resolved as described in
    the module's docstring; the name is None when path resolves to the directory itself ('/',
    '..'). The caller closes the fd."""
    if not os.path.isabs(path):
        path = os.path.join(os.getcwd(), path)
    parts = _components(path)
    fd = os.open("/", _PASS_DIR)
    links = 0
    try:
        while parts:
            name = parts.pop(0)
            if name == "..":
                fd = _reopen(fd, "..", _PASS_DIR)
                continue
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                if not parts:
                    return fd, name
                raise
            if stat.S_ISLNK(st.st_mode) and (parts or follow_final):
                if not is_trusted_dir(os.fstat(fd)):
                    raise UnsafePathError(errno.ELOOP, "a symlink in a directory another account can write, not followed",
                                          path)
                links += 1
                if links > _MAX_LINKS:
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
                target = os.readlink(name, dir_fd=fd)
                if target.startswith("/"):
                    fd = _reopen(fd, "/", _PASS_DIR)
                parts[0:0] = _components(target)
                continue
            if not parts:
                return fd, name
            # O_NOFOLLOW: a directory swapped for a link since the stat fails here (ELOOP/ENOTDIR).
            fd = _reopen(fd, name, _PASS_DIR)
        return fd, None
    except BaseException:
        os.close(fd)
        raise


def open_parent(path):
    """(fd of path's parent directory, path's last name), the parent resolved safely; the last
    name itself is not looked at (it may not exist, or be a link: act on it with dir_fd= and
    follow_symlinks=False). The caller closes the fd."""
    fd, name = _resolve(path, follow_final=False)
    if name is None:
        os.close(fd)
        raise OSError(errno.EINVAL, "no last name to act on", path)
    return fd, name


def open_dir(path):
    """A descriptor of the directory path (for os.scandir, fchown, dir_fd=), resolved safely.
    FileNotFoundError, NotADirectoryError (a file, or a symlink that may not be followed gives
    UnsafePathError). The caller closes it."""
    fd, name = _resolve(path)
    if name is None:
        return _reopen(fd, ".", _READ_DIR)
    try:
        return open_dir_at(fd, name)
    finally:
        os.close(fd)


def open_dir_at(dir_fd, name):
    """A descriptor of the directory name in dir_fd, never through a symlink."""
    try:
        return os.open(name, _READ_DIR, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotADirectoryError(errno.ENOTDIR, "a symlink, not a directory", name) from None
        raise


def open_file(path):
    """A read-only descriptor of the file at path, resolved safely (the last name too: a symlink
    is followed only out of a trusted directory), opened without blocking. The caller checks what
    it is (os.fstat) and closes it."""
    fd, name = _resolve(path)
    try:
        if name is None:
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        return _open_file_at(fd, name, path)
    finally:
        os.close(fd)


def _open_file_at(dir_fd, name, shown):
    try:
        return os.open(name, _READ_FILE, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafePathError(errno.ELOOP, "a symlink in a directory another account can write, not followed",
                                  shown) from None
        raise


def check_regular(fd, shown):
    """fstat of the open fd when it is a regular file, None for /dev/null (reads empty); an
    OSError naming what it is otherwise (a directory, a FIFO, a device, a socket)."""
    st = os.fstat(fd)
    if stat.S_ISREG(st.st_mode):
        return st
    if stat.S_ISCHR(st.st_mode) and st.st_rdev == _DEV_NULL:
        return None
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), shown)
    raise OSError(errno.EINVAL, "not a regular file", shown)


def _read_fd(fd, shown, limit):
    st = check_regular(fd, shown)
    if st is None:
        return b""
    if limit is not None and st.st_size > limit:
        raise OSError(errno.EFBIG, "larger than %d bytes" % limit, shown)
    chunks, size = [], 0
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if limit is not None and size > limit:
            raise OSError(errno.EFBIG, "larger than %d bytes" % limit, shown)
        chunks.append(chunk)


def read_file(path, limit=None):
    """The bytes of the regular file at path, resolved safely (open_file); /dev/null reads empty.
    OSError for anything else (a FIFO, a device, a directory, more than limit bytes)."""
    fd = open_file(path)
    try:
        return _read_fd(fd, path, limit)
    finally:
        os.close(fd)


def read_file_state(path, limit=None):
    """(bytes, stat) of the regular file at path from one safe open, as read_file reads it."""
    fd = open_file(path)
    try:
        return _read_fd(fd, path, limit), os.fstat(fd)
    finally:
        os.close(fd)


def read_file_at(dir_fd, name, limit=None):
    """The bytes of the regular file name in dir_fd, never through a symlink."""
    fd = _open_file_at(dir_fd, name, name)
    try:
        return _read_fd(fd, name, limit)
    finally:
        os.close(fd)


def lstat_at(dir_fd, name):
    """os.lstat of name in dir_fd; None when there is nothing there."""
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def lstat_path(path):
    """os.lstat of path with its parents resolved safely; None when nothing is there (its parent
    directory missing included)."""
    try:
        parent, name = open_parent(path)
    except FileNotFoundError:
        return None
    try:
        return lstat_at(parent, name)
    finally:
        os.close(parent)


def write_file_at(dir_fd, name, data, mode, owner=None):
    """Replace name in dir_fd with data (permission bits mode, owner (uid, gid) when given): a new
    file made with O_EXCL beside it, written, synced, given its mode and owner through its own
    descriptor and renamed over name. A link at name is replaced, never written through."""
    fd, temp = _make_temp(dir_fd, name)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
            os.fchmod(fd, mode)
            if owner is not None:
                os.fchown(fd, owner[0], owner[1])
        finally:
            os.close(fd)
        os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        try:
            os.unlink(temp, dir_fd=dir_fd)
        except OSError:
            pass
        raise


def _make_temp(dir_fd, name):
    """(fd, name) of a new file beside name in dir_fd, <name>.<random>.tmp, made with O_EXCL."""
    attempts = 100
    while True:
        temp = "%s.%s.tmp" % (name, os.urandom(6).hex())
        try:
            return os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC, 0o600,
                           dir_fd=dir_fd), temp
        except FileExistsError:
            attempts -= 1
            if not attempts:
                raise


def _names(fd):
    with os.scandir(fd) as entries:
        return sorted(entry.name for entry in entries)


class Entry:
    """One entry of walk(): rel (its path under the top, '/'-joined), name, parent_fd (the open
    directory holding it), st (os.lstat; for a directory the fstat of fd) and fd (a directory's
    open descriptor, None for anything else). Descriptors are valid only until the next entry."""

    __slots__ = ("rel", "name", "parent_fd", "st", "fd")

    def __init__(self, rel, name, parent_fd, st, fd):
        self.rel, self.name, self.parent_fd, self.st, self.fd = rel, name, parent_fd, st, fd

    def is_dir(self):
        return self.fd is not None

    def is_dir_link(self):
        """A symlink to a directory (os.walk lists those with the directories, never entering
        them). Stats the link's target, nothing more."""
        if not stat.S_ISLNK(self.st.st_mode):
            return False
        try:
            return stat.S_ISDIR(os.stat(self.name, dir_fd=self.parent_fd).st_mode)
        except OSError:
            return False


def walk(dir_fd, top_rel=""):
    """Every entry under the open directory dir_fd, depth first, each directory's names sorted,
    a directory before what it holds. Symlinks are entries of their own, never followed; a
    directory is entered through a descriptor opened with O_NOFOLLOW, so one swapped for a link
    after its stat is skipped, as is one that vanished or cannot be read."""
    stack = [(dir_fd, top_rel, iter(_names(dir_fd)))]
    try:
        while stack:
            fd, rel, names = stack[-1]
            name = next(names, None)
            if name is None:
                stack.pop()
                if fd != dir_fd:
                    os.close(fd)
                continue
            st = lstat_at(fd, name)
            if st is None:
                continue
            child_rel = rel + "/" + name if rel else name
            if not stat.S_ISDIR(st.st_mode):
                yield Entry(child_rel, name, fd, st, None)
                continue
            try:
                child = open_dir_at(fd, name)
            except OSError:
                continue
            try:
                entry = Entry(child_rel, name, fd, os.fstat(child), child)
                children = iter(_names(child))
            except OSError:
                os.close(child)
                continue
            stack.append((child, child_rel, children))
            yield entry
    finally:
        for fd, _rel, _names_left in stack:
            if fd != dir_fd:
                os.close(fd)


def _join(top, rel):
    return top if not rel else (top.rstrip("/") or "") + "/" + rel


def chown_tree(dir_fd, uid, gid, top, apply=True):
    """Give uid:gid every entry under the open directory dir_fd, and the directory itself, that
    another owner has, without following a link (top: the directory's path, for the answer).
    Returns (given, refused): the paths given (or, apply False, that would be), sorted, and
    [(path, why)] of entries never given away: a file with more than one hard link (its other
    names can be anywhere) and a device node."""
    given, refused = [], []
    st = os.fstat(dir_fd)
    if (st.st_uid, st.st_gid) != (uid, gid):
        given.append(top)
        if apply:
            os.fchown(dir_fd, uid, gid)
    for entry in walk(dir_fd):
        mode = entry.st.st_mode
        if (entry.st.st_uid, entry.st.st_gid) == (uid, gid):
            continue
        path = _join(top, entry.rel)
        if entry.is_dir():
            given.append(path)
            if apply:
                os.fchown(entry.fd, uid, gid)
        elif stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
            refused.append((path, "a device node"))
        elif entry.st.st_nlink > 1:
            refused.append((path, "a file with other hard links"))
        elif stat.S_ISREG(mode):
            why = _chown_file(entry, uid, gid, apply)
            if why:
                refused.append((path, why))
            else:
                given.append(path)
        else:
            # A symlink, FIFO or socket: its own inode (AT_SYMLINK_NOFOLLOW), by name in the open
            # directory; such an inode cannot be opened to act through a descriptor.
            given.append(path)
            if apply:
                os.chown(entry.name, uid, gid, dir_fd=entry.parent_fd, follow_symlinks=False)
    return sorted(given), refused


def _chown_file(entry, uid, gid, apply):
    """fchown of the regular file entry through a descriptor opened without following a link,
    checked to be the file the walk saw and to have one name; why it was not, else None."""
    try:
        fd = os.open(entry.name, _READ_FILE, dir_fd=entry.parent_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOENT, errno.ENXIO):
            return "changed while it was read"
        raise
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (entry.st.st_dev, entry.st.st_ino) or not stat.S_ISREG(st.st_mode):
            return "changed while it was read"
        if st.st_nlink > 1:
            return "a file with other hard links"
        if apply:
            os.fchown(fd, uid, gid)
        return None
    finally:
        os.close(fd)


def clear_dir(dir_fd, keep=()):
    """Remove everything in the open directory dir_fd but the names in keep, never following a
    link (a link is removed, not what it points to). Returns how many of its entries went."""
    removed = 0
    for name in _names(dir_fd):
        if name in keep:
            continue
        remove_at(dir_fd, name)
        removed += 1
    return removed


def remove_at(dir_fd, name):
    """Remove name in the open directory dir_fd: a directory with everything in it (rm -r), a
    link or file by unlinking it; nothing there is no error."""
    st = lstat_at(dir_fd, name)
    if st is None:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=dir_fd)
        return
    try:
        child = open_dir_at(dir_fd, name)
    except NotADirectoryError:
        # Swapped for a link or a file since the stat: that is what goes.
        os.unlink(name, dir_fd=dir_fd)
        return
    stack = [(child, name, dir_fd, iter(_names(child)))]
    try:
        while stack:
            fd, own_name, parent, names = stack[-1]
            entry = next(names, None)
            if entry is None:
                stack.pop()
                os.close(fd)
                os.rmdir(own_name, dir_fd=parent)
                continue
            st = lstat_at(fd, entry)
            if st is None:
                continue
            if stat.S_ISDIR(st.st_mode):
                try:
                    sub = open_dir_at(fd, entry)
                except NotADirectoryError:
                    os.unlink(entry, dir_fd=fd)
                    continue
                stack.append((sub, entry, fd, iter(_names(sub))))
            else:
                os.unlink(entry, dir_fd=fd)
    finally:
        for fd, _own, _parent, _names_left in stack:
            os.close(fd)


def remove_tree(path):
    """shutil.rmtree(path) (or os.unlink for what is not a directory) with path's parents
    resolved safely: a directory on the way the account swapped for a link is never followed."""
    parent, name = open_parent(path)
    try:
        remove_at(parent, name)
    finally:
        os.close(parent)


def _parent_at(dir_fd, rel):
    """(fd of the directory holding rel's last name, that name) for rel ('/'-separated, under the
    open directory dir_fd): every directory of rel is opened with O_NOFOLLOW from the one before.
    The fd is dir_fd itself when rel has one part: the caller closes it only when it is not."""
    parts = _components(rel)
    if not parts or ".." in parts:
        raise OSError(errno.EINVAL, "not a relative path under the directory", rel)
    fd = dir_fd
    try:
        for part in parts[:-1]:
            new = open_dir_at(fd, part)
            if fd != dir_fd:
                os.close(fd)
            fd = new
    except BaseException:
        if fd != dir_fd:
            os.close(fd)
        raise
    return fd, parts[-1]


def unlink_rel(dir_fd, rel):
    """Unlink rel ('/'-separated, under the open directory dir_fd) without following a link on the
    way (_parent_at)."""
    fd, name = _parent_at(dir_fd, rel)
    try:
        os.unlink(name, dir_fd=fd)
    finally:
        if fd != dir_fd:
            os.close(fd)


def lstat_rel(dir_fd, rel):
    """os.lstat of rel under the open directory dir_fd, reached as unlink_rel reaches it."""
    fd, name = _parent_at(dir_fd, rel)
    try:
        return os.stat(name, dir_fd=fd, follow_symlinks=False)
    finally:
        if fd != dir_fd:
            os.close(fd)


def prune_empty_dirs(dir_fd):
    """Remove the directories under the open directory dir_fd that are empty or hold only
    directories that are, deepest first, never following a link. Returns whether dir_fd's
    directory is left empty."""
    stack = [(dir_fd, None, iter(_names(dir_fd)), [False])]
    empty_top = False
    try:
        while stack:
            fd, own_name, names, kept = stack[-1]
            name = next(names, None)
            if name is None:
                stack.pop()
                if fd == dir_fd:
                    empty_top = not kept[0]
                    continue
                os.close(fd)
                parent = stack[-1]
                if kept[0]:
                    parent[3][0] = True
                    continue
                try:
                    os.rmdir(own_name, dir_fd=parent[0])
                except OSError:
                    parent[3][0] = True
                continue
            st = lstat_at(fd, name)
            if st is None:
                continue
            if not stat.S_ISDIR(st.st_mode):
                kept[0] = True
                continue
            try:
                sub = open_dir_at(fd, name)
            except OSError:
                kept[0] = True
                continue
            stack.append((sub, name, iter(_names(sub)), [False]))
    finally:
        for fd, _own, _names_left, _kept in stack:
            if fd != dir_fd:
                os.close(fd)
    return empty_top


def prune_tree(path):
    """Remove the directories under path left empty, and path when it is then empty (what
    ``for top in os.walk(path, topdown=False): rmdir(top) if empty`` did), never following a link
    below path's parent. Nothing at path, or not a directory there, is no error."""
    try:
        parent, name = open_parent(path)
    except FileNotFoundError:
        return
    try:
        try:
            fd = open_dir_at(parent, name)
        except (FileNotFoundError, NotADirectoryError):
            return
        try:
            empty = prune_empty_dirs(fd)
        finally:
            os.close(fd)
        if empty:
            os.rmdir(name, dir_fd=parent)
    finally:
        os.close(parent)

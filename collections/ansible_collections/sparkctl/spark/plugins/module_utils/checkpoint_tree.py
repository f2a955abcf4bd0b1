# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What a checkpoint directory holds, as the verification (checkpoint.py) and the transfer
(checkpoint_sync.py) both see it: the ignore rules for sparkctl's own and the hub client's
bookkeeping, a walk that never follows a symlink, and the names an unfinished download or rsync
leaves behind, with which of those are sparkctl's own to clean.
"""

from __future__ import annotations

import os
import posixpath
import re
import stat

DEFAULT_IGNORE = (".sparkctl-*", ".cache/**")

# Names download tools and copiers give a file that is still being written.
LEFTOVER_SUFFIXES = (".incomplete", ".part", ".tmp")
# rsync --delay-updates stages into .~tmp~; .rsync-partial is the conventional --partial-dir.
PARTIAL_DIRS = (".~tmp~", ".rsync-partial")
# rsync without --inplace writes into ".<name>.<6 random characters>" next to the target.
_RSYNC_TEMP_RE = re.compile(r"^\.(?P<name>.+)\.[A-Za-z0-9]{6}$")


# --- ignore patterns -----------------------------------------------------------------------------


def _glob_to_regex(pattern):
    """Translate a glob to a regex over '/'-separated paths: '*' and '?' stay within a component,
    '**' spans components, a trailing '/**' also matches the directory itself."""
    out = []
    i = 0
    length = len(pattern)
    while i < length:
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("/**", i) and i + 3 == length:
            out.append("(?:/.*)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and "]" in pattern[i + 2 :]:
            end = pattern.index("]", i + 2)
            body = pattern[i + 1 : end]
            if body.startswith("!"):
                body = "^" + body[1:]
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def compile_ignore(patterns):
    """Return a predicate rel_path -> bool.

    A pattern without '/' matches a file or directory name at any depth (like .gitignore);
    a pattern with '/' matches the path relative to the checkpoint root. Everything under an
    ignored directory is ignored.
    """
    by_name = []
    by_path = []
    for pattern in patterns or ():
        pattern = pattern.strip()
        if not pattern:
            continue
        if "/" in pattern.strip("/"):
            by_path.append(_glob_to_regex(pattern.lstrip("/")))
        else:
            by_name.append(_glob_to_regex(pattern.strip("/")))

    def ignored(rel):
        parts = rel.split("/")
        for depth in range(1, len(parts) + 1):
            prefix = "/".join(parts[:depth])
            if any(regex.match(parts[depth - 1]) for regex in by_name):
                return True
            if any(regex.match(prefix) for regex in by_path):
                return True
        return False

    return ignored


# --- tree scan -----------------------------------------------------------------------------------


class FileInfo:
    """What a regular file's lstat says; identity (ino, ctime) catches copied stamps and restored mtimes."""

    __slots__ = ("size", "mtime_ns", "ctime_ns", "ino")

    def __init__(self, size, mtime_ns, ctime_ns, ino):
        self.size = size
        self.mtime_ns = mtime_ns
        self.ctime_ns = ctime_ns
        self.ino = ino

    @classmethod
    def from_stat(cls, st):
        return cls(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)

    def key(self):
        return (self.size, self.mtime_ns, self.ctime_ns, self.ino)


class Scan:
    """Result of walking the tree: regular files, symlinks, partial dirs, other oddities."""

    def __init__(self):
        self.files = {}
        self.symlinks = {}
        self.partial_dirs = []
        self.special = {}
        self.unreadable = {}


def _special_kind(mode):
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def scan_tree(root, ignored=None, skip=None):
    """Walk root without following symlinks; ignored(rel) prunes, skip(rel) drops single files."""
    ignored = ignored or (lambda rel: False)
    skip = skip or (lambda rel: False)
    scan = Scan()
    pending = [""]
    while pending:
        rel_dir = pending.pop()
        directory = os.path.join(root, rel_dir) if rel_dir else root
        try:
            entries = sorted(os.scandir(directory), key=lambda entry: entry.name)
        except OSError as exc:
            scan.unreadable[rel_dir or "."] = exc.strerror or str(exc)
            continue
        for entry in entries:
            rel = posixpath.join(rel_dir, entry.name) if rel_dir else entry.name
            if ignored(rel) or skip(rel):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError as exc:
                scan.unreadable[rel] = exc.strerror or str(exc)
                continue
            if stat.S_ISLNK(st.st_mode):
                try:
                    scan.symlinks[rel] = os.readlink(entry.path)
                except OSError:
                    scan.symlinks[rel] = "?"
            elif stat.S_ISDIR(st.st_mode):
                if entry.name in PARTIAL_DIRS:
                    scan.partial_dirs.append(rel)
                else:
                    pending.append(rel)
            elif stat.S_ISREG(st.st_mode):
                scan.files[rel] = FileInfo.from_stat(st)
            else:
                scan.special[rel] = _special_kind(st.st_mode)
    return scan


def leftover_reason(rel, known_names):
    """Why rel looks like an unfinished transfer, or None. known_names: names expected or present in its directory."""
    name = posixpath.basename(rel)
    for suffix in LEFTOVER_SUFFIXES:
        if name.endswith(suffix):
            return "unfinished download or copy (%s file)" % suffix
    match = _RSYNC_TEMP_RE.match(name)
    if match and match.group("name") in known_names:
        return "rsync temporary file of %s" % posixpath.join(posixpath.dirname(rel), match.group("name"))
    return None


def owned_leftover(rel, manifest_names):
    """Whether rel is an unfinished copy of a file the manifest lists (its name plus a leftover
    suffix, or rsync's temporary name for it): sparkctl's own to clean. Any other leftover-looking
    file belongs to someone else (another download into a shared directory) and is left alone."""
    name = posixpath.basename(rel)
    directory = posixpath.dirname(rel)
    for suffix in LEFTOVER_SUFFIXES:
        if name.endswith(suffix) and posixpath.join(directory, name[: -len(suffix)]) in manifest_names:
            return True
    match = _RSYNC_TEMP_RE.match(name)
    return bool(match and posixpath.join(directory, match.group("name")) in manifest_names)


def manifest_dirs(manifest_names):
    """The directories that hold a manifest file ('' for the root)."""
    return set(posixpath.dirname(rel) for rel in manifest_names)

# -*- coding: utf-8 -*-
# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the teardown takes out of a directory sparkctl created that others write into as well.

Some directories sparkctl creates are not its own namespace: /etc/docker, /etc/prometheus and
/etc/grafana come with packages sparkctl installs, their daemons write data there, and the node's
administrator adds files of their own (a registry's CA under /etc/docker/certs.d, a site.ini under
/etc/grafana). Such a directory is emptied of what sparkctl writes there (named by the roles that
write it) and what its packages' daemons write there (named the same way); the packages' own files
go with their purge. Whatever is left is someone else's: it stays, with the directories that hold
it, and the teardown names it."""

from __future__ import annotations

import glob
import os

# Where dpkg lists each installed package's files (<package>.list, one absolute path a line).
DPKG_INFO = "/var/lib/dpkg/info"


def named_entries(directory, names):
    """The absolute paths of names (relative to directory: a file, or a directory with all it holds),
    refusing one that would reach outside it."""
    root = directory.rstrip("/")
    paths = []
    for name in names:
        rel = os.path.normpath(name)
        if os.path.isabs(name) or rel == "." or rel.startswith(".."):
            raise ValueError("%r is not a path inside %s" % (name, root))
        paths.append(root + "/" + rel)
    return paths


def package_files(directories, info_dir=None):
    """The files dpkg lists for any installed package under one of directories (absolute paths):
    the packages' own, which their purge removes or their staying keeps. info_dir: dpkg's (DPKG_INFO)."""
    info_dir = info_dir or DPKG_INFO
    roots = [d.rstrip("/") + "/" for d in directories]
    found = set()
    for listing in glob.glob(os.path.join(info_dir, "*.list")):
        try:
            with open(listing, errors="replace") as handle:
                for line in handle:
                    path = line.rstrip("\n")
                    if any(path.startswith(root) for root in roots):
                        found.add(path)
        except OSError:
            continue
    return found


def foreign_files(directory, rel_files, named, packaged=frozenset()):
    """Of the files under directory (rel_files: relative paths of everything that is not a directory),
    the ones neither named (absolute paths sparkctl or its packages' daemons write; a directory names
    all it holds) nor a package's (packaged: absolute paths dpkg lists), sorted: someone else's."""
    root = directory.rstrip("/")
    named = [n.rstrip("/") for n in named]
    foreign = []
    for rel in rel_files:
        path = root + "/" + rel
        if path in packaged or any(path == n or path.startswith(n + "/") for n in named):
            continue
        foreign.append(rel)
    return sorted(foreign)

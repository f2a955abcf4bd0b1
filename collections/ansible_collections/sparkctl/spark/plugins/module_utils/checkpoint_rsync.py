# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The rsync commands of the checkpoint mirror: one file, a named set of files, a relay through
another worker's copy, the head's copy of a `path` source. A target is reached over ssh or is an
rsync daemon (rsync://), whose secret goes in rsync's environment, never on a command line. The
JIT cache mirror pushes with the same Rsync.
"""

from __future__ import annotations

import os
import posixpath
import shlex
import stat
import subprocess
import threading

from ansible_collections.sparkctl.spark.plugins.module_utils.checkpoint_errors import SyncError, scrub
from ansible_collections.sparkctl.spark.plugins.module_utils.mesh_command import relay_command

PARTIAL_DIR = ".rsync-partial"
DEFAULT_RSH = "ssh -o BatchMode=yes"
STDERR_TAIL_LINES = 6
# Per-file options. --whole-file: on a fast private link the delta algorithm costs CPU and gains
# nothing; -O: directory mtimes are not synced (the head's dest changes with every progress write);
# --partial-dir keeps an interrupted file out of the live path (never --inplace).
# --timeout: a cable pulled mid-copy ends the copy (and its retry) instead of hanging the run.
RSYNC_BASE = ("-a", "-O", "--whole-file", "--partial-dir=" + PARTIAL_DIR, "--itemize-changes", "--timeout=%d" % 120)
# A target of this form is an rsync daemon (the worker's sparkctl-rsyncd socket on its link address):
# no ssh, no encryption on the private cable, authenticated with the daemon's secret.
DAEMON_PREFIX = "rsync://"
DAEMON_CONNECT_TIMEOUT_S = 20
# The exit status of a relay whose feeding worker's copy does not match the manifest (the mesh
# key's forced command, roles/ssh_mesh/files/sparkctl-mesh-command, ends its relay form with it).
RELAY_HASH_MISMATCH = 86


def parse_itemized(output):
    """rsync --itemize-changes lines -> (files copied or updated, paths deleted). Directory
    attribute lines are ignored: they carry no checkpoint content."""
    copied, deleted = [], []
    for line in output.splitlines():
        if line.startswith("*deleting "):
            deleted.append(line[len("*deleting ") :].strip())
            continue
        if len(line) < 13 or line[11] != " ":
            continue
        code, name = line[:11], line[12:]
        if code[1] != "f":
            continue
        if code[0] in "<>c" or (code[0] == "." and code[2:].strip(".")):
            copied.append(name)
    return copied, deleted


def _target_dir(target, rel_dir):
    base = target.rstrip("/")
    return base + "/" + (rel_dir + "/" if rel_dir else "")


def is_daemon_target(target):
    return target.startswith(DAEMON_PREFIX)


def _tail(text, lines=STDERR_TAIL_LINES):
    return " | ".join(line for line in text.strip().splitlines()[-lines:])


def read_password_file(path):
    """The daemon secret: the file's first line. Refused when others can read it (rsync's own rule
    for --password-file), so a secret left world-readable is noticed, not used."""
    try:
        st = os.stat(path)
        if st.st_mode & 0o077:
            raise SyncError("%s is readable by group or others (mode %o); it must be 0600" % (path, stat.S_IMODE(st.st_mode)))
        with open(path) as handle:
            password = handle.readline().strip()
    except OSError as exc:
        raise SyncError("cannot read the rsync daemon secret %s: %s" % (path, exc.strerror or exc)) from exc
    if not password:
        raise SyncError("the rsync daemon secret %s is empty" % path)
    return password


def split_relay_source(source):
    """'[user@]host:/path/' -> (ssh destination, directory); a worker's own copy of dest, as the head reaches it."""
    host, sep, path = source.partition(":")
    if not sep or not host or not path.startswith("/"):
        raise SyncError("relay_source %r is not [user@]host:/absolute/path/" % source)
    return host, path


class RsyncFailure(Exception):
    def __init__(self, returncode, stderr):
        Exception.__init__(self, "rsync exit %d: %s" % (returncode, _tail(stderr) or "(no message)"))
        self.returncode = returncode


class Rsync:
    """Builds and runs the rsync commands; `binary` is swappable for tests. An `rsync://` target
    goes to a daemon with `password` in RSYNC_PASSWORD (never on the command line); any other
    target goes over `rsh`."""

    def __init__(self, rsh=DEFAULT_RSH, binary="rsync", processes=None, password=None):
        self.rsh = rsh
        self.binary = binary
        self.password = password
        self.processes = processes if processes is not None else set()
        self.lock = threading.Lock()

    def _transport(self, target):
        if is_daemon_target(target):
            return ["--contimeout=%d" % DAEMON_CONNECT_TIMEOUT_S]
        return ["-e", self.rsh]

    def _run(self, argv, target=None, input_text=None):
        env = None
        if target is not None and is_daemon_target(target) and self.password:
            env = dict(os.environ, RSYNC_PASSWORD=self.password)
        stdin = subprocess.PIPE if input_text is not None else subprocess.DEVNULL
        # Not run_command: the streams run side by side, and a stop must reach each process.
        process = subprocess.Popen(argv, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,  # pylint: disable=ansible-bad-function
                                   universal_newlines=True, env=env)
        with self.lock:
            self.processes.add(process)
        try:
            out, err = process.communicate(input_text)
        finally:
            with self.lock:
                self.processes.discard(process)
        if process.returncode != 0:
            raise RsyncFailure(process.returncode, scrub(err, self.password))
        return out

    def copy_file(self, dest, rel, target, extra=()):
        """Copy one file to target/rel (into its directory, so an odd directory named like the file
        on the worker fails instead of swallowing the file); returns the itemized names copied."""
        rel_dir = posixpath.dirname(rel)
        argv = [self.binary] + list(RSYNC_BASE) + ["--mkpath"] + self._transport(target) + list(extra)
        argv += [os.path.join(dest, rel), _target_dir(target, rel_dir)]
        return parse_itemized(self._run(argv, target))[0]

    def tree(self, dest, target, files, delete=(), dry_run=False, whole_directories=False, within=""):
        """One pass over the checkpoint's own files, named explicitly (--files-from): whatever else
        the directories hold, on the head or the worker, is neither sent nor deleted. `delete` names
        files an earlier manifest owned that are gone from the head; rsync deletes exactly those on
        the worker (--delete-missing-args), never a file it was not given. With whole_directories
        (--force; over ssh only, the checkpoint's rsync daemon refuses it), a named directory goes
        with what it holds. `within` runs the pass in that sub-directory of both sides, the names
        relative to it. Returns (copied, deleted)."""
        argv = [self.binary] + list(RSYNC_BASE) + ["--mkpath"] + self._transport(target) + ["--from0", "--files-from=-"]
        argv.append("--delete-missing-args" if delete else "--ignore-missing-args")
        if delete and whole_directories:
            argv.append("--force")
        if dry_run:
            argv.append("--dry-run")
        argv += [posixpath.join(dest, within).rstrip("/") + "/", _target_dir(target, within)]
        names = sorted(set(files) | set(delete))
        return parse_itemized(self._run(argv, target, "".join(name + "\0" for name in names)))

    def relay_file(self, source, rel, sha256, target, extra=(), password_file=None):
        """Have a worker send its copy of one file to another worker: over ssh (rsh) to the feeding
        worker, which runs the mesh key's forced command (module_utils/mesh_command.py) in its relay
        form: it hashes its copy against the manifest's sha256 and, only if it matches, runs rsync
        to `target` (for a daemon target with the secret from `password_file` on the feeding worker,
        never on a command line); a copy that differs ends it with RELAY_HASH_MISMATCH. Returns the
        itemized names copied."""
        host, directory = split_relay_source(source)
        path = posixpath.join(directory, rel)
        options = list(RSYNC_BASE) + ["--mkpath"] + list(extra)
        if is_daemon_target(target):
            options += ["--contimeout=%d" % DAEMON_CONNECT_TIMEOUT_S] + (["--password-file=" + password_file] if password_file else [])
        elif not target.startswith("/"):
            options += ["-e", self.rsh]  # a local target (the feeding worker's own disk) needs no remote shell
        command = relay_command(sha256, path, _target_dir(target, posixpath.dirname(rel)), options)
        argv = shlex.split(self.rsh) + [host, command]
        return parse_itemized(self._run(argv))[0]

    def local_copy(self, source_file, dest, rel):
        """Head copy of a `path` source: real content (-L), into place through rsync's temp file."""
        argv = [self.binary, "-a", "-L", "--whole-file", "--mkpath", source_file, _target_dir(dest, posixpath.dirname(rel))]
        self._run(argv)

    def terminate_all(self):
        with self.lock:
            running = list(self.processes)
        for process in running:
            if process.poll() is None:
                process.terminate()

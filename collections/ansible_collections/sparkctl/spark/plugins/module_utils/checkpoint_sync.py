# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The checkpoint stage's engine: manifest, download on the head, streamed mirror to the workers.

Runs on the head node. A file is offered to every worker's mirror queue the moment it is
verified on the head (already there, or just downloaded and hashed), so mirroring overlaps the
download instead of adding to it. Each worker gets `streams` concurrent single-file rsyncs; once
every file is done, one final itemized rsync per worker removes what should not be there and
catches anything the streaming missed.

Hashing, the verification stamp and the ignore rules come from checkpoint.py (the same code
checkpoint_verify runs), so a stamp written here lets checkpoint_verify skip re-hashing and the
reverse. huggingface_hub is imported only for hub sources; `path` sources need the stdlib only.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import posixpath
import queue
import shlex
import shutil
import stat
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from fnmatch import fnmatchcase

from ansible_collections.sparkctl.spark.plugins.module_utils.checkpoint import (
    DEFAULT_IGNORE,
    STAMP_MODE,
    STAMP_NAME,
    CheckpointError,
    FileInfo,
    compile_ignore,
    git_blob_sha1_file,
    is_racy,
    manifest_digest,
    manifest_dirs,
    normalize_manifest,
    owned_leftover,
    read_stamp,
    render_stamp,
    scan_tree,
    sha256_file,
    stamp_entry,
    stamp_vouches,
)
from ansible_collections.sparkctl.spark.plugins.module_utils.files import write_file_atomic
from ansible_collections.sparkctl.spark.plugins.module_utils.mesh_command import relay_command

MANIFEST_NAME = ".sparkctl-manifest.json"
PROGRESS_NAME = ".sparkctl-progress.json"
# Hashes of a `path` source, keyed by size/mtime/ctime/inode, so an unchanged source is not re-hashed.
SOURCE_STAMP_NAME = ".sparkctl-source-stamp.json"
MANIFEST_VERSION = 1
PARTIAL_DIR = ".rsync-partial"
DEFAULT_RSH = "ssh -o BatchMode=yes"
PROGRESS_INTERVAL_S = 1.0
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
# One transfer per checkpoint directory: an flock on this file, held for the whole run, with the
# holder's PID written in it for the message a second run gives.
LOCK_NAME = ".sparkctl-transfer.lock"
LOCK_POLL_S = 0.5
# huggingface_hub's own partial downloads into a local_dir: a killed run leaves them behind, and
# nothing but a run of this module writes there (the lock keeps two runs apart).
HUB_DOWNLOAD_DIR = ".cache/huggingface/download"
HUB_INCOMPLETE_SUFFIX = ".incomplete"
# How many names a note about files that are not the checkpoint's spells out.
FOREIGN_SHOWN = 5
# The exit status of a relay whose feeding worker's copy does not match the manifest (the mesh
# key's forced command, roles/ssh_mesh/files/sparkctl-mesh-command, ends its relay form with it).
RELAY_HASH_MISMATCH = 86


class SyncError(Exception):
    """The request cannot be carried out at all (bad source, hub unreachable, client missing)."""


def _scrub(text, secret):
    text = str(text)
    if secret:
        text = text.replace(secret, "********")
    return text


class DirectoryLock:
    """An exclusive flock on <dest>/.sparkctl-transfer.lock for the whole transfer. A second run
    waits up to `timeout` seconds (calling on_wait(pid) once), then fails naming the holder's PID:
    an interrupted run's background job may still be writing, and two transfers into one
    directory would delete and download each other's files."""

    def __init__(self, dest, timeout, on_wait=None, clock=time.monotonic, sleep=time.sleep):
        self.path = os.path.join(dest, LOCK_NAME)
        self.timeout = timeout
        self.on_wait = on_wait
        self.clock = clock
        self.sleep = sleep
        self.fd = None

    def _holder(self):
        try:
            with open(self.path) as handle:
                return handle.read().strip() or "unknown"
        except OSError:
            return "unknown"

    def acquire(self):
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        deadline = self.clock() + max(0, self.timeout)
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    os.close(fd)
                    raise
            holder = self._holder()
            if self.clock() >= deadline:
                os.close(fd)
                raise SyncError(
                    "another checkpoint transfer into this directory is running (PID %s holds %s) and did not end within "
                    "%d s; wait for it to finish (a re-run after an interrupted run waits for its background job) or stop "
                    "that process, then run again" % (holder, self.path, self.timeout))
            if not told and self.on_wait:
                self.on_wait(holder)
                told = True
            self.sleep(LOCK_POLL_S)
        os.ftruncate(fd, 0)
        os.write(fd, b"%d\n" % os.getpid())
        self.fd = fd
        return self

    def release(self):
        if self.fd is not None:
            os.close(self.fd)  # closing the descriptor drops the flock
            self.fd = None


def remove_hub_leftovers(dest):
    """huggingface_hub's unfinished downloads (<dest>/.cache/huggingface/download/**/*.incomplete),
    left by a killed run; returns the removed paths relative to dest."""
    removed = []
    top = os.path.join(dest, HUB_DOWNLOAD_DIR)
    for directory, _dirs, names in os.walk(top):
        for name in sorted(names):
            if name.endswith(HUB_INCOMPLETE_SUFFIX):
                path = os.path.join(directory, name)
                if os.path.isfile(path) and not os.path.islink(path):
                    os.unlink(path)
                    removed.append(os.path.relpath(path, dest).replace(os.sep, "/"))
    return sorted(removed)


def foreign_note(dest, foreign):
    """The warning about files in the directory that are not the checkpoint's."""
    shown = ", ".join(foreign[:FOREIGN_SHOWN]) + (" and %d more" % (len(foreign) - FOREIGN_SHOWN) if len(foreign) > FOREIGN_SHOWN else "")
    return ("%d file%s in %s %s not part of the checkpoint and no earlier sparkctl manifest of it listed %s: left in place "
            "(%s). Keep other data out of spark_checkpoint_dir, or give the checkpoint a directory of its own."
            % (len(foreign), "" if len(foreign) == 1 else "s", dest, "is" if len(foreign) == 1 else "are",
               "it" if len(foreign) == 1 else "them", shown))


# --- manifest ------------------------------------------------------------------------------------


def select_repo_files(names, allow_patterns=None):
    """The repo files a transfer takes, in the order given: huggingface_hub's allow_patterns
    filter (`filter_repo_objects`: case-sensitive fnmatch, a pattern ending in '/' takes the
    directory's files; none means all), less this module's and huggingface_hub's own
    bookkeeping (DEFAULT_IGNORE). The transfer builds its manifest from these and the stage's
    no-op check compares a kept manifest's files with them, so both agree on what is wanted."""
    patterns = allow_patterns or None
    if isinstance(patterns, str):
        patterns = [patterns]
    if patterns is not None:
        patterns = [p.replace("\\", "/") for p in patterns]
        patterns = [p + "*" if p.endswith("/") else p for p in patterns]
    ignored = compile_ignore(DEFAULT_IGNORE)
    chosen = []
    for name in names:
        path = name.replace("\\", "/")
        if patterns is not None and not any(fnmatchcase(path, pattern) for pattern in patterns):
            continue
        if not ignored(name):  # would collide with this module's or huggingface_hub's bookkeeping
            chosen.append(name)
    return chosen


def hub_manifest(repo_id, revision, allow_patterns=None, endpoint=None, token=None, hub=None):
    """The files of repo_id at revision (filtered like huggingface_hub's allow_patterns) with sizes,
    LFS sha256 (None for files stored in git) and git blob ids, and the resolved commit."""
    hub = hub or import_hub()
    info = hub.HfApi(endpoint=endpoint).model_info(repo_id, revision=revision, files_metadata=True, token=token)
    wanted = set(select_repo_files([sibling.rfilename for sibling in info.siblings], allow_patterns))
    files = {}
    for sibling in info.siblings:
        rel = sibling.rfilename
        if rel not in wanted:
            continue
        if sibling.size is None:
            raise SyncError("the hub gave no size for %s (model_info without files_metadata?)" % rel)
        lfs = sibling.lfs
        files[rel] = {
            "size": int(sibling.size),
            "sha256": lfs.sha256 if lfs is not None else None,
            "git_blob_sha1": None if lfs is not None else sibling.blob_id,
        }
    if not files:
        raise SyncError("%s@%s has no files matching allow_patterns %s" % (repo_id, revision, allow_patterns))
    return build_manifest(files, repo_id=repo_id, revision=revision, commit=info.sha, source="hub")


def kept_manifest_refusal(manifest, source):
    """Why the manifest an earlier run kept is not of this hub source (repo and revision as
    asked), or None when it is."""
    where = "%s@%s" % (source["repo_id"], source["revision"])
    kept = (manifest.get("source"), manifest.get("repo_id"), manifest.get("revision"))
    if kept != ("hub", source["repo_id"], source["revision"]):
        return "the earlier run's manifest is of %s@%s, not %s" % (kept[1] or manifest.get("path") or "?", kept[2] or "?", where)
    return None


def offline_notes(manifest, source, hub_unreachable):
    """What to say when the hub is out of reach and the kept manifest stands in for it: a branch
    or tag (anything but the commit the manifest names) may have moved on the hub since."""
    if manifest.get("commit") == source["revision"]:
        return []
    return ["the hub is out of reach (%s): %s@%s is checked against the commit %s of the earlier run; the branch or tag "
            "%r may have moved on the hub since (pin a commit in spark_checkpoint.revision to make this exact)"
            % (hub_unreachable, source["repo_id"], source["revision"], manifest.get("commit"), source["revision"])]


def kept_manifest_standing(manifest, source, hub_commit=None, hub_files=None, hub_unreachable=None):
    """Whether the manifest an earlier run kept is the one a transfer would build now, so a node
    whose copy verifies against it holds the checkpoint this run asks for.

    source is the transfer's (type hub or path); with the hub in reach, hub_commit and hub_files
    are the hub's answer for the revision (hub_access: the commit it resolves to and its file
    names), and the kept manifest stands only for that same commit and the same files after
    allow_patterns; with the hub out of reach (hub_unreachable, the reason) it stands for the same
    repo and revision, as the transfer's own offline run takes it (a branch may have moved: a
    note says so). A path source is never vouched for here: only reading the source tells.
    Returns {current: bool, reason: why not (empty when current), notes: [lines to show]}."""

    def no(reason):
        return {"current": False, "reason": reason, "notes": []}

    if not isinstance(source, dict) or source.get("type") != "hub":
        return no("a path source is read again by the transfer")
    if not manifest:
        return no("no manifest of an earlier run")
    try:
        files = normalize_manifest(dict(manifest))
    except (CheckpointError, TypeError, ValueError, AttributeError) as exc:
        return no("the earlier run's manifest cannot be used: %s" % exc)
    refusal = kept_manifest_refusal(manifest, source)
    if refusal:
        return no(refusal)
    if hub_unreachable:
        return {"current": True, "reason": "", "notes": offline_notes(manifest, source, hub_unreachable)}
    if not hub_commit or hub_files is None:
        return no("the hub named no commit or files for %s@%s" % (source["repo_id"], source["revision"]))
    if hub_commit != manifest.get("commit"):
        return no("%s@%s is commit %s on the hub, the earlier run's manifest is of %s"
                  % (source["repo_id"], source["revision"], hub_commit, manifest.get("commit")))
    wanted = set(select_repo_files(hub_files, source.get("allow_patterns")))
    if wanted != set(files):
        return no("the hub's files after allow_patterns differ from the earlier run's manifest (%d wanted, %d kept)"
                  % (len(wanted), len(files)))
    return {"current": True, "reason": "", "notes": []}


def build_manifest(files, repo_id=None, revision=None, commit=None, source=None, path=None):
    manifest = {
        "version": MANIFEST_VERSION,
        "source": source,
        "repo_id": repo_id,
        "revision": revision,
        "commit": commit,
        "total_bytes": sum(entry["size"] for entry in files.values()),
        "files": dict(sorted(files.items())),
    }
    if path is not None:
        manifest["path"] = path
    normalize_manifest(manifest)  # proves checkpoint_verify accepts it
    return manifest


def path_manifest(source, source_stamp_file=None, jobs=2, write_stamp=True, racy_window_ns=None, clock_ns=time.time_ns):
    """Walk a directory on the head and hash its files, trusting a previous hash when size, mtime,
    ctime and inode are unchanged. Symlinks to regular files are followed (the served tree gets
    their content); anything else that is not a regular file is refused."""
    source = os.path.abspath(source)
    if not os.path.isdir(source):
        raise SyncError("source path %s is not a directory" % source)
    ignored = compile_ignore(DEFAULT_IGNORE)
    scan = scan_tree(source, ignored)
    if scan.unreadable:
        raise SyncError("cannot read %s under %s" % (", ".join(sorted(scan.unreadable)), source))
    if scan.special:
        raise SyncError("not regular files under %s: %s" % (source, ", ".join(sorted(scan.special))))
    infos = dict(scan.files)
    real = {}
    for rel in scan.symlinks:
        target = os.path.realpath(os.path.join(source, rel))
        try:
            st = os.stat(target)
        except OSError as exc:
            raise SyncError("symlink %s in %s is broken: %s" % (rel, source, exc.strerror or exc)) from exc
        if not stat.S_ISREG(st.st_mode):
            raise SyncError("symlink %s in %s does not point to a regular file" % (rel, source))
        infos[rel] = FileInfo.from_stat(st)
        real[rel] = target
    if scan.partial_dirs:
        raise SyncError("source %s holds transfer leftovers: %s" % (source, ", ".join(scan.partial_dirs)))
    if not infos:
        raise SyncError("source path %s holds no files" % source)

    stamp = read_stamp(source_stamp_file) if source_stamp_file else None
    known = (stamp or {}).get("files", {})
    files, to_hash = {}, []
    for rel, info in sorted(infos.items()):
        entry = known.get(rel)
        recorded = entry and (entry.get("size"), entry.get("mtime_ns"), entry.get("ctime_ns"), entry.get("ino"))
        if entry and recorded == info.key() and entry.get("sha256"):
            files[rel] = {"size": info.size, "sha256": entry["sha256"]}
        else:
            to_hash.append(rel)

    def task(rel):
        started = clock_ns()
        digest, after = sha256_file(real.get(rel, os.path.join(source, rel)))
        return rel, digest, after, started

    stamp_files = dict((rel, known[rel]) for rel in files)
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for rel, digest, after, started in pool.map(task, sorted(to_hash, key=lambda r: -infos[r].size)):
            if after.key() != infos[rel].key():
                raise SyncError("%s changed while it was hashed (is something still writing %s?)" % (rel, source))
            files[rel] = {"size": after.size, "sha256": digest}
            if not is_racy(after.ctime_ns, started, racy_window_ns):
                stamp_files[rel] = stamp_entry(after, digest)
    if source_stamp_file and write_stamp:
        data = render_stamp(dict(sorted(stamp_files.items())), "source:" + source)
        _write_if_changed(source_stamp_file, data)
    return build_manifest(files, source="path", path=source), real


def path_sizes_manifest(source):
    """The files of a source directory with their sizes only (sha256 None): what the transfer
    would copy, without hashing. Symlinks to regular files count with their target's size."""
    if not os.path.isdir(source):
        raise SyncError("source path %s is not a directory" % source)
    scan = scan_tree(source, compile_ignore(DEFAULT_IGNORE))
    files = dict((rel, {"size": info.size, "sha256": None}) for rel, info in scan.files.items())
    for rel in scan.symlinks:
        try:
            files[rel] = {"size": os.stat(os.path.join(source, rel)).st_size, "sha256": None}
        except OSError as exc:
            raise SyncError("symlink %s in %s is broken: %s" % (rel, source, exc.strerror or exc)) from exc
    if not files:
        raise SyncError("source path %s holds no files" % source)
    return {"source": "path", "path": source, "commit": None, "files": files, "total_bytes": sum(f["size"] for f in files.values())}


def _write_if_changed(path, data):
    try:
        with open(path, "rb") as handle:
            if handle.read() == data:
                return False
    except OSError:
        pass
    write_file_atomic(path, data, STAMP_MODE)
    return True


def render_manifest(manifest):
    return (json.dumps(manifest, sort_keys=True, indent=1) + "\n").encode("utf-8")


def import_hub():
    # Xet off (roles/checkpoint/README.md, "Xet"): every byte comes over the hub's HTTP resolve
    # route, the path preflight probes, straight into the checkpoint directory. hf_xet would
    # fetch from other hosts and keep a chunk cache under HF_HOME/xet, outside the directory
    # and its disk check. The variable is read at import; the constant covers an earlier import.
    os.environ["HF_HUB_DISABLE_XET"] = "1"
    try:
        import huggingface_hub
        # The package's lazy attributes do not include its submodules: import it by name.
        import huggingface_hub.constants
    except ImportError as exc:
        raise SyncError(
            "hub sources need huggingface_hub in the Python that runs this module (%s); point "
            "ansible_python_interpreter at the tools venv: %s" % (sys.executable, exc)
        ) from exc
    huggingface_hub.constants.HF_HUB_DISABLE_XET = True
    try:
        huggingface_hub.utils.disable_progress_bars()
    except AttributeError:
        pass
    return huggingface_hub


# --- rsync ---------------------------------------------------------------------------------------


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


def relay_plan(workers, files):
    """Who feeds whom, per file: {rel: {worker: feeder}}, the feeder a worker's name or None (the head).

    With one head sending, the head's link carries every byte once per worker. Relayed, a file
    goes from the head to one worker and on along a chain, each worker sending it to the next
    once its own copy verifies, so the head sends it once. The chain's order turns by one worker
    per file, so every worker is first (fed by the head) for about 1/n of the files and last
    (feeding no one) for as many: the workers' sending is spread evenly. `files`: (rel, relayable)
    pairs; a file that cannot be verified on a worker before it is sent on (no sha256 in the
    manifest) and every file of a cluster with one worker come from the head."""
    workers = list(workers)
    plan = {}
    turn = 0
    for rel, relayable in sorted(files):
        if not relayable or len(workers) < 2:
            plan[rel] = dict((name, None) for name in workers)
            continue
        start = turn % len(workers)
        chain = workers[start:] + workers[:start]
        turn += 1
        plan[rel] = dict((name, chain[index - 1] if index else None) for index, name in enumerate(chain))
    return plan


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
            raise RsyncFailure(process.returncode, _scrub(err, self.password))
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


# --- bookkeeping ---------------------------------------------------------------------------------


class Activity:
    """Counts running downloads and mirror copies; accumulates the time both kinds ran at once."""

    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.lock = threading.Lock()
        self.running = {"download": 0, "mirror": 0}
        self.first = {}
        self.last = {}
        self.overlap = 0.0
        self._since = None

    def _account(self, now):
        if self._since is not None:
            self.overlap += now - self._since
        self._since = now if self.running["download"] and self.running["mirror"] else None

    def start(self, kind):
        with self.lock:
            now = self.clock()
            self.first.setdefault(kind, now)
            self.running[kind] += 1
            self._account(now)

    def stop(self, kind):
        with self.lock:
            now = self.clock()
            self.last[kind] = now
            self.running[kind] -= 1
            self._account(now)

    def span(self, kind):
        if kind not in self.first:
            return 0.0
        return max(0.0, self.last.get(kind, self.first[kind]) - self.first[kind])


class Progress:
    """The progress file the role polls while the module runs under async: rewritten atomically
    at every file event and at least every PROGRESS_INTERVAL_S by a ticker thread."""

    def __init__(self, path, files_total, bytes_total, workers, enabled=True, clock=time.monotonic):
        self.path = path
        self.enabled = enabled
        self.clock = clock
        self.started_wall = time.time()
        self.started = clock()
        self.lock = threading.Lock()
        self.events = []
        self.state = {
            "phase": "manifest",
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started_wall)),
            "elapsed_s": 0.0,
            "files_total": files_total,
            "bytes_total": bytes_total,
            "files_verified_on_head": 0,
            "bytes_downloaded": 0,
            "downloaded": 0,
            "workers": dict((name, {"files_done": 0, "bytes_done": 0, "in_flight": []}) for name in workers),
            "last_event": None,
        }
        self._stop = threading.Event()
        self._ticker = None

    def start_ticker(self):
        if not self.enabled:
            return

        def tick():
            while not self._stop.wait(PROGRESS_INTERVAL_S):
                self.write()

        self._ticker = threading.Thread(target=tick, name="checkpoint-sync-progress", daemon=True)
        self._ticker.start()

    def stop_ticker(self):
        self._stop.set()
        if self._ticker:
            self._ticker.join()

    def event(self, kind, text, update=None):
        with self.lock:
            now = self.clock() - self.started
            self.events.append((now, kind, text))
            if update:
                update(self.state)
            self.state["last_event"] = text
        self.write()

    def write(self):
        if not self.enabled:
            return
        with self.lock:
            self.state["elapsed_s"] = round(self.clock() - self.started, 3)
            data = (json.dumps(self.state, sort_keys=True, indent=1) + "\n").encode("utf-8")
            try:
                write_file_atomic(self.path, data, STAMP_MODE)
            except OSError:
                pass  # progress is best effort; the result carries the truth


# --- the sync ------------------------------------------------------------------------------------


class WorkerMirror:
    """One worker: a planner that asks rsync (dry run, one connection) which of the files already on
    the head the worker lacks, then `streams` threads copying offered files one rsync each. With
    several targets (one per cable half) the streams are spread over them, stream i on target
    i mod n; the planner and the final pass use the first. With relaying, a file may come from
    another worker (its feeder) instead of the head: from the head again when that fails."""

    def __init__(self, name, targets, sync):
        self.name = name
        self.targets = list(targets)
        self.target = self.targets[0]
        self.sync = sync
        self.offers = queue.Queue()
        self.fresh = set()
        self.jobs = queue.Queue()
        self.lacks = None
        self.copied = []
        self.deleted = []
        self.relayed = {}
        self.failures = []
        self.lock = threading.Lock()
        self.threads = []

    def start(self, plan_existing):
        planner = threading.Thread(target=self._dispatch, args=(plan_existing,), name="plan-%s" % self.name, daemon=True)
        planner.start()
        self.threads.append(planner)
        for index in range(self.sync.streams):
            target = self.targets[index % len(self.targets)]
            thread = threading.Thread(target=self._copy_loop, args=(target,), name="mirror-%s-%d" % (self.name, index), daemon=True)
            thread.start()
            self.threads.append(thread)

    def offer(self, rel, fresh, feeder=None):
        self.offers.put((rel, fresh, feeder))

    def finish(self):
        self.offers.put(None)
        for thread in self.threads:
            thread.join()

    def _dispatch(self, plan_existing):
        lacks = None
        if plan_existing:
            try:
                lacks = set(self.sync.rsync.tree(self.sync.dest, self.target, plan_existing, dry_run=True)[0])
            except RsyncFailure:
                lacks = None  # unknown: offer everything, each rsync's quick check decides
        while True:
            item = self.offers.get()
            if item is None:
                break
            rel, fresh, feeder = item
            if fresh:
                self.fresh.add(rel)
            if fresh or lacks is None or rel in lacks:
                self.jobs.put((rel, feeder))
            else:
                # Already here: the workers this one feeds get it from here (hashed before it goes on).
                self.sync.forward(self.name, rel, fresh, True)
        for _stream in range(self.sync.streams):
            self.jobs.put(None)

    def _copy_loop(self, target):
        while True:
            job = self.jobs.get()
            if job is None:
                return
            self._copy(job[0], target, job[1])

    def _copy(self, rel, target, feeder=None):
        sync = self.sync
        size = sync.manifest["files"][rel]["size"]
        source = "from %s " % feeder if feeder else ""
        sync.progress.event("mirror-start", "%s: copying %s%s" % (self.name, source, rel),
                            lambda s: s["workers"][self.name]["in_flight"].append(rel))
        sync.activity.start("mirror")
        error = None
        copied = []
        # A file fetched in this run gets sent even when size and mtime second match
        # (rsync's quick check compares whole seconds): the old copy may be the bad one.
        extra = ("--ignore-times",) if rel in self.fresh else ()
        try:
            # The feeder first, when there is one; the second try (or the only source) is the head.
            for attempt_feeder in (feeder, None):
                try:
                    if attempt_feeder:
                        copied = sync.rsync.relay_file(sync.relay_sources[attempt_feeder], rel, sync.manifest["files"][rel]["sha256"],
                                                       target, extra, sync.relay_password_file)
                        with self.lock:
                            self.relayed[rel] = attempt_feeder
                    else:
                        copied = sync.rsync.copy_file(sync.dest, rel, target, extra)
                    error = None
                    break
                except RsyncFailure as exc:
                    error = exc
                    if attempt_feeder:
                        sync.progress.event("relay-failed",
                                            "%s: %s from %s failed (%s); from the head" % (self.name, rel, attempt_feeder, exc))
        finally:
            sync.activity.stop("mirror")

        def done(state):
            worker = state["workers"][self.name]
            worker["in_flight"].remove(rel)
            if error is None:
                worker["files_done"] += 1
                worker["bytes_done"] += size

        if error is not None:
            with self.lock:
                self.failures.append("worker %s: %s: %s" % (self.name, rel, error))
            sync.progress.event("mirror-failed", "%s: %s failed: %s" % (self.name, rel, error), done)
            sync.forward(self.name, rel, rel in self.fresh, False)
            return
        with self.lock:
            self.copied.extend(name for name in copied if name not in self.copied)
        via = source if self.relayed.get(rel) else ""
        outcome = "copied" if copied else "already there"
        sync.progress.event("mirror-done", "%s: %s %s%s" % (self.name, rel, via, outcome), done)
        sync.forward(self.name, rel, rel in self.fresh, True)

    def final_pass(self, delete):
        """delete: the files to remove on the worker (an earlier manifest's, gone from the head)."""
        self.sync.progress.event("final-start", "%s: final pass" % self.name)
        self.sync.activity.start("mirror")
        try:
            copied, deleted = self.sync.rsync.tree(self.sync.dest, self.target, self.sync.manifest["files"], delete=delete)
        except RsyncFailure as exc:
            self.failures.append("worker %s: final pass: %s" % (self.name, exc))
            return
        finally:
            self.sync.activity.stop("mirror")
        with self.lock:
            self.copied.extend(name for name in copied if name not in self.copied)
            self.deleted.extend(deleted)
        self.sync.progress.event("final-done", "%s: final pass copied %d, deleted %d" % (self.name, len(copied), len(deleted)))


class CheckpointSync:
    """Run with .run(); the result dict is what the module returns (before changed/msg handling).

    downloader(rel) fetches one file into dest (hub or local copy); tests can swap `rsync`.
    """

    def __init__(
        self,
        source,
        dest,
        workers=(),
        token=None,
        rsync_rsh=DEFAULT_RSH,
        streams=2,
        download_workers=4,
        mirror=True,
        progress_file=None,
        manifest_file=None,
        delete_extraneous=True,
        check_mode=False,
        hash_jobs=2,
        racy_window_ns=None,
        rsync_binary="rsync",
        hub=None,
        rsync_password=None,
        manifest_only=False,
        hub_unreachable=None,
        lock_timeout=60,
        verify_full=False,
        relay=False,
        relay_password_file=None,
    ):
        if streams < 1 or download_workers < 1:
            raise SyncError("streams and download_workers must be 1 or more")
        if not isinstance(source, dict) or source.get("type") not in ("hub", "path"):
            raise SyncError("source.type must be 'hub' or 'path'")
        if source["type"] == "hub" and not (source.get("repo_id") and source.get("revision")):
            raise SyncError("a hub source needs repo_id and a pinned revision")
        if source["type"] == "path" and not source.get("path"):
            raise SyncError("a path source needs path")
        names = [worker.get("name") for worker in workers]
        if any(not name or not worker.get("target") for name, worker in zip(names, workers)) or len(set(names)) != len(names):
            raise SyncError("each worker needs a unique name and a target")
        for worker in workers:
            targets = [worker["target"]] + list(worker.get("alternate_targets") or [])
            daemon = set(is_daemon_target(t) for t in targets)
            if len(daemon) > 1:
                raise SyncError("worker %s mixes rsync:// and ssh targets; use one transport per worker" % worker["name"])
            if True in daemon and not rsync_password:
                raise SyncError("worker %s has rsync:// targets but no rsync_password (the daemon's secret)" % worker["name"])
            if relay and len(workers) > 1:
                if not worker.get("relay_source"):
                    raise SyncError("relay needs every worker's relay_source (its copy of dest as the head reaches it "
                                    "over ssh); worker %s has none" % worker["name"])
                split_relay_source(worker["relay_source"])
                if True in daemon and not relay_password_file:
                    raise SyncError("relay to rsync:// targets needs relay_password_file (the daemon's secret on the workers)")
        self.source = source
        self.dest = os.path.abspath(dest)
        self.workers = list(workers) if mirror else []
        self.token = token or None
        self.streams = streams
        self.download_workers = download_workers
        self.progress_file = progress_file or os.path.join(self.dest, PROGRESS_NAME)
        self.manifest_file = manifest_file or os.path.join(self.dest, MANIFEST_NAME)
        self.stamp_file = os.path.join(self.dest, STAMP_NAME)
        self.delete_extraneous = delete_extraneous
        self.check_mode = check_mode
        self.manifest_only = manifest_only
        # Why the hub cannot be used (the checkpoint stage asked it first), or None.
        self.hub_unreachable = hub_unreachable or None
        self.notes = []
        self.hash_jobs = hash_jobs
        self.racy_window_ns = racy_window_ns
        self.lock_timeout = lock_timeout
        # Hash every head file even when the stamp vouches for it (bit rot keeps size and times).
        self.verify_full = verify_full
        # The files the manifest of an earlier run listed: the only ones besides the new
        # manifest's (and its own leftovers) that this module may delete.
        self.previous_files = set()
        self.rsync = Rsync(rsync_rsh, rsync_binary, password=rsync_password)
        # Relaying: which worker's copy each worker's files may come from (relay_plan).
        self.relay = bool(relay) and len(self.workers) > 1
        self.relay_password_file = relay_password_file
        self.relay_sources = dict((w["name"], w.get("relay_source")) for w in self.workers)
        self.relay_feeds = {}
        self.relay_pending = dict((w["name"], set()) for w in self.workers)
        self.relay_ready = threading.Condition()
        self.head_offered = set()
        self.hub = hub
        self.activity = Activity()
        self.manifest = None
        self.progress = Progress(self.progress_file, 0, 0, [w["name"] for w in self.workers], enabled=False)
        self.failures = []

    # -- manifest ----------------------------------------------------------------------------

    def build_manifest(self):
        source = self.source
        self.real_sources = {}
        if self._offline():
            return self._kept_manifest()
        if source["type"] == "hub":
            self.hub = self.hub or import_hub()
            try:
                return hub_manifest(
                    source["repo_id"], source["revision"], source.get("allow_patterns"), source.get("endpoint"), self.token, self.hub
                )
            except SyncError:
                raise
            except Exception as exc:  # the client's errors: unknown repo/revision, auth, network
                # `from None`: the client's error may hold the token, which only the scrubbed text leaves out.
                raise SyncError("cannot read the file list of %s@%s: %s"
                                % (source["repo_id"], source["revision"], _scrub(exc, self.token))) from None
        path = os.path.abspath(source["path"])
        self.same_tree = os.path.realpath(path) == os.path.realpath(self.dest)
        if self.manifest_only:
            # Sizes are all a size check needs; hashing a large source here would be done twice.
            return path_sizes_manifest(path)
        read_only = self.check_mode or self.manifest_only
        stamp_file = os.path.join(self.dest, SOURCE_STAMP_NAME) if os.path.isdir(self.dest) or not read_only else None
        if not read_only:
            os.makedirs(self.dest, exist_ok=True)
        manifest, self.real_sources = path_manifest(
            path, stamp_file, self.hash_jobs, write_stamp=not read_only, racy_window_ns=self.racy_window_ns
        )
        return manifest

    def _offline(self):
        return self.source["type"] == "hub" and bool(self.hub_unreachable)

    def _kept_manifest(self):
        """The manifest an earlier run wrote for this very repo and revision: with the hub out of
        reach, the head's verified copy is still the checkpoint and can be checked and mirrored."""
        source = self.source
        where = "%s@%s" % (source["repo_id"], source["revision"])
        cannot = "the hub is out of reach (%s) and " % self.hub_unreachable
        try:
            with open(self.manifest_file, "rb") as handle:
                manifest = json.loads(handle.read().decode("utf-8"))
            normalize_manifest(manifest)
        except FileNotFoundError:
            raise SyncError(cannot + "the head holds no manifest of an earlier run (%s): the first download of %s "
                            "needs the hub" % (self.manifest_file, where)) from None
        except (OSError, ValueError, CheckpointError) as exc:
            raise SyncError(cannot + "the earlier run's manifest %s cannot be used: %s" % (self.manifest_file, exc)) from exc
        refusal = kept_manifest_refusal(manifest, source)
        if refusal:
            raise SyncError(cannot + refusal + ": the new checkpoint needs the hub")
        self.notes.extend(offline_notes(manifest, source, self.hub_unreachable))
        return manifest

    # -- head ----------------------------------------------------------------------------------

    def _head_state(self):
        """Split the manifest into files verified on the head and files to fetch; also what is not
        the checkpoint: `stale` (sparkctl's own: files an earlier manifest listed that the new one
        does not, and unfinished copies of the manifest's files), which may be removed, and
        `foreign` (everything else), which is left where it is and reported."""
        files = self.manifest["files"]
        ignored = compile_ignore(DEFAULT_IGNORE)
        scan = scan_tree(self.dest, ignored) if os.path.isdir(self.dest) else None
        present = scan.files if scan else {}
        digest = manifest_digest(normalize_manifest(self.manifest))
        stamp = None if self.verify_full else read_stamp(self.stamp_file)
        verified, fetch, to_hash = [], [], []
        stamp_files = {}
        for rel, entry in sorted(files.items()):
            info = present.get(rel)
            if info is None or info.size != entry["size"]:
                fetch.append(rel)
            elif stamp_vouches(stamp, digest, rel, info, entry["sha256"], entry.get("git_blob_sha1")):
                verified.append(rel)
                stamp_files[rel] = stamp_entry(info, entry["sha256"], entry.get("git_blob_sha1"))
            else:
                to_hash.append(rel)
        stale, foreign = [], []
        if scan:
            own_dirs = manifest_dirs(files)
            for rel in sorted(set(present) - set(files)):
                owned = rel in self.previous_files or owned_leftover(rel, files)
                (stale if owned else foreign).append(rel)
            for rel in sorted(scan.symlinks):
                if rel not in files:
                    (stale if rel in self.previous_files else foreign).append(rel)
            for rel in sorted(scan.partial_dirs):
                (stale if posixpath.dirname(rel) in own_dirs else foreign).append(rel)
            foreign.extend(sorted(rel for rel in scan.special if rel not in files))
        return verified, fetch, to_hash, stamp_files, digest, stale, foreign, present

    def _read_previous_files(self):
        """The files the manifest of an earlier run of this directory listed (empty without one)."""
        try:
            with open(self.manifest_file, "rb") as handle:
                return set(normalize_manifest(json.loads(handle.read().decode("utf-8"))))
        except (OSError, ValueError, CheckpointError):
            return set()

    def _worker_deletions(self):
        """Files to delete on every worker: an earlier manifest's that the new one does not list and
        the head no longer holds (the head removed them first)."""
        if not self.delete_extraneous:
            return []
        gone = self.previous_files - set(self.manifest["files"])
        return sorted(rel for rel in gone if not os.path.lexists(os.path.join(self.dest, rel)))

    def _check_file(self, rel):
        """Hash one head file against the manifest; returns (ok, detail, stamp entry or None)."""
        entry = self.manifest["files"][rel]
        path = os.path.join(self.dest, rel)
        started = time.time_ns()
        try:
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode):
                return False, "not a regular file", None
            if st.st_size != entry["size"]:
                return False, "is %d bytes, expected %d" % (st.st_size, entry["size"]), None
            if entry["sha256"] is not None:
                digest, after = sha256_file(path)
                if digest != entry["sha256"]:
                    return False, "sha256 %s, expected %s" % (digest, entry["sha256"]), None
            elif entry.get("git_blob_sha1"):
                digest, after = git_blob_sha1_file(path)
                if digest != entry["git_blob_sha1"]:
                    return False, "git blob sha1 %s differs from the hub's %s" % (digest, entry["git_blob_sha1"]), None
            else:
                after = FileInfo.from_stat(os.lstat(path))
        except OSError as exc:
            return False, "cannot read: %s" % (exc.strerror or exc), None
        if is_racy(after.ctime_ns, started, self.racy_window_ns):
            return True, None, None
        return True, None, stamp_entry(after, entry["sha256"], entry.get("git_blob_sha1"))

    def _remove(self, rel):
        path = os.path.join(self.dest, rel)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        elif os.path.lexists(path):
            os.unlink(path)

    def _fetch_once(self, rel, force=False):
        if self.source["type"] == "hub":
            # force_download: huggingface_hub copies a file it finds in the user's hub cache without
            # checking it, so a bad cached copy would come back on every try; the retry asks the hub.
            self.hub.hf_hub_download(
                self.source["repo_id"],
                rel,
                revision=self.manifest["commit"],
                local_dir=self.dest,
                token=self.token,
                endpoint=self.source.get("endpoint"),
                force_download=force,
            )
        else:
            source_file = self.real_sources.get(rel) or os.path.join(os.path.abspath(self.source["path"]), rel)
            self.rsync.local_copy(source_file, self.dest, rel)

    def _fetch(self, rel):
        """Download (or copy) one file and verify it; one more try on any failure."""
        entry = self.manifest["files"][rel]
        if self._offline():
            with self.lock:
                self.failures.append("download %s: missing or damaged on the head, and the hub is out of reach (%s)"
                                     % (rel, self.hub_unreachable))
            self.progress.event("download-failed", "%s cannot be downloaded: the hub is out of reach" % rel)
            return
        self.progress.event("download-start", "downloading %s" % rel)
        self.activity.start("download")
        detail = None
        try:
            for attempt in (1, 2):
                try:
                    self._remove(rel)  # a bad file whose metadata matches would otherwise be kept by the client
                    self._fetch_once(rel, force=attempt > 1)
                except Exception as exc:  # client, network or rsync error: retried once, then reported
                    detail = _scrub(exc, self.token).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                    continue
                ok, detail, recorded = self._check_file(rel)
                if ok:
                    with self.lock:
                        if recorded:
                            self.stamp_files[rel] = recorded
                        self.downloaded.append(rel)
                    break
                detail = "downloaded file failed verification: %s" % detail
            else:
                with self.lock:
                    self.failures.append("%s %s: %s" % ("download" if self.source["type"] == "hub" else "copy", rel, detail))
                self.progress.event("download-failed", "%s failed: %s" % (rel, detail))
                return
        finally:
            self.activity.stop("download")

        def done(state):
            state["files_verified_on_head"] += 1
            state["downloaded"] += 1
            state["bytes_downloaded"] += entry["size"]

        self.progress.event("download-done", "downloaded and verified %s" % rel, done)
        self._offer(rel, fresh=True)

    def _offer(self, rel, fresh):
        """A file verified on the head goes to every worker it feeds: all of them, or, relayed, the
        first of the file's chain."""
        with self.relay_ready:
            self.head_offered.add(rel)
        for mirror in self.mirrors:
            if self.relay_feeds.get(rel, {}).get(mirror.name) is None:
                mirror.offer(rel, fresh)

    def forward(self, name, rel, fresh, held):
        """Worker `name` is done with `rel`: the workers it feeds get it from it when it holds the file
        (`held`), else from the head."""
        for mirror in self.mirrors:
            if self.relay_feeds.get(rel, {}).get(mirror.name) == name:
                mirror.offer(rel, fresh, name if held else None)
                with self.relay_ready:
                    self.relay_pending[mirror.name].discard(rel)
                    self.relay_ready.notify_all()

    # -- run -----------------------------------------------------------------------------------

    def run(self):
        started = time.monotonic()
        self.lock = threading.Lock()
        self.downloaded = []
        self.manifest = self.build_manifest()
        manifest_s = time.monotonic() - started
        files = self.manifest["files"]
        workers = [w["name"] for w in self.workers]
        if self.manifest_only:
            return {
                "changed": False,
                "commit": self.manifest.get("commit"),
                "manifest_file": self.manifest_file,
                "files": len(files),
                "bytes": self.manifest["total_bytes"],
                "failures": [],
                "offline": self._offline(),
                "notes": list(self.notes),
            }
        if self.check_mode:
            return self._plan(started, manifest_s)

        os.makedirs(self.dest, exist_ok=True)
        self.progress = Progress(self.progress_file, len(files), self.manifest["total_bytes"], workers)
        lock_file = os.path.join(self.dest, LOCK_NAME)

        def waiting(holder):
            self.progress.event("lock-wait",
                                "waiting up to %d s for the transfer of PID %s (it holds %s)" % (self.lock_timeout, holder, lock_file))

        lock = DirectoryLock(self.dest, self.lock_timeout, waiting)
        lock.acquire()
        try:
            # Read before it is replaced: what the earlier run put here is what may be deleted.
            self.previous_files = self._read_previous_files()
            self.leftovers_removed = remove_hub_leftovers(self.dest)
            if not self._offline():  # else it is the kept manifest, already there
                _write_if_changed(self.manifest_file, render_manifest(self.manifest))
            self.progress.event("manifest", "manifest: %d files, %d bytes" % (len(files), self.manifest["total_bytes"]), _phase("verify"))
            self.progress.start_ticker()
            try:
                return self._run(started, manifest_s)
            finally:
                self.progress.stop_ticker()
                self.rsync.terminate_all()
        finally:
            lock.release()

    def _run(self, started, manifest_s):
        verified, fetch, to_hash, self.stamp_files, digest, stale, foreign, _present = self._head_state()
        if self.source["type"] == "path" and self.same_tree:
            verified, to_hash = self._trust_same_tree(verified, to_hash)
        removed_on_head = self._clean_head(stale, foreign)
        self._start_mirrors(sorted(verified + to_hash))
        for rel in verified:
            self._verified_now(rel)
        self._download(fetch, to_hash)
        head_failed = self._finish_mirrors()
        stamp_data = render_stamp(dict(sorted(self.stamp_files.items())), digest)
        if not head_failed:
            _write_if_changed(self.stamp_file, stamp_data)
        for mirror in self.mirrors:
            self.failures.extend(mirror.failures)
        return self._run_result(started, manifest_s, removed_on_head, foreign)

    def _trust_same_tree(self, verified, to_hash):
        """A path source that is the destination itself: the manifest was hashed from this very
        tree a moment ago, so every file is verified and the source stamp's entries become ours."""
        verified, to_hash = sorted(verified + to_hash), []
        source_stamp = read_stamp(os.path.join(self.dest, SOURCE_STAMP_NAME)) or {"files": {}}
        self.stamp_files = dict((rel, source_stamp["files"][rel]) for rel in verified if rel in source_stamp["files"])
        for rel in self.stamp_files:
            self.stamp_files[rel] = dict(self.stamp_files[rel], sha256=self.manifest["files"][rel]["sha256"])
        return verified, to_hash

    def _clean_head(self, stale, foreign):
        """Remove what an earlier run owned and this manifest does not (when asked), note what is
        someone else's; returns everything removed from the head, hub leftovers included."""
        removed_on_head = list(self.leftovers_removed)
        if self.delete_extraneous:
            for rel in stale:
                self._remove(rel)
                removed_on_head.append(rel)
        if removed_on_head:
            self.progress.event("head-removed", "removed from the head: %s" % ", ".join(removed_on_head))
        if foreign:
            self.notes.append(foreign_note(self.dest, foreign))
        return removed_on_head

    def _start_mirrors(self, plan_existing):
        """One mirror per worker, each starting with the files the head already holds."""
        self.mirrors = [WorkerMirror(w["name"], [w["target"]] + list(w.get("alternate_targets") or []), self) for w in self.workers]
        if self.relay:
            files = self.manifest["files"]
            self.relay_feeds = relay_plan([m.name for m in self.mirrors], [(rel, bool(files[rel]["sha256"])) for rel in files])
            for rel, feeders in self.relay_feeds.items():
                for name, feeder in feeders.items():
                    if feeder is not None:
                        self.relay_pending[name].add(rel)
        for mirror in self.mirrors:
            mirror.start(plan_existing=plan_existing)

    def _verified_now(self, rel):
        self.progress.event("verified", "verified on the head: %s" % rel, _count_verified)
        self._offer(rel, fresh=False)

    def _download(self, fetch, to_hash):
        """Hash the untrusted files first, then fetch the missing and the bad ones, largest first."""
        self.progress.event("download", "downloading %d files" % (len(fetch) + len(to_hash)), _phase("download"))
        with ThreadPoolExecutor(max_workers=self.download_workers) as pool:
            hashed = dict(zip(to_hash, pool.map(self._check_file, to_hash))) if to_hash else {}
            bad = []
            for rel in to_hash:
                ok, detail, recorded = hashed[rel]
                if ok:
                    if recorded:
                        self.stamp_files[rel] = recorded
                    self._verified_now(rel)
                else:
                    bad.append(rel)
            sizes = self.manifest["files"]
            order = sorted(fetch + bad, key=lambda rel: (-sizes[rel]["size"], rel))
            list(pool.map(self._fetch, order))

    def _finish_mirrors(self):
        """Wait for the mirrors, then, only when the head is complete, run every sound worker's
        final pass (with its deletions) at once. Returns whether the head failed."""
        self.progress.event("mirror", "waiting for the mirror", _phase("mirror"))
        # A relayed file reaches a worker after its feeder is done with it; one the head never
        # verified (its download failed) reaches no one, so no worker waits for it.
        with self.relay_ready:
            for pending in self.relay_pending.values():
                pending.difference_update(set(pending) - self.head_offered)
        for mirror in self.mirrors:
            with self.relay_ready:
                while self.relay_pending[mirror.name]:
                    self.relay_ready.wait()
            mirror.finish()
        head_failed = bool(self.failures)
        if not head_failed:
            # Never delete on a worker while the head is incomplete: the worker may hold the good copy.
            self.progress.event("final", "final pass on %d workers" % len(self.mirrors), _phase("final"))
            passes = [m for m in self.mirrors if not m.failures]
            deletions = self._worker_deletions()
            threads = [threading.Thread(target=m.final_pass, args=(deletions,)) for m in passes]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        return head_failed

    def _run_result(self, started, manifest_s, removed_on_head, foreign):
        total = time.monotonic() - started
        result = self._result(
            downloaded=sorted(self.downloaded),
            mirrored=dict((m.name, sorted(m.copied)) for m in self.mirrors),
            deleted=dict((m.name, sorted(m.deleted)) for m in self.mirrors),
            removed_on_head=sorted(removed_on_head),
            foreign=foreign,
            relayed=dict((m.name, dict(sorted(m.relayed.items()))) for m in self.mirrors),
            timings={
                "manifest_s": round(manifest_s, 3),
                "download_s": round(self.activity.span("download"), 3),
                "mirror_s": round(self.activity.span("mirror"), 3),
                "total_s": round(total, 3),
                "overlap_s": round(self.activity.overlap, 3),
            },
        )
        result["failures"] = list(self.failures)
        phase = "failed" if self.failures else "done"
        self.progress.event("end", "%s in %.1f s" % (phase, total), _phase(phase))
        return result

    def _plan(self, started, manifest_s):
        """Check mode: what a run would download, copy and delete; nothing is written."""
        self.previous_files = self._read_previous_files()
        verified, fetch, to_hash, _stamp_files, _digest, stale, foreign, _present = self._head_state()
        bad = [rel for rel in to_hash if not self._check_file(rel)[0]]
        would_fetch = sorted(fetch + bad)
        if foreign:
            self.notes.append(foreign_note(self.dest, foreign))
        gone = sorted(self.previous_files - set(self.manifest["files"])) if self.delete_extraneous else []
        mirrored, deleted = {}, {}
        for worker in self.workers:
            copied = []
            if os.path.isdir(self.dest):
                try:
                    on_head = [rel for rel in self.manifest["files"] if rel not in would_fetch]
                    copied = self.rsync.tree(self.dest, worker["target"], on_head, dry_run=True)[0]
                except RsyncFailure as exc:
                    self.failures.append("worker %s: dry run: %s" % (worker["name"], exc))
            mirrored[worker["name"]] = sorted(set(copied) | set(would_fetch))
            # The daemon lists nothing: what a run would delete is what an earlier manifest owned.
            deleted[worker["name"]] = gone
        result = self._result(
            downloaded=would_fetch,
            mirrored=mirrored,
            deleted=deleted,
            removed_on_head=stale if self.delete_extraneous else [],
            foreign=foreign,
            timings={"manifest_s": round(manifest_s, 3), "download_s": 0.0, "mirror_s": 0.0,
                     "total_s": round(time.monotonic() - started, 3), "overlap_s": 0.0},
        )
        result["failures"] = list(self.failures)
        return result

    def _result(self, downloaded, mirrored, deleted, removed_on_head, timings, foreign=(), relayed=None):
        changed = bool(downloaded or removed_on_head or any(mirrored.values()) or any(deleted.values()))
        return {
            "changed": changed,
            "commit": self.manifest.get("commit"),
            "manifest_file": self.manifest_file,
            "files": len(self.manifest["files"]),
            "bytes": self.manifest["total_bytes"],
            "downloaded": downloaded,
            "mirrored": mirrored,
            "deleted": deleted,
            "removed_on_head": removed_on_head,
            "foreign": list(foreign),
            "relayed": relayed or dict((w["name"], {}) for w in self.workers),
            "timings": timings,
            "offline": self._offline(),
            "notes": list(self.notes),
        }


def _phase(name):
    def update(state):
        state["phase"] = name

    return update


def _count_verified(state):
    state["files_verified_on_head"] += 1

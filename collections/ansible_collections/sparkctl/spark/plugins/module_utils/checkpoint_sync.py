# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The checkpoint stage's engine: manifest, download on the head, streamed mirror to the workers.

Runs on the head node. A file is offered to every worker's mirror queue the moment it is
verified on the head (already there, or just downloaded and hashed), so mirroring overlaps the
download instead of adding to it. Each worker gets `streams` concurrent single-file rsyncs; once
every file is done, one final itemized rsync per worker removes what should not be there and
catches anything the streaming missed.

This module is the orchestration; each part it drives has a module of its own: the directory
lock (checkpoint_lock.py), the hub client (checkpoint_hub.py), the manifest
(checkpoint_manifest.py), the rsync commands (checkpoint_rsync.py), one worker's mirror
(checkpoint_mirror.py) and the progress file (checkpoint_progress.py). Hashing, the verification
stamp and the ignore rules are the ones checkpoint_verify uses (checkpoint_stamp.py,
checkpoint_tree.py), so a stamp written here lets checkpoint_verify skip re-hashing and the
reverse. huggingface_hub is imported only for hub sources; `path` sources need the stdlib only.
"""

from __future__ import annotations

import json
import os
import posixpath
import shutil
import stat
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.sparkctl.spark.plugins.module_utils.checkpoint_errors import CheckpointError, SyncError, scrub
from ansible_collections.sparkctl.spark.plugins.module_utils.checkpoint_hub import (
    hub_manifest,
    import_hub,
    kept_manifest_refusal,
    offline_notes,
    remove_hub_leftovers,
)
from ansible_collections.sparkctl.spark.plugins.module_utils.checkpoint_lock import LOCK_NAME, DirectoryLock
from ansible_collections.sparkctl.spark.plugins.module_utils.checkpoint_manifest import (
    MANIFEST_NAME,
    SOURCE_STAMP_NAME,
    manifest_digest,
    normalize_manifest,
    path_manifest,
    path_sizes_manifest,
    render_manifest,
)
from ansible_collections.sparkctl.spark.plugins.module_utils.checkpoint_mirror import WorkerMirror
from ansible_collections.sparkctl.spark.plugins.module_utils.checkpoint_progress import PROGRESS_NAME, Activity, Progress
from ansible_collections.sparkctl.spark.plugins.module_utils.checkpoint_rsync import (
    DEFAULT_RSH,
    Rsync,
    RsyncFailure,
    is_daemon_target,
    split_relay_source,
)
from ansible_collections.sparkctl.spark.plugins.module_utils.checkpoint_stamp import (
    STAMP_NAME,
    git_blob_sha1_file,
    is_racy,
    read_stamp,
    render_stamp,
    sha256_file,
    stamp_entry,
    stamp_vouches,
    write_if_changed,
)
from ansible_collections.sparkctl.spark.plugins.module_utils.checkpoint_tree import (
    DEFAULT_IGNORE,
    FileInfo,
    compile_ignore,
    manifest_dirs,
    owned_leftover,
    scan_tree,
)

# How many names a note about files that are not the checkpoint's spells out.
FOREIGN_SHOWN = 5


def foreign_note(dest, foreign):
    """The warning about files in the directory that are not the checkpoint's."""
    shown = ", ".join(foreign[:FOREIGN_SHOWN]) + (" and %d more" % (len(foreign) - FOREIGN_SHOWN) if len(foreign) > FOREIGN_SHOWN else "")
    return ("%d file%s in %s %s not part of the checkpoint and no earlier sparkctl manifest of it listed %s: left in place "
            "(%s). Keep other data out of spark_checkpoint_dir, or give the checkpoint a directory of its own."
            % (len(foreign), "" if len(foreign) == 1 else "s", dest, "is" if len(foreign) == 1 else "are",
               "it" if len(foreign) == 1 else "them", shown))


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
                                % (source["repo_id"], source["revision"], scrub(exc, self.token))) from None
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
                    detail = scrub(exc, self.token).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
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
                write_if_changed(self.manifest_file, render_manifest(self.manifest))
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
            write_if_changed(self.stamp_file, stamp_data)
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

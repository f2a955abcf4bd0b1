# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The mirror to one worker: which of the head's files the worker lacks, and the streams that copy
each file the moment the head has verified it, from the head or, relayed, from another worker.
The transfer (checkpoint_sync.py's CheckpointSync) runs one per worker and is passed in as
`sync`: its rsync, progress and the forwarding of a file to the workers this one feeds.
"""

from __future__ import annotations

import queue
import threading

from ansible_collections.sparkctl.spark.plugins.module_utils.checkpoint_rsync import RsyncFailure


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

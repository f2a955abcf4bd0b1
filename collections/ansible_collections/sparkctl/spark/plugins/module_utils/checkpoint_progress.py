# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What the transfer tells while it runs: the progress file the role polls while the module runs
under async (turned into one line by the checkpoint_progress_line filter), and the spans and
overlap of downloads and mirror copies its result reports.
"""

from __future__ import annotations

import json
import threading
import time

from ansible_collections.sparkctl.spark.plugins.module_utils.checkpoint_stamp import STAMP_MODE
from ansible_collections.sparkctl.spark.plugins.module_utils.files import write_file_atomic

PROGRESS_NAME = ".sparkctl-progress.json"
PROGRESS_INTERVAL_S = 1.0


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

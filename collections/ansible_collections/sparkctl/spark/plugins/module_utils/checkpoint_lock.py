# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The lock that keeps a checkpoint directory to one transfer at a time: two transfers into one
directory would delete and download each other's files, and a re-run must wait for the background
job of an interrupted run, which may still be writing.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time

from ansible_collections.sparkctl.spark.plugins.module_utils.checkpoint_errors import SyncError

# One transfer per checkpoint directory: an flock on this file, held for the whole run, with the
# holder's PID written in it for the message a second run gives.
LOCK_NAME = ".sparkctl-transfer.lock"
LOCK_POLL_S = 0.5


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

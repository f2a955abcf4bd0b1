# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Counts, per role and host, the module runs a playbook makes on the nodes (loop items
one by one) beside the tasks that stay on the control node or are skipped, and writes
them as JSON to $SPARKCTL_CENSUS_FILE at the end. Used by tests/bench/module_census.py."""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = r"""
name: module_census
type: aggregate
short_description: Count module runs on the nodes per role and host
description:
  - "Writes C({role: {host: {remote, controller, skipped}}}) to the file named by C(SPARKCTL_CENSUS_FILE),
    with C(_seconds: {role: {remote, local}}): the wall time of the tasks in which some node ran a module
    and of the others (each task timed from its start to the next one's)."
requirements:
  - enabled in callbacks_enabled
"""

# Actions the controller carries out itself: no module reaches a node.
CONTROLLER_ACTIONS = {
    "set_fact", "assert", "debug", "fail", "meta", "include_tasks", "import_tasks", "include_role",
    "import_role", "include_vars", "add_host", "group_by", "validate_argument_spec", "set_stats", "pause",
}


def _short(action: str) -> str:
    return action.rsplit(".", 1)[-1]


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "module_census"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self.counts = defaultdict(lambda: defaultdict(lambda: {"remote": 0, "controller": 0, "skipped": 0}))
        self.seconds = defaultdict(lambda: {"remote": 0.0, "local": 0.0})
        self._open = None  # [role, started, ran a module on some node]

    def _close_task(self):
        if self._open:
            role, started, remote = self._open
            self.seconds[role]["remote" if remote else "local"] += time.monotonic() - started
            self._open = None

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._close_task()
        self._open = [task._role.get_name() if task._role else "(play)", time.monotonic(), False]

    def v2_playbook_on_handler_task_start(self, task):
        self.v2_playbook_on_task_start(task, False)

    def v2_playbook_on_play_start(self, play):
        self._close_task()

    def _count(self, result, skipped=False):
        task = result._task
        role = task._role.get_name() if task._role else "(play)"
        host = result._host.get_name()
        slot = self.counts[role][host]
        if skipped:
            slot["skipped"] += 1
            return
        delegated = (task.delegate_to or "") in ("localhost", "127.0.0.1")
        if _short(task.action) in CONTROLLER_ACTIONS or delegated:
            slot["controller"] += 1
            return
        items = result._result.get("results")
        if isinstance(items, list):
            slot["remote"] += sum(1 for item in items if not item.get("skipped"))
        else:
            slot["remote"] += 1
        if self._open:
            self._open[2] = True

    def v2_runner_on_ok(self, result):
        self._count(result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._count(result)

    def v2_runner_on_skipped(self, result):
        self._count(result, skipped=True)

    def v2_playbook_on_stats(self, stats):
        self._close_task()
        path = os.environ.get("SPARKCTL_CENSUS_FILE")
        if path:
            census = {role: dict(hosts) for role, hosts in self.counts.items()}
            census["_seconds"] = {role: {k: round(v, 2) for k, v in split.items()} for role, split in self.seconds.items()}
            with open(path, "w", encoding="utf-8") as handle:
                json.dump(census, handle, indent=1, sort_keys=True)

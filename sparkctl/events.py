"""Fold ansible-runner's event stream into what a stage reports: per-host counters,
failures (host, task, message) and the exit code; what it keeps to print has no
credentials inside URLs. Pure: no I/O, no clock."""

from __future__ import annotations

from dataclasses import dataclass, field

from .redact import redact_text, redact_value

# Exit codes of every sparkctl command.
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3

# The inventory validation task (playbooks/validate_inventory.yml) runs on the
# control node before any host is touched; its failure is the user's input, not a
# play failure. Matched by prefix so the task may grow its list of checks.
VALIDATION_TASK_PREFIX = "Check groups, link plan"
CONTROL_NODE = "localhost"

# The counters of the per-host table, in display order. The stats event calls
# failures "failures" and unreachable hosts "dark".
COUNTERS = ("ok", "changed", "failed", "unreachable", "skipped")
_STATS_KEYS = {"ok": "ok", "changed": "changed", "failed": "failures", "unreachable": "dark", "skipped": "skipped"}

# States of a host on the task in progress, for the live display.
RESULT_STATES = {
    "runner_on_ok": "ok",
    "runner_on_failed": "failed",
    "runner_on_unreachable": "unreachable",
    "runner_on_skipped": "skipped",
}

DEBUG_ACTIONS = ("ansible.builtin.debug", "debug")

# A failure message longer than this is cut (the stdout artifact has it all).
MSG_LIMIT = 4000


@dataclass
class Failure:
    host: str
    task: str
    msg: str
    kind: str = "failed"  # or "unreachable"
    play: str = ""

    def as_dict(self) -> dict:
        return {"host": self.host, "task": self.task, "msg": self.msg, "kind": self.kind, "play": self.play}


@dataclass
class Tally:
    """Everything the event stream said, folded one event at a time (the live display
    reads it while the stage runs; the summary reads it at the end)."""

    play: str = ""
    task: str = ""
    task_counter: int = 0  # bumps on every new task: the display restarts its clock
    # host -> state on the current task: running, ok, changed, failed, unreachable, skipped
    task_states: dict[str, str] = field(default_factory=dict)
    # host -> counter -> n, counted from the results (the stats event replaces them)
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    stats: dict[str, dict[str, int]] | None = None
    failures: list[Failure] = field(default_factory=list)
    no_hosts_matched: bool = False
    # Files the tasks wrote or found up to date (a result's `dest`): how the wrapper
    # knows which reports belong to this run, even when an unchanged one kept its mtime.
    files: list[str] = field(default_factory=list)
    # What debug tasks printed (host, task, msg): the payload of `logs` and `status`.
    output: list[dict] = field(default_factory=list)

    def feed(self, event: dict) -> None:
        name = event.get("event", "")
        data = event.get("event_data") or {}
        if name == "playbook_on_play_start":
            self.play = data.get("play") or data.get("name") or ""
            self.task, self.task_states = "", {}
        elif name in ("playbook_on_task_start", "playbook_on_handler_task_start"):
            self.task = data.get("task") or data.get("name") or ""
            self.task_counter += 1
            self.task_states = {}
        elif name == "runner_on_start":
            self.task_states[data.get("host", "")] = "running"
        elif name in RESULT_STATES:
            self._result(name, data)
        elif name == "playbook_on_no_hosts_matched":
            self.no_hosts_matched = True
        elif name == "playbook_on_stats":
            self.stats = stats_from_event(data)

    def _result(self, name: str, data: dict) -> None:
        host = data.get("host", "")
        res = data.get("res") or {}
        state = RESULT_STATES[name]
        if state == "ok" and res.get("changed"):
            state = "changed"
        ignored = state == "failed" and data.get("ignore_errors")
        if state in ("ok", "changed") and isinstance(res.get("dest"), str) and res["dest"] not in self.files:
            self.files.append(res["dest"])
        if state == "ok" and data.get("task_action") in DEBUG_ACTIONS and "msg" in res:
            self.output.append({"host": host, "task": data.get("task", ""), "msg": redact_value(res["msg"])})
        self.task_states[host] = "ok" if ignored else state
        counts = self.counts.setdefault(host, dict.fromkeys(COUNTERS, 0))
        counts["ok" if ignored else ("failed" if state == "failed" else state)] += 1
        if state == "changed":
            counts["ok"] += 1  # ansible counts a changed result as ok too
        if state in ("failed", "unreachable") and not ignored:
            self.failures.append(Failure(host=host, task=data.get("task", ""), msg=failure_message(res),
                                         kind=state, play=data.get("play", "")))

    def host_stats(self) -> dict[str, dict[str, int]]:
        """Per-host counters: the stats event's when the play got that far, else the counted ones."""
        return self.stats if self.stats is not None else {h: dict(c) for h, c in self.counts.items()}

    def final_failures(self) -> list[Failure]:
        """Failures that stuck: a failure a rescue block handled is not in the stats' failures."""
        if self.stats is None:
            return list(self.failures)
        stuck = {h for h, c in self.stats.items() if c["failed"] or c["unreachable"]}
        return [f for f in self.failures if f.host in stuck]


def stats_from_event(data: dict) -> dict[str, dict[str, int]]:
    """Per-host counters from a playbook_on_stats event's data."""
    hosts: set[str] = set()
    for key in _STATS_KEYS.values():
        hosts.update((data.get(key) or {}).keys())
    hosts.update((data.get("processed") or {}).keys())
    return {host: {counter: int((data.get(key) or {}).get(host, 0)) for counter, key in _STATS_KEYS.items()}
            for host in sorted(hosts)}


def failure_message(res: dict) -> str:
    """The message of a failed or unreachable result: msg, then stderr; for a loop, the failed items'."""
    if res.get("censored"):
        return str(res["censored"])
    parts = []
    msg = res.get("msg")
    if isinstance(msg, list):
        parts.extend(str(line) for line in msg)
    elif msg:
        parts.append(str(msg))
    stderr = res.get("stderr") or ""
    if stderr and stderr not in parts:
        parts.append(f"stderr: {stderr.strip()}")
    for item in res.get("results") or []:
        if isinstance(item, dict) and (item.get("failed") or item.get("rc") not in (None, 0) or item.get("unreachable")):
            label = item.get("_ansible_item_label", item.get("item"))
            parts.append(f"item {label}: {failure_message(item)}")
    text = redact_text("\n".join(parts) or "(no message)")
    return text if len(text) <= MSG_LIMIT else text[:MSG_LIMIT] + " [...]"


def fold(events: list[dict]) -> Tally:
    tally = Tally()
    for event in events:
        tally.feed(event)
    return tally


def exit_code(status: str, rc: int | None, stats: dict[str, dict[str, int]], failures: list[Failure]) -> int:
    """0 success, 2 bad inventory (or ansible-playbook refusing its arguments), 3 unreachable host, 1 any other failure."""
    if status == "successful" and rc == 0:
        return EXIT_OK
    if any(f.host == CONTROL_NODE and f.task.startswith(VALIDATION_TASK_PREFIX) for f in failures):
        return EXIT_USAGE
    if any(c.get("unreachable") for c in stats.values()) or any(f.kind == "unreachable" for f in failures):
        return EXIT_UNREACHABLE
    # ansible-playbook's own "bad or incomplete options" code, before any play ran.
    if rc == 5 and not stats:
        return EXIT_USAGE
    return EXIT_FAILED

"""What people see: the live progress of a stage and the summary after it."""

from __future__ import annotations

import time
from collections.abc import Callable

from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from .events import COUNTERS, EXIT_UNREACHABLE, EXIT_USAGE, Tally
from .result import StageResult

STATE_STYLE = {
    "running": "cyan",
    "ok": "green",
    "changed": "yellow",
    "failed": "bold red",
    "unreachable": "bold magenta",
    "skipped": "dim",
}
COUNTER_STYLE = {"changed": "yellow", "failed": "red", "unreachable": "magenta", "skipped": "dim"}


def format_elapsed(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


class StageProgress:
    """A live view of one stage: play, task, time on the task (downloads, JIT boot and
    health waits are long), and every host's state on it and counters so far."""

    def __init__(self, stage: str, console: Console, verbosity: int = 0, clock: Callable[[], float] = time.monotonic):
        self.stage = stage
        self.console = console
        self.verbosity = verbosity
        self.clock = clock
        self.started = clock()
        self.task_started = self.started
        self._task_counter = 0
        self.tally = Tally()
        self._live: Live | None = None
        self._paused = False

    def on_event(self, tally: Tally, event: dict) -> None:
        self.tally = tally
        if self._paused:  # the first event: ansible-playbook runs, the fork is over
            self._paused = False
            self._live.start()
        if tally.task_counter != self._task_counter:
            self._task_counter = tally.task_counter
            self.task_started = self.clock()
        if self.verbosity and event.get("event") in ("runner_on_ok", "runner_on_failed", "runner_on_unreachable",
                                                      "runner_on_skipped"):
            data = event.get("event_data") or {}
            host = data.get("host", "")
            state = tally.task_states.get(host, "")
            self.console.print(f"  [{STATE_STYLE.get(state, '')}]{state:<11}[/] {escape(host)}  {escape(data.get('task', ''))}")

    def __rich__(self) -> Group:
        tally = self.tally
        now = self.clock()
        # Times first: a long task name is cut at the terminal's edge, the clocks never are.
        head = Text.assemble(
            (f"{self.stage}", "bold"), " ",
            (format_elapsed(now - self.started), "dim"), "  task ",
            (format_elapsed(now - self.task_started) if tally.task else "-", "bold cyan"), "  ",
            (tally.play or "starting", "blue"), " > ",
            (tally.task or "", ""),
            no_wrap=True, overflow="ellipsis",
        )
        table = Table(box=None, padding=(0, 1), show_header=True, header_style="dim")
        table.add_column("host")
        table.add_column("now")
        for counter in COUNTERS:
            table.add_column(counter, justify="right")
        for host in sorted(set(tally.counts) | set(tally.task_states)):
            state = tally.task_states.get(host, "")
            counts = tally.counts.get(host, {})
            table.add_row(host, Text(state, STATE_STYLE.get(state, "")), *(str(counts.get(c, 0)) for c in COUNTERS))
        return Group(head, table)

    def __enter__(self) -> StageProgress:
        # transient: the summary table replaces the live view when the stage ends.
        self._live = Live(self, console=self.console, refresh_per_second=4, transient=True)
        self._live.start()
        return self

    def __exit__(self, *exc) -> None:
        self._live.stop()

    def on_status(self, status: str) -> None:
        # ansible-runner forks ansible-playbook right after "running": no refresh thread
        # may run across that fork (a thread holding a lock there can deadlock the child).
        if status == "running":
            self._live.stop()
            self._paused = True


def stats_table(result: StageResult) -> Table:
    verdict = {0: "[green]ok[/]", EXIT_USAGE: "[bold red]refused[/]", EXIT_UNREACHABLE: "[bold magenta]unreachable[/]"}
    if result.status in ("canceled", "timeout"):
        word = f"[bold red]{result.status}[/]"
    else:
        word = verdict.get(result.exit_code, "[bold red]failed[/]")
    title = f"{result.name}: {word} in {format_elapsed(result.duration_s)}"
    table = Table(title=title, title_justify="left")
    table.add_column("host")
    for counter in COUNTERS:
        table.add_column(counter, justify="right")
    for host, counts in result.stats.items():
        cells = []
        for counter in COUNTERS:
            value = counts.get(counter, 0)
            style = COUNTER_STYLE.get(counter, "") if value else ""
            cells.append(f"[{style}]{value}[/]" if style else str(value))
        table.add_row(host, *cells)
    return table


def show_stage(result: StageResult, console: Console) -> None:
    if result.stats:
        console.print(stats_table(result))
    else:
        console.print(f"{result.name}: {result.status} (rc {result.rc}), no play ran", soft_wrap=True)
    for failure in result.failures:
        what = "unreachable" if failure.kind == "unreachable" else "failed"
        console.print(f"[bold red]x[/] {escape(failure.host)} {what} at task [bold]{escape(failure.task)}[/]:")
        console.print(Text(failure.msg, style="red"), soft_wrap=True)
    if result.exit_code and result.log:
        console.print(f"full log: {result.log}", soft_wrap=True)


def show_output(result: StageResult, console: Console) -> None:
    """What the stage's debug tasks printed, per host (the payload of `logs` and `status`)."""
    for item in result.output:
        console.rule(f"{item['host']}: {item['task']}", align="left")
        msg = item["msg"]
        lines = msg if isinstance(msg, list) else str(msg).splitlines()
        for line in lines:
            console.print(Text(str(line)), soft_wrap=True)

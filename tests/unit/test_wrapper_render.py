"""What people see: the live progress view and the per-stage summary."""

import json
from pathlib import Path

import pytest
from rich.console import Console
from sparkctl import render
from sparkctl.events import Failure, fold
from sparkctl.result import StageResult

FIXTURES = Path(__file__).parent / "fixtures" / "wrapper"


def text_of(renderable, width=160):
    console = Console(record=True, width=width, color_system=None)
    console.print(renderable)
    return console.export_text()


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


@pytest.mark.parametrize("seconds, text", [(0, "0s"), (59.9, "59s"), (61, "1m01s"), (3600 + 120, "1h02m")])
def test_format_elapsed(seconds, text):
    assert render.format_elapsed(seconds) == text


def test_progress_shows_play_task_time_on_task_and_hosts():
    events = json.loads((FIXTURES / "mixed.json").read_text())["events"]
    clock = Clock()
    progress = render.StageProgress("provision", Console(), clock=clock)
    tally = None
    for event in events:
        if event["event"] == "playbook_on_task_start" and event["event_data"]["task"] == "Loop with a failing item":
            clock.now += 5  # the earlier tasks took 5 s
        tally = fold(events[: events.index(event) + 1])
        progress.on_event(tally, event)
        if event["event"] == "runner_on_start" and event["event_data"]["task"] == "Loop with a failing item":
            break
    clock.now += 754  # a long download on the current task
    text = text_of(progress)
    head = text.splitlines()[0]
    assert head.startswith("provision 12m39s  task 12m34s  Mixed results > Loop with a failing item")
    rows = {line.split()[0]: line.split()[1:] for line in text.splitlines()[2:] if line.strip()}
    # host, state on this task, ok changed failed unreachable skipped so far
    assert rows["a"] == ["running", "2", "1", "0", "0", "1"]
    # c went unreachable two tasks ago: no state on this task, its counters stay.
    assert rows["c"] == ["1", "0", "0", "1", "0"]


def test_a_long_task_name_is_cut_not_the_clocks():
    progress = render.StageProgress("runtime", Console(), clock=Clock())
    tally = fold([{"event": "playbook_on_play_start", "event_data": {"play": "Install the engine runtime"}},
                  {"event": "playbook_on_task_start", "event_data": {"task": "Build the image " + "x" * 200}}])
    progress.on_event(tally, {"event": "playbook_on_task_start"})
    head = text_of(progress, width=80).splitlines()[0]
    assert head.startswith("runtime 0s  task 0s  Install the engine runtime > Build the image xxx")
    assert head.rstrip().endswith("…")


def test_progress_prints_results_when_verbose():
    events = json.loads((FIXTURES / "green.json").read_text())["events"]
    console = Console(record=True, width=120, color_system=None)
    progress = render.StageProgress("doctor", console, verbosity=1)
    for i, event in enumerate(events):
        progress.on_event(fold(events[: i + 1]), event)
    lines = [line.split() for line in console.export_text().splitlines()]
    assert ["ok", "a", "Say", "hello"] in lines and ["ok", "b", "Say", "hello"] in lines


def _result(**kwargs):
    base = dict(name="preflight", playbook="playbooks/preflight.yml", status="failed", rc=2, exit_code=1,
                duration_s=83.2, stats={"spark1": {"ok": 11, "changed": 0, "failed": 0, "unreachable": 0, "skipped": 2},
                                        "spark2": {"ok": 9, "changed": 1, "failed": 1, "unreachable": 0, "skipped": 2}},
                failures=[Failure("spark2", "Fail with every failed check and its fix", "Preflight failed on spark2:\n[FAIL] gpu.driver")],
                artifact_dir="/p/.sparkctl/runner/artifacts/preflight-x")
    base.update(kwargs)
    return StageResult(**base)


def test_stage_summary_has_the_table_the_failure_and_the_log():
    console = Console(record=True, width=160, color_system=None)
    render.show_stage(_result(), console)
    text = console.export_text()
    assert "preflight: failed in 1m23s" in text
    rows = [line.replace("│", " ").split() for line in text.splitlines()]
    assert ["spark2", "9", "1", "1", "0", "2"] in rows
    assert "x spark2 failed at task Fail with every failed check and its fix:" in text
    assert "Preflight failed on spark2:\n[FAIL] gpu.driver" in text
    assert "full log: /p/.sparkctl/runner/artifacts/preflight-x/stdout" in text


@pytest.mark.parametrize("exit_code, verdict", [(0, "ok"), (2, "refused"), (3, "unreachable")])
def test_stage_verdicts(exit_code, verdict):
    assert f"preflight: {verdict} in" in text_of(render.stats_table(_result(exit_code=exit_code)))


def test_a_successful_stage_shows_no_log_line():
    console = Console(record=True, width=160, color_system=None)
    render.show_stage(_result(exit_code=0, status="successful", rc=0, failures=[]), console)
    assert "full log" not in console.export_text()


def test_a_stage_that_never_started_a_play():
    console = Console(record=True, width=160, color_system=None)
    render.show_stage(_result(stats={}, failures=[], rc=4), console)
    assert "preflight: failed (rc 4), no play ran" in console.export_text()


def test_output_is_printed_per_host_and_task():
    console = Console(record=True, width=100, color_system=None)
    result = _result(output=[{"host": "spark1", "task": "Print them", "msg": ["line one", "line [two]"]},
                             {"host": "spark2", "task": "Print them", "msg": "single"}])
    render.show_output(result, console)
    lines = [line.strip(" ─") for line in console.export_text().splitlines()]
    assert lines == ["spark1: Print them", "line one", "line [two]", "spark2: Print them", "single"]

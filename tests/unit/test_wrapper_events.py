"""The wrapper's event fold and exit codes, on event streams recorded from real
ansible-runner runs (tests/unit/fixtures/wrapper/record.py re-records them)."""

import json
from pathlib import Path

import pytest
from sparkctl import events
from sparkctl.events import EXIT_FAILED, EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE, Failure, fold

FIXTURES = Path(__file__).parent / "fixtures" / "wrapper"


def recorded(name):
    return json.loads((FIXTURES / f"{name}.json").read_text())


def folded(name):
    run = recorded(name)
    tally = fold(run["events"])
    return run, tally


def test_stats_come_from_the_stats_event():
    _, tally = folded("mixed")
    assert tally.host_stats() == {
        "a": {"ok": 2, "changed": 1, "failed": 0, "unreachable": 0, "skipped": 2},
        "b": {"ok": 2, "changed": 1, "failed": 1, "unreachable": 0, "skipped": 1},
        "c": {"ok": 1, "changed": 0, "failed": 0, "unreachable": 1, "skipped": 0},
    }


def test_counted_results_match_the_stats_event():
    # The live display counts results as they come; at the end they agree with ansible's own stats.
    _, tally = folded("mixed")
    assert tally.counts == tally.stats


def test_without_a_stats_event_the_counted_results_stand_in():
    run = recorded("mixed")
    tally = fold([e for e in run["events"] if e["event"] != "playbook_on_stats"])
    assert tally.stats is None
    assert tally.host_stats()["b"] == {"ok": 2, "changed": 1, "failed": 1, "unreachable": 0, "skipped": 1}


def test_failures_name_host_task_and_message():
    _, tally = folded("mixed")
    failures = {f.host: f for f in tally.final_failures()}
    assert set(failures) == {"b", "c"}
    assert failures["c"].kind == "unreachable"
    assert failures["c"].task == "Change something"
    assert "connect to host 127.0.0.1 port 1: Connection refused" in failures["c"].msg
    loop = failures["b"]
    assert (loop.kind, loop.task, loop.play) == ("failed", "Loop with a failing item", "Mixed results")
    # The loop's summary line, then only the failed item with its stderr.
    assert loop.msg.splitlines() == [
        "One or more items failed",
        "item 3: The command exited with a non-zero return code.",
        "stderr: boom",
    ]


def test_rescued_and_ignored_failures_are_not_failures():
    run, tally = folded("rescued")
    assert [f.task for f in tally.failures] == ["Fails inside the block"]
    assert tally.final_failures() == []
    assert events.exit_code(run["status"], run["rc"], tally.host_stats(), tally.final_failures()) == EXIT_OK


def test_inventory_refusal_is_a_usage_error_with_the_problems():
    run, tally = folded("bad_inventory")
    [failure] = tally.final_failures()
    assert failure.host == "localhost"
    assert failure.task.startswith(events.VALIDATION_TASK_PREFIX)
    assert failure.msg.splitlines()[0] == "The inventory is not usable:"
    assert "h2: spark_link[0].address 192.168.100.10 is already used by h1" in failure.msg
    assert events.exit_code(run["status"], run["rc"], tally.host_stats(), tally.final_failures()) == EXIT_USAGE


@pytest.mark.parametrize("name, expected", [("green", EXIT_OK), ("mixed", EXIT_UNREACHABLE), ("bad_inventory", EXIT_USAGE)])
def test_exit_code_of_recorded_runs(name, expected):
    run, tally = folded(name)
    assert events.exit_code(run["status"], run["rc"], tally.host_stats(), tally.final_failures()) == expected


def _stats(**per_host):
    base = dict.fromkeys(events.COUNTERS, 0)
    return {host: {**base, **counts} for host, counts in per_host.items()}


@pytest.mark.parametrize("status, rc, stats, failures, expected", [
    ("successful", 0, _stats(s1={"ok": 3}), [], EXIT_OK),
    ("failed", 2, _stats(s1={"failed": 1}), [Failure("s1", "Install", "boom")], EXIT_FAILED),
    ("failed", 4, _stats(s1={"ok": 1}, s2={"unreachable": 1}), [Failure("s2", "Gather", "no route", "unreachable")],
     EXIT_UNREACHABLE),
    # Unreachable wins over a failure elsewhere: the cause comes first.
    ("failed", 4, _stats(s1={"failed": 1}, s2={"unreachable": 1}), [Failure("s1", "x", "y")], EXIT_UNREACHABLE),
    ("failed", 2, _stats(localhost={"failed": 1}), [Failure("localhost", "Check groups, link plan, MTU", "bad")],
     EXIT_USAGE),
    # A failing task on the control node that is not the validation: a play failure.
    ("failed", 2, _stats(localhost={"failed": 1}), [Failure("localhost", "Write the report", "disk full")], EXIT_FAILED),
    # ansible-playbook refused its options before any play.
    ("failed", 5, {}, [], EXIT_USAGE),
    ("failed", 1, {}, [], EXIT_FAILED),
    ("timeout", 254, {}, [], EXIT_FAILED),
])
def test_exit_code(status, rc, stats, failures, expected):
    assert events.exit_code(status, rc, stats, failures) == expected


def test_live_state_follows_the_current_task():
    run = recorded("mixed")
    tally = events.Tally()
    seen = []
    for event in run["events"]:
        tally.feed(event)
        if event["event"] == "runner_on_start" and event["event_data"]["task"] == "Change something":
            seen.append(dict(tally.task_states))
    assert tally.play == "Mixed results"
    assert seen[-1] == {"a": "running", "b": "running", "c": "running"}
    assert tally.task == "Loop with a failing item"
    assert tally.task_states == {"a": "skipped", "b": "failed"}
    assert tally.task_counter == 4


@pytest.mark.parametrize("res, expected", [
    ({"msg": "plain"}, "plain"),
    ({"msg": ["The inventory is not usable:", "a", "b"]}, "The inventory is not usable:\na\nb"),
    ({"msg": "non-zero return code", "stderr": "E: disk full\n"}, "non-zero return code\nstderr: E: disk full"),
    ({"censored": "the output has been hidden"}, "the output has been hidden"),
    ({}, "(no message)"),
])
def test_failure_message(res, expected):
    assert events.failure_message(res) == expected


def test_failure_message_is_cut_when_huge():
    text = events.failure_message({"msg": "x" * 10000})
    assert len(text) < 4100 and text.endswith("[...]")


def test_files_the_tasks_wrote_are_remembered_unchanged_or_not():
    tally = fold([
        {"event": "runner_on_ok", "event_data": {"host": "s1", "task": "Write", "res": {"changed": False, "dest": "/r/preflight.json"}}},
        {"event": "runner_on_ok", "event_data": {"host": "s2", "task": "Write", "res": {"changed": True, "dest": "/r/preflight.json"}}},
        {"event": "runner_on_failed", "event_data": {"host": "s1", "task": "Write", "res": {"msg": "x", "dest": "/r/other.json"}}},
    ])
    assert tally.files == ["/r/preflight.json"]


def test_debug_output_is_collected_per_host():
    _, tally = folded("green")
    assert sorted(tally.output, key=lambda item: item["host"]) == [{"host": "a", "task": "Say hello", "msg": "hello"},
                                                                {"host": "b", "task": "Say hello", "msg": "hello"}]


def test_printed_lines_lose_credentials_inside_urls():
    tally = fold([
        {"event": "runner_on_failed", "event_data": {"host": "s1", "task": "Install", "res": {
            "msg": "pip could not reach https://bob:hunter2@pypi.example.com/simple", "stderr": "proxy http://u:pw@p:3128"}}},
        {"event": "runner_on_ok", "event_data": {"host": "s1", "task": "Show", "task_action": "ansible.builtin.debug",
                                                 "res": {"msg": ["HF_ENDPOINT=https://hf_tok@hub.example", "plain"]}}},
        {"event": "runner_on_ok", "event_data": {"host": "s2", "task": "Show", "task_action": "ansible.builtin.debug",
                                                 "res": {"msg": "https://a:b@x.example/"}}},
    ])
    text = json.dumps([f.as_dict() for f in tally.failures] + tally.output)
    for secret in ("hunter2", "u:pw", "hf_tok", "a:b@"):
        assert secret not in text
    assert tally.output[0]["msg"] == ["HF_ENDPOINT=https://<redacted by sparkctl>@hub.example", "plain"]
    assert "https://<redacted by sparkctl>@pypi.example.com/simple" in tally.failures[0].msg

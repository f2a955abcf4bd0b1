"""The bad-input catalogue (tests/catalogue/bad_inputs.yml) on the two-node lab.

For every entry: probe every node (labrun.probe_nodes: files under /etc/sparkctl,
/etc/netplan, /etc/systemd/system, /opt/sparkctl, /srv/sparkctl, addresses, MTUs, the
sparkctl units; not for an entry the inventory validation play refuses, whose run must not
reach a node at all), apply the entry to a copy of the lab inventory (plus its extra vars, and
the hub stand-in's settings for the gated-repo entries), run site.yml (with the entry's
tags, if any), and assert: rc != 0; refused at the entry's stage; every expected
substring (the variable and the fix) in the output and no forbidden one (secrets); no
Python traceback; changed=0 for every host in the recap; every probed node equal after.
A table of the results (id | stage | playbook | refused | message ok | state unchanged) is printed
at the end of the session (conftest.py: result_table).

An entry the inventory validation play refuses runs that play alone
(playbooks/validate_inventory.yml, which every stage playbook imports first and runs
whatever the tags: tests/unit/test_stage_hosts.py), but for the catalogue's first such
entry, which runs site.yml and shows the whole site stopping there: the same play and
message without parsing every role again (about 2 s of the control node's CPU an entry)."""

from __future__ import annotations

import json
import re
import time

import pytest
from labrun import bad_inputs, hub_request, lab, node_exec, probe_nodes, state_diff, write_inventory

pytestmark = pytest.mark.lab

HOSTS = ("spark1", "spark2")
ENTRIES = bad_inputs()
TABLE = "bad-input catalogue (tests/catalogue/bad_inputs.yml)"
HEADERS = ["id", "stage", "playbook", "refused", "message ok", "state unchanged", "seconds"]
TRACEBACK_MARKERS = ("Traceback (most recent call last)", "MODULE FAILURE")
TOOLS_PYTHON = "/opt/sparkctl/tools/bin/python"
VALIDATION_PLAYBOOK = "playbooks/validate_inventory.yml"
# Every validation entry without a playbook of its own but the first, which runs site.yml.
VALIDATION_ALONE = [e["id"] for e in ENTRIES if e["stage"] == "validation" and "playbook" not in e][1:]
# The first task that writes in the checkpoint stage; a refusal "before write" never reaches it.
FIRST_CHECKPOINT_WRITE = "checkpoint : Create the checkpoint directory, owned by the service user"


def _ensure_hub() -> None:
    """The hub stand-in answers on the head and knows the gate (an older copy is replaced)."""
    answer = hub_request("/_stub/faults", check=False)
    if answer["status"] != 200 or "gated" not in answer["body"]:
        lab("hub", "start")
    hub_request("/_stub/faults", {"reset": True})


def _has_checkpoint_tools() -> bool:
    return node_exec("spark1", "test", "-x", TOOLS_PYTHON, check=False).returncode == 0


def _found(text: str, output: str) -> bool:
    """text in the output, whitespace folded; also as YAML's single-quoted style prints it
    (quotes doubled) and as Ansible's error line prints it (Python repr)."""
    wanted = " ".join(text.split())
    folded = " ".join(output.split())
    return wanted in folded or wanted in folded.replace("''", "'") or wanted in folded.replace("\\'", "'")


# The record of the node before sparkctl's first change (roles/teardown, tasks/baseline.yml):
# every stage that changes a node takes it first, once per node, whatever the tags, so that
# `sparkctl teardown` can undo even a run refused half-way. It is sparkctl's bookkeeping, not a
# step of the stage; the entry's state probe still sees whether it changed anything.
NODE_RECORD_TASKS = ("teardown : Record the node before sparkctl's first change",
                     "teardown : Remember the record is there for this run's later stages")


def _tasks(output: str) -> list[str]:
    """The tasks that ran, without the argument-spec checks every imported role runs whatever the
    tags (they are tagged `always`): those change nothing and say nothing of how far the run got;
    nor the node's record every changing stage takes first (NODE_RECORD_TASKS)."""
    tasks = re.findall(r"^TASK \[(.*)\] \**$", output, flags=re.M)
    return [t for t in tasks if "Validating arguments against arg spec" not in t and t not in NODE_RECORD_TASKS]


def _stage_problems(entry: dict, run) -> list[str]:
    """Where the run stopped, against the entry's stage."""
    stage, tasks = entry["stage"], _tasks(run.output)
    roles = {task.split(" : ", 1)[0] for task in tasks if " : " in task}
    if stage == "validation":
        problems = [] if "The inventory is not usable:" in run.output else ["no 'The inventory is not usable:'"]
        if set(run.recap) != {"localhost"}:
            problems.append(f"hosts other than the control node ran tasks: {sorted(run.recap)}")
        return problems
    if stage == "arguments":
        problems = [] if "Validation of arguments failed" in run.output else ["no 'Validation of arguments failed'"]
        if roles - {"spark"}:
            problems.append(f"roles after the argument check ran: {sorted(roles - {'spark'})}")
        return problems
    if stage == "preflight":
        problems = [] if "Preflight failed on " in run.output else ["no 'Preflight failed on'"]
        if roles - {"spark", "preflight"}:
            problems.append(f"roles after preflight ran: {sorted(roles - {'spark', 'preflight'})}")
        return problems
    problems = [] if any(t.startswith("checkpoint : ") for t in tasks) else ["the checkpoint stage did not run"]
    if roles - {"spark", "checkpoint"}:
        problems.append(f"roles other than checkpoint ran: {sorted(roles - {'spark', 'checkpoint'})}")
    if FIRST_CHECKPOINT_WRITE in tasks:
        problems.append("the checkpoint stage reached its first write")
    return problems


@pytest.mark.parametrize("entry", [pytest.param(e, id=e["id"]) for e in ENTRIES])
def test_bad_input_is_refused_before_any_change(entry, lab_up, run_site, tmp_path, monkeypatch, result_table):
    playbook = entry.get("playbook") or (VALIDATION_PLAYBOOK if entry["id"] in VALIDATION_ALONE else "site.yml")
    row = {"id": entry["id"], "stage": entry["stage"], "playbook": playbook.rsplit("/", 1)[-1],
           "refused": "-", "message ok": "-", "state unchanged": "-"}
    result_table(TABLE, HEADERS).append(row)
    produce = entry["produce"]
    for need in entry.get("requires", []):
        if need == "hub":
            _ensure_hub()
        elif need == "checkpoint-tools" and not _has_checkpoint_tools():
            row["refused"] = "skipped"
            pytest.skip(f"needs a lab whose checkpoint stage ran once ({TOOLS_PYTHON} on the head)")

    inventory = write_inventory(tmp_path / "inv", change=produce)
    args = ["-e", json.dumps(produce["extra_vars"])] if produce.get("extra_vars") else []
    if entry.get("tags"):
        args += ["--tags", ",".join(entry["tags"])]
    # One line per message: PyYAML would otherwise fold long messages at ~80 columns.
    monkeypatch.setenv("ANSIBLE_CALLBACK_YAML_LINE_WIDTH", "no-break")

    # An entry refused by the inventory validation play never reaches a node: its stage check
    # holds the run to tasks on the control node alone (the recap names no node), which says
    # more than probing the nodes' files before and after would.
    probed = entry["stage"] != "validation"
    if produce.get("hub"):
        hub_request("/_stub/faults", produce["hub"])
    try:
        before = probe_nodes(HOSTS) if probed else {}
        started = time.monotonic()
        run = run_site(*args, inventory=inventory, playbook=playbook)
        row["seconds"] = f"{time.monotonic() - started:.1f}"
        after = probe_nodes(HOSTS) if probed else {}
    finally:
        if produce.get("hub"):
            hub_request("/_stub/faults", {"reset": True})

    stage_problems = _stage_problems(entry, run)
    refused = run.rc != 0 and "PLAY RECAP" in run.output and not stage_problems
    missing = [s for s in entry["expect"] if not _found(s, run.output)]
    shown = [s for s in entry.get("forbid", []) if s in run.output]
    tracebacks = [m for m in TRACEBACK_MARKERS if m in run.output]
    # Nothing at all: a directory no earlier run named (another checkpoint directory) is learnt by
    # the teardown's record of the node only right before the step that creates it
    # (roles/teardown, tasks/learn.yml), which a refused run never reaches.
    changed = {host: counts.get("changed", 0) for host, counts in run.recap.items() if counts.get("changed", 0)}
    diff = state_diff(before, after)
    row.update({
        "refused": "yes" if refused else "NO",
        "message ok": "yes" if not (missing or shown or tracebacks) else "NO",
        "state unchanged": "yes" if not (changed or diff) else "NO",
    })

    problems = []
    if run.rc == 0:
        problems.append("the run succeeded (rc 0)")
    problems += [f"stage {entry['stage']}: {p}" for p in stage_problems]
    problems += [f"expected in the output: {s!r}" for s in missing]
    problems += [f"must not be in the output: {s!r}" for s in shown]
    problems += [f"a Python traceback in the output ({m!r})" for m in tracebacks]
    problems += [f"changed={n} on {host}" for host, n in changed.items()]
    problems += [f"node state changed: {line}" for line in diff]
    assert not problems, "\n".join(problems) + "\n--- output (tail) ---\n" + run.output[-6000:]

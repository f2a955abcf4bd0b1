"""The fault catalogue (tests/catalogue/faults.yml) on the two-node lab: each fault is
made by hand, ONE re-run of the owning stage (site.yml with its tag) must repair it,
and a further run must report changed=0 on every node.

Faults of one `batch` are broken together and share that re-run (the union of their
tags) and the quiet run after it; each fault still gets its own test and verdict: its
own probes, and every change of the repair run explained by the owner role and nodes of
some fault of the batch (labrun.batch_problems keeps batches from weakening that). A
table of the results is printed in the terminal summary (conftest.py: result_table) and
kept in <report dir>/faults.json."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

import pytest
import yaml
from labrun import REPO, batch_problems, batch_tags, fault_batches, fault_nodes, lab, node_args, node_exec, unexplained_changes

pytestmark = pytest.mark.lab

HOSTS = ("spark1", "spark2")
CATALOGUE = REPO / "tests" / "catalogue" / "faults.yml"
FAULTS = yaml.safe_load(CATALOGUE.read_text())
BATCHES = fault_batches(FAULTS)
BATCH_OF = {fault["id"]: name for name, members in BATCHES for fault in members}
ORDERED = [fault for _name, members in BATCHES for fault in members]
TABLE = "fault catalogue: break, one re-run repairs, the next run changes nothing"
HEADERS = ["fault", "batch", "stage", "broken on", "repair run changed", "repaired", "then quiet", "batch seconds"]


@dataclass
class BatchOutcome:
    """What one batch's runs showed; each fault's test reads its own part."""

    tags: str
    seconds: float = 0.0
    error: str = ""                                  # a step or run of the batch failed outright
    repair_changed: str = "-"
    unexplained: dict = field(default_factory=dict)  # host -> changed tasks no fault explains
    not_repaired: dict = field(default_factory=dict)  # fault id -> what its probes saw
    quiet_changes: dict = field(default_factory=dict)  # host -> tasks the quiet run changed
    restore_error: str = ""


@pytest.fixture(scope="module")
def served(site_converged, run_site):
    # site.yml once for the session (conftest.py); this module leaves the cluster as it found it.
    yield site_converged
    # A provision-stage repair of fabric.env leaves Ray started before its environment file:
    # the serve stage restarts what is stale, so the modules after this one find a converged cluster.
    settle = run_site("--tags", "serve")
    assert settle.rc == 0, settle.output[-4000:]


@pytest.fixture(scope="module")
def image_runtime(image_base, run_site):
    """The lab-image profile's image on every node (Docker and the local base image, conftest.py; one runtime run)."""
    run = run_site("-e", "spark_model_profile=lab-image", playbook="playbooks/runtime.yml")
    assert run.rc == 0, run.output[-4000:]
    return run


@pytest.fixture(scope="module")
def batch_outcomes():
    return {}


def _steps(steps):
    for step in steps or []:
        if "lab" in step:
            lab(*[str(arg) for arg in step["lab"]])
        else:
            node_exec(step["node"], *node_args(step["node"], step["run"]))


def _probe(probe) -> str | None:
    """None when the probe holds (retrying up to retry_seconds), else what it saw."""
    deadline = time.monotonic() + float(probe.get("retry_seconds", 0))
    while True:
        seen = _probe_once(probe)
        if seen is None or time.monotonic() >= deadline:
            return seen
        time.sleep(3)


def _probe_once(probe) -> str | None:
    if "same_on" in probe:
        outputs = {node: node_exec(node, *node_args(node, probe["run"]), check=False) for node in probe["same_on"]}
        texts = {node: (proc.returncode, proc.stdout.split()[0] if proc.stdout.split() else "")
                 for node, proc in outputs.items()}
        return None if len(set(texts.values())) == 1 and all(rc == 0 for rc, _ in texts.values()) else str(texts)
    proc = node_exec(probe["node"], *node_args(probe["node"], probe["run"]), check=False)
    if proc.returncode != 0:
        return f"rc={proc.returncode} {proc.stdout.strip()[-300:]} {proc.stderr.strip()[-300:]}"
    if probe.get("stdout_contains") and probe["stdout_contains"] not in proc.stdout:
        return f"no {probe['stdout_contains']!r} in {proc.stdout.strip()[-300:]!r}"
    return None


def _rerun(run_site, members, tags):
    extra = ["--tags", tags]
    extra_vars = members[0].get("extra_vars")  # batch_problems: one set per batch
    if extra_vars:
        extra += ["-e", json.dumps(extra_vars)]
    return run_site(*extra)


def _run_batch(members, run_site) -> BatchOutcome:
    """Break every fault of the batch, one repair run, every fault's probes, one quiet run,
    then the fixtures' restore steps and, unless none needs one, a run after them."""
    outcome = BatchOutcome(tags=batch_tags(members))
    started = time.monotonic()
    try:
        for fault in members:
            _steps(fault["break"])
        repair = _rerun(run_site, members, outcome.tags)
        outcome.repair_changed = ",".join(f"{h}={repair.changed(h)}" for h in HOSTS if h in repair.recap) or "-"
        if repair.rc != 0:
            outcome.error = f"the repair run failed (rc={repair.rc}):\n{repair.output[-5000:]}"
            return outcome
        for fault in members:
            seen = [s for s in (_probe(p) for p in fault["repaired"]) if s is not None]
            if seen:
                outcome.not_repaired[fault["id"]] = seen
        outcome.unexplained = unexplained_changes({h: repair.changed_tasks(h) for h in HOSTS}, members)
        quiet = _rerun(run_site, members, outcome.tags)
        if quiet.rc != 0:
            outcome.error = f"the quiet run failed (rc={quiet.rc}):\n{quiet.output[-5000:]}"
            return outcome
        outcome.quiet_changes = {h: quiet.changed_tasks(h) for h in HOSTS if quiet.changed(h)}
    finally:
        restores = [fault for fault in members if fault.get("restore")]
        for fault in restores:
            _steps(fault["restore"])
        # A restore that puts a node back exactly as site.yml left it needs no run after it
        # (restore_needs_run: false); one that moves a lab fixture the stack reads does.
        if any(fault.get("restore_needs_run", True) for fault in restores):
            restored = _rerun(run_site, members, outcome.tags)
            if restored.rc != 0:
                outcome.restore_error = f"the run after the restore steps failed:\n{restored.output[-3000:]}"
        outcome.seconds = round(time.monotonic() - started, 1)
    return outcome


def test_catalogue_batches_keep_each_faults_checks():
    assert not batch_problems(FAULTS), batch_problems(FAULTS)


@pytest.mark.parametrize("fault", ORDERED, ids=[f["id"] for f in ORDERED])
def test_fault_is_repaired_by_one_run_then_quiet(fault, served, run_site, request, result_table, report_dir,
                                                 batch_outcomes):
    name = BATCH_OF[fault["id"]]
    members = dict(BATCHES)[name]
    if fault.get("requires") == "image_runtime":
        request.getfixturevalue("image_runtime")
    if name not in batch_outcomes:
        batch_outcomes[name] = _run_batch(members, run_site)
    outcome = batch_outcomes[name]

    repaired = not outcome.error.startswith("the repair") and fault["id"] not in outcome.not_repaired \
        and not outcome.unexplained
    quiet = repaired and not outcome.error and not outcome.quiet_changes
    rows = result_table(TABLE, HEADERS)
    rows.append({"fault": fault["id"], "batch": name if len(members) > 1 else "-", "stage": outcome.tags,
                 "broken on": ",".join(sorted(fault_nodes(fault))), "repair run changed": outcome.repair_changed,
                 "repaired": "yes" if repaired else "NO", "then quiet": "yes" if quiet else "NO",
                 "batch seconds": outcome.seconds})
    passed = sum(1 for r in rows if r["repaired"] == r["then quiet"] == "yes")
    (report_dir / "faults.json").write_text(json.dumps({"passed": passed, "total": len(FAULTS), "results": rows},
                                                       indent=2))

    assert not outcome.error.startswith("the repair"), outcome.error
    assert fault["id"] not in outcome.not_repaired, f"{fault['id']} not repaired: {outcome.not_repaired[fault['id']]}"
    assert not outcome.unexplained, (f"the repair run of batch {name} changed what none of its faults "
                                     f"({', '.join(f['id'] for f in members)}) owns: {outcome.unexplained}")
    assert not outcome.error, outcome.error
    assert not outcome.quiet_changes, f"the run after the repair still changed: {outcome.quiet_changes}"
    assert not outcome.restore_error, outcome.restore_error

"""The fault catalogue (tests/catalogue/faults.yml) on the two-node lab: each fault is
made by hand, ONE re-run of the owning stage (site.yml with its tag) must repair it,
and a further run must report changed=0 on every node. A table of the results is
printed in the terminal summary (conftest.py: result_table) and kept in
<report dir>/faults.json."""

from __future__ import annotations

import json
import time

import pytest
import yaml
from labrun import REPO, lab, node_exec

pytestmark = pytest.mark.lab

HOSTS = ("spark1", "spark2")
CATALOGUE = REPO / "tests" / "catalogue" / "faults.yml"
FAULTS = yaml.safe_load(CATALOGUE.read_text())
TABLE = "fault catalogue: break, one re-run repairs, the next run changes nothing"
HEADERS = ["fault", "stage", "broken on", "repair run changed", "repaired", "then quiet", "seconds"]


@pytest.fixture(scope="module")
def served(site_converged, run_site):
    # site.yml once for the session (conftest.py); this module leaves the cluster as it found it.
    yield site_converged
    # A provision-stage repair of fabric.env leaves Ray started before its environment file:
    # the serve stage restarts what is stale, so the modules after this one find a converged cluster.
    settle = run_site("--tags", "serve")
    assert settle.rc == 0, settle.output[-4000:]


@pytest.fixture(scope="module")
def image_runtime(lab_up, run_site):
    """The lab-image profile's image on every node (Docker, the local base image, one runtime run)."""
    profile = ("-e", "spark_model_profile=lab-image")
    docker = run_site(*profile, "--tags", "engine_image_docker", playbook="playbooks/runtime.yml")
    assert docker.rc == 0, docker.output[-4000:]
    lab("base-image")
    run = run_site(*profile, playbook="playbooks/runtime.yml")
    assert run.rc == 0, run.output[-4000:]
    return run


def _steps(steps):
    for step in steps or []:
        if "lab" in step:
            lab(*[str(arg) for arg in step["lab"]])
        else:
            node_exec(step["node"], *[str(arg) for arg in step["run"]])


def _probe(probe) -> str | None:
    """None when the probe holds (retrying up to retry_seconds), else what it saw."""
    deadline = time.monotonic() + float(probe.get("retry_seconds", 0))
    while True:
        seen = _probe_once(probe)
        if seen is None or time.monotonic() >= deadline:
            return seen
        time.sleep(3)


def _probe_once(probe) -> str | None:
    argv = [str(arg) for arg in probe["run"]]
    if "same_on" in probe:
        outputs = {node: node_exec(node, *argv, check=False) for node in probe["same_on"]}
        texts = {node: (proc.returncode, proc.stdout.split()[0] if proc.stdout.split() else "")
                 for node, proc in outputs.items()}
        return None if len(set(texts.values())) == 1 and all(rc == 0 for rc, _ in texts.values()) else str(texts)
    proc = node_exec(probe["node"], *argv, check=False)
    if proc.returncode != 0:
        return f"rc={proc.returncode} {proc.stdout.strip()[-300:]} {proc.stderr.strip()[-300:]}"
    if probe.get("stdout_contains") and probe["stdout_contains"] not in proc.stdout:
        return f"no {probe['stdout_contains']!r} in {proc.stdout.strip()[-300:]!r}"
    return None


def _rerun(run_site, fault):
    extra = ["--tags", fault["tags"]]
    if fault.get("extra_vars"):
        extra += ["-e", json.dumps(fault["extra_vars"])]
    return run_site(*extra)


def _unexpected_changes(run, fault) -> dict[str, list[str]]:
    """Changes the repair run made outside the owning role or on nodes that did not drift."""
    drifted = {step["node"] for step in fault["break"]}
    unexpected = {}
    for host in HOSTS:
        tasks = run.changed_tasks(host)
        if fault.get("drifted_only") and host not in drifted and tasks:
            unexpected[host] = tasks
        elif fault.get("owner"):
            wrong = [t for t in tasks if not t.startswith(f"{fault['owner']} : ")]
            if wrong:
                unexpected[host] = wrong
    return unexpected


@pytest.mark.parametrize("fault", FAULTS, ids=[f["id"] for f in FAULTS])
def test_fault_is_repaired_by_one_run_then_quiet(fault, served, run_site, request, result_table, report_dir):
    if fault.get("requires") == "image_runtime":
        request.getfixturevalue("image_runtime")
    rows = result_table(TABLE, HEADERS)
    row = {"fault": fault["id"], "stage": fault["tags"], "broken on": ",".join(sorted({s["node"] for s in fault["break"]})),
           "repair run changed": "-", "repaired": "NO", "then quiet": "NO", "seconds": 0.0}
    rows.append(row)
    started = time.monotonic()
    try:
        _steps(fault["break"])
        repair = _rerun(run_site, fault)
        row["repair run changed"] = ",".join(f"{h}={repair.changed(h)}" for h in HOSTS if h in repair.recap) or "-"
        assert repair.rc == 0, repair.output[-5000:]
        failures = [seen for seen in (_probe(p) for p in fault["repaired"]) if seen is not None]
        assert not failures, f"{fault['id']} not repaired: {failures}"
        assert not _unexpected_changes(repair, fault), _unexpected_changes(repair, fault)
        row["repaired"] = "yes"
        quiet = _rerun(run_site, fault)
        assert quiet.rc == 0, quiet.output[-5000:]
        assert all(quiet.changed(h) == 0 for h in HOSTS), {h: quiet.changed_tasks(h) for h in HOSTS}
        row["then quiet"] = "yes"
    finally:
        row["seconds"] = round(time.monotonic() - started, 1)
        passed = sum(1 for r in rows if r["repaired"] == r["then quiet"] == "yes")
        (report_dir / "faults.json").write_text(json.dumps({"passed": passed, "total": len(FAULTS), "results": rows},
                                                           indent=2))
        if fault.get("restore"):
            _steps(fault["restore"])
            restored = _rerun(run_site, fault)
            assert restored.rc == 0, restored.output[-3000:]

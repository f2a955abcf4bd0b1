"""The container-image runtime (role engine_image) on the two-node lab, with the lab-image
profile: the patched image is built on the head from a locally built base (the lab has no
registry: `sparklab base-image`), shipped to the worker over the cable and run on both.
--check on a changed context reports the rebuild and the ship without making them; one
changed patch file means exactly one rebuild and one ship, and the converged re-run after
it changes nothing; a worker that lost its image gets it shipped again without a rebuild,
even while the run shares an SSH master to the head that was opened before the service user
joined the docker group.

The profile's context is used from a temporary copy (spark_profile_overrides), so the
repository's files are never modified; the copy hashes the same as the original."""

from __future__ import annotations

import json
import os
import re
import shutil
import time

import pytest
from labrun import REPO, configured_callbacks, node_exec

pytestmark = pytest.mark.lab

HOSTS = ("spark1", "spark2")
TAG = "sparklab/engine:local"
LABEL = "org.sparkctl.context-hash"
CONTEXT = REPO / "tests" / "lab" / "profiles" / "contexts" / "lab-image"
BUILD = "engine_image : Build the image when the tag is missing or was built from another context"
SHIP = "engine_image : Stream the image to each worker that holds another ID"
WOULD_SHIP = "engine_image : Report the workers that would receive the image"
TIMINGS: dict[str, float] = {}


def _image(node: str) -> tuple[str, str]:
    """(image ID, context-hash label) of the profile's tag on node; ('', '') when absent."""
    proc = node_exec(node, "docker", "image", "inspect", "--format", "{{json .}}", TAG, check=False)
    if proc.returncode != 0:
        return "", ""
    info = json.loads(proc.stdout)
    return info["Id"], (info["Config"].get("Labels") or {}).get(LABEL, "")


@pytest.fixture(scope="module")
def context_copy(tmp_path_factory):
    copy = tmp_path_factory.mktemp("lab-image") / "context"
    shutil.copytree(CONTEXT, copy)
    return copy


@pytest.fixture(scope="module")
def task_timings():
    """Per-task durations in the runs' output (profile_tasks), for the timing report."""
    saved = os.environ.get("ANSIBLE_CALLBACKS_ENABLED")
    os.environ["ANSIBLE_CALLBACKS_ENABLED"] = ",".join(filter(None, [configured_callbacks(), "ansible.posix.profile_tasks"]))
    yield
    if saved is None:
        os.environ.pop("ANSIBLE_CALLBACKS_ENABLED", None)
    else:
        os.environ["ANSIBLE_CALLBACKS_ENABLED"] = saved


def _task_seconds(output: str, task: str) -> float | None:
    match = re.search(re.escape(task) + r" -+ ([0-9.]+)s$", output, re.M)
    return float(match.group(1)) if match else None


@pytest.fixture(scope="module")
def runtime(run_site, context_copy, task_timings):
    """Run playbooks/runtime.yml with the lab-image profile built from the copy; time it."""
    overrides = {"runtime": {"image": {"build": {"context": str(context_copy)}}}}

    def _run(step: str, *extra: str):
        started = time.monotonic()
        run = run_site("-e", "spark_model_profile=lab-image", "-e", json.dumps({"spark_profile_overrides": overrides}),
                       *extra, playbook="playbooks/runtime.yml")
        TIMINGS[step] = time.monotonic() - started
        parts = [f"{name} {seconds:.1f} s" for name, seconds in
                 (("build", _task_seconds(run.output, BUILD)), ("ship", _task_seconds(run.output, SHIP)))
                 if seconds is not None and seconds >= 0.5]
        print(f"\n[timing] {step}: {TIMINGS[step]:.1f} s" + (f" ({', '.join(parts)})" if parts else ""))
        return run

    return _run


@pytest.fixture(scope="module")
def first_run(image_base, runtime):
    # Docker and the lab's local base image on the head (conftest.py, shared with the fault
    # catalogue), then a start without the engine image on any node.
    TIMINGS.update(image_base)
    for node in HOSTS:
        node_exec(node, "docker", "rmi", TAG, check=False)
    run = runtime("first run (build on head, ship, smoke)")
    assert run.rc == 0, run.output
    return run


def test_first_run_builds_on_the_head_ships_and_runs_everywhere(first_run, context_copy):
    assert first_run.changed_tasks("spark1").count(BUILD) == 1
    assert first_run.changed_tasks("spark1").count(SHIP) == 1
    assert BUILD not in first_run.changed_tasks("spark2")
    head_id, head_label = _image("spark1")
    assert head_id and _image("spark2") == (head_id, head_label)
    assert head_label.startswith("sha256:")
    for node in HOSTS:
        assert f"{node}: {TAG} ({head_id[:19]}) runs: sparkctl-smoke" in first_run.output
    # The build applied the patch (the stamp is the patch file's sha256).
    stamp = node_exec("spark2", "docker", "run", "--rm", "--entrypoint", "cat", TAG, "/opt/sparklab-engine/PATCHED").stdout
    assert len(stamp.strip()) == 64


def test_one_changed_patch_file_rebuilds_once_and_ships_once(first_run, runtime, context_copy):
    before = _image("spark1")
    patch = context_copy / "sparklab_patch.py"
    patch.write_text(patch.read_text().replace("PATCH_LEVEL = 1", "PATCH_LEVEL = 2"))

    check = runtime("--check with a changed patch file", "--check")
    assert check.rc == 0, check.output
    assert BUILD in check.changed_tasks("spark1") and WOULD_SHIP in check.changed_tasks("spark1")
    assert _image("spark1") == before and _image("spark2") == before

    run = runtime("one patch file changed (rebuild + ship)")
    assert run.rc == 0, run.output
    assert run.changed_tasks("spark1").count(BUILD) == 1
    assert run.changed_tasks("spark1").count(SHIP) == 1
    after = _image("spark1")
    assert after[0] != before[0] and after[1] != before[1]
    assert _image("spark2") == after

    quiet = runtime("re-run after the change")
    assert all(quiet.changed(h) == 0 for h in HOSTS), {h: quiet.changed_tasks(h) for h in HOSTS}


def test_worker_that_lost_its_image_gets_it_shipped_without_a_rebuild(first_run, runtime):
    head = _image("spark1")
    node_exec("spark2", "docker", "rmi", TAG)
    assert _image("spark2") == ("", "")
    run = runtime("worker lost its image (ship only)")
    assert run.rc == 0, run.output
    assert BUILD not in run.changed_tasks("spark1")
    assert run.changed_tasks("spark1").count(SHIP) == 1
    assert _image("spark1") == head and _image("spark2") == head


def test_report_timings(first_run):
    print("\n[timings] " + json.dumps({k: round(v, 1) for k, v in TIMINGS.items()}, indent=1))

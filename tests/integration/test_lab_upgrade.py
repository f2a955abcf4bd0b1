"""Upgrading the image runtime of a serving lab cluster, as a user bumps an image tag and re-runs,
through `sparkctl` as a user types it.

The lab-image profile (copies of its context, on the lab's engine base: the stand-in engine and
sparkctl's Ray in the image, `sparklab base-image --engine`): the served venv cluster switched to the
image profile serves from containers on every node and is verified; a tag bump with a changed patch
file is built by the runtime stage beside the old image on every node while the old one keeps
serving (the API, polled throughout, never down), the serve stage restarts the containers from the
new image (the API down once, that window's length in the report table), and `sparkctl rollback`
serves the old image again with nothing built, pulled or shipped. (The venv runtime's pin bump,
built beside, switched to and rolled back, is test_lab_rollback.py's record B.)

Its own marker (`upgrade`): builds and engine restarts that change the lab; each step's time goes in
the session's report table. The history is the module's own directory ($SPARKCTL_DEPLOYMENT_DIR), so
the steps' records are the only ones."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest
from labrun import LAB_INVENTORY_DIR, REPO, HealthWatch, lab, node_exec, served_standin_version, unit_started

pytestmark = [pytest.mark.lab, pytest.mark.upgrade]

HOSTS = ("spark1", "spark2")
# The stand-in's release in the lab's engine base (the one the venv profile pins).
OLD = "0.3.0"
ENGINE_UNIT = "sparkctl-engine.service"
IMAGE_CONTEXT = REPO / "tests" / "lab" / "profiles" / "contexts" / "lab-image"
OLD_TAG, NEW_TAG = "sparklab/engine:local", "sparklab/engine:bumped"
# The lab's base with the engine in it (tests/lab/sparklab.py, ENGINE_BASE_TAG).
ENGINE_BASE = "sparklab/base:engine"
# The image profile's Ray units run their containers under these names (profile_render: the unit's stem).
RAY_CONTAINERS = {"spark1": "sparkctl-ray-head", "spark2": "sparkctl-ray-worker"}
# roles/ray_cluster's recovery of a degraded cluster, as the wrapper lists the task: a planned
# restart from a new runtime is not one.
RECOVERY = "Say why the cluster is being recovered"


def node_records() -> list[dict]:
    return [json.loads(node_exec(host, "cat", "/etc/sparkctl/deployment.json").stdout) for host in HOSTS]


def served_id() -> str:
    ids = {record["deployment_id"] for record in node_records()}
    assert len(ids) == 1, ids
    return ids.pop()


@pytest.fixture(scope="module")
def sparkctl(report_dir, tmp_path_factory, result_table):
    """`python -m sparkctl` of this checkout against the lab, the history in a directory of the
    module's own; each call's time (and the API's down windows) goes in the report table."""
    history = tmp_path_factory.mktemp("deployments")
    table = result_table("runtime upgrade (tests/integration/test_lab_upgrade.py)", ["step", "rc", "seconds", "API down"])

    def _run(step: str, *argv: str, rc: int = 0) -> tuple[str, list[float]]:
        env = dict(os.environ, SPARKCTL_REPORT_DIR=str(report_dir), SPARKCTL_DEPLOYMENT_DIR=str(history),
                   COLUMNS="200", NO_COLOR="1")
        t0 = time.monotonic()
        with HealthWatch() as watch:
            proc = subprocess.run([sys.executable, "-m", "sparkctl", *argv, "-i", str(LAB_INVENTORY_DIR)], cwd=REPO,
                                  env=env, capture_output=True, text=True, timeout=1800)
        down = watch.down_windows()
        table.append({"step": step, "rc": proc.returncode, "seconds": f"{time.monotonic() - t0:.0f}",
                      "API down": watch.summary()})
        output = proc.stdout + proc.stderr
        assert proc.returncode == rc, output[-6000:]
        return output, down

    return _run


@pytest.fixture(scope="module")
def start_record(site_converged, sparkctl):
    """The served lab-standin recorded in the module's history (record A); its id."""
    sparkctl("verify (records A)", "verify")
    return served_id()


@pytest.fixture(scope="module")
def image_contexts(tmp_path_factory):
    """Two copies of the lab-image context: as shipped, and with its patch file bumped (another image)."""
    base = tmp_path_factory.mktemp("lab-image")
    old, new = base / "old", base / "new"
    shutil.copytree(IMAGE_CONTEXT, old)
    shutil.copytree(IMAGE_CONTEXT, new)
    patch = new / "sparklab_patch.py"
    patch.write_text(patch.read_text().replace("PATCH_LEVEL = 1", "PATCH_LEVEL = 2"))
    return old, new


def _image_vars(context, tag) -> str:
    build = {"context": str(context), "tag": tag, "base": ENGINE_BASE}
    return json.dumps({"spark_model_profile": "lab-image",
                       "spark_profile_overrides": {"runtime": {"image": {"build": build}}}})


def image_id(host: str, tag: str) -> str:
    proc = node_exec(host, "docker", "image", "inspect", "--format", "{{.Id}}", tag, check=False)
    return proc.stdout.strip() if proc.returncode == 0 else ""


def all_images(host: str) -> list[str]:
    return sorted(node_exec(host, "docker", "images", "--no-trunc", "--format", "{{.Repository}}:{{.Tag}} {{.ID}}").stdout.splitlines())


def running_images() -> dict[str, str]:
    """Per node, the image ID its Ray container runs ("" when none runs)."""
    out = {}
    for host, container in RAY_CONTAINERS.items():
        proc = node_exec(host, "docker", "inspect", "--format", "{{.Image}}", container, check=False)
        out[host] = proc.stdout.strip() if proc.returncode == 0 else ""
    return out


def container_rdma_devices() -> dict[str, list[str]]:
    """Per node, what its Ray container sees under /dev/infiniband (NCCL's RDMA devices)."""
    return {host: node_exec(host, "docker", "exec", container, "ls", "/dev/infiniband").stdout.split()
            for host, container in RAY_CONTAINERS.items()}


@pytest.fixture(scope="module")
def engine_image_base(image_base, run_site):
    """The engine base on the head, for the image profile to serve from; afterwards the lab
    serves its venv profile again, as the modules after this one expect."""
    lab("base-image", "--engine", OLD)
    yield
    back = run_site()
    assert back.rc == 0, back.output[-6000:]


def test_an_image_tag_bump_is_built_beside_then_served_verified_and_rolled_back(start_record, engine_image_base,
                                                                              image_contexts, sparkctl):
    old_context, new_context = image_contexts

    # The served venv cluster switched to the image profile: built on the head, shipped, served
    # from a container on every node, verified and recorded.
    sparkctl(f"image {OLD_TAG}: up (switch from the venv)", "up", "-e", _image_vars(old_context, OLD_TAG))
    old_id = {host: image_id(host, OLD_TAG) for host in HOSTS}
    assert all(old_id.values()) and len(set(old_id.values())) == 1, old_id
    assert running_images() == old_id
    # Each container was given the node's RDMA devices (the lab's stand-in nodes), as NCCL needs.
    assert all({"uverbs0", "rdma_cm"} <= set(seen) for seen in container_rdma_devices().values()), container_rdma_devices()
    assert served_standin_version() == OLD
    image_record = served_id()
    assert image_record != start_record
    engine_before = unit_started("spark1", ENGINE_UNIT)

    # The runtime stage builds the bumped image beside the old one on every node; nothing serving moves.
    output, down = sparkctl(f"image {NEW_TAG}, patch bumped: runtime (beside)", "up", "--tags", "runtime",
                            "-e", _image_vars(new_context, NEW_TAG))
    assert down == [], down
    new_id = {host: image_id(host, NEW_TAG) for host in HOSTS}
    assert all(new_id.values()) and len(set(new_id.values())) == 1 and new_id != old_id, new_id
    assert {host: image_id(host, OLD_TAG) for host in HOSTS} == old_id   # beside, not instead
    assert running_images() == old_id and unit_started("spark1", ENGINE_UNIT) == engine_before

    # The serve stage switches: the containers restart from the new image, the API down once.
    output, down = sparkctl(f"image {NEW_TAG}: serve + verify (switch)", "up", "--tags", "serve,verify",
                            "-e", _image_vars(new_context, NEW_TAG))
    assert len(down) == 1, down
    assert RECOVERY not in output, output[-6000:]
    assert running_images() == new_id
    assert served_id() not in (start_record, image_record)

    # Back to the old image: nothing built, pulled or shipped, the old image serves the old record.
    images = {host: all_images(host) for host in HOSTS}
    output, down = sparkctl(f"rollback to {OLD_TAG}", "rollback")
    assert len(down) == 1, down
    assert running_images() == old_id
    assert served_id() == image_record
    assert {host: all_images(host) for host in HOSTS} == images

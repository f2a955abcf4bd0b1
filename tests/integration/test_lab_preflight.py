"""Preflight on the two-node lab: green and unchanged on a healthy lab; each
broken precondition stops the run with the node, the problem and the fix,
before anything changes. Bad inventories are the bad-input catalogue's
(tests/catalogue/bad_inputs.yml, test_lab_bad_inputs.py)."""

from __future__ import annotations

import json

import pytest
from labrun import lab, node_exec, read_report

pytestmark = pytest.mark.lab

HOSTS = ("spark1", "spark2")


def assert_stopped_before_any_change(run, failed_hosts, *lines):
    """The run failed in preflight on each of failed_hosts, its output holds each of lines (the problem and
    the fix), and no host changed."""
    assert run.rc != 0
    for host in failed_hosts:
        assert f"Preflight failed on {host}" in run.output
    for line in lines:
        assert line in run.output
    assert all(run.changed(h) == 0 for h in HOSTS), run.output


def test_healthy_lab_passes_and_changes_nothing(lab_up, run_site, report_dir):
    # The preflight stage alone, as `sparkctl doctor` runs it; a whole-site re-run that
    # changes nothing is the molecule scenario's idempotence step.
    run = run_site("--tags", "preflight")
    assert run.rc == 0, run.output
    for host in HOSTS:
        assert run.changed(host) == 0, run.output
        assert run.recap[host]["failed"] == 0
    report = read_report(report_dir)
    assert report["ok"] is True
    assert set(report["hosts"]) == set(HOSTS)
    for host in HOSTS:
        ids = {c["id"] for c in report["hosts"][host]["checks"]}
        assert {"gpu.driver", "gpu.compute_cap", "memory.available", "disk.checkpoint", "link.enp1s0f1np1", "rdma.enP2p1s0f1np1"} <= ids


@pytest.fixture
def old_driver_on_spark2(lab_up):
    config = {"driver_version": "550.54.15", "cuda_version": "12.4"}
    node_exec("spark2", "sh", "-c", f"echo '{json.dumps(config)}' > /etc/sparklab/gpu.json")
    yield
    node_exec("spark2", "rm", "-f", "/etc/sparklab/gpu.json")


def test_old_driver_fails_before_any_change(old_driver_on_spark2, run_site, report_dir):
    run = run_site()
    assert_stopped_before_any_change(run, ["spark2"], "gpu.driver: driver 550.54.15 is older than 580.",
                                     "Fix: Update the NVIDIA driver to 580 or newer")
    report = read_report(report_dir)
    assert report["ok"] is False
    assert report["hosts"]["spark1"]["ok"] is True
    failed = [c["id"] for c in report["hosts"]["spark2"]["checks"] if c["status"] == "fail"]
    assert failed == ["gpu.driver", "gpu.cuda_driver"]


def test_escape_hatch_downgrades_to_a_warning(old_driver_on_spark2, run_site):
    # The two stages whose asserts an old driver trips: preflight's minimum, verify's parity.
    run = run_site("-e", "spark_ignore_assert_errors=true", "--tags", "preflight,verify")
    assert run.rc == 0, run.output
    assert "WARNING: spark_ignore_assert_errors is set; continuing past:" in run.output
    assert "driver 550.54.15 is older than 580" in run.output
    assert "verify failed but spark_ignore_assert_errors is set:" in run.output, run.output[-4000:]


@pytest.fixture
def cable_pulled(lab_up):
    # Deleting one end of the veth pair removes the whole cable half on both nodes.
    node_exec("spark1", "ip", "link", "del", "enP2p1s0f1np1")
    yield
    lab("up")


def test_missing_link_interface_fails_on_both_nodes(cable_pulled, run_site):
    run = run_site()
    assert_stopped_before_any_change(run, HOSTS, "link.enP2p1s0f1np1: enP2p1s0f1np1 does not exist on this node.")


@pytest.fixture
def full_checkpoint_disk(lab_up):
    # A small filesystem where the checkpoint goes, filled to the brim.
    node_exec("spark2", "sh", "-c", "mkdir -p /srv/sparkctl/models && mount -t tmpfs -o size=64m sparklab-small /srv/sparkctl/models"
              " && fallocate -l 60m /srv/sparkctl/models/filler")
    yield
    # The checkpoint stage may have filled the directory underneath: only unmount.
    node_exec("spark2", "umount", "/srv/sparkctl/models")


def test_full_disk_fails_with_the_numbers(full_checkpoint_disk, run_site):
    run = run_site()
    assert_stopped_before_any_change(run, ["spark2"], "disk.checkpoint: 0.0 GiB free at /srv/sparkctl/models <",
                                     "point 'spark_checkpoint_dir' at a larger one")





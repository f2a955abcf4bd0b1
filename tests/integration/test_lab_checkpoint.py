"""The checkpoint stage on the two-node lab, against the hub stand-in inside the
head (its converged re-run is the whole-site one of test_lab_check_mode.py): a damaged worker copy (truncated
shard, flipped byte with its mtime put back, leftover .incomplete, extra file)
is repaired by one re-run; a download cut mid-file fails the run and the next
run completes it, fetching only what was missing; a mirror cut mid-transfer
(the worker's daemon stopped, its connections ended) fails the run and the next
run resumes it without downloading again; a node too small for the hub's real
size is refused before anything is written; with the hub out of reach a first
download is refused before anything is written, and a hub answering 503 counts
as out of reach (a complete checkpoint re-run offline is in the fault catalogue);
files sparkctl does not own, in and beside the checkpoint directory, survive a
run byte for byte, and a directory it did not create keeps its mode."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
from labrun import LAB_INVENTORY, REPO, lab, node_exec, service_user

pytestmark = pytest.mark.lab

HOSTS = ("spark1", "spark2")
CKPT = "/srv/sparkctl/models/lab-standin"
HUB = "http://127.0.0.1:8765"


@pytest.fixture(scope="module")
def converged(site_converged):
    # site.yml once for the session (conftest.py); each test puts back what it breaks.
    return site_converged


def _sums(node: str) -> dict[str, str]:
    out = node_exec(node, "sh", "-c", f"cd {CKPT} && sha256sum -- *").stdout
    return {name: digest for digest, name in (line.split(maxsplit=1) for line in out.splitlines())}


def _hub(path: str, payload: dict | None = None) -> dict:
    """Talk to the stand-in's control endpoints, on the head node's own loopback."""
    data = "None" if payload is None else repr(json.dumps(payload).encode())
    code = (
        "import json, urllib.request\n"
        f"req = urllib.request.Request('{HUB}{path}', data={data}, headers={{'Content-Type': 'application/json'}})\n"
        "print(urllib.request.urlopen(req, timeout=10).read().decode())\n"
    )
    return json.loads(node_exec("spark1", "python3", "-c", code).stdout)


def test_worker_holds_the_heads_files_byte_for_byte(converged):
    head, worker = _sums("spark1"), _sums("spark2")
    assert worker == head
    assert len([name for name in head if name.endswith(".safetensors")]) == 8


def test_damaged_worker_copy_is_repaired_by_one_run(converged, run_site):
    shard3, shard5, shard6 = (f"{CKPT}/model-0000{i}-of-00008.safetensors" for i in (3, 5, 6))
    node_exec("spark2", "sh", "-c",
              f"truncate -s 1000 {shard3}"
              f" && printf X | dd of={shard5} bs=1 seek=5000 conv=notrunc 2>/dev/null && touch -r {shard6} {shard5}"
              f" && echo junk > {CKPT}/extra.bin && touch {CKPT}/model-00001-of-00008.safetensors.incomplete")
    repair = run_site("--tags", "checkpoint")
    assert repair.rc == 0, repair.output
    assert repair.changed("spark2") > 0
    # No sparkctl manifest ever listed extra.bin: it is someone else's, left in place and named.
    assert node_exec("spark2", "cat", f"{CKPT}/extra.bin").stdout == "junk\n"
    assert "1 file in /srv/sparkctl/models/lab-standin not in the manifest, left in place: extra.bin" in " ".join(repair.output.split())
    node_exec("spark2", "rm", f"{CKPT}/extra.bin")
    assert _sums("spark2") == _sums("spark1")
    quiet = run_site("--tags", "checkpoint")
    assert all(quiet.changed(h) == 0 for h in HOSTS), {h: quiet.changed_tasks(h) for h in HOSTS}


def test_download_cut_mid_file_is_completed_by_the_next_run(converged, run_site):
    shard = "model-00004-of-00008.safetensors"
    node_exec("spark1", "rm", "-f", f"{CKPT}/{shard}")
    _hub("/_stub/stats/reset", {})
    # Every request for the shard is cut after 1 MiB and every resume refused: this run cannot finish it.
    _hub("/_stub/faults", {"cut_after_bytes": 1048576, "cut_path": shard, "cut_times": 0,
                           "fail_status": 503, "fail_path": shard, "fail_times": 0, "fail_only_ranges": True})
    try:
        failed = run_site("--tags", "checkpoint")
        assert failed.rc != 0
        # The transfer's own failure stops the run, before verification.
        assert f"download {shard}:" in failed.output, failed.output[-3000:]
        assert "Verify every file of the checkpoint on this node" not in failed.output
    finally:
        _hub("/_stub/faults", {"reset": True})
    stats = _hub("/_stub/stats")
    assert stats["files"][shard]["cuts"] >= 1, stats["files"].get(shard)
    other_gets = {name: f["gets"] for name, f in stats["files"].items() if name != shard}
    assert not any(other_gets.values()), other_gets  # nothing else was fetched again
    done = run_site("--tags", "checkpoint")
    assert done.rc == 0, done.output
    assert _sums("spark2") == _sums("spark1")
    assert shard in _sums("spark2")


LINK_INTERFACES = ("enp1s0f1np1", "enP2p1s0f1np1")


def _worker_bytes() -> int:
    """Bytes of checkpoint data on the worker, the partial directory included."""
    out = node_exec("spark2", "sh", "-c", f"du -sb --exclude='.sparkctl-*' {CKPT} | cut -f1").stdout
    return int(out.strip() or 0)


def _complete_shards() -> dict[str, str]:
    """Worker shards whose size equals the head's: name -> inode."""
    script = f"cd {CKPT} && stat -c '%n %s %i' -- *.safetensors 2>/dev/null || true"
    head = {n: s for n, s, _ in (line.split() for line in node_exec("spark1", "sh", "-c", script).stdout.splitlines())}
    worker = [line.split() for line in node_exec("spark2", "sh", "-c", script).stdout.splitlines()]
    return {n: i for n, s, i in worker if head.get(n) == s}


def _slow_cable(rate: str | None) -> None:
    """Shape the head's sending side of both cable halves (inside the head node only)."""
    for interface in LINK_INTERFACES:
        node_exec("spark1", "tc", "qdisc", "del", "dev", interface, "root", check=False)
        if rate:
            node_exec("spark1", "tc", "qdisc", "add", "dev", interface, "root", "tbf", "rate", rate, "burst", "64kb", "latency", "100ms")


def test_interrupted_mirror_is_resumed_by_the_next_run(converged, run_site, report_dir):
    before = _sums("spark1")
    node_exec("spark2", "sh", "-c", f"rm -f {CKPT}/*.safetensors")
    _hub("/_stub/stats/reset", {})
    _slow_cable("100mbit")
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), SPARKCTL_REPORT_DIR=str(report_dir), ANSIBLE_NOCOLOR="1")
    playbook = [str(Path(sys.executable).with_name("ansible-playbook")), "site.yml", "-i", str(LAB_INVENTORY), "--tags", "checkpoint"]
    try:
        run = subprocess.Popen(playbook, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 300
        while _worker_bytes() < 150_000_000:
            assert run.poll() is None and time.monotonic() < deadline, "the mirror never got going"
            time.sleep(0.5)
        # Cut it: no new connections, and the copies in flight end (their PIDs, started by this run).
        node_exec("spark2", "systemctl", "stop", "sparkctl-rsyncd.socket")
        pids = node_exec("spark2", "pgrep", "-u", service_user(), "-x", "rsync", check=False).stdout.split()
        if pids:
            node_exec("spark2", "kill", *pids)
        output, _ = run.communicate(timeout=600)
    finally:
        _slow_cable(None)
    assert run.returncode != 0, output
    assert "worker spark2" in output and "rsync exit" in output, output[-4000:]
    assert _worker_bytes() < 1 << 30, "the run was cut before the mirror finished"
    complete = _complete_shards()
    assert len(complete) < 8, "the run was cut before the mirror finished"

    resumed = run_site("--tags", "checkpoint")
    assert resumed.rc == 0, resumed.output
    assert "checkpoint : Listen on the cable addresses" in resumed.changed_tasks("spark2"), "the stopped socket is started again"
    assert _sums("spark2") == before
    # Resumed at file granularity: what arrived whole stays (same inode), the rest is sent.
    after = _complete_shards()
    assert {name: after[name] for name in complete} == complete
    gets = {name: f["gets"] for name, f in _hub("/_stub/stats")["files"].items()}
    assert not any(gets.values()), f"the head downloaded again: {gets}"
    leftovers = node_exec("spark2", "find", CKPT, "-name", ".rsync-partial").stdout.strip()
    assert leftovers == "", leftovers


@pytest.fixture
def small_worker_disk(converged):
    # A 600 MB filesystem where the worker's checkpoint goes: smaller than the 1 GiB checkpoint.
    node_exec("spark2", "sh", "-c", "mkdir -p /srv/sparkctl/models && mount -t tmpfs -o size=600m sparklab-small /srv/sparkctl/models")
    yield
    node_exec("spark2", "umount", "/srv/sparkctl/models")


def test_node_too_small_for_the_real_size_is_refused_before_any_change(small_worker_disk, run_site):
    # Preflight is told a wrong, tiny size and passes; the hub's file list tells the truth.
    run = run_site("-e", "spark_checkpoint_size_bytes=1", "-e", "spark_disk_reserve_bytes=0")
    assert run.rc != 0
    assert "Not enough disk on spark2 for" in run.output and "of checkpoint (14 files)" in run.output, run.output[-3000:]
    assert "point 'spark_checkpoint_dir' at a larger one" in run.output
    assert all(run.changed(h) == 0 for h in HOSTS), {h: run.changed_tasks(h) for h in HOSTS}
    assert node_exec("spark2", "ls", "-A", "/srv/sparkctl/models").stdout.strip() == ""


@pytest.fixture
def hub_out_of_reach(converged):
    node_exec("spark1", "systemctl", "stop", "sparklab-hub", check=False)  # already stopped is fine
    yield
    lab("hub", "start")


def test_a_first_download_without_the_hub_is_refused_before_any_change(hub_out_of_reach, run_site):
    elsewhere = "/srv/sparkctl/models/offline-first"
    run = run_site("--tags", "checkpoint", "-e", f"spark_checkpoint_dir={elsewhere}")
    assert run.rc != 0
    text = " ".join(run.output.split())  # the callback folds long messages
    assert "is out of reach from spark1" in text and "holds no checkpoint from an earlier run" in text, run.output[-3000:]
    assert "the first download of sparklab/lab-standin-nvfp4 needs the hub" in text
    assert "spark_hf_endpoint" in text and "spark_checkpoint" in text
    # Nothing changed, not even the teardown's record of the node: it learns the directory the run
    # names only right before the step that creates it (roles/teardown, tasks/learn.yml).
    changed = {h: run.changed_tasks(h) for h in HOSTS}
    assert not any(changed.values()), changed
    for node in HOSTS:
        assert node_exec(node, "test", "-e", elsewhere, check=False).returncode != 0, node


def test_a_hub_answering_503_counts_as_out_of_reach_for_a_complete_checkpoint(converged, run_site):
    _hub("/_stub/faults", {"model_info_status": 503})
    try:
        run = run_site("--tags", "checkpoint")
    finally:
        _hub("/_stub/faults", {"model_info_status": None})
    assert run.rc == 0, run.output[-4000:]
    assert all(run.changed(h) == 0 for h in HOSTS), {h: run.changed_tasks(h) for h in HOSTS}
    text = " ".join(run.output.split())
    assert "the hub is out of reach (the hub answered 503" in text, run.output[-4000:]
    # Said by the transfer, or when every node verifies and no transfer starts by the stage itself
    # (its debug output doubles the quotes around 'main').
    assert "sparklab/lab-standin-nvfp4@main is checked against the commit" in text
    assert "'main' may have moved on the hub since" in text.replace("''", "'")


# Another user's files in the checkpoint directory and a sibling model beside it, on every node.
PLANTED = {
    f"{CKPT}/notes.txt": "a user's notes",
    f"{CKPT}/download.part": "someone's unfinished download",
    f"{CKPT}/other-model/model.safetensors": "another model's weights",
    f"{CKPT}/other-model/model.safetensors.index.json": '{"weight_map": {"w": "gone.safetensors"}}',
    "/srv/sparkctl/models/sibling-model/model.safetensors": "a sibling model",
}


def test_files_sparkctl_does_not_own_survive_a_run(converged, run_site):
    mark = f"{CKPT}/.sparkctl-created"
    plant = " && ".join(f"mkdir -p {os.path.dirname(path)} && printf %s {shlex.quote(text)} > {path}" for path, text in PLANTED.items())
    # A directory sparkctl did not create (no mark) keeps the mode its owner gave it.
    plant += f" && chmod 0775 {CKPT} && if [ -e {mark} ]; then mv {mark} {mark}.away; fi"
    probe = f"sha256sum {' '.join(PLANTED)} && stat -c %a {CKPT}"
    before = {}
    try:
        for host in HOSTS:
            node_exec(host, "sh", "-c", plant)
            before[host] = node_exec(host, "sh", "-c", probe).stdout
        run = run_site("--tags", "checkpoint")
        assert run.rc == 0, run.output[-4000:]
        for host in HOSTS:
            assert node_exec(host, "sh", "-c", probe).stdout == before[host], host
        text = " ".join(run.output.split())
        # Every node's copy verifies, so the transfer is not started (roles/checkpoint/tasks/main.yml):
        # the check of each node's copy names the files it leaves in place.
        assert "4 files in /srv/sparkctl/models/lab-standin not in the manifest, left in place" in text, run.output[-4000:]
    finally:
        for host in HOSTS:
            node_exec(host, "sh", "-c", f"rm -rf {CKPT}/notes.txt {CKPT}/download.part {CKPT}/other-model"
                      f" /srv/sparkctl/models/sibling-model && chmod 0755 {CKPT}"
                      f" && if [ -e {mark}.away ]; then mv {mark}.away {mark}; fi")

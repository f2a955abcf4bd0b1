"""The checkpoint stage on the two-node lab, against the hub stand-in inside the
head: a converged re-run changes nothing; a damaged worker copy (truncated
shard, flipped byte with its mtime put back, leftover .incomplete, extra file)
is repaired by one re-run; a download cut mid-file fails the run and the next
run completes it, fetching only what was missing."""

from __future__ import annotations

import json

import pytest
from labrun import node_exec

pytestmark = pytest.mark.lab

HOSTS = ("spark1", "spark2")
CKPT = "/srv/sparkctl/models/lab-standin"
HUB = "http://127.0.0.1:8765"


@pytest.fixture(scope="module")
def converged(lab_up, run_site):
    run = run_site("--tags", "checkpoint")
    assert run.rc == 0, run.output
    return run


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


def test_converged_rerun_changes_nothing(converged, run_site):
    run = run_site("--tags", "checkpoint")
    assert run.rc == 0, run.output
    assert all(run.changed(h) == 0 for h in HOSTS), {h: run.changed_tasks(h) for h in HOSTS}


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
        assert shard in failed.output
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

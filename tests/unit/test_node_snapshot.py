"""The lab's node snapshot (tests/lab/node_snapshot.py): what its comparison counts as a change."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "lab"))

import node_snapshot as snap  # noqa: E402


def _node(files):
    return {"spark1": {"files": files, "units": {}}}


def test_a_socket_that_goes_away_with_its_process_is_no_difference():
    # An SSH ControlMaster's socket lives as long as its master (ControlPersist), so it can
    # vanish between two snapshots of an unchanged node.
    socket = {"type": "socket", "mode": "0600", "uid": 1000, "gid": 1000}
    before = _node({"/home/spark/.ssh": {"type": "dir"}, "/home/spark/.ssh/cm-spark@10.0.0.2:22": socket})
    after = _node({"/home/spark/.ssh": {"type": "dir"}})
    assert snap.differences(before, after) == []
    assert snap.differences(after, before) == []


def test_a_file_that_goes_away_is_a_difference():
    before = _node({"/home/spark/.ssh": {"type": "dir"}, "/home/spark/.ssh/config": {"type": "file", "sha256": "0" * 64}})
    after = _node({"/home/spark/.ssh": {"type": "dir"}})
    assert snap.differences(before, after) == ["spark1: files /home/spark/.ssh/config: removed"]


def test_the_probe_names_sockets_so_the_comparison_can_leave_them_out():
    assert "S_ISSOCK" in snap.PROBE and 'type="socket"' in snap.PROBE

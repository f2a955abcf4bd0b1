"""module_utils/files.py: what a file holds now, and the write that leaves the old file or the
new one, never a part."""

from __future__ import annotations

import os

import pytest
from ansible_collections.sparkctl.spark.plugins.module_utils.files import read_bytes_and_mode, read_file_state, write_file_atomic


def test_a_missing_file_reads_as_none(tmp_path):
    assert read_bytes_and_mode(str(tmp_path / "absent")) == (None, None)


def test_a_file_reads_as_its_bytes_and_permission_bits(tmp_path):
    path = tmp_path / "report.json"
    path.write_bytes(b"{}\n")
    path.chmod(0o640)
    assert read_bytes_and_mode(str(path)) == (b"{}\n", 0o640)


def test_what_cannot_be_read_is_not_taken_for_missing(tmp_path):
    with pytest.raises(IsADirectoryError):
        read_bytes_and_mode(str(tmp_path))


def test_the_write_sets_the_bits_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "stamp.json"
    path.write_bytes(b"old")
    write_file_atomic(str(path), b"new", 0o600)
    assert read_bytes_and_mode(str(path)) == (b"new", 0o600)
    assert os.listdir(tmp_path) == ["stamp.json"]


def test_a_failed_write_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "stamp.json"
    path.write_bytes(b"old")

    def refuse(source, destination, **_dir_fds):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError):
        write_file_atomic(str(path), b"new", 0o644)
    assert path.read_bytes() == b"old" and os.listdir(tmp_path) == ["stamp.json"]


def test_the_file_state_is_read_from_one_open_with_its_owner(tmp_path):
    path = tmp_path / "record.json"
    assert read_file_state(str(path)) == (None, None, None)
    path.write_bytes(b"{}\n")
    path.chmod(0o644)
    info = path.stat()
    assert read_file_state(str(path)) == (b"{}\n", 0o644, (info.st_uid, info.st_gid))
    assert read_bytes_and_mode(str(path)) == (b"{}\n", 0o644)

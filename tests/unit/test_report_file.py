"""sparkctl.spark.report_file: a report written on the control node with one module run,
its missing directories created."""

from __future__ import annotations

import os
import stat

import module_runner
import pytest
from ansible_collections.sparkctl.spark.plugins.modules import report_file


def run(capsys, **args):
    return module_runner.run_module(report_file.main, args, capsys)


def mode_of(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_creates_the_missing_directories_and_writes(tmp_path, capsys):
    path = tmp_path / "sparkctl" / "reports" / "preflight.json"

    rc, result = run(capsys, path=str(path), content='{"ok": true}\n')

    assert rc == 0 and result["changed"] is True
    # The sparkctl wrapper knows a run's reports by the results' dest (sparkctl/events.py).
    assert result["dest"] == str(path)
    assert result["created_directories"] == [str(tmp_path / "sparkctl"), str(tmp_path / "sparkctl" / "reports")]
    assert path.read_text() == '{"ok": true}\n'
    assert mode_of(path) == 0o640
    assert mode_of(path.parent) == 0o750 and mode_of(path.parent.parent) == 0o750
    assert os.listdir(path.parent) == ["preflight.json"]


def test_the_same_report_is_no_change(tmp_path, capsys):
    path = tmp_path / "verify.json"
    path.write_text("{}\n")
    path.chmod(0o640)

    rc, result = run(capsys, path=str(path), content="{}\n")

    assert rc == 0 and result["changed"] is False and result["created_directories"] == []


def test_a_new_mode_alone_is_a_change(tmp_path, capsys):
    path = tmp_path / "verify.json"
    path.write_text("{}\n")
    path.chmod(0o644)

    rc, result = run(capsys, path=str(path), content="{}\n", mode="0600")

    assert rc == 0 and result["changed"] is True and mode_of(path) == 0o600


def test_check_mode_writes_nothing(tmp_path, capsys):
    path = tmp_path / "reports" / "verify.json"

    rc, result = run(capsys, path=str(path), content="{}\n", _ansible_check_mode=True)

    assert rc == 0 and result["changed"] is True
    assert result["created_directories"] == [str(tmp_path / "reports")]
    assert not (tmp_path / "reports").exists()


def test_a_mode_that_is_not_octal_fails(tmp_path, capsys):
    rc, result = run(capsys, path=str(tmp_path / "r.json"), content="", mode="rw-r-----")

    assert rc == 1 and "octal permission bits" in result["msg"]


@pytest.mark.parametrize("text, mode", [("0640", 0o640), ("750", 0o750)])
def test_octal_mode(text, mode):
    assert report_file.octal_mode(text) == mode


def test_a_failed_write_leaves_the_old_report_and_no_temporary_file(tmp_path, capsys, monkeypatch):
    path = tmp_path / "verify.json"
    path.write_text('{"old": true}\n')
    path.chmod(0o640)

    def refuse(source, destination, **_dir_fds):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    rc, result = run(capsys, path=str(path), content='{"new": true}\n')

    assert rc == 1 and result["failed"] is True
    assert str(path) in result["msg"] and "No space left on device" in result["msg"]
    assert path.read_text() == '{"old": true}\n'
    assert os.listdir(tmp_path) == ["verify.json"]

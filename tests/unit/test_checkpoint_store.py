"""The checkpoints sparkctl keeps side by side (module_utils/checkpoint_store.py and the
checkpoint_store module): what could be freed, the served record, and a keep policy that
removes only what sparkctl put in checkpoints it created."""

from __future__ import annotations

import json

import module_runner
from ansible_collections.sparkctl.spark.plugins.module_utils import served_record
from ansible_collections.sparkctl.spark.plugins.modules import checkpoint_store

MIB = 1 << 20


def make_checkpoint(root, name, size=MIB, created=True, extra=None):
    path = root / name
    path.mkdir(parents=True)
    (path / "model.safetensors").write_bytes(b"\0" * size)
    (path / "config.json").write_text("{}")
    manifest = {"model.safetensors": {"size": size, "sha256": None}, "config.json": {"size": 2, "sha256": None}}
    (path / ".sparkctl-manifest.json").write_text(json.dumps(manifest))
    if created:
        (path / ".sparkctl-created").write_text("Created by sparkctl\n")
    for rel in extra or []:
        (path / rel).write_text("mine")
    return path


def run(capsys, tmp_path, current, **args):
    return module_runner.run_module(checkpoint_store.main, dict(
        {"root": str(tmp_path / "models"), "current": str(tmp_path / "models" / current),
         "served_file": str(tmp_path / "lib" / "served.json")}, **args), capsys)


def test_plan_keeps_the_current_and_the_most_recently_served():
    found = {"/m/a": 1, "/m/b": 1, "/m/c": 1, "/m/d": 1}
    ranked, remove = served_record.plan(found, "/m/a", 2, ["/m/a", "/m/c", "/m/b"])
    assert ranked == ["/m/c", "/m/b", "/m/d"] and remove == ["/m/b", "/m/d"]
    assert served_record.plan(found, "/m/a", 0, [])[1] == []
    assert served_record.plan(found, "/m/a", 1, [])[1] == ["/m/b", "/m/c", "/m/d"]


def test_served_after_puts_the_current_first_once():
    assert served_record.served_after(["/m/b", "/m/a"], "/m/a/") == ["/m/a", "/m/b"]
    assert served_record.served_after(["/m/a", "/m/b"], "/m/a", removed=["/m/b"]) == ["/m/a"]


def test_the_disk_check_counts_what_other_checkpoints_could_free(tmp_path, capsys):
    models = tmp_path / "models"
    make_checkpoint(models, "a", 2 * MIB)
    make_checkpoint(models, "b", 3 * MIB)
    make_checkpoint(models, "theirs", 5 * MIB, created=False)
    code, out = run(capsys, tmp_path, "a")
    assert code == 0 and not out["changed"]
    assert [c["path"] for c in out["checkpoints"]] == [str(models / "b")]
    assert 3 * MIB < out["freeable_bytes"] < 3 * MIB + 4096
    assert "in 1 other checkpoint sparkctl downloaded could be freed" in out["message"] and "checkpoint_keep" in out["message"]


def test_keep_removes_only_sparkctls_files_beyond_the_count(tmp_path, capsys):
    models = tmp_path / "models"
    for name in ("a", "b", "c"):
        make_checkpoint(models, name)
    make_checkpoint(models, "d", extra=["notes.txt"])
    make_checkpoint(models, "theirs", created=False)
    for name in ("d", "c", "b", "a"):  # served in this order, a last
        assert run(capsys, tmp_path, name, record=True)[0] == 0
    code, out = run(capsys, tmp_path, "a", keep=2, state="absent", record=True)
    assert code == 0 and out["changed"]
    assert out["removed"] == [str(models / "c"), str(models / "d")]
    assert sorted(p.name for p in models.iterdir()) == ["a", "b", "d", "theirs"]
    assert [p.name for p in (models / "d").iterdir()] == ["notes.txt"]
    assert out["kept"] and "notes.txt" in out["kept"][0]
    assert json.loads((tmp_path / "lib" / "served.json").read_text())["served"] == [str(models / "a"), str(models / "b"),
                                                                                    str(models / "d")]
    # Converged: nothing more to remove or record.
    code, out = run(capsys, tmp_path, "a", keep=2, state="absent", record=True)
    assert code == 0 and not out["changed"] and out["removed"] == []


def test_check_mode_removes_nothing(tmp_path, capsys):
    models = tmp_path / "models"
    make_checkpoint(models, "a")
    make_checkpoint(models, "b")
    code, out = run(capsys, tmp_path, "a", keep=1, state="absent", record=True, _ansible_check_mode=True)
    assert code == 0 and out["changed"] and out["removed"] == [str(models / "b")]
    assert (models / "b" / "model.safetensors").exists() and not (tmp_path / "lib" / "served.json").exists()


def test_a_negative_keep_is_refused_naming_the_variable(tmp_path, capsys):
    code, out = run(capsys, tmp_path, "a", keep=-1)
    assert code == 1 and "checkpoint_keep" in out["msg"]

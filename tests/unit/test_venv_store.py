"""The engine venvs sparkctl keeps side by side, one per runtime lock (module_utils/venv_store.py
and the venv_store module): which venvs are candidates (the profile's per-lock name, created by
sparkctl per the node's record, never the served one), the served record, and a keep policy
that removes the least recently served beyond the count."""

from __future__ import annotations

import json

import module_runner
import pytest
from ansible_collections.sparkctl.spark.plugins.module_utils import venv_store as store
from ansible_collections.sparkctl.spark.plugins.module_utils import served_record
from ansible_collections.sparkctl.spark.plugins.modules import venv_store

PROFILE = "lab-standin"
A, B, C, D = (f"{PROFILE}-{digit * 12}" for digit in "abcd")


def make_venvs(tmp_path, created, theirs=()):
    """Venv directories under tmp_path/venvs; the node's record says the ones in created were not
    there before sparkctl, the ones in theirs were."""
    root = tmp_path / "venvs"
    for name in list(created) + list(theirs):
        (root / name / "bin").mkdir(parents=True)
        (root / name / "bin" / "python").write_text("")
    baseline = {"paths": {str(root / n): False for n in created} | {str(root / n): True for n in theirs}}
    (tmp_path / "baseline.json").write_text(json.dumps(baseline))
    return root


def run(capsys, tmp_path, current, **args):
    return module_runner.run_module(venv_store.main, dict(
        {"root": str(tmp_path / "venvs"), "profile": PROFILE, "current": str(tmp_path / "venvs" / current),
         "served_file": str(tmp_path / "lib" / "served.json"), "baseline_file": str(tmp_path / "baseline.json")},
        **args), capsys)


@pytest.mark.parametrize("name, candidate", [
    (B, True),
    (f"{PROFILE}-b-{'0' * 12}", False),      # another profile's per-lock venv (lab-standin-b)
    (PROFILE, False),                          # the venv per profile (spark_engine_venv_per_lock: false)
    (f"{PROFILE}-{'B' * 12}", False),          # not the digest's lowercase hex
    (f"{PROFILE}-{'0' * 11}", False),
    (f"{PROFILE}-{'0' * 13}", False),
    (f"x{PROFILE}-{'0' * 12}", False),
])
def test_only_the_profiles_per_lock_names_are_candidates(name, candidate):
    baseline = {"paths": {f"/v/{name}": False}}
    assert store.candidates([name], "/v", PROFILE, f"/v/{A}", baseline) == ([f"/v/{name}"] if candidate else [])


def test_a_venv_sparkctl_did_not_create_or_the_served_one_is_never_a_candidate():
    names = [A, B, C, D]
    baseline = {"paths": {f"/v/{A}": False, f"/v/{B}": True, f"/v/{C}": False}}  # D unknown to the record
    assert store.candidates(names, "/v", PROFILE, f"/v/{C}/", baseline) == [f"/v/{A}"]
    assert store.candidates(names, "/v", PROFILE, f"/v/{C}", None) == []
    assert store.candidates(names, "/v", PROFILE, f"/v/{C}", {"paths": "broken"}) == []


def test_plan_keeps_the_current_and_the_most_recently_served_and_drops_never_served_first():
    venvs = ["/v/b", "/v/c", "/v/d", "/v/e"]
    ranked, remove = served_record.plan(venvs, "/v/a", 2, ["/v/a", "/v/c", "/v/b"])
    assert ranked == ["/v/c", "/v/b", "/v/d", "/v/e"] and remove == ["/v/b", "/v/d", "/v/e"]
    assert served_record.plan(venvs, "/v/a", 0, [])[1] == []
    assert served_record.plan(venvs, "/v/a", 1, ["/v/a", "/v/b"])[1] == venvs
    # A venv built by a run whose verify failed was never served: it goes before any served one.
    assert served_record.plan(["/v/new", "/v/old"], "/v/a", 2, ["/v/a", "/v/old"]) == (["/v/old", "/v/new"], ["/v/new"])


def test_served_after_puts_the_current_first_once():
    assert served_record.served_after(["/v/b", "/v/a"], "/v/a/") == ["/v/a", "/v/b"]
    assert served_record.served_after(["/v/a", "/v/b"], "/v/a", removed=["/v/b"]) == ["/v/a"]


def test_keep_removes_the_least_recently_served_of_sparkctls_venvs(tmp_path, capsys):
    root = make_venvs(tmp_path, [A, B, C, D, f"{PROFILE}-b-{'0' * 12}"], theirs=[f"{PROFILE}-{'e' * 12}", PROFILE])
    for name in (D, C, B, A):  # served in this order, A last
        assert run(capsys, tmp_path, name, record=True)[0] == 0
    code, out = run(capsys, tmp_path, A, keep=2, state="absent", record=True)
    assert code == 0 and out["changed"]
    assert out["removed"] == [str(root / C), str(root / D)]
    assert sorted(p.name for p in root.iterdir()) == sorted([A, B, f"{PROFILE}-b-{'0' * 12}", f"{PROFILE}-{'e' * 12}", PROFILE])
    assert json.loads((tmp_path / "lib" / "served.json").read_text())["served"] == [str(root / A), str(root / B)]
    assert f"kept for a rollback: {root / B}" in out["message"]
    # Converged: nothing more to remove or record.
    code, out = run(capsys, tmp_path, A, keep=2, state="absent", record=True)
    assert code == 0 and not out["changed"] and out["removed"] == [] and out["venvs"] == [str(root / B)]


def test_a_rollback_serves_the_older_venv_again_and_the_newer_one_stays(tmp_path, capsys):
    root = make_venvs(tmp_path, [A, B])
    for name in (A, B, A):  # upgraded A -> B, rolled back to A
        assert run(capsys, tmp_path, name, keep=2, state="absent", record=True)[0] == 0
    assert sorted(p.name for p in root.iterdir()) == [A, B]
    code, out = run(capsys, tmp_path, A, keep=1, state="absent", record=True)
    assert code == 0 and out["removed"] == [str(root / B)] and [p.name for p in root.iterdir()] == [A]


def test_present_lists_and_records_but_removes_nothing(tmp_path, capsys):
    root = make_venvs(tmp_path, [A, B])
    code, out = run(capsys, tmp_path, A, keep=1, record=True)
    assert code == 0 and out["changed"] and out["removed"] == [] and out["venvs"] == [str(root / B)]
    assert (root / B).is_dir()


def test_check_mode_removes_and_writes_nothing_and_shows_the_diff(tmp_path, capsys):
    root = make_venvs(tmp_path, [A, B])
    code, out = run(capsys, tmp_path, A, keep=1, state="absent", record=True, _ansible_check_mode=True, _ansible_diff=True)
    assert code == 0 and out["changed"] and out["removed"] == [str(root / B)]
    assert (root / B / "bin" / "python").exists() and not (tmp_path / "lib" / "served.json").exists()
    assert out["diff"]["before"] == "" and json.loads(out["diff"]["after"]) == {"served": [str(root / A)]}


def test_without_the_nodes_record_nothing_is_removed(tmp_path, capsys):
    root = make_venvs(tmp_path, [A, B])
    (tmp_path / "baseline.json").unlink()
    code, out = run(capsys, tmp_path, A, keep=1, state="absent", record=True)
    assert code == 0 and out["removed"] == [] and (root / B).is_dir()


def test_a_negative_keep_is_refused_naming_the_variable(tmp_path, capsys):
    code, out = run(capsys, tmp_path, A, keep=-1)
    assert code == 1 and "engine_venv_keep" in out["msg"]

"""The checkpoint role's filters: the progress line it prints while the transfer runs, the disk
check it repeats once the checkpoint's real size is known, and whether the manifest an earlier run
kept stands for the checkpoint a run asks for (the stage's no-op path)."""

import pytest
from ansible_collections.sparkctl.spark.plugins.filter.checkpoint import checkpoint_progress_line, checkpoint_room


def test_line_names_phase_head_and_each_worker():
    progress = {
        "phase": "transfer",
        "elapsed_s": 61.4,
        "files_total": 8,
        "bytes_total": 8 * 128 * 1024**2,
        "files_verified_on_head": 5,
        "bytes_downloaded": 640 * 1024**2,
        "workers": {
            "spark3": {"files_done": 4, "bytes_done": 512 * 1024**2, "in_flight": []},
            "spark2": {"files_done": 3, "bytes_done": 384 * 1024**2, "in_flight": ["model-00004-of-00008.safetensors"]},
        },
        "last_event": "spark2: copying model-00004-of-00008.safetensors",
    }
    assert checkpoint_progress_line(progress) == (
        "[transfer] 61 s | head 5/8 files verified, 640.0 MiB downloaded of 1.0 GiB"
        " | spark2 3/8 files, 384.0 MiB (copying model-00004-of-00008.safetensors)"
        " | spark3 4/8 files, 512.0 MiB"
        " | last: spark2: copying model-00004-of-00008.safetensors"
    )


def test_empty_progress_still_reads():
    assert checkpoint_progress_line({}) == "[?] 0 s | head 0/0 files verified, 0 B downloaded of 0 B"


def test_checkpoint_room_uses_the_size_it_is_given():
    gib = 1024**3
    facts = {"disks": {"/srv/m": {"free_bytes": 20 * gib, "used_bytes": 5 * gib, "checked_path": "/srv"}}}
    fits = checkpoint_room(facts, "/srv/m", 20 * gib, 4 * gib)  # 15 GiB more + 4 reserve <= 20
    too_big = checkpoint_room(facts, "/srv/m", 22 * gib, 4 * gib)  # 17 + 4 > 20

    assert fits["status"] == "pass" and "5.0 GiB of it already in place" in fits["detail"]
    assert too_big["status"] == "fail" and "21.0 GiB needed" in too_big["detail"]
    assert "spark_checkpoint_dir" in too_big["fix"]
    assert checkpoint_room({}, "/srv/m", 1, 0)["status"] == "fail"


# --- checkpoint_manifest_standing: may the stage skip its transfer? -------------------------------

from ansible_collections.sparkctl.spark.plugins.filter.checkpoint import checkpoint_manifest_standing  # noqa: E402, I001

COMMIT = "c" * 40
SOURCE = {"type": "hub", "repo_id": "org/model", "revision": "main", "allow_patterns": []}
KEPT = {
    "version": 1, "source": "hub", "repo_id": "org/model", "revision": "main", "commit": COMMIT, "total_bytes": 30,
    "files": {
        "config.json": {"size": 10, "sha256": None, "git_blob_sha1": "a" * 40},
        "model-00001-of-00001.safetensors": {"size": 20, "sha256": "b" * 64, "git_blob_sha1": None},
    },
}
HUB_FILES = [".gitattributes", "README.md", "config.json", "model-00001-of-00001.safetensors"]


def _hub(commit=COMMIT, files=HUB_FILES):
    return {"status": "pass", "commit": commit, "files": files}


def test_a_kept_manifest_of_the_commit_the_hub_names_stands():
    only = dict(SOURCE, allow_patterns=["config.json", "*.safetensors"])
    assert checkpoint_manifest_standing(KEPT, only, _hub()) == {"current": True, "reason": "", "notes": []}


def test_a_branch_that_moved_on_the_hub_needs_the_transfer():
    standing = checkpoint_manifest_standing(KEPT, SOURCE, _hub(commit="d" * 40))
    assert standing["current"] is False and "is commit " + "d" * 40 + " on the hub" in standing["reason"]


@pytest.mark.parametrize("patterns", [[], ["*.safetensors"], ["*.json", "*.safetensors", "README.md"]])
def test_other_allow_patterns_than_the_kept_manifests_need_the_transfer(patterns):
    standing = checkpoint_manifest_standing(KEPT, dict(SOURCE, allow_patterns=patterns), _hub())
    assert standing["current"] is False and "allow_patterns" in standing["reason"]


@pytest.mark.parametrize("kept", [{"revision": "v2"}, {"repo_id": "org/other"}, {"source": "path"}])
def test_the_manifest_of_another_checkpoint_never_stands(kept):
    standing = checkpoint_manifest_standing(dict(KEPT, **kept), SOURCE, _hub(), "")
    assert standing["current"] is False and "not org/model@main" in standing["reason"]
    assert checkpoint_manifest_standing(dict(KEPT, **kept), SOURCE, {}, "connection refused")["current"] is False


@pytest.mark.parametrize("kept", [{}, {"files": {}}, {"files": {"config.json": {"size": -1}}}])
def test_no_usable_manifest_never_stands(kept):
    assert checkpoint_manifest_standing(dict(KEPT, **kept) if kept else {}, SOURCE, _hub())["current"] is False


def test_a_path_source_is_always_read_again():
    standing = checkpoint_manifest_standing(dict(KEPT, source="path"), {"type": "path", "path": "/data/m"}, {})
    assert standing["current"] is False and "path source" in standing["reason"]


def test_a_skipped_or_failed_access_check_names_no_commit():
    assert checkpoint_manifest_standing(KEPT, SOURCE, {"skipped": True})["current"] is False
    assert checkpoint_manifest_standing(KEPT, SOURCE, {"status": "fail", "commit": None, "files": None})["current"] is False


def test_with_the_hub_out_of_reach_the_kept_manifest_stands_and_a_branch_is_named():
    standing = checkpoint_manifest_standing(KEPT, SOURCE, {"status": "warn", "commit": None}, "the hub answered 503")
    assert standing["current"] is True
    # The transfer's own offline note, word for word (module_utils/checkpoint_hub.py offline_notes).
    assert standing["notes"] == [
        f"the hub is out of reach (the hub answered 503): org/model@main is checked against the commit {COMMIT} of the "
        "earlier run; the branch or tag 'main' may have moved on the hub since (pin a commit in "
        "spark_checkpoint.revision to make this exact)"]
    pinned = dict(SOURCE, revision=COMMIT)
    assert checkpoint_manifest_standing(dict(KEPT, revision=COMMIT), pinned, {}, "offline") == {
        "current": True, "reason": "", "notes": []}


def test_the_fit_estimate_is_made_again_only_when_the_kept_one_does_not_stand():
    """The role's decision on the head's read of the kept file (node_state's text, '' when it is not there)."""
    import json

    from ansible_collections.sparkctl.spark.plugins.filter.checkpoint import checkpoint_fit_due
    from ansible_collections.sparkctl.spark.plugins.module_utils import fit

    profile = {"name": "p", "topology": {"tensor_parallel": 2}, "memory": {"kv_pool_bytes": 1 << 30}}
    kept = json.dumps(fit.kept_estimate({"kv_tokens": 7}, fit.made_for(profile, COMMIT)))
    assert checkpoint_fit_due(kept, profile, COMMIT) == {"due": False, "reason": ""}
    assert checkpoint_fit_due("", profile, COMMIT)["due"] is True
    bigger = dict(profile, memory={"kv_pool_bytes": 2 << 30})
    assert "kv_pool_bytes" in checkpoint_fit_due(kept, bigger, COMMIT)["reason"]
    # A path source: no commit either side (Ansible may render it as '' or None).
    path_kept = json.dumps(fit.kept_estimate({}, fit.made_for(profile)))
    assert checkpoint_fit_due(path_kept, profile, "")["due"] is False
    assert checkpoint_fit_due(path_kept, profile, None)["due"] is False

"""The checkpoint role's filters: the progress line it prints while the transfer runs, and
the disk check it repeats once the checkpoint's real size is known."""

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

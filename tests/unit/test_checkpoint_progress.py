"""The progress line the checkpoint role prints while the transfer runs."""

from ansible_collections.sparkctl.spark.plugins.filter.checkpoint_progress import checkpoint_progress_line


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

"""The fit estimate's hub reader (module_utils/fit.py read_hub_checkpoint) against the hub
stand-in on 127.0.0.1: headers by range requests, nothing downloaded, the same tensors as
huggingface_hub's get_safetensors_metadata and as the files themselves."""

from __future__ import annotations

import pytest
from ansible_collections.sparkctl.spark.plugins.module_utils import fit

pytestmark = pytest.mark.usefixtures("loopback_only")

REPO_ID = "sparklab/fit-llama"
HUB_CHECKPOINT = {"shards": 3, "shard_bytes": 1 << 20, "seed": 5}
TOKEN = "hf_lab_fit_token_0123"
HUB_TOKEN = TOKEN


def test_headers_read_by_range_requests_only(hub, ckpt):
    config, tensors, names = fit.read_hub_checkpoint(REPO_ID, "main", token=TOKEN, endpoint=hub.url)
    local_config, local_tensors, local_names = fit.read_local_checkpoint(ckpt)
    assert (config, tensors, names) == (local_config, local_tensors, local_names)
    stats = hub.stats()
    shard_stats = {name: stats["files"][name] for name in names}
    # Two range requests per shard (length, then header); no shard read whole.
    assert all(s["range_gets"] == 2 and s["full_gets"] == 0 for s in shard_stats.values()), shard_stats
    total = sum(info["bytes"] for info in tensors.values())
    assert sum(s["bytes_served"] for s in shard_stats.values()) < total / 50


def test_same_tensors_as_huggingface_hub(hub, hf):
    meta = hf.HfApi(endpoint=hub.url).get_safetensors_metadata(REPO_ID, token=TOKEN)
    _, tensors, _ = fit.read_hub_checkpoint(REPO_ID, "main", token=TOKEN, endpoint=hub.url)
    theirs = {name: info for f in meta.files_metadata.values() for name, info in f.tensors.items()}
    assert set(theirs) == set(tensors)
    for name, info in theirs.items():
        assert (info.dtype, list(info.shape), info.data_offsets[1] - info.data_offsets[0]) == (
            tensors[name]["dtype"], tensors[name]["shape"], tensors[name]["bytes"])


def test_refused_token_names_the_status_without_the_token(hub):
    with pytest.raises(fit.FitError, match="answered 401") as info:
        fit.read_hub_checkpoint(REPO_ID, "main", token="hf_wrong_token_999", endpoint=hub.url)
    assert "hf_wrong_token_999" not in str(info.value)


def test_unreachable_hub_says_so():
    with pytest.raises(fit.FitError, match="out of reach"):
        fit.read_hub_checkpoint(REPO_ID, "main", endpoint="http://127.0.0.1:9", timeout=2)


# --- the checkpoint stage's module ------------------------------------------------------

def _profile(max_model_len, kv_pool=64 << 20):
    return {"name": "lab-fit", "topology": {"kind": "ray_tp", "tensor_parallel": 2},
            "engine": {"kind": "vllm", "args": {"max_model_len": max_model_len, "kv_cache_memory_bytes": kv_pool}},
            "memory": {"kv_pool_bytes": kv_pool, "overhead_bytes": 1 << 20}, "checkpoint": {"size_bytes": 3 << 20}}


def test_module_fits_and_refuses_with_the_numbers(hub, capsys):
    import json

    import module_runner
    from ansible_collections.sparkctl.spark.plugins.modules import checkpoint_fit

    args = {"repo_id": REPO_ID, "token": TOKEN, "endpoint": hub.url, "available_bytes": 16 * 1024**3,
            "guard_bytes": 1024**3}
    rc, out = module_runner.run_module(checkpoint_fit.main, dict(args, profile=_profile(4096)), capsys, raw=True)
    result = json.loads(out)
    assert rc == 0 and result["read"] and result["fits"] is True and TOKEN not in out
    tokens = result["estimate"]["kv_tokens"]
    assert result["message"].startswith("profile lab-fit fits") and f"{tokens:,} tokens" in result["message"]
    rc, out = module_runner.run_module(checkpoint_fit.main, dict(args, profile=_profile(tokens + 1)), capsys, raw=True)
    result = json.loads(out)
    assert result["fits"] is False
    assert f"buys {tokens:,} tokens" in result["message"] and "spark_profile_overrides" in result["message"]


def test_module_without_the_hub_reads_nothing_and_says_why(capsys):
    import json

    import module_runner
    from ansible_collections.sparkctl.spark.plugins.modules import checkpoint_fit

    args = {"repo_id": REPO_ID, "endpoint": "http://127.0.0.1:9", "timeout": 2, "profile": _profile(4096)}
    rc, out = module_runner.run_module(checkpoint_fit.main, args, capsys, raw=True)
    result = json.loads(out)
    assert rc == 0 and result["read"] is False and result["fits"] is None and "out of reach" in result["reason"]


def test_the_estimate_kept_from_the_heads_files_is_the_one_kept_from_the_hub(hub, ckpt, capsys):
    """The checkpoint stage makes the estimate from the hub before a first download and from the head's
    verified files when an earlier run kept none (or one made for other inputs): both keep the same
    figures and the same record of what they were made for, so switching between them writes nothing."""
    import json

    import module_runner
    from ansible_collections.sparkctl.spark.plugins.modules import checkpoint_fit

    commit = "0123456789abcdef0123456789abcdef01234567"
    common = {"profile": _profile(4096), "available_bytes": 16 * 1024**3, "commit": commit}
    rc, out = module_runner.run_module(
        checkpoint_fit.main, dict(common, repo_id=REPO_ID, token=TOKEN, endpoint=hub.url), capsys, raw=True)
    from_hub = json.loads(out)["kept"]
    rc_local, out = module_runner.run_module(checkpoint_fit.main, dict(common, path=str(ckpt)), capsys, raw=True)
    from_files = json.loads(out)["kept"]
    assert rc == rc_local == 0 and from_hub == from_files and from_files["kv_tokens"]
    assert from_files["made_for"]["commit"] == commit
    assert fit.estimate_due(json.dumps(from_files), _profile(4096), commit) == {"due": False, "reason": ""}
    assert fit.estimate_due(json.dumps(from_files), _profile(4096, kv_pool=128 << 20), commit)["due"] is True

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

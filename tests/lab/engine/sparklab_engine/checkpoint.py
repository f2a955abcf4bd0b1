"""What the stand-in reads from the checkpoint directory: the shard index, the shard sizes and
config.json (memory.py reads the shards' headers). No tensor is read; "loading" is a delay."""

from __future__ import annotations

import json
import os

INDEX_NAME = "model.safetensors.index.json"
GIB = 1 << 30


class CheckpointError(Exception):
    pass


def read_checkpoint(model_dir):
    """{"shard_names", "config", "shards", "total_bytes", "architectures", "max_position_embeddings"} of a sharded
    safetensors checkpoint; CheckpointError when the index or a shard it names is missing."""
    index_path = os.path.join(model_dir, INDEX_NAME)
    if not os.path.isdir(model_dir):
        raise CheckpointError(f"model directory {model_dir} does not exist")
    try:
        with open(index_path, encoding="utf-8") as handle:
            index = json.load(handle)
    except FileNotFoundError:
        raise CheckpointError(f"no {INDEX_NAME} in {model_dir}: not a sharded safetensors checkpoint") from None
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"cannot read {index_path}: {exc}") from None
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError(f"{index_path} has no weight_map")
    shards = sorted(set(weight_map.values()))
    total, missing = 0, []
    for name in shards:
        try:
            total += os.path.getsize(os.path.join(model_dir, name))
        except OSError:
            missing.append(name)
    if missing:
        raise CheckpointError(f"{len(missing)} of {len(shards)} shards named in {INDEX_NAME} are missing: {', '.join(missing[:4])}")
    config = {}
    try:
        with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as handle:
            config = json.load(handle)
    except (OSError, ValueError):
        pass
    return {
        "shard_names": shards,
        "config": config,
        "shards": len(shards),
        "total_bytes": total,
        "architectures": config.get("architectures") or [],
        "max_position_embeddings": config.get("max_position_embeddings"),
    }

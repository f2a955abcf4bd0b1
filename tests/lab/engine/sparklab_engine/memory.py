"""What the stand-in's ranks hold, computed the way vLLM sizes them (no tensor is loaded):

- weights per rank from the shards' safetensors headers (an 8-byte little-endian length, then
  that many bytes of JSON with each tensor's dtype, shape and data_offsets), each tensor placed
  by the kind of layer that loads it: column/row-parallel projections, the vocabulary-parallel
  embedding and LM head and the fused MoE experts are split over the tensor-parallel ranks;
  norms, biases, scalars and the MoE router are whole on every rank; K and V projections are
  replicated when there are fewer KV heads than ranks (each rank keeps one head);
- the KV cache: one page of `block_size` tokens per attention layer holds K and V for the rank's
  KV heads (max(1, kv_heads // tp)) x head_dim x the KV dtype's size (MLA: one latent vector of
  kv_lora_rank + qk_rope_head_dim); the pool buys pool // (page x layers) blocks.
  Linear-attention layers (`layer_types`) keep no KV per token.

This is the stand-in's own reading of the checkpoint, written apart from sparkctl's fit
estimate (collections/.../module_utils/fit.py) so the verify stage compares two computations."""

from __future__ import annotations

import json
import math
import os
import re
import struct

# vLLM's default KV block size (tokens per page) on CUDA.
BLOCK_SIZE = 16
DTYPE_BYTES = {"F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2,
               "U16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "I8": 1, "U8": 1, "BOOL": 1}
KV_DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2, "bf16": 2, "fp16": 2}
_SPLIT = re.compile(r"(q_proj|k_proj|v_proj|qkv_proj|o_proj|gate_proj|up_proj|gate_up_proj|down_proj|embed_tokens|lm_head)\.")
_KV_PROJ = re.compile(r"\.(k_proj|v_proj)\.")


class SizingError(Exception):
    """A shard or config the stand-in cannot size (a real engine fails to load it too)."""


def read_header(path):
    """{name: bytes} of one safetensors file, from its header only."""
    with open(path, "rb") as handle:
        first = handle.read(8)
        if len(first) != 8:
            raise SizingError(f"{path} is not a safetensors file (shorter than 8 bytes)")
        (length,) = struct.unpack("<Q", first)
        if length < 2 or length > 100_000_000:
            raise SizingError(f"{path} is not a safetensors file (header length {length})")
        raw = handle.read(length)
    try:
        header = json.loads(raw)
    except ValueError as exc:
        raise SizingError(f"{path}: safetensors header is not JSON: {exc}") from None
    sizes = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        sizes[name] = (end - start, info["shape"])
    return sizes


def placement(name, shape, kv_heads, tp):
    """The share of a tensor one rank holds: 1 (whole), or 1/n."""
    if len(shape) <= 1:
        return 1
    if ".experts." in name and ".shared_experts." not in name:
        return 1 / tp
    if _KV_PROJ.search(name) and kv_heads and kv_heads < tp:
        return 1 / kv_heads
    if _SPLIT.search(name):
        return 1 / tp
    return 1


def weights_per_rank(model_dir, shard_names, config, tp):
    """Bytes of weights rank 0 holds."""
    text = {**config, **(config.get("text_config") or {})}
    kv_heads = int(text.get("num_key_value_heads") or text.get("num_attention_heads") or 0)
    total = 0.0
    for shard in shard_names:
        for name, (size, shape) in read_header(os.path.join(model_dir, shard)).items():
            total += size * placement(name, shape, kv_heads, tp)
    return int(math.ceil(total))


def kv_layout(config, tp, kv_cache_dtype="auto"):
    """{"page_bytes": one block's bytes in one layer, "layers": attention layers, "bytes_per_token"}."""
    text = {**config, **(config.get("text_config") or {})}
    layers = int(text.get("num_hidden_layers") or 0)
    if layers <= 0:
        raise SizingError("config.json has no num_hidden_layers")
    types = text.get("layer_types")
    if isinstance(types, list) and len(types) == layers:
        layers = sum(1 for kind in types if "attention" in str(kind) and "linear" not in str(kind))
    if kv_cache_dtype and kv_cache_dtype != "auto":
        elem = 1 if str(kv_cache_dtype).startswith("fp8") else KV_DTYPE_BYTES.get(str(kv_cache_dtype), 2)
    else:
        elem = KV_DTYPE_BYTES.get(str(text.get("torch_dtype") or text.get("dtype") or "bfloat16"), 2)
    if text.get("kv_lora_rank"):
        per_token_layer = (int(text["kv_lora_rank"]) + int(text.get("qk_rope_head_dim") or 0)) * elem
    else:
        heads = int(text.get("num_attention_heads") or 0)
        kv_heads = int(text.get("num_key_value_heads") or heads)
        head_dim = int(text.get("head_dim") or (int(text.get("hidden_size") or 0) // heads if heads else 0))
        if not kv_heads or not head_dim:
            raise SizingError("config.json names no num_key_value_heads/head_dim")
        per_token_layer = 2 * max(1, kv_heads // tp) * head_dim * elem
    return {"page_bytes": BLOCK_SIZE * per_token_layer, "layers": layers, "bytes_per_token": per_token_layer * layers}


def kv_tokens(pool_bytes, layout):
    """Tokens the pool holds: whole blocks of every attention layer's page."""
    if not layout["layers"]:
        return 0
    blocks = pool_bytes // (layout["page_bytes"] * layout["layers"])
    return blocks * BLOCK_SIZE

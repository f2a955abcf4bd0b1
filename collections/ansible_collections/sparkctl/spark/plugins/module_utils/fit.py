# -*- coding: utf-8 -*-
# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fit estimate (docs/fit.md): what one engine rank holds before a byte is downloaded.

- weights per rank from the checkpoint's real tensors: safetensors headers (an 8-byte
  little-endian length, then that many bytes of JSON: per tensor `dtype`, `shape`,
  `data_offsets`), split over the profile's tensor, expert and pipeline parallel ranks;
- KV bytes per token from the model's config.json, per kind of layer: full-attention GQA
  layers hold K and V for every token, MLA layers one latent vector, linear-attention
  (KDA, gated delta) and Mamba layers none (they keep a constant state per sequence instead);
- the KV tokens the profile's pool buys, the longest context one sequence can hold, and per
  node the memory left after weights, KV pool and overhead against the OOM guard line.

Standard library only: the same code runs in the wrapper (`sparkctl fit`) and in a module on
the head (the checkpoint stage's check before the download)."""

from __future__ import annotations

import json
import math
import re
import struct

GIB = 1024**3
# The OOM guard's line, what a node must keep available beyond the engine: the default of the
# estimate here and of `sparkctl fit` (which imports it). The roles' own is
# spark_oom_guard_min_available_bytes (roles/spark/defaults/main.yml), which they pass in.
GUARD_BYTES = 8 * GIB
# Bytes per element of each safetensors dtype. Sub-byte types are fractional: the header's
# data_offsets are preferred anyway (exact, whatever the packing).
DTYPE_BYTES = {
    "F64": 8, "I64": 8, "U64": 8,
    "F32": 4, "I32": 4, "U32": 4,
    "F16": 2, "BF16": 2, "I16": 2, "U16": 2,
    "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "I8": 1, "U8": 1, "BOOL": 1,
    "F6_E2M3": 0.75, "F6_E3M2": 0.75, "F4": 0.5,
}
# Element sizes of the KV and state dtypes a config or an engine flag names.
TORCH_DTYPE_BYTES = {
    "float32": 4, "float": 4, "fp32": 4,
    "bfloat16": 2, "float16": 2, "half": 2, "bf16": 2, "fp16": 2,
    "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8_inc": 1, "float8_e4m3fn": 1,
}
# safetensors refuses headers above 100 MB; so does this reader (a corrupt length would
# otherwise ask the hub for gigabytes).
MAX_HEADER_BYTES = 100_000_000
# The recurrent state of KDA and gated-delta layers is kept in float32 (vLLM's and SGLang's
# default for these layers' SSM state); their short-convolution state in the model's dtype.
LINEAR_STATE_BYTES = 4
# Layer kinds.
FULL, SLIDING, LINEAR = "full_attention", "sliding_attention", "linear_attention"
_LAYER_INDEX = re.compile(r"(?:^|\.)layers\.(\d+)\.")


class FitError(ValueError):
    """Input the estimate cannot use (a malformed header, a config without the numbers)."""


# --- safetensors headers ---------------------------------------------------------------

def header_length(first8):
    """The JSON header's length from a shard's first 8 bytes."""
    if len(first8) < 8:
        raise FitError(f"a safetensors file starts with an 8-byte header length; got {len(first8)} bytes")
    (length,) = struct.unpack("<Q", first8[:8])
    if length < 2 or length > MAX_HEADER_BYTES:
        raise FitError(f"safetensors header length {length} is outside 2..{MAX_HEADER_BYTES}: not a safetensors file")
    return length


def parse_header(text):
    """{tensor name: {dtype, shape, bytes}} from a header's JSON (bytes or str); `__metadata__` is skipped."""
    try:
        data = json.loads(text.decode("utf-8") if isinstance(text, (bytes, bytearray)) else text)
    except (UnicodeDecodeError, ValueError) as exc:
        raise FitError(f"safetensors header is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise FitError("safetensors header is not a JSON object")
    tensors = {}
    for name, info in data.items():
        if name == "__metadata__":
            continue
        if not isinstance(info, dict) or "dtype" not in info or "shape" not in info:
            raise FitError(f"safetensors header entry {name!r} lacks dtype or shape")
        tensors[name] = {"dtype": info["dtype"], "shape": list(info["shape"]),
                         "bytes": tensor_bytes(info["dtype"], info["shape"], info.get("data_offsets"))}
    return tensors


def tensor_bytes(dtype, shape, data_offsets=None):
    """A tensor's size: its data_offsets when the header gives them, else elements x dtype size."""
    if isinstance(data_offsets, (list, tuple)) and len(data_offsets) == 2:
        return int(data_offsets[1]) - int(data_offsets[0])
    if dtype not in DTYPE_BYTES:
        raise FitError(f"unknown safetensors dtype {dtype!r} (known: {', '.join(sorted(DTYPE_BYTES))})")
    return int(math.ceil(math.prod(int(d) for d in shape) * DTYPE_BYTES[dtype]))


def read_local_header(path):
    """The tensors of a local .safetensors file (reads only the header)."""
    with open(path, "rb") as handle:
        length = header_length(handle.read(8))
        text = handle.read(length)
    if len(text) != length:
        raise FitError(f"{path}: header announces {length} bytes, the file holds {len(text)}")
    return parse_header(text)


def header_summary(tensors):
    """Bytes per dtype and the total: what the fit table and the test data record."""
    by_dtype = {}
    for info in tensors.values():
        by_dtype[info["dtype"]] = by_dtype.get(info["dtype"], 0) + info["bytes"]
    return {"tensors": len(tensors), "bytes": sum(by_dtype.values()), "bytes_by_dtype": dict(sorted(by_dtype.items()))}


# --- weights per rank ------------------------------------------------------------------

def tensor_placement(name, shape):
    """'expert', 'replicated' or 'sharded': how a tensor-parallel engine places a tensor.
    Experts go to the expert-parallel ranks; vectors and scalars (norms, biases, per-tensor
    scales) and the MoE router (a replicated linear layer in vLLM's and SGLang's MoE blocks)
    sit whole on every rank; every other matrix (attention and MLP projections, the
    vocabulary-parallel embedding and LM head) is split."""
    if ".experts." in name and ".shared_experts." not in name:
        return "expert"
    if len(shape) <= 1 or re.search(r"\.(gate|router)\.(weight|bias)$|e_score_correction_bias", name):
        return "replicated"
    return "sharded"


def weights_per_rank(tensors, tensor_parallel=1, expert_parallel=None, pipeline_parallel=1, num_layers=None):
    """Bytes of checkpoint tensors the busiest rank holds, with the split by placement.
    Experts are divided over expert_parallel ranks when the profile shards experts (vLLM's
    expert parallel size is tensor_parallel x data_parallel), else tensor-split like any matrix.
    With pipeline parallel, layers are cut into equal contiguous stages, the embedding on the
    first and the LM head and final norm on the last; the largest stage counts."""
    tp = max(1, int(tensor_parallel or 1))
    ep = max(1, int(expert_parallel or 1))
    pp = max(1, int(pipeline_parallel or 1))
    indices = [int(m.group(1)) for m in (_LAYER_INDEX.search(n) for n in tensors) if m]
    layers = num_layers or (max(indices) + 1 if indices else 1)
    per_stage = -(-layers // pp)
    stages = [{"sharded": 0, "replicated": 0, "expert": 0} for _stage in range(pp)]
    for name, info in tensors.items():
        match = _LAYER_INDEX.search(name)
        if match:
            stage = min(int(match.group(1)) // per_stage, pp - 1)
        elif "embed" in name:
            stage = 0
        else:
            stage = pp - 1
        stages[stage][tensor_placement(name, info["shape"])] += info["bytes"]
    expert_div = ep if ep > 1 else tp
    totals = []
    for s in stages:
        per_rank = -(-s["sharded"] // tp) + s["replicated"] + -(-s["expert"] // expert_div)
        totals.append((per_rank, s))
    per_rank, split = max(totals, key=lambda t: t[0])
    return {"bytes": per_rank, "sharded": split["sharded"], "replicated": split["replicated"],
            "expert": split["expert"], "checkpoint_bytes": sum(i["bytes"] for i in tensors.values())}


# --- KV per token from config.json ----------------------------------------------------

def text_config(config):
    """The language model's part of a config (multimodal configs nest it)."""
    inner = config.get("text_config") or config.get("language_config")
    return {**config, **inner} if isinstance(inner, dict) else config


def _norm_kind(kind):
    kind = str(kind).lower()
    if kind in ("full_attention", "attention", "full", "global", "attn", "*", "mla"):
        return FULL
    if "sliding" in kind or kind in ("local", "chunked_attention"):
        return SLIDING
    return LINEAR


def layer_kinds(config):
    """Per layer: full_attention (KV per token), sliding_attention (KV per token up to its
    window) or linear_attention (constant state, no KV per token), from the ways configs
    say it: `layer_types`; `gqa_layers` (0-indexed) or `gqa_interval` (one full then N
    linear layers); `linear_attn_config.full_attn_layers` (1-indexed); `full_attention_interval`
    (every Nth layer full); `layers_block_type`; `hybrid_override_pattern` ('*' attention).
    A config that says none of these is all full attention."""
    cfg = text_config(config)
    n = int(cfg.get("num_hidden_layers") or cfg.get("num_layers") or 0)
    if n <= 0:
        raise FitError("config.json has no num_hidden_layers")
    if isinstance(cfg.get("layer_types"), list) and len(cfg["layer_types"]) == n:
        return [_norm_kind(k) for k in cfg["layer_types"]]
    if isinstance(cfg.get("gqa_layers"), list):
        full = {int(i) for i in cfg["gqa_layers"]}
        return [FULL if i in full else LINEAR for i in range(n)]
    if cfg.get("gqa_interval"):
        step = int(cfg["gqa_interval"]) + 1
        return [FULL if i % step == 0 else LINEAR for i in range(n)]
    linear_cfg = cfg.get("linear_attn_config")
    if isinstance(linear_cfg, dict) and isinstance(linear_cfg.get("full_attn_layers"), list):
        full = {int(i) - 1 for i in linear_cfg["full_attn_layers"]}
        return [FULL if i in full else LINEAR for i in range(n)]
    if cfg.get("full_attention_interval"):
        step = int(cfg["full_attention_interval"])
        return [FULL if (i + 1) % step == 0 else LINEAR for i in range(n)]
    if isinstance(cfg.get("layers_block_type"), list) and len(cfg["layers_block_type"]) == n:
        return [_norm_kind(k) for k in cfg["layers_block_type"]]
    pattern = cfg.get("hybrid_override_pattern")
    if isinstance(pattern, str) and len(pattern) == n:
        return [FULL if c == "*" else ("mlp" if c == "-" else LINEAR) for c in pattern]
    return [FULL] * n


def dtype_bytes(name, default=2):
    """Element size of a torch/engine dtype name; `auto` or unknown -> default."""
    text = str(name or "auto").lower().replace("torch.", "")
    if text.startswith("fp8") or text.startswith("float8"):
        return 1
    return TORCH_DTYPE_BYTES.get(text, default)


def model_dtype_bytes(config):
    """The element size the engine runs the model in with its dtype `auto`: the config's dtype, but a
    float32 checkpoint is downcast to the platform's preferred 16-bit dtype (vLLM's
    _resolve_auto_dtype in vllm/config/model.py: bfloat16 on GPUs and on its CPU build)."""
    cfg = text_config(config)
    size = dtype_bytes(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
    return 2 if size == 4 else size


def kv_dtype_bytes(config, kv_cache_dtype=None):
    """The KV cache's element size: the engine's kv_cache_dtype, else (`auto`) the model's dtype as
    the engine runs it (model_dtype_bytes)."""
    if kv_cache_dtype and str(kv_cache_dtype).lower() != "auto":
        return dtype_bytes(kv_cache_dtype)
    return model_dtype_bytes(config)


def kv_per_token(config, tensor_parallel=1, kv_cache_dtype=None):
    """KV bytes one token costs one rank, summed over the layers that keep KV, with the layer counts.
    GQA layers hold K and V for their KV heads; the heads are split over the TP ranks (a head is
    replicated when there are fewer KV heads than ranks). MLA layers (a `kv_lora_rank` in the
    config) hold one latent vector of kv_lora_rank + qk_rope_head_dim per token, the same on
    every rank. Linear-attention layers hold nothing per token."""
    cfg = text_config(config)
    tp = max(1, int(tensor_parallel or 1))
    kinds = layer_kinds(cfg)
    elem = kv_dtype_bytes(cfg, kv_cache_dtype)
    if cfg.get("kv_lora_rank"):
        per_layer = (int(cfg["kv_lora_rank"]) + int(cfg.get("qk_rope_head_dim") or 0)) * elem
        layout = "mla"
    else:
        heads = int(cfg.get("num_attention_heads") or 0)
        kv_heads = int(cfg.get("num_key_value_heads") or heads)
        head_dim = cfg.get("head_dim") or (int(cfg["hidden_size"]) // heads if heads and cfg.get("hidden_size") else None)
        if not kv_heads or not head_dim:
            raise FitError("config.json names neither num_key_value_heads/num_attention_heads nor head_dim/hidden_size")
        per_rank_heads = max(1, -(-kv_heads // tp)) if kv_heads >= tp else 1
        per_layer = 2 * per_rank_heads * int(head_dim) * elem
        layout = "gqa"
    full = kinds.count(FULL)
    sliding = kinds.count(SLIDING)
    return {"bytes": per_layer * (full + sliding), "per_layer": per_layer, "layout": layout, "dtype_bytes": elem,
            "full_layers": full, "sliding_layers": sliding, "linear_layers": kinds.count(LINEAR),
            "window": cfg.get("sliding_window")}


def linear_state_per_sequence(config, tensor_parallel=1):
    """Constant bytes one sequence's linear-attention layers keep on one rank (recurrent state in
    float32, short-convolution state in the model's dtype), or 0 when the config names no
    layout this knows (the KV pool then holds that state unaccounted; docs/fit.md)."""
    cfg = text_config(config)
    tp = max(1, int(tensor_parallel or 1))
    linear = layer_kinds(cfg).count(LINEAR)
    if not linear:
        return 0
    elem = model_dtype_bytes(cfg)
    kda = cfg.get("linear_attn_config")
    if isinstance(kda, dict) and kda.get("head_dim"):
        heads = -(-int(kda.get("num_heads") or cfg.get("num_attention_heads")) // tp)
        dim = int(kda["head_dim"])
        conv = int(kda.get("short_conv_kernel_size") or 4) - 1
        per_layer = heads * dim * dim * LINEAR_STATE_BYTES + 3 * heads * dim * conv * elem
        return linear * per_layer
    if cfg.get("linear_num_value_heads"):
        v_heads = -(-int(cfg["linear_num_value_heads"]) // tp)
        k_heads = -(-int(cfg.get("linear_num_key_heads") or cfg["linear_num_value_heads"]) // tp)
        k_dim, v_dim = int(cfg["linear_key_head_dim"]), int(cfg["linear_value_head_dim"])
        conv = int(cfg.get("linear_conv_kernel_dim") or 4) - 1
        per_layer = v_heads * k_dim * v_dim * LINEAR_STATE_BYTES + (2 * k_heads * k_dim + v_heads * v_dim) * conv * elem
        return linear * per_layer
    return 0


# --- the estimate ------------------------------------------------------------------------

def estimate(*, kv, weights_bytes, kv_pool_bytes, overhead_bytes=0, node_available_bytes=110 * GIB,
             guard_bytes=GUARD_BYTES, context=None, max_num_seqs=1, state_per_sequence=0):
    """The numbers and the verdict. kv: kv_per_token()'s result (None when no config was read).
    node_available_bytes: what a node has for the engine (measured MemAvailable, or the
    profile's node budget). Refusals: weights + KV pool + overhead leave less than the guard
    line, or one sequence of `context` tokens does not fit the pool."""
    left = node_available_bytes - weights_bytes - kv_pool_bytes - overhead_bytes
    result = {"weights_per_rank_bytes": weights_bytes, "kv_pool_bytes": kv_pool_bytes,
              "overhead_bytes": overhead_bytes, "node_available_bytes": node_available_bytes,
              "guard_bytes": guard_bytes, "left_bytes": left, "margin_bytes": left - guard_bytes,
              "context": context, "kv_bytes_per_token": None, "kv_tokens": None, "max_context": None,
              "concurrency": None, "state_bytes": state_per_sequence * max(1, int(max_num_seqs or 1)),
              "problems": [], "warnings": []}
    if left < guard_bytes:
        result["problems"].append(
            f"weights {gib(weights_bytes)} + KV pool {gib(kv_pool_bytes)} + overhead {gib(overhead_bytes)} leave "
            f"{gib(left)} of the node's {gib(node_available_bytes)}, below the OOM guard line of {gib(guard_bytes)}")
    elif left - guard_bytes < 2 * GIB:
        result["warnings"].append(
            f"{gib(left)} left per node is within 2 GiB of the OOM guard line ({gib(guard_bytes)}): a long prefill "
            "or a compile burst can trip it")
    if kv and kv["bytes"] > 0:
        usable = max(0, kv_pool_bytes - result["state_bytes"])
        tokens = usable // kv["bytes"]
        result.update(kv_bytes_per_token=kv["bytes"], kv_tokens=tokens, max_context=tokens)
        if context:
            result["concurrency"] = tokens / context
            if tokens < context:
                result["problems"].append(
                    f"the KV pool of {gib(kv_pool_bytes)} buys {tokens:,} tokens at {kv['bytes']:,} bytes each, fewer "
                    f"than one sequence of the {context:,}-token context")
    return result


def gib(n):
    return f"{n / GIB:.2f} GiB"


def within(estimated, measured, tolerance):
    """Whether estimated is within tolerance (0.05 = 5 %) of measured."""
    return abs(estimated - measured) <= tolerance * abs(measured)


# --- the estimate against the engine's own startup figures ------------------------------

# How far the engine's own figures may stray from the estimate before verify warns.
STARTUP_TOLERANCE = 0.10
# What the checkpoint stage keeps of its estimate for verify (roles/checkpoint, fit.yml).
KEPT_KEYS = ("profile", "weights_per_rank_bytes", "kv_bytes_per_token", "kv_tokens", "kv_pool_bytes",
             "tensor_parallel", "expert_parallel", "pipeline_parallel", "weights_source")
_RANK_IP = re.compile(r"\bip=([0-9A-Fa-f.:]+)\)")


# What a kept estimate records it was made for (its `made_for`): the profile's inputs the kept
# figures depend on and the checkpoint's commit. Bumped when the arithmetic behind the kept figures
# changes, so an estimate an earlier sparkctl kept is made again.
MADE_FOR_VERSION = 1
# The profile's inputs (profile_inputs) the kept figures depend on: the parallel sizes split the
# weights and the KV heads, the pool and KV dtype set the tokens, max_num_seqs the state per
# sequence taken from the pool. The node's MemAvailable is not one: the kept part has no memory left.
MADE_FOR_INPUTS = ("tensor_parallel", "expert_parallel", "pipeline_parallel", "kv_pool_bytes", "kv_cache_dtype",
                   "max_num_seqs")


def made_for(profile, commit=None):
    """What an estimate of this profile for the checkpoint at `commit` is made for (kept beside it)."""
    inputs = profile_inputs(profile or {})
    record = {"version": MADE_FOR_VERSION, "profile": (profile or {}).get("name"), "commit": commit or None}
    record.update((key, inputs[key]) for key in MADE_FOR_INPUTS)
    return record


def kept_estimate(result, made_for_record=None):
    """The part of an estimate the checkpoint stage keeps beside the checkpoint for verify, with what
    it was made for (made_for(); estimate_due compares it with a later run's)."""
    kept = {key: result.get(key) for key in KEPT_KEYS}
    if made_for_record is not None:
        kept["made_for"] = dict(made_for_record)
    return kept


def estimate_due(kept, profile, commit=None):
    """Whether the estimate kept beside the checkpoint must be made again: {due, reason}.

    kept: the kept file's text (as a role reads it), its parsed mapping, or None / '' when there is
    none. Due when there is none, it cannot be read, it records nothing of what it was made for (an
    earlier sparkctl's), or that record differs from made_for(profile, commit): another profile,
    parallel size, KV pool, KV dtype or sequence count, or another commit of the checkpoint. The
    reason names what differs, for the role's and verify's messages."""
    if isinstance(kept, (bytes, bytearray)):
        kept = kept.decode("utf-8", "replace")
    if isinstance(kept, str):
        if not kept.strip():
            kept = None
        else:
            try:
                kept = json.loads(kept)
            except ValueError:
                return {"due": True, "reason": "the kept fit estimate is not JSON"}
    if not kept:
        return {"due": True, "reason": "no fit estimate is kept beside the checkpoint"}
    if not isinstance(kept, dict):
        return {"due": True, "reason": "the kept fit estimate is not a JSON object"}
    recorded = kept.get("made_for")
    if not isinstance(recorded, dict):
        return {"due": True, "reason": "the kept fit estimate does not record what it was made for (an earlier sparkctl's)"}
    wanted = made_for(profile, commit)
    differ = [key for key in wanted if recorded.get(key) != wanted[key]]
    if not differ:
        return {"due": False, "reason": ""}
    return {"due": True, "reason": "the kept fit estimate was made for other inputs: " + ", ".join(
        f"{key} {recorded.get(key)!r}, now {wanted[key]!r}" for key in differ)}


def _fact_values(fact):
    """(where, value) per matching line of a startup fact: a Ray worker's line names its node's
    address (`ip=...`), the driver's line is the head's."""
    values = list(fact.get("matched_values") or [])
    lines = list(fact.get("lines") or [])
    out = []
    for index, value in enumerate(values):
        line = lines[index] if index < len(lines) else ""
        match = _RANK_IP.search(line)
        out.append((match.group(1) if match else "head", value))
    return out


def compare_startup(estimate, startup, tolerance=STARTUP_TOLERANCE):
    """Rows comparing the kept estimate with the engine's startup facts (engine_startup_facts'
    `startup` list): the GiB each rank loaded (rule `model_loading_gib`) against the weights per
    rank, the KV cache size in tokens (rule `kv_cache_tokens`) against the tokens the pool buys.
    Each row: item, where, estimated, measured, status (`ok` within tolerance, else `warn`) and a
    message with both numbers. No estimate or no such fact: no row."""
    if not estimate:
        return []
    facts = {fact.get("name"): fact for fact in startup or [] if isinstance(fact, dict)}
    wanted = (
        ("weights_per_rank", "model_loading_gib", estimate.get("weights_per_rank_bytes"), GIB, "GiB"),
        ("kv_tokens", "kv_cache_tokens", estimate.get("kv_tokens"), 1, "tokens"),
    )
    rows = []
    for item, rule, estimated_raw, unit, unit_name in wanted:
        if estimated_raw is None or rule not in facts:
            continue
        estimated = estimated_raw / unit
        for where, measured in _fact_values(facts[rule]):
            try:
                measured = float(measured)
            except (TypeError, ValueError):
                continue
            ok = within(estimated, measured, tolerance)
            off = (estimated - measured) / measured * 100 if measured else float("inf")
            number = "{:.2f} %s" % unit_name if unit != 1 else "{:,.0f} %s" % unit_name
            message = (f"{item} on {where}: estimated {number.format(estimated)}, the engine reports {number.format(measured)} "
                       f"({off:+.1f} %" + (")" if ok else f", beyond {tolerance:.0%}: the fit estimate and the "
                                                          "engine disagree)"))
            rows.append({"item": item, "where": where, "estimated": estimated, "measured": measured,
                         "status": "ok" if ok else "warn", "message": message})
    return rows


# --- reading a checkpoint's headers and config -------------------------------------------

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"


def shard_names(index):
    """The shard files an index's weight_map names, in order."""
    weight_map = (index or {}).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise FitError(f"{INDEX_NAME} has no weight_map")
    return sorted(set(weight_map.values()))


def read_local_checkpoint(directory):
    """(config, tensors, shards) of a checkpoint directory: config.json and every shard's header
    (the shards the index names, else every *.safetensors file)."""
    import os

    def load(name):
        with open(os.path.join(directory, name), encoding="utf-8") as handle:
            return json.load(handle)

    try:
        config = load("config.json")
    except (OSError, ValueError) as exc:
        raise FitError(f"{directory}/config.json: {exc}") from None
    if os.path.isfile(os.path.join(directory, INDEX_NAME)):
        names = shard_names(load(INDEX_NAME))
    else:
        names = sorted(n for n in os.listdir(directory) if n.endswith(".safetensors"))
    if not names:
        raise FitError(f"{directory} holds no .safetensors shard")
    tensors = {}
    for name in names:
        try:
            tensors.update(read_local_header(os.path.join(directory, name)))
        except OSError as exc:
            raise FitError(f"{directory}/{name}: {exc}") from None
    return config, tensors, names


def read_hub_checkpoint(repo_id, revision, token=None, endpoint=None, timeout=30, opener=None):
    """(config, tensors, shards) read from the hub without downloading weights: config.json and
    the index whole, then two range requests per shard (its first 8 bytes, then its header).
    The token goes to the hub's own origin only (hub_access's opener)."""
    from urllib.parse import quote

    from ansible_collections.sparkctl.spark.plugins.module_utils import hub_access

    base = (endpoint or hub_access.DEFAULT_ENDPOINT).rstrip("/")
    opener = opener or hub_access._default_opener()

    def get(name, byte_range=None):
        url = f"{base}/{repo_id}/resolve/{quote(str(revision), safe='')}/{quote(name)}"
        headers = {"Range": f"bytes={byte_range[0]}-{byte_range[1]}"} if byte_range else None
        answer, reason = hub_access._request(opener, "GET", url, token, timeout, extra_headers=headers)
        if answer is None:
            raise FitError(f"the hub at {base} is out of reach reading {repo_id}/{name}: "
                           f"{hub_access._scrub(reason, token)}")
        if answer["status"] not in (200, 206):
            raise FitError(f"the hub answered {answer['status']} for {repo_id}@{revision}/{name}"
                           + (f" ({answer['error_code']})" if answer.get("error_code") else ""))
        body = answer["body"]
        if byte_range and answer["status"] == 200:
            body = body[byte_range[0]:byte_range[1] + 1]
        return body

    def get_json(name):
        body = get(name)
        try:
            return json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise FitError(f"{repo_id}/{name} is not JSON: {exc}") from None

    config = get_json("config.json")
    try:
        names = shard_names(get_json(INDEX_NAME))
    except FitError as exc:
        if "answered 404" not in str(exc):
            raise
        names = [SINGLE_NAME]
    tensors = {}
    for name in names:
        length = header_length(get(name, (0, 7)))
        tensors.update(parse_header(get(name, (8, 8 + length - 1))))
    return config, tensors, names


# --- a profile's estimate ----------------------------------------------------------------

def profile_inputs(profile):
    """What the estimate takes from a loaded profile (plugin_utils/profile.py's shape)."""
    topo = profile.get("topology") or {}
    mem = profile.get("memory") or {}
    args = (profile.get("engine") or {}).get("args") or {}
    ckpt = profile.get("checkpoint") or {}
    return {
        "tensor_parallel": int(topo.get("tensor_parallel") or 1),
        "expert_parallel": int(topo.get("expert_parallel") or 1) if topo.get("kind") == "ray_tp_ep" else 1,
        "pipeline_parallel": int(topo.get("pipeline_parallel") or 1),
        "kv_pool_bytes": int(mem.get("kv_pool_bytes") or args.get("kv_cache_memory_bytes") or 0),
        "overhead_bytes": int(mem.get("overhead_bytes") or 0),
        "node_budget_bytes": int(mem.get("node_budget_bytes") or 110 * GIB),
        "context": args.get("max_model_len") or args.get("context_length") or (profile.get("model") or {}).get("context_native"),
        "max_num_seqs": int(args.get("max_num_seqs") or args.get("max_running_requests") or 1),
        "kv_cache_dtype": args.get("kv_cache_dtype"),
        "size_bytes": int(ckpt.get("size_bytes") or 0),
        "repo_id": ckpt.get("repo_id"),
        "revision": ckpt.get("revision") or "main",
    }


def profile_estimate(profile, config=None, tensors=None, *, context=None, node_available_bytes=None,
                     guard_bytes=GUARD_BYTES):
    """The estimate for a profile. tensors: the checkpoint's headers (None falls back to the
    profile's checkpoint.size_bytes split over the tensor-parallel ranks, and says so);
    config: config.json (None leaves the KV figures out, and says so). node_available_bytes:
    a node's measured MemAvailable (default: the profile's node budget)."""
    inputs = profile_inputs(profile)
    context = context or inputs["context"]
    notes = []
    if tensors:
        layers = int(text_config(config or {}).get("num_hidden_layers") or 0) or None
        weights = weights_per_rank(tensors, inputs["tensor_parallel"], inputs["expert_parallel"],
                                   inputs["pipeline_parallel"], layers)
        weights_source = "headers"
    else:
        per_rank = -(-inputs["size_bytes"] // (inputs["tensor_parallel"] * inputs["pipeline_parallel"]))
        weights = {"bytes": per_rank, "checkpoint_bytes": inputs["size_bytes"]}
        weights_source = "profile"
    kv = state = None
    if config:
        kv = kv_per_token(config, inputs["tensor_parallel"], inputs["kv_cache_dtype"])
        state = linear_state_per_sequence(config, inputs["tensor_parallel"])
        if kv["linear_layers"] and not state:
            notes.append("linear-attention state per sequence not counted (layout not known)")
        if kv["sliding_layers"]:
            notes.append("sliding-window layers counted as full attention (an upper bound)")
    result = estimate(kv=kv, weights_bytes=weights["bytes"], kv_pool_bytes=inputs["kv_pool_bytes"],
                      overhead_bytes=inputs["overhead_bytes"],
                      node_available_bytes=node_available_bytes or inputs["node_budget_bytes"],
                      guard_bytes=guard_bytes, context=context, max_num_seqs=inputs["max_num_seqs"],
                      state_per_sequence=state or 0)
    result.update(profile=profile.get("name"), weights_source=weights_source, weights=weights, kv=kv,
                  tensor_parallel=inputs["tensor_parallel"], expert_parallel=inputs["expert_parallel"],
                  pipeline_parallel=inputs["pipeline_parallel"], notes=notes,
                  fits=not result["problems"])
    return result


def refusal(result):
    """One message naming the profile, the numbers and the fix, for a result that does not fit."""
    name = result.get("profile") or "?"
    return (f"profile {name} does not fit: " + "; ".join(result["problems"])
            + ". Shrink memory.kv_pool_bytes (and engine.args.kv_cache_memory_bytes) or the context "
              "(engine.args.max_model_len), or serve a smaller checkpoint (checkpoint.repo_id), in a profile of "
              "your own or through spark_profile_overrides.")

# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Model profiles, memory fit and engine traps: the per-node memory a profile needs against the
node's budget, and the engine settings that wedge or crash a node (docs/field-notes.md,
"Engine traps"), each refused with the reason and the fix before any change."""

from __future__ import annotations

from ansible_collections.sparkctl.spark.plugins.plugin_utils.profile_engine import _VERSION_RE, _args, _engine_env
from ansible_collections.sparkctl.spark.plugins.plugin_utils.profile_schema import _is_int

GIB = 1024**3
# Usable for one engine rank on a 128 GB GB10 node after DGX OS, Docker and the
# OOM guard: 110-121 GiB in the published recipes; the low end (docs/field-notes.md, "Memory on a GB10 node").
DEFAULT_NODE_BUDGET_BYTES = 110 * GIB
# pip's NCCL 2.28.9 deadlocks cross-node CUDA graph replay; fixed in 2.30.4 (docs/field-notes.md).
NCCL_GRAPH_FIX = (2, 30, 4)


def _fmt_bytes(n):
    return f"{n / 1e9:.1f} GB ({n / GIB:.1f} GiB)"


def context_tokens(profile):
    args = _args(profile)
    return args.get("max_model_len") or args.get("context_length")


def uses_cuda_graphs(profile):
    args = _args(profile)
    if (profile.get("engine") or {}).get("kind") == "sglang":
        return not args.get("disable_cuda_graph")
    return not args.get("enforce_eager")


def speculative_method(profile):
    args = _args(profile)
    if args.get("speculative_config"):
        spec = args["speculative_config"]
        return spec.get("method", "configured") if isinstance(spec, dict) else "configured"
    if args.get("speculative_algorithm"):
        return str(args["speculative_algorithm"])
    return None


def node_memory_bytes(profile):
    """Per-node need: weights per rank + KV pool + runtime overhead (weights default to the
    checkpoint split evenly over the ranks: tensor_parallel x pipeline_parallel, each stage
    holding its share of the layers, as module_utils/fit.py splits them)."""
    mem = profile.get("memory") or {}
    weights = mem.get("weights_per_rank_bytes")
    if weights is None:
        size = (profile.get("checkpoint") or {}).get("size_bytes") or 0
        topo = profile.get("topology") or {}
        ranks = (topo.get("tensor_parallel") or 1) * (topo.get("pipeline_parallel") or 1)
        weights = -(-size // ranks)
    return {
        "weights": int(weights),
        "kv_pool": int(mem.get("kv_pool_bytes") or 0),
        "overhead": int(mem.get("overhead_bytes") or 0),
        "budget": int(mem.get("node_budget_bytes") or DEFAULT_NODE_BUDGET_BYTES),
    }


def _nccl_fixed(profile):
    preload = (profile.get("nccl") or {}).get("preload") or {}
    image_nccl = ((profile.get("runtime") or {}).get("image") or {}).get("nccl_version")
    for version in (preload.get("version"), image_nccl):
        match = _VERSION_RE.match(str(version or ""))
        if match and tuple(int(x) for x in match.groups()) >= NCCL_GRAPH_FIX:
            return True
    return False


def trap_problems(profile):
    """The known engine traps (docs/field-notes.md, "Engine traps"), each refused with the reason and the fix."""
    name = profile.get("name", "?")
    engine = (profile.get("engine") or {}).get("kind")
    args = _args(profile)
    env = _engine_env(profile)
    problems = []

    def refuse(message):
        problems.append(f"profile {name}: {message}")

    if str(args.get("load_format", "")).lower() == "dummy":
        refuse("engine.args.load_format: 'dummy' is refused: the dummy initialiser upcasts fp8 parameters to fp16 "
               "(seed 002: the 51.2 GB fp8 PLE table alone needs > 150 GB transiently) and wedges a 128 GB GB10 node; "
               "remove load_format and load the real checkpoint.")
    if args.get("no_ple_offload_embedding"):
        refuse("engine.args.no_ple_offload_embedding is refused: disabling PLE offload pins ~26 GB more per rank on the GPU "
               "side and over-commits unified memory (seed 002); remove it and keep SGLang's automatic offload.")
    for var, forbidden in (profile.get("forbid_env_values") or {}).items():
        value = str(env.get(var, ""))
        for needle in forbidden:
            if needle in value:
                refuse(f"engine.env.{var}={value!r} contains {needle!r}, which this profile forbids (the seed's recipe was "
                       f"never validated with it on GB10); remove it from engine.env.{var}.")
    ctx = context_tokens(profile)
    if engine == "sglang" and _is_int(ctx) and ctx >= 900_000:
        chunk = args.get("chunked_prefill_size")
        if chunk is None or (_is_int(chunk) and (chunk > 1024 or chunk < 0)):
            if chunk is None:
                shown = "unset (SGLang picks a larger default)"
            else:
                shown = "-1 (unchunked)" if _is_int(chunk) and chunk < 0 else chunk
            refuse(f"engine.args.chunked_prefill_size is {shown} at a {ctx:,}-token context: the QSA indexer's fp32 "
                   "workspace grows with chunk x history and 4096 wedged the box (seed 002); set chunked_prefill_size: 1024 "
                   "or lower.")
    linear = (profile.get("model") or {}).get("linear_attention")
    method = speculative_method(profile)
    if linear == "kda" and method:
        refuse(f"speculative decoding ({method}) is refused on a KDA linear-attention model: vLLM's spec-decode path "
               "asserts on the KDA recurrent state on the first token (seed 004, every method); remove "
               f"engine.args.{'speculative_config' if 'speculative_config' in args else 'speculative_algorithm'}.")
    nodes = (profile.get("topology") or {}).get("nodes") or 1
    if nodes > 1 and uses_cuda_graphs(profile) and not _nccl_fixed(profile):
        fix = "engine.args.enforce_eager: true" if engine != "sglang" else "engine.args.disable_cuda_graph: true"
        refuse("cross-node CUDA graphs without an NCCL that fixes the graph-replay deadlock (>= 2.30.4; pip's 2.28.9 hangs "
               f"the first generation, seeds 002/004): set {fix}, or preload a fixed host NCCL with "
               "nccl.preload {version: '2.30.7', path: /abs/libnccl.so.2}.")
    mem = node_memory_bytes(profile)
    total = mem["weights"] + mem["kv_pool"] + mem["overhead"]
    if mem["kv_pool"] and total > mem["budget"]:
        ckpt = profile.get("checkpoint") or {}
        precision = str(ckpt.get("precision", "")).upper()
        msg = (f"memory: {_fmt_bytes(mem['weights'])} of weights per rank + {_fmt_bytes(mem['kv_pool'])} KV pool + "
               f"{_fmt_bytes(mem['overhead'])} overhead = {_fmt_bytes(total)} per node exceeds the node budget of "
               f"{_fmt_bytes(mem['budget'])}")
        if precision in ("BF16", "FP16"):
            alts = ckpt.get("quantized_alternatives") or []
            named = ", ".join(f"{a['repo_id']} ({a['precision'].upper()})" for a in alts if isinstance(a, dict))
            msg += (f": the {precision} checkpoint {ckpt.get('repo_id', '')} does not fit two Sparks; serve a quantized "
                    f"(FP8) checkpoint instead{' such as ' + named if named else ''}, via spark_profile_overrides "
                    "{checkpoint: {repo_id, revision, size_bytes, precision: fp8, ...}, memory: {weights_per_rank_bytes: ...}}.")
        else:
            msg += ": shrink memory.kv_pool_bytes (and the engine's KV argument with it) or the context length."
        refuse(msg)
    kv_arg = args.get("kv_cache_memory_bytes")
    if engine == "vllm" and kv_arg is not None and kv_arg != (profile.get("memory") or {}).get("kv_pool_bytes"):
        refuse(f"engine.args.kv_cache_memory_bytes ({kv_arg}) differs from memory.kv_pool_bytes "
               f"({(profile.get('memory') or {}).get('kv_pool_bytes')}): the budget check would judge the wrong pool; "
               "set both to the same value.")
    return problems

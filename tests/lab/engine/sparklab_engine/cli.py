"""The serve command line: vLLM's flags that the stand-in uses, every other `--flag [value]`
accepted and reported, and the SPARKLAB_ENGINE_* environment (README.md lists it)."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field

from sparklab_engine.timing import Timing

DEFAULT_KV_CACHE_BYTES = 268435456
DEFAULT_MAX_MODEL_LEN = 4096


class UsageError(Exception):
    pass


@dataclass
class Settings:
    model_dir: str
    served_model_name: str
    host: str = "0.0.0.0"
    port: int = 8000
    api_key: str | None = None
    tensor_parallel_size: int = 1
    distributed_executor_backend: str = "mp"
    max_model_len: int | None = None
    kv_cache_memory_bytes: int | None = None
    kv_cache_dtype: str = "auto"
    max_num_seqs: int = 256
    gpu_memory_utilization: float = 0.9
    enforce_eager: bool = False
    enable_auto_tool_choice: bool = False
    tool_call_parser: str | None = None
    reasoning_parser: str | None = None
    # vLLM's own multi-node launch (ranks.py): rank mode when nnodes > 1 with the mp backend.
    nnodes: int = 1
    node_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int = 29501
    headless: bool = False
    ignored: list = field(default_factory=list)
    # SPARKLAB_ENGINE_* knobs.
    load_seconds: float = 2.0
    # None: computed from config.json (memory.py); SPARKLAB_ENGINE_KV_BYTES_PER_TOKEN overrides it.
    kv_bytes_per_token: int | None = None
    placement_timeout_s: float = 120.0
    ray_watch_s: float = 5.0
    ray_address: str = "auto"
    rank_lost_exit_s: float = 5.0  # rank 0: from the request that found a rank lost to the exit
    hold_bytes: int = 0
    crash_during_boot: str = ""  # why every boot dies on purpose; "" boots
    comm: str = "sparklab-engine"
    # The compile step's variables (jit.py), for the ranks this process runs itself.
    jit_env: dict = field(default_factory=dict)
    timing: Timing = field(default_factory=Timing)


def parse_bytes(text):
    """'268435456', '256M', '2G', '1.5GiB' -> bytes (binary units)."""
    value = str(text).strip()
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    upper = value.upper().removesuffix("IB").removesuffix("B")
    suffix = upper[-1:] if upper[-1:] in "KMGT" and upper[-1:] else ""
    number = upper[:-1] if suffix else upper
    try:
        result = int(float(number) * units[suffix])
    except ValueError:
        raise UsageError(f"not a byte count: {text!r}") from None
    if result < 0:
        raise UsageError(f"not a byte count: {text!r}")
    return result


def _crash_during_boot(env):
    """Why every boot should die after loading ("" when it should not): the environment asks
    for it, or this release carries that defect."""
    from sparklab_engine import RELEASE_DEFECT, __version__

    if (env.get("SPARKLAB_ENGINE_CRASH_DURING_BOOT") or "0").strip().lower() in ("1", "true", "yes"):
        return "SPARKLAB_ENGINE_CRASH_DURING_BOOT is set"
    if RELEASE_DEFECT == "crash-during-boot":
        return f"release {__version__} carries the defect {RELEASE_DEFECT!r}"
    return ""


def _env_float(env, name, default, minimum=0.0):
    raw = env.get(name)
    if raw in (None, ""):
        return default
    try:
        value = float(raw)
    except ValueError:
        raise UsageError(f"{name}={raw!r} is not a number") from None
    if value < minimum:
        raise UsageError(f"{name}={raw!r} must be at least {minimum}")
    return value


def _parser():
    parser = argparse.ArgumentParser(prog="sparklab_engine serve", add_help=True,
                                     description="sparkctl lab stand-in engine (NOT vLLM); vLLM-shaped flags")
    parser.add_argument("model_dir")
    parser.add_argument("--served-model-name", nargs="+")
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--api-key")
    parser.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    parser.add_argument("--distributed-executor-backend", choices=["ray", "mp", "uni", "external_launcher"], default="mp")
    parser.add_argument("--max-model-len", type=int)
    parser.add_argument("--kv-cache-memory-bytes", type=parse_bytes)
    parser.add_argument("--kv-cache-dtype", default="auto",
                        choices=["auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc"])
    parser.add_argument("--max-num-seqs", type=int, default=256)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    parser.add_argument("--enforce-eager", action="store_true")
    parser.add_argument("--enable-auto-tool-choice", action="store_true")
    parser.add_argument("--tool-call-parser")
    parser.add_argument("--reasoning-parser")
    parser.add_argument("--nnodes", type=int, default=1)
    parser.add_argument("--node-rank", type=int, default=0)
    parser.add_argument("--master-addr", default="127.0.0.1")
    parser.add_argument("--master-port", type=int, default=29501)
    parser.add_argument("--headless", action="store_true")
    return parser


def _split_unknown(unknown):
    """Other `--flag [value]` pairs, kept for the log; a bare word that follows no flag is an error."""
    ignored, i = [], 0
    while i < len(unknown):
        word = unknown[i]
        if not word.startswith("-"):
            raise UsageError(f"unexpected argument {word!r}")
        if "=" in word or i + 1 >= len(unknown) or unknown[i + 1].startswith("--"):
            ignored.append(word)
            i += 1
        else:
            ignored.append(f"{word} {unknown[i + 1]}")
            i += 2
    return ignored


def _check_ranks(args):
    """vLLM's multi-node launch flags: which combinations make a rank (ranks.py)."""
    if args.nnodes < 1:
        raise UsageError("--nnodes must be at least 1")
    if args.nnodes == 1 and (args.headless or args.node_rank > 0):
        raise UsageError("--headless and --node-rank > 0 belong to a multi-node launch: they need --nnodes > 1")
    if not 0 <= args.node_rank < args.nnodes:
        raise UsageError(f"--node-rank {args.node_rank} is outside 0..{args.nnodes - 1} (--nnodes {args.nnodes})")
    if args.headless and args.node_rank == 0:
        raise UsageError("--headless on rank 0: node rank 0 serves the API; the headless ranks are 1..nnodes-1")
    if args.node_rank > 0 and not args.headless:
        raise UsageError(f"--node-rank {args.node_rank} needs --headless: only node rank 0 serves the API")
    if args.nnodes > 1 and args.distributed_executor_backend != "mp":
        raise UsageError(f"--nnodes {args.nnodes} is vLLM's multi-node launch without Ray: it needs "
                         f"--distributed-executor-backend mp, not {args.distributed_executor_backend}")
    if not 1 <= args.master_port <= 65535:
        raise UsageError(f"--master-port {args.master_port} is not a TCP port (1-65535)")


def parse_serve(argv, env=None):
    env = os.environ if env is None else env
    args, unknown = _parser().parse_known_args(argv)
    if args.tensor_parallel_size < 1:
        raise UsageError("--tensor-parallel-size must be at least 1")
    if args.max_num_seqs < 1:
        raise UsageError("--max-num-seqs must be at least 1")
    _check_ranks(args)
    timing = Timing(
        ttft_s=_env_float(env, "SPARKLAB_ENGINE_TTFT_S", Timing.ttft_s),
        ttft_per_token_s=_env_float(env, "SPARKLAB_ENGINE_TTFT_PER_TOKEN_S", Timing.ttft_per_token_s),
        token_rate=_env_float(env, "SPARKLAB_ENGINE_TOKEN_RATE", Timing.token_rate, minimum=1e-6),
        max_total_token_rate=_env_float(env, "SPARKLAB_ENGINE_MAX_TOTAL_TOKEN_RATE", Timing.max_total_token_rate),
    )
    names = args.served_model_name or [args.model_dir]
    return Settings(
        model_dir=args.model_dir,
        served_model_name=names[0],
        host=args.host,
        port=args.port,
        api_key=args.api_key or env.get("VLLM_API_KEY") or None,
        tensor_parallel_size=args.tensor_parallel_size,
        distributed_executor_backend=args.distributed_executor_backend,
        max_model_len=args.max_model_len,
        kv_cache_memory_bytes=args.kv_cache_memory_bytes,
        kv_cache_dtype=args.kv_cache_dtype,
        max_num_seqs=args.max_num_seqs,
        gpu_memory_utilization=args.gpu_memory_utilization,
        enforce_eager=args.enforce_eager,
        enable_auto_tool_choice=args.enable_auto_tool_choice,
        tool_call_parser=args.tool_call_parser,
        reasoning_parser=args.reasoning_parser,
        nnodes=args.nnodes,
        node_rank=args.node_rank,
        master_addr=args.master_addr,
        master_port=args.master_port,
        headless=args.headless,
        ignored=_split_unknown(unknown),
        load_seconds=_env_float(env, "SPARKLAB_ENGINE_LOAD_S", 2.0),
        kv_bytes_per_token=(int(_env_float(env, "SPARKLAB_ENGINE_KV_BYTES_PER_TOKEN", 1, minimum=1))
                            if env.get("SPARKLAB_ENGINE_KV_BYTES_PER_TOKEN") else None),
        placement_timeout_s=_env_float(env, "SPARKLAB_ENGINE_PLACEMENT_TIMEOUT_S", 120.0),
        ray_watch_s=_env_float(env, "SPARKLAB_ENGINE_RAY_WATCH_S", 5.0),
        ray_address=env.get("RAY_ADDRESS") or "auto",
        rank_lost_exit_s=_env_float(env, "SPARKLAB_ENGINE_RANK_LOST_EXIT_S", 5.0),
        hold_bytes=parse_bytes(env.get("SPARKLAB_ENGINE_HOLD_BYTES") or "0"),
        crash_during_boot=_crash_during_boot(env),
        comm=env.get("SPARKLAB_ENGINE_COMM", "sparklab-engine"),
        jit_env={name: env[name] for name in ("FLASHINFER_WORKSPACE_BASE", "SPARKLAB_ENGINE_COMPILE_S") if name in env},
        timing=timing,
    )

#!/usr/bin/env python3
"""Generate a realistic, deterministic multi-shard safetensors checkpoint (LAB-ONLY test data).

The lab cannot reach the Hugging Face hub, so the checkpoint pipeline is exercised against
tests/lab/hub/hubstub.py serving a directory written by this script. The directory looks
like a sharded Llama-style repo on the hub:

    model-00001-of-0000N.safetensors ... model-0000N-of-0000N.safetensors
    model.safetensors.index.json   (metadata.total_size + weight_map tensor -> shard)
    config.json  generation_config.json  tokenizer.json  README.md  .gitattributes

Every shard is a valid safetensors file: an 8-byte little-endian header length, a JSON
header (dtype BF16 / F32 / U8, shape, data_offsets relative to the data section, contiguous
and in order, padded with spaces to 8 bytes as the reference writer does) and the data.
Weights are pseudo-random bytes (incompressible, like real bf16 weights on the wire);
norm weights are F32 ones. Contents are a pure function of (shards, shard_bytes, seed):
each shard draws from its own random.Random stream, so shards are generated in parallel
(one process per core) and a re-run with the same arguments yields identical bytes.

Idempotent: a shard whose file already exists with the planned size is skipped (sizes
only: the 2 GiB case must not re-read the data); small JSON/text files are rewritten only
when their content differs. Files are written to a temporary name and renamed, so an
interrupted run never leaves a right-sized partial shard.

Stdlib only, Python >= 3.11 (the lab nodes run Debian bookworm).

    python make_checkpoint.py DIR --shards 8 --total-gib 2
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import random
import struct
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

DTYPE_BYTES = {"BF16": 2, "F32": 4, "U8": 1}
# Pseudo-random bytes are produced and written in chunks of this size: large enough for
# randbytes/write to run at memory speed, small enough to keep the RSS flat.
CHUNK_BYTES = 8 << 20
# Norm weights are F32 1.0, the value a freshly initialised RMSNorm holds.
F32_ONE = struct.pack("<f", 1.0)
INDEX_NAME = "model.safetensors.index.json"


def shard_name(index: int, shards: int) -> str:
    """HF's shard naming: 1-based, zero-padded to five digits."""
    return f"model-{index:05d}-of-{shards:05d}.safetensors"


def _architecture(shard_bytes: int) -> dict:
    """Pick model dimensions so every tensor is at most a quarter of a shard.

    The largest tensors are the embedding and lm_head ([16*H, H] BF16 = 32*H^2 bytes), so
    H is the largest power of two with 32*H^2 <= shard_bytes/4 (between 16 and 4096).
    That keeps the greedy packing below from ever producing an empty shard.
    """
    hidden = 16
    while hidden < 4096 and 32 * (hidden * 2) ** 2 <= shard_bytes // 4:
        hidden *= 2
    return {
        "hidden_size": hidden,
        "intermediate_size": 4 * hidden,
        "vocab_size": 16 * hidden,
        "num_attention_heads": max(1, hidden // 64),
        "num_key_value_heads": max(1, hidden // 256),
    }


def _layer_tensors(layer: int, arch: dict) -> list[tuple[str, str, list[int]]]:
    """One decoder layer: BF16 attention, a 4-bit packed (U8) MLP with F32 scales, F32 norms."""
    h, i = arch["hidden_size"], arch["intermediate_size"]
    kv = h * arch["num_key_value_heads"] // arch["num_attention_heads"]
    p = f"model.layers.{layer}."
    return [
        (p + "input_layernorm.weight", "F32", [h]),
        (p + "mlp.down_proj.weight", "U8", [h, i // 2]),
        (p + "mlp.down_proj.weight_scale", "F32", [h, i // 16]),
        (p + "mlp.gate_proj.weight", "BF16", [i, h]),
        (p + "mlp.up_proj.weight", "BF16", [i, h]),
        (p + "post_attention_layernorm.weight", "F32", [h]),
        (p + "self_attn.k_proj.weight", "BF16", [kv, h]),
        (p + "self_attn.o_proj.weight", "BF16", [h, h]),
        (p + "self_attn.q_proj.weight", "BF16", [h, h]),
        (p + "self_attn.v_proj.weight", "BF16", [kv, h]),
    ]


def _nbytes(dtype: str, shape: list[int]) -> int:
    return DTYPE_BYTES[dtype] * math.prod(shape)


def plan_checkpoint(shards: int, shard_bytes: int) -> dict:
    """Lay out tensors and shards (no I/O). Returns arch, layers and per-shard tensor lists."""
    if shards < 1:
        raise ValueError("shards must be >= 1")
    arch = _architecture(shard_bytes)
    h, v = arch["hidden_size"], arch["vocab_size"]
    head = [("model.embed_tokens.weight", "BF16", [v, h])]
    tail = [("model.norm.weight", "F32", [h]), ("lm_head.weight", "BF16", [v, h])]
    fixed = sum(_nbytes(d, s) for _, d, s in head + tail)
    per_layer = sum(_nbytes(d, s) for _, d, s in _layer_tensors(0, arch))
    target = shards * shard_bytes
    layers = max(2 * shards, round((target - fixed) / per_layer))
    tensors = head + [t for n in range(layers) for t in _layer_tensors(n, arch)] + tail

    # Greedy packing on cumulative boundaries, like save_pretrained's max_shard_size:
    # tensor k goes to the shard whose slice of the total contains its first byte.
    total = sum(_nbytes(d, s) for _, d, s in tensors)
    per_shard: list[list[tuple[str, str, list[int]]]] = [[] for _ in range(shards)]
    offset = 0
    for name, dtype, shape in tensors:
        index = min(shards - 1, offset * shards // total)
        per_shard[index].append((name, dtype, shape))
        offset += _nbytes(dtype, shape)
    if any(not tensors_of_shard for tensors_of_shard in per_shard):
        raise ValueError(f"cannot spread {len(tensors)} tensors over {shards} shards")
    return {"arch": dict(arch, num_hidden_layers=layers), "shards": per_shard, "total_size": total}


def _shard_header(tensors: list[tuple[str, str, list[int]]]) -> bytes:
    """The safetensors header for tensors laid out contiguously in the given order."""
    header: dict = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, dtype, shape in tensors:
        end = offset + _nbytes(dtype, shape)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, end]}
        offset = end
    raw = json.dumps(header, separators=(",", ":")).encode()
    # The reference writer pads the header with spaces so the data starts 8-byte aligned.
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw


def shard_size(tensors: list[tuple[str, str, list[int]]]) -> int:
    return len(_shard_header(tensors)) + sum(_nbytes(d, s) for _, d, s in tensors)


def _shard_seed(seed: int, index: int) -> int:
    # Independent, reproducible stream per shard (so shards can be written in any order).
    return seed * 1_000_003 + index


def _write_shard(path: str, tensors: list[tuple[str, str, list[int]]], seed: int) -> int:
    """Write one shard through a temporary file; returns its size."""
    rng = random.Random(seed)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as out:
        out.write(_shard_header(tensors))
        for name, dtype, shape in tensors:
            left = _nbytes(dtype, shape)
            if name.endswith("norm.weight"):
                out.write(F32_ONE * (left // 4))
                continue
            while left:
                step = min(left, CHUNK_BYTES)
                out.write(rng.randbytes(step))
                left -= step
    os.replace(tmp, path)
    return os.path.getsize(path)


def _config(arch: dict) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_act": "silu",
        "hidden_size": arch["hidden_size"],
        "intermediate_size": arch["intermediate_size"],
        "num_hidden_layers": arch["num_hidden_layers"],
        "num_attention_heads": arch["num_attention_heads"],
        "num_key_value_heads": arch["num_key_value_heads"],
        "vocab_size": arch["vocab_size"],
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "bos_token_id": 1,
        "eos_token_id": 2,
        "quantization_config": {"quant_method": "sparklab-stub", "bits": 4, "modules": ["mlp.down_proj"]},
    }


def _tokenizer(vocab_size: int) -> dict:
    """A small but loadable `tokenizers` WordLevel tokenizer (ids beyond it are unused)."""
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for n in range(3, min(vocab_size, 512)):
        vocab[f"tok{n}"] = n
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True}
            for t, i in (("<unk>", 0), ("<s>", 1), ("</s>", 2))
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"},
    }


def _readme(shards: int, total_size: int, seed: int) -> str:
    return (
        "---\nlicense: apache-2.0\nlibrary_name: transformers\npipeline_tag: text-generation\ntags:\n- sparkctl-lab\n---\n\n"
        "# sparkctl lab checkpoint (synthetic)\n\n"
        f"Generated by tests/lab/hub/make_checkpoint.py with seed {seed}: {shards} safetensors shards, "
        f"{total_size} bytes of tensor data. The weights are pseudo-random bytes: this repo exists to\n"
        "exercise download, verification and mirroring, not inference.\n"
    )


GITATTRIBUTES = "*.safetensors filter=lfs diff=lfs merge=lfs -text\n*.bin filter=lfs diff=lfs merge=lfs -text\n"


def _json_text(obj: dict) -> str:
    return json.dumps(obj, indent=2, sort_keys=False) + "\n"


def _write_text_if_changed(path: Path, text: str) -> bool:
    data = text.encode()
    if path.is_file() and path.read_bytes() == data:
        return False
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return True


def make_checkpoint(
    directory: str | os.PathLike,
    shards: int = 8,
    shard_bytes: int = 256 << 20,
    seed: int = 0,
    workers: int | None = None,
) -> dict:
    """Write (or complete) the checkpoint under `directory`.

    Returns {"directory", "files": {name: size}, "total_size", "written": [...], "skipped": [...]}.
    `total_size` is the index's metadata.total_size (tensor bytes, headers excluded, as in HF).
    """
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    plan = plan_checkpoint(shards, shard_bytes)
    names = [shard_name(i + 1, shards) for i in range(shards)]
    expected = {name: shard_size(t) for name, t in zip(names, plan["shards"], strict=True)}

    todo = [i for i, name in enumerate(names) if not ((root / name).is_file() and (root / name).stat().st_size == expected[name])]
    written, skipped = [], [n for i, n in enumerate(names) if i not in todo]
    if todo:
        jobs = [(str(root / names[i]), plan["shards"][i], _shard_seed(seed, i)) for i in todo]
        workers = workers or min(len(jobs), os.cpu_count() or 1)
        if workers > 1:
            # spawn, not fork: callers (test harnesses) may have threads running.
            with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
                list(pool.map(_write_shard, *zip(*jobs, strict=True)))
        else:
            for job in jobs:
                _write_shard(*job)
        written += [names[i] for i in todo]

    index = {
        "metadata": {"total_size": plan["total_size"]},
        "weight_map": dict(sorted((t[0], names[i]) for i, ts in enumerate(plan["shards"]) for t in ts)),
    }
    texts = {
        INDEX_NAME: _json_text(index),
        "config.json": _json_text(_config(plan["arch"])),
        "generation_config.json": _json_text({"bos_token_id": 1, "eos_token_id": 2, "do_sample": True, "temperature": 0.6, "top_p": 0.9}),
        "tokenizer.json": _json_text(_tokenizer(plan["arch"]["vocab_size"])),
        "README.md": _readme(shards, plan["total_size"], seed),
        ".gitattributes": GITATTRIBUTES,
    }
    for name, text in texts.items():
        (written if _write_text_if_changed(root / name, text) else skipped).append(name)

    files = {name: (root / name).stat().st_size for name in names + list(texts)}
    return {"directory": str(root), "files": files, "total_size": plan["total_size"], "written": written, "skipped": skipped}


def standin_checkpoint(root: Path, shards: int = 1, shard_bytes: int = 64 << 10) -> Path:
    """A small directory the lab's stand-in engine (SparklabStandinForCausalLM) serves: real
    safetensors shards (the engine sizes its ranks from their headers and config.json), the
    index and a config naming that architecture. Returns root."""
    make_checkpoint(root, shards=shards, shard_bytes=shard_bytes, workers=1)
    config = json.loads((root / "config.json").read_text())
    (root / "config.json").write_text(_json_text(dict(config, architectures=["SparklabStandinForCausalLM"])))
    return root


def header_only_checkpoint(root: Path, shards: int = 8, shard_bytes: int = 128 << 20,
                           architecture: str = "SparklabStandinForCausalLM") -> tuple[Path, list[str]]:
    """The checkpoint make_checkpoint() would write, with every shard cut after its header: what
    sizing from headers reads (the stand-in engine, the fit estimate) without the data. The
    defaults are the lab hub's checkpoint. Returns (root, shard names)."""
    root.mkdir(parents=True, exist_ok=True)
    plan = plan_checkpoint(shards, shard_bytes)
    names = [shard_name(i + 1, shards) for i in range(shards)]
    for name, tensors in zip(names, plan["shards"], strict=True):
        (root / name).write_bytes(_shard_header(tensors))
    (root / "config.json").write_text(_json_text(dict(_config(plan["arch"]), architectures=[architecture])))
    (root / INDEX_NAME).write_text(_json_text({"metadata": {"total_size": plan["total_size"]}, "weight_map": dict(
        sorted((t[0], names[i]) for i, ts in enumerate(plan["shards"]) for t in ts))}))
    return root, names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory")
    parser.add_argument("--shards", type=int, default=8)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--total-gib", type=float, help="approximate total size (default 2)")
    size.add_argument("--shard-mib", type=float, help="approximate size of one shard")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, help="parallel shard writers (default: one per core)")
    args = parser.parse_args(argv)
    if args.shard_mib is not None:
        shard_bytes = int(args.shard_mib * (1 << 20))
    else:
        shard_bytes = int((args.total_gib if args.total_gib is not None else 2.0) * (1 << 30) / args.shards)
    start = time.monotonic()
    result = make_checkpoint(args.directory, shards=args.shards, shard_bytes=shard_bytes, seed=args.seed, workers=args.workers)
    elapsed = time.monotonic() - start
    total = sum(result["files"].values())
    print(
        f"{result['directory']}: {len(result['files'])} files, {total} bytes "
        f"({total / (1 << 30):.2f} GiB), wrote {len(result['written'])}, kept {len(result['skipped'])}, {elapsed:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`sparkctl fit`: will a profile fit two Sparks, before anything is downloaded (docs/fit.md).

Reads the checkpoint's config.json and every shard's safetensors header (from the hub with
two small range requests per shard, or from --checkpoint-dir), and prints per profile the
weights per rank, the KV bytes per token, the tokens the KV pool buys, the longest context
one sequence can hold and the memory a node has left against the OOM guard line. The
arithmetic is the collection's (module_utils/fit.py): the checkpoint stage refuses an
oversized profile on the head with the same numbers.

The hub is read with the standard library, like the head's check: the wrapper does not
depend on huggingface_hub (tests/unit/test_fit_hub.py holds the reader to
huggingface_hub's get_safetensors_metadata)."""

from __future__ import annotations

import os
from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Table

from .project import collection_importable

GIB = 1024**3
# Seconds per hub request: an unreachable hub should cost seconds, not minutes, per profile.
HUB_TIMEOUT = 15


def fit_results(root: Path, names: list[str] | None, *, paths: list[str], context: int | None,
                checkpoint_dir: str | None, offline: bool, node_available_bytes: int | None,
                endpoint: str | None, token: str | None, kv_cache_dtype: str | None = None,
                kv_pool_bytes: int | None = None) -> tuple[list[dict], list[str]]:
    """(one estimate per profile, errors). No profile named: every shipped one. kv_cache_dtype and
    kv_pool_bytes stand in for the profile's engine.args.kv_cache_dtype and memory.kv_pool_bytes."""
    collection_importable(root)
    from ansible_collections.sparkctl.spark.plugins.module_utils import fit
    from ansible_collections.sparkctl.spark.plugins.plugin_utils import profile_load

    names = names or sorted(profile_load.available_profiles([profile_load.COLLECTION_PROFILES]))
    results, errors = [], []
    for name in names:
        try:
            profile = profile_load.load_profile(name, paths, None, os.getcwd())
        except profile_load.ProfileError as exc:
            errors.append(str(exc))
            continue
        profile = with_overrides(profile, kv_cache_dtype, kv_pool_bytes)
        inputs = fit.profile_inputs(profile)
        config = tensors = None
        source_note = None
        try:
            if checkpoint_dir:
                source = f"local {checkpoint_dir}"
                config, tensors, _ = fit.read_local_checkpoint(checkpoint_dir)
            elif offline:
                source, source_note = "profile", "not read (--offline)"
            else:
                config, tensors, _ = fit.read_hub_checkpoint(inputs["repo_id"], inputs["revision"], token=token,
                                                             endpoint=endpoint, timeout=HUB_TIMEOUT)
                source = f"hub {inputs['repo_id']}@{inputs['revision']}"
        except fit.FitError as exc:
            if checkpoint_dir:
                errors.append(f"--checkpoint-dir: {exc}")
                continue
            source, source_note = "profile", f"not read: {exc}"
        result = fit.profile_estimate(profile, config, tensors, context=context,
                                      node_available_bytes=node_available_bytes, guard_bytes=fit.GUARD_BYTES)
        result["source"] = source
        if source_note:
            result["notes"].insert(0, f"checkpoint headers and config.json {source_note}: weights are "
                                      "checkpoint.size_bytes split over the ranks, KV figures unknown")
        result["message"] = None if result["fits"] else fit.refusal(result)
        results.append(result)
    return results, errors


def with_overrides(profile: dict, kv_cache_dtype: str | None, kv_pool_bytes: int | None) -> dict:
    """The profile as the estimate sees it with `--kv-cache-dtype` / `--kv-pool-gib` (the profile's
    own file is not touched)."""
    engine = dict(profile.get("engine") or {})
    args = dict(engine.get("args") or {})
    memory = dict(profile.get("memory") or {})
    if kv_cache_dtype:
        args["kv_cache_dtype"] = kv_cache_dtype
    if kv_pool_bytes:
        memory["kv_pool_bytes"] = kv_pool_bytes
        # vLLM's pool flag, which profile_inputs reads when memory names no pool.
        if "kv_cache_memory_bytes" in args:
            args["kv_cache_memory_bytes"] = kv_pool_bytes
    return dict(profile, engine=dict(engine, args=args), memory=memory)


def _gib(n) -> str:
    return "-" if n is None else f"{n / GIB:.2f}"


def _tokens(n) -> str:
    return "-" if n is None else f"{n:,}"


def _kv_line(r: dict) -> str:
    kv = r.get("kv")
    if not kv:
        return "-"
    if kv["layout"] == "mla":
        shape = "MLA latent"
    else:
        shape = f"GQA, {kv['per_layer'] // (2 * kv['dtype_bytes'])} KV values per layer and rank"
    layers = f"{kv['full_layers'] + kv['sliding_layers']} of {kv['full_layers'] + kv['sliding_layers'] + kv['linear_layers']} layers"
    return f"{kv['bytes']:,} B ({layers} keep KV; {shape}; {kv['dtype_bytes']}-byte elements)"


def fit_rows(r: dict) -> list[tuple[str, str]]:
    """(quantity, value) rows of one profile's estimate."""
    weights = _gib(r["weights_per_rank_bytes"]) + " GiB"
    weights += f" (shard headers, {r['source']})" if r["weights_source"] == "headers" else " (checkpoint.size_bytes)"
    context = "-"
    if r["max_context"] is not None:
        context = f"{r['max_context']:,} tokens"
        if r["concurrency"] is not None:
            context += f" ({r['concurrency']:.2f}x the profile's {r['context']:,})"
    elif r["context"]:
        context = f"profile asks {r['context']:,}; unknown without config.json"
    verdict = "does not fit" if not r["fits"] else ("tight" if r["warnings"] else "fits")
    return [
        ("weights per rank", weights),
        ("KV per token and rank", _kv_line(r)),
        ("KV pool", f"{_gib(r['kv_pool_bytes'])} GiB" + (f", {_tokens(r['kv_tokens'])} tokens" if r["kv_tokens"] else "")),
        ("longest context", context),
        ("left per node", f"{_gib(r['left_bytes'])} GiB of {_gib(r['node_available_bytes'])} GiB after "
                          f"{_gib(r['overhead_bytes'])} GiB overhead (OOM guard line {_gib(r['guard_bytes'])} GiB)"),
        ("verdict", verdict),
    ]


def show_fit(results: list[dict], console: Console | None = None) -> None:
    """One small table per profile, then its refusal, warnings and notes."""
    console = console or Console()
    for r in results:
        table = Table(title=f"{r['profile']}: TP {r['tensor_parallel']}"
                            + (f", PP {r['pipeline_parallel']}" if r.get("pipeline_parallel", 1) > 1 else "")
                            + (f", EP {r['expert_parallel']}" if r["expert_parallel"] > 1 else ""),
                      title_justify="left", box=box.SIMPLE_HEAD, show_header=False, pad_edge=False, show_edge=False)
        table.add_column("quantity", no_wrap=True, style="bold")
        table.add_column("value", overflow="fold")
        for name, value in fit_rows(r):
            style = {"does not fit": "red", "tight": "yellow", "fits": "green"}.get(value) if name == "verdict" else None
            table.add_row(name, value, style=style)
        console.print(table)
        for line in ([r["message"]] if r["message"] else []) + r["warnings"] + r["notes"]:
            console.print(f"  {line}", highlight=False, markup=False)
        console.print()

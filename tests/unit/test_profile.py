"""Model profiles: schema errors name the key, every known engine trap (docs/field-notes.md) is
refused (and accepted once fixed), overrides merge, user directories win, the memory budget refuses BF16
Solar-Open-100B, and the rendered argv / environment / units of every shipped profile
are compared with reviewed golden files under tests/unit/golden/profiles/.
Regenerate with SPARKCTL_UPDATE_GOLDEN=1 and review the diff."""

import json
import re
import sys
from pathlib import Path

import pytest

import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.sparkctl.spark.plugins.filter import profile as profile_filter
from inventory_check import ROLE_DEFAULTS, inventory_problems
from ansible_collections.sparkctl.spark.plugins.plugin_utils import profile as P
from golden_files import assert_golden_tree

REPO = Path(__file__).resolve().parents[2]
LAB_PROFILES = REPO / "tests" / "lab" / "profiles"
GOLDEN = Path(__file__).parent / "golden" / "profiles"
# Every profile the collection ships: a new one needs its file and its golden files only. Tests
# that cover every profile of a kind pick them from this list by their fields (shipped_where),
# never by name.
SHIPPED = sorted(path.stem for path in (REPO / "collections/ansible_collections/sparkctl/spark/profiles").glob("*.yml"))
# Solar-Open-100B (BF16) as shipped is refused by the memory budget; its golden renders the FP8 fix.
SOLAR100_FP8 = {
    "checkpoint": {"repo_id": "mike-ravkine/Solar-Open-100B-FP8-Dynamic", "size_bytes": 103000000000,
                   "precision": "fp8", "dir_name": "solar-open-100b-fp8", "shards": None},
}
# The shipped profiles the checks refuse as shipped (profiles/README.md says why), each with the
# overrides that fix it: the goldens and every test that renders them render the fix. Exactly the
# refused ones (test_only_the_profiles_with_a_fix_are_refused_as_shipped), so a sound new profile
# needs no entry.
FIXES = {"solar-open-100b-vllm-fork": SOLAR100_FP8}
# The lab's profiles the rendering tests cover beside the shipped ones (tests/lab/profiles).
LAB_RENDERED = ["lab-standin", "lab-standin-3", "lab-vllm"]


def load(name, overrides=None, paths=(str(LAB_PROFILES),)):
    return P.load_profile(name, list(paths), overrides or {})


def problems(name, overrides=None, paths=(str(LAB_PROFILES),)):
    return P.resolve(name, list(paths), overrides or {})[1]


def shipped_where(test):
    """The shipped profiles (as shipped, fixes left out) for which test(profile) holds."""
    return [name for name in SHIPPED if test(load(name, paths=()))]


def cluster(profile):
    """The cluster the profile serves on: the head and topology.nodes - 1 workers (spark2, ...)."""
    ckpt = profile["checkpoint"]["dir_name"]
    image = profile["runtime"].get("image") or {}
    nodes = profile["topology"]["nodes"]
    return {
        "head": {"name": "spark1", "link_ip": "192.168.100.10/24", "interface": "enp1s0f1np1"},
        "workers": [{"name": f"spark{n}", "link_ip": f"192.168.100.{9 + n}/24", "interface": "enp1s0f1np1"}
                    for n in range(2, nodes + 1)],
        "service_user": "spark",
        "checkpoint_dir": f"/srv/sparkctl/models/{ckpt}",
        "venv_path": f"/opt/sparkctl/venvs/{profile['name']}",
        "image": image.get("pull") or (image.get("build") or {}).get("tag") or image.get("load"),
        "api_key_file": "/etc/sparkctl/api-key.env" if profile["engine"]["kind"] == "vllm" else "/etc/sparkctl/sglang-api.yaml",
    }


# ----------------------------------------------------------------------------- shipped profiles


@pytest.mark.parametrize("name", SHIPPED + LAB_RENDERED)
def test_shipped_profiles_are_sound(name):
    assert problems(name, FIXES.get(name)) == []


def test_only_the_profiles_with_a_fix_are_refused_as_shipped():
    assert [name for name in SHIPPED if problems(name, paths=())] == sorted(FIXES)


def test_default_profile_is_shipped_and_keeps_the_old_memory_figure():
    profile = load(ROLE_DEFAULTS["spark_model_profile"], paths=())
    assert profile_filter.profile_node_memory_bytes(profile) == 109046032916
    assert profile_filter.profile_checkpoint(profile) == {
        "source": "hub", "repo_id": "nota-ai/Solar-Open2-250B-Nota-NVFP4", "revision": "main", "allow_patterns": []}


def test_256k_variant_extends_the_1m_profile():
    base, variant = load("solar-open2-nvfp4-vllm-venv"), load("solar-open2-nvfp4-vllm-venv-256k")
    assert variant["engine"]["args"]["max_model_len"] == 262144
    assert variant["memory"]["kv_pool_bytes"] == variant["engine"]["args"]["kv_cache_memory_bytes"] == 8000000000
    assert variant["runtime"] == base["runtime"] and variant["checkpoint"] == base["checkpoint"]
    assert [Path(s).name for s in variant["_sources"]] == ["solar-open2-nvfp4-vllm-venv.yml", "solar-open2-nvfp4-vllm-venv-256k.yml"]


def test_lab_profile_matches_the_lab_inventory():
    """The lab serves lab-standin and, like any inventory, lets the checkpoint's name, directory,
    size and the memory follow the profile (roles/spark defaults): switching the profile
    switches them."""
    profile = load("lab-standin")
    inv = yaml.safe_load((REPO / "inventories" / "lab" / "group_vars" / "all.yml").read_text())
    assert inv["spark_model_profile"] == "lab-standin"
    for follows_the_profile in ("spark_checkpoint", "spark_checkpoint_size_bytes", "spark_model_memory_bytes",
                                "spark_checkpoint_dir", "spark_model_name"):
        assert follows_the_profile not in inv
    assert profile["checkpoint"]["shards"] == 8


def test_the_second_lab_profile_differs_in_runtime_version_checkpoint_and_topology_only():
    """lab-standin-b, the switch's other end: another pinned engine version (a wheel
    sparklab_build writes beside the first), another checkpoint (the hub stand-in's second
    repo, as `sparklab hub start` makes it) and vLLM's other multi-node topology (vllm_ranks
    instead of Ray, the same sizes); the same engine, model and API port."""
    for where in (REPO / "tests" / "lab", REPO / "tests" / "lab" / "engine" / "_build"):
        if str(where) not in sys.path:
            sys.path.insert(0, str(where))
    import sparklab
    import sparklab_build

    first, second = load("lab-standin"), load("lab-standin-b")
    assert first["runtime"]["venv"]["packages"] == [f"sparklab-engine=={sparklab_build.versions()[0]}"]
    assert second["runtime"]["venv"]["packages"] == [f"sparklab-engine=={sparklab_build.versions()[1]}"]
    assert second["checkpoint"]["dir_name"] != first["checkpoint"]["dir_name"]
    assert second["checkpoint"]["repo_id"] == sparklab.SECOND_REPO != first["checkpoint"]["repo_id"]
    assert second["checkpoint"]["shards"] == sparklab.SECOND_REPO_SHARDS
    assert second["checkpoint"]["size_bytes"] == int(sparklab.SECOND_REPO_GIB * 2 ** 30)
    for same in ("engine", "model"):
        assert {k: v for k, v in second[same].items() if k != "env"} == {k: v for k, v in first[same].items() if k != "env"}
    assert (first["topology"]["kind"], second["topology"]["kind"]) == ("ray_tp", "vllm_ranks")
    assert dict(second["topology"], kind="ray_tp") == first["topology"]
    assert second["api"]["port"] == first["api"]["port"]
    assert problems("lab-standin-b") == []


def test_sglang_build_context_is_kept_with_the_profile():
    profile = load("qwen38-flash-next-nvfp4-sglang")
    context = Path(profile["_dir"]) / profile["runtime"]["image"]["build"]["context"]
    dockerfile = (context / "Dockerfile").read_text()
    assert "ARG BASE_IMAGE=" + profile["runtime"]["image"]["build"]["base"] in dockerfile
    assert "is_sm100_supported" in (context / "patch_qsa_backend.py").read_text()


def test_patch_script_is_idempotent_and_refuses_a_moved_anchor(tmp_path):
    import importlib.util

    script = Path(load("qwen38-flash-next-nvfp4-sglang")["_dir"]) / "contexts/qwen38-flash-next-sglang/patch_qsa_backend.py"
    spec = importlib.util.spec_from_file_location("patch_qsa_backend", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    target = tmp_path / "qwen_sparse_attn_backend.py"
    target.write_text("def _resolve_flash_attn_varlen_func():\n    return None\n")
    assert module.main(str(target)) == 0
    once = target.read_text()
    assert module.main(str(target)) == 0 and target.read_text() == once
    compile(once, str(target), "exec")
    moved = tmp_path / "moved.py"
    moved.write_text("def something_else():\n    pass\n")
    assert module.main(str(moved)) == 1


# ----------------------------------------------------------------------------- loading


def test_unknown_profile_names_the_variable_and_the_choices():
    (msg,) = problems("nope")
    assert "profile 'nope' was not found" in msg and "spark_model_profile" in msg and "lab-standin" in msg


def test_bad_profile_name_is_refused():
    (msg,) = problems("../etc/passwd")
    assert "is not valid" in msg


def test_user_profile_directory_wins_over_the_collection(tmp_path):
    shadow = yaml.safe_load((Path(P.COLLECTION_PROFILES) / "solar-open2-nvfp4-vllm-venv.yml").read_text())
    shadow["api"]["port"] = 9000
    (tmp_path / "solar-open2-nvfp4-vllm-venv.yml").write_text(yaml.safe_dump(shadow))
    assert load("solar-open2-nvfp4-vllm-venv", paths=(str(tmp_path),))["api"]["port"] == 9000
    assert load("solar-open2-nvfp4-vllm-venv", paths=())["api"]["port"] == 8000


def test_relative_user_directory_resolves_against_the_inventory(tmp_path):
    (tmp_path / "inv" / "profiles").mkdir(parents=True)
    (tmp_path / "inv" / "profiles" / "mine.yml").write_text("extends: lab-standin\napi: {port: 8123}\n")
    profile, found = P.resolve("mine", ["profiles", str(LAB_PROFILES)], {}, str(tmp_path / "inv"))
    assert found == [] and profile["api"]["port"] == 8123 and profile["name"] == "mine"


def test_extends_loop_is_refused(tmp_path):
    (tmp_path / "a.yml").write_text("extends: b\n")
    (tmp_path / "b.yml").write_text("extends: a\n")
    (msg,) = problems("a", paths=(str(tmp_path),))
    assert "'extends' loops (a -> b -> a)" in msg


def test_invalid_yaml_is_refused(tmp_path):
    (tmp_path / "broken.yml").write_text("engine: [unclosed\n")
    (msg,) = problems("broken", paths=(str(tmp_path),))
    assert "is not valid YAML" in msg


def test_overrides_merge_deeply_replace_lists_and_null_removes():
    profile = load("lab-standin", {
        "engine": {"args": {"max_num_seqs": 2, "enforce_eager": None}, "env": {"EXTRA": "1"}},
        "startup_log": [{"name": "only", "regex": "x", "on_mismatch": "warn"}],
    })
    args = profile["engine"]["args"]
    assert args["max_num_seqs"] == 2 and args["max_model_len"] == 40960 and "enforce_eager" not in args
    assert profile["engine"]["env"] == {"SPARKLAB_ENGINE_ROLE": "standin", "SPARKLAB_ENGINE_COMPILE_S": "3", "EXTRA": "1"}
    assert [item["name"] for item in profile["startup_log"]] == ["only"]
    # The file on disk is untouched by a merge.
    assert "enforce_eager" in load("lab-standin")["engine"]["args"]


def test_overrides_must_be_a_mapping():
    (msg,) = problems("lab-standin", ["not", "a", "mapping"])
    assert "spark_profile_overrides must be a mapping" in msg


# ----------------------------------------------------------------------------- schema errors


@pytest.mark.parametrize("overrides, expected", [
    ({"engine": {"args": {"max_model_len": "abc"}}}, "profile lab-standin: engine.args.max_model_len: expected an integer, got 'abc'."),
    ({"engine": {"kind": "tgi"}}, "engine.kind: expected one of vllm, sglang, got 'tgi'."),
    ({"runtime": {"kind": "conda"}}, "runtime.kind: expected one of image, venv, got 'conda'."),
    ({"runtime": {"venv": {"packages": ["ray"]}}}, "runtime.venv.packages[0]: 'ray' is not pinned"),
    ({"checkpoint": {"size_bytes": None}}, "checkpoint.size_bytes: is missing."),
    ({"checkpoint": {"repo_id": "no-slash"}}, "checkpoint.repo_id: 'no-slash' is not valid (a hub repo id"),
    ({"topology": {"kind": "mesh"}}, "topology.kind: expected one of ray_tp, ray_tp_ep, sglang_ranks, vllm_ranks, got 'mesh'."),
    ({"topology": {"tensor_parallel": 3}}, "topology.tensor_parallel: 3 ranks do not spread evenly over 2 nodes"),
    ({"memory": {"kv_pool_bytes": -1}}, "memory.kv_pool_bytes: expected an integer >= 1, got -1."),
    ({"engine": {"args": {"gpu_memory_utilization": 1.5}}}, "engine.args.gpu_memory_utilization: expected a fraction in (0, 1]"),
    ({"engine": {"args": {"tensor_parallel_size": 2}}},
     "engine.args.tensor_parallel_size: is set by sparkctl from topology.tensor_parallel"),
    ({"engine": {"args": {"api_key": "secret"}}}, "engine.args.api_key: is set by sparkctl from the API key file (never on argv)"),
    ({"engine": {"args": {"Max-Len": 1}}}, "engine.args.Max-Len: argument names are the flag in snake_case"),
    ({"engine": {"env": {"BAD VAR": "x"}}}, "engine.env.BAD VAR: is not a valid environment variable name."),
    ({"engine": {"env": {"A": "two words"}}}, "engine.env.A: 'two words' is empty or holds whitespace"),
    ({"engine": {"command": ["{python}", "-m", "x"]}}, "engine.command: unknown placeholder {python}"),
    ({"api": {"port": 70000}}, "api.port: expected a TCP port (1-65535), got 70000."),
    ({"smoke": {"expect": ""}}, "smoke.expect: expected a non-empty string, got ''."),
    ({"startup_log": [{"name": "x", "regex": "(", "on_mismatch": "warn"}]}, "startup_log[0].regex: is not a valid regular expression"),
    ({"startup_log": [{"name": "x", "regex": "no group", "min": 1, "on_mismatch": "warn"}]}, "startup_log[0].regex: needs a capture group"),
    ({"startup_log": [{"name": "x", "regex": "y", "on_mismatch": "panic"}]},
     "startup_log[0].on_mismatch: expected warn or fail, got 'panic'."),
    ({"startup_log": "x"}, "startup_log: expected a list of {name, regex, on_mismatch}, got 'x'."),
    ({"startup_log": ["x"]}, "startup_log[0]: expected a mapping {name, regex, on_mismatch, [expect|min|max]}."),
    ({"checkpoint": {"quantized_alternatives": "x"}},
     "checkpoint.quantized_alternatives: expected a list of {repo_id, precision}, got 'x'."),
    ({"checkpoint": {"quantized_alternatives": [{"repo_id": "a/b"}]}},
     "checkpoint.quantized_alternatives[0]: expected {repo_id, precision}."),
    ({"parsers": {"logits_processors": ["NoModulePath"]}}, "parsers.logits_processors[0]: 'NoModulePath' is not a full dotted path"),
    ({"cpu_affinity": "five"}, "cpu_affinity: expected CPU ranges like '5-9,15-19', got 'five'."),
    ({"nccl": {"preload": {"version": "latest", "path": "/x/libnccl.so.2"}}}, "nccl.preload.version: expected a version like '2.30.7'"),
    ({"surprise": 1}, "(top level): unknown key(s) surprise"),
    ({"schema_version": 2}, "schema_version: expected 1, got 2."),
    ({"runtime": {"kind": "image"}}, "runtime.image: is missing."),
    ({"runtime": {"kind": "image", "image": {"pull": "a", "load": "b"}}},
     "runtime.image: give exactly one of pull, build or load (found pull, load)."),
    ({"topology": {"kind": "sglang_ranks"}}, "topology.kind: sglang_ranks runs SGLang's own multi-node launcher"),
    ({"topology": {"kind": "ray_tp_ep", "expert_parallel": 1}},
     "topology.expert_parallel: vLLM's expert parallel size is tensor_parallel x data_parallel = 2"),
])
def test_schema_errors_name_the_key(overrides, expected):
    found = problems("lab-standin", overrides)
    assert any(expected in msg for msg in found), found
    assert all(msg.startswith("profile lab-standin: ") for msg in found)


@pytest.mark.parametrize("slo, expected", [
    ("ttft=2", "benchmark.slo: 'ttft=2' is not METRIC=VALUE with a unit, e.g. 'ttft=2s,tpot=100ms'"),
    ("latency=2s", "benchmark.slo: 'latency=2s' is not METRIC=VALUE with a unit"),
    ("ttft=0ms", "benchmark.slo: 'ttft=0ms' is not METRIC=VALUE with a unit"),
    ("e2e=30s,e2el=20s", "benchmark.slo: e2e is given twice"),
    (",", "benchmark.slo: names no objective"),
    (2, "benchmark.slo: expected a non-empty string, got 2."),
])
def test_a_benchmark_slo_the_client_would_refuse_is_refused(slo, expected):
    found = problems("lab-standin", {"benchmark": {"slo": slo}})
    assert any(expected in msg for msg in found), found


def test_a_benchmark_slo_in_the_clients_form_is_accepted_and_read_alike():
    from sparkctl.bench.goodput import parse_slo

    for slo in ("ttft=2s,tpot=100ms", " TTFT = 1.5s , e2el=2000ms ", "itl=250ms,e2e=3e1s"):
        assert problems("lab-standin", {"benchmark": {"slo": slo}}) == [], slo
        assert parse_slo(slo)
    assert "benchmark: unknown key(s) goodput" in problems("lab-standin", {"benchmark": {"goodput": "x"}})[0]


def test_build_context_without_dockerfile_is_refused():
    found = problems("qwen38-flash-next-nvfp4-sglang", {"runtime": {"image": {"build": {"context": "contexts/missing"}}}})
    assert any("runtime.image.build.context" in m and "has no Dockerfile" in m for m in found), found


# ----------------------------------------------------------------------------- trap rules


def test_load_format_dummy_is_refused_and_auto_is_accepted():
    (msg,) = problems("qwen38-flash-next-nvfp4-sglang", {"engine": {"args": {"load_format": "dummy"}}})
    assert "engine.args.load_format: 'dummy' is refused" in msg and "fp16" in msg
    assert problems("qwen38-flash-next-nvfp4-sglang", {"engine": {"args": {"load_format": "auto"}}}) == []


def test_disabling_ple_offload_is_refused():
    (msg,) = problems("qwen38-flash-next-nvfp4-sglang", {"engine": {"args": {"no_ple_offload_embedding": True}}})
    assert "no_ple_offload_embedding is refused" in msg and "26 GB" in msg
    assert problems("qwen38-flash-next-nvfp4-sglang", {"engine": {"args": {"no_ple_offload_embedding": False}}}) == []


def test_expandable_segments_is_refused_where_the_profile_forbids_it():
    bad = {"engine": {"env": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}}}
    (msg,) = problems("qwen38-flash-next-nvfp4-sglang", bad)
    assert "engine.env.PYTORCH_CUDA_ALLOC_CONF='expandable_segments:True' contains 'expandable_segments'" in msg
    # Another allocator setting is fine, and so is the same variable where the profile does not forbid it.
    assert problems("qwen38-flash-next-nvfp4-sglang", {"engine": {"env": {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:512"}}}) == []
    assert problems("lab-standin", bad) == []


@pytest.mark.parametrize("chunk", [2048, 4096, -1, None])
def test_chunked_prefill_above_1024_at_900k_is_refused(chunk):
    (msg,) = problems("qwen38-flash-next-nvfp4-sglang", {"engine": {"args": {"chunked_prefill_size": chunk}}})
    assert "engine.args.chunked_prefill_size" in msg and "900,000-token context" in msg and "1024" in msg


def test_chunked_prefill_is_free_below_900k_and_at_1024():
    assert problems("qwen38-flash-next-nvfp4-sglang", {"engine": {"args": {"chunked_prefill_size": 512}}}) == []
    assert problems("qwen38-flash-next-nvfp4-sglang", {"engine": {"args": {"chunked_prefill_size": 4096, "context_length": 262144}}}) == []


@pytest.mark.parametrize("spec", [{"method": "ngram", "num_speculative_tokens": 4}, {"method": "eagle"}])
def test_speculative_decode_on_a_kda_model_is_refused(spec):
    (msg,) = problems("solar-open2-nvfp4-vllm-venv", {"engine": {"args": {"speculative_config": spec}}})
    assert f"speculative decoding ({spec['method']}) is refused on a KDA linear-attention model" in msg
    assert "engine.args.speculative_config" in msg


def test_speculative_decode_is_fine_without_kda():
    # The Qwen3.8 profile's NEXTN runs on gated-delta state; the same drafting on a KDA model is refused.
    assert problems("qwen38-flash-next-nvfp4-sglang") == []
    (msg,) = problems("qwen38-flash-next-nvfp4-sglang", {"model": {"linear_attention": "kda"}})
    assert "speculative decoding (NEXTN) is refused" in msg


def test_cross_node_cuda_graphs_need_eager_or_a_fixed_nccl():
    (msg,) = problems("solar-open2-nvfp4-vllm-venv", {"engine": {"args": {"enforce_eager": None}}})
    assert "cross-node CUDA graphs" in msg and "enforce_eager: true" in msg and "2.30.4" in msg
    fixed = {"engine": {"args": {"enforce_eager": None}}, "nccl": {"preload": {"version": "2.30.7", "path": "/opt/nccl/libnccl.so.2"}}}
    assert problems("solar-open2-nvfp4-vllm-venv", fixed) == []
    broken = {"engine": {"args": {"enforce_eager": None}}, "nccl": {"preload": {"version": "2.28.9", "path": "/opt/nccl/libnccl.so.2"}}}
    assert len(problems("solar-open2-nvfp4-vllm-venv", broken)) == 1
    # SGLang: graphs on with the recipe's host NCCL 2.30.7 is the shipped profile; without the preload it is refused.
    (msg,) = problems("qwen38-flash-next-nvfp4-sglang", {"nccl": None})
    assert "disable_cuda_graph: true" in msg


def test_single_node_graphs_need_no_nccl_fix():
    assert problems("lab-standin", {"engine": {"args": {"enforce_eager": None}}, "topology": {"nodes": 1, "tensor_parallel": 1}}) == []


def test_memory_budget_refuses_bf16_solar_100b_and_points_to_fp8():
    (msg,) = problems("solar-open-100b-vllm-fork")
    assert "102.5 GB (95.5 GiB) of weights per rank" in msg
    assert "exceeds the node budget of 118.1 GB (110.0 GiB)" in msg
    assert "BF16 checkpoint upstage/Solar-Open-100B does not fit two Sparks" in msg
    assert "quantized (FP8) checkpoint" in msg and "mike-ravkine/Solar-Open-100B-FP8-Dynamic" in msg


def test_memory_budget_accepts_the_fp8_checkpoint():
    assert problems("solar-open-100b-vllm-fork", SOLAR100_FP8) == []


def test_memory_budget_over_a_quantized_model_says_shrink_the_pool():
    over = {"engine": {"args": {"kv_cache_memory_bytes": 60000000000}}, "memory": {"kv_pool_bytes": 60000000000}}
    (msg,) = problems("solar-open2-nvfp4-vllm-venv", over)
    assert "exceeds the node budget" in msg and "shrink memory.kv_pool_bytes" in msg and "GiB" in msg


def test_kv_argument_and_budget_must_agree():
    (msg,) = problems("solar-open2-nvfp4-vllm-venv", {"engine": {"args": {"kv_cache_memory_bytes": 32000000000}}})
    assert "engine.args.kv_cache_memory_bytes (32000000000) differs from memory.kv_pool_bytes (28000000000)" in msg


def test_lab_budget_is_tiny_and_enforced():
    (msg,) = problems("lab-standin", {"memory": {"kv_pool_bytes": 2147483648}, "engine": {"args": {"kv_cache_memory_bytes": 2147483648}}})
    assert "exceeds the node budget of 2.1 GB (2.0 GiB)" in msg


# ----------------------------------------------------------------------------- inventory validation


def _lab_hostvars(**extra):
    inv = yaml.safe_load((REPO / "inventories" / "lab" / "group_vars" / "all.yml").read_text())
    hosts = yaml.safe_load((REPO / "inventories" / "lab" / "hosts.yml").read_text())
    groups_ = hosts["all"]["children"]["sparklab"]["children"]
    groups = {"spark_head": list(groups_["spark_head"]["hosts"]), "spark_workers": list(groups_["spark_workers"]["hosts"])}
    hostvars = {}
    for group in groups_.values():
        for host, hvars in group["hosts"].items():
            hostvars[host] = {**inv, **hvars, "inventory_dir": str(REPO / "inventories" / "lab"), **extra}
    return groups, hostvars


def test_lab_inventory_passes_with_its_profile():
    assert inventory_problems(*_lab_hostvars()) == []


@pytest.mark.parametrize("extra, expected", [
    ({"spark_model_profile": "nope"}, "profile 'nope' was not found"),
    ({"spark_profile_overrides": {"engine": {"args": {"load_format": "dummy"}}}}, "'dummy' is refused"),
    ({"spark_profile_overrides": {"engine": {"args": {"max_model_len": "abc"}}}},
     "engine.args.max_model_len: expected an integer, got 'abc'"),
    ({"spark_profile_paths": "tests/lab/profiles"}, "'spark_profile_paths'"),
    ({"spark_model_profile": "solar-open-100b-vllm-fork"}, "quantized (FP8) checkpoint"),
])
def test_inventory_validation_refuses_bad_profiles(extra, expected):
    found = inventory_problems(*_lab_hostvars(**extra))
    assert any(expected in msg and msg.startswith("'spark_model_profile'") or expected in msg for msg in found), found


# ----------------------------------------------------------------------------- rendering


GOLDEN_CASES = {name: (name, FIXES.get(name, {})) for name in SHIPPED + LAB_RENDERED}


def _rendered_files(name, overrides):
    profile = load(name, overrides)
    out = profile_filter.profile_render(profile, cluster(profile))
    files = {
        "argv.txt": "\n".join(out["argv"]) + "\n",
        "command_line.txt": out["command_line"] + "\n",
        "env.env": "".join(f"{k}={v}\n" for k, v in out["env"].items()),
        "secret_files.json": json.dumps(out["secret_files"], indent=2, sort_keys=True) + "\n",
    }
    for host, units in out["units"].items():
        for unit, text in units.items():
            files[f"units/{host}/{unit}"] = text
    return files


@pytest.mark.parametrize("case", list(GOLDEN_CASES))
def test_rendering_matches_golden(case):
    name, overrides = GOLDEN_CASES[case]
    files = _rendered_files(name, overrides)
    assert_golden_tree(GOLDEN / case, files)


def test_the_golden_files_are_of_the_rendered_profiles_only():
    """A profile removed takes its golden files with it (a new one without them fails to match)."""
    assert sorted(path.name for path in GOLDEN.iterdir()) == sorted(GOLDEN_CASES)


def test_vllm_api_key_never_reaches_argv():
    profile = load("solar-open2-nvfp4-vllm-venv")
    out = P.render(profile, cluster(profile))
    assert "--api-key" not in out["argv"]
    assert out["secret_files"] == {"/etc/sparkctl/api-key.env": {"format": "env", "key": "VLLM_API_KEY", "mode": "0600"}}
    assert "EnvironmentFile=/etc/sparkctl/api-key.env" in out["units"]["spark1"]["sparkctl-engine.service"]
    assert "api-key" not in out["units"]["spark1"]["sparkctl-ray-head.service"]


def test_sglang_ranks_join_the_head_link_address():
    profile = load("qwen38-flash-next-nvfp4-sglang")
    c = cluster(profile)
    c["workers"].append({"name": "spark3", "link_ip": "192.168.100.12"})
    profile["topology"]["nodes"] = 3
    out = P.render(profile, c)
    for rank, host in enumerate(["spark1", "spark2", "spark3"]):
        unit = out["units"][host]["sparkctl-sglang-rank.service"]
        assert f"--node-rank {rank} " in unit and "--nnodes 3 " in unit
        assert "--dist-init-addr 192.168.100.10:25000" in unit
        # Behind the API proxy no rank is given the key (test_secrets_in_logs.py).
        assert "--config" not in unit and "sglang-api.yaml" not in unit
    assert "sparkctl-sglang-router.service" in out["units"]["spark1"]
    assert "sparkctl-sglang-router.service" not in out["units"]["spark2"]


def test_fabric_environment_is_not_duplicated():
    for name in list(GOLDEN_CASES):
        profile = load(*GOLDEN_CASES[name])
        env = P.environment(profile)
        assert not {"NCCL_SOCKET_IFNAME", "SGLANG_HOST_IP", "VLLM_HOST_IP", "MAX_JOBS", "LD_PRELOAD"} & set(env)


def test_systemd_quoting_escapes_specifiers_and_json():
    assert P.systemd_quote("50%") == "50%%"
    assert P.systemd_quote("$HOME") == "$$HOME"
    assert P.systemd_quote('{"a":1}') == '"{\\"a\\":1}"'
    assert P.systemd_quote("plain") == "plain"


def test_render_refuses_a_profile_with_problems():
    profile = load("solar-open-100b-vllm-fork")
    with pytest.raises(AnsibleFilterError, match="quantized"):
        profile_filter.profile_render(profile, cluster(profile))


def test_render_refuses_an_incomplete_cluster():
    profile = load("lab-standin")
    with pytest.raises(AnsibleFilterError, match="lacks venv_path"):
        profile_filter.profile_render(profile, {**cluster(profile), "venv_path": ""})


def test_profile_load_filter_raises_with_the_fix():
    with pytest.raises(AnsibleFilterError, match="spark_profile_paths"):
        profile_filter.profile_load("nope", [], {}, "")


def test_profile_cluster_describes_any_number_of_workers():
    from ansible_collections.sparkctl.spark.plugins.filter.profile import profile_cluster

    groups = {"spark_head": ["a"], "spark_workers": ["b", "c", "d"]}
    hostvars = {h: {"spark_link": [{"interface": "enp1s0f1np1", "address": f"192.168.100.{i}/24"}]} for i, h in enumerate("abcd", 10)}
    venv = {"name": "v", "runtime": {"kind": "venv"}}
    cluster = profile_cluster(groups, hostvars, "spark", "/srv/m", "/etc/sparkctl/api-key.env", venv, "/opt/v")
    assert cluster["head"] == {"name": "a", "link_ip": "192.168.100.10", "interface": "enp1s0f1np1"}
    assert [w["link_ip"] for w in cluster["workers"]] == ["192.168.100.11", "192.168.100.12", "192.168.100.13"]
    assert cluster["venv_path"] == "/opt/v" and "image" not in cluster
    image = {"runtime": {"kind": "image", "image": {"build": {"tag": "x:local"}}}}
    assert profile_cluster(groups, hostvars, "spark", "/srv/m", "/k", image)["image"] == "x:local"


# ----------------------------------------------------------------------------- profiles across N nodes


def _groups_and_hostvars(workers):
    groups = {"spark_head": ["spark1"], "spark_workers": list(workers)}
    hostvars = {h: {"spark_link": [{"interface": "enp1s0f1np1", "address": f"192.168.100.{10 + i}/24"}]}
                for i, h in enumerate(["spark1"] + list(workers))}
    return groups, hostvars


def test_more_nodes_than_the_profile_needs_serve_on_the_head_and_the_first_workers():
    two = load("lab-standin")
    # Inventory order decides, not the names: spark4 is listed before spark2.
    groups, _ = _groups_and_hostvars(["spark3", "spark4", "spark2"])
    assert profile_filter.profile_serving(groups, two) == {
        "nodes": 2, "serving": ["spark1", "spark3"], "idle": ["spark4", "spark2"]}
    three = load("lab-standin-3")
    assert profile_filter.profile_serving(groups, three) == {
        "nodes": 3, "serving": ["spark1", "spark3", "spark4"], "idle": ["spark2"]}
    # Exactly as many nodes: nobody idles.
    assert profile_filter.profile_serving({"spark_head": ["spark1"], "spark_workers": ["spark2"]}, two)["idle"] == []
    # The head listed among the workers too is still the head, once.
    assert profile_filter.profile_serving({"spark_head": ["a"], "spark_workers": ["a", "b", "c"]}, two) == {
        "nodes": 2, "serving": ["a", "b"], "idle": ["c"]}


def test_fewer_nodes_than_the_profile_needs_is_refused_with_the_variable_and_the_fix():
    with pytest.raises(AnsibleFilterError, match=r"'spark_model_profile': profile lab-standin-3 runs on 3 nodes "
                                                 r"\(topology.nodes\) but the inventory has 2 .*add workers, or pick a profile"):
        profile_filter.profile_serving({"spark_head": ["spark1"], "spark_workers": ["spark2"]}, load("lab-standin-3"))


def test_an_idle_node_gets_no_engine_or_ray_unit_and_ray_expects_the_serving_set():
    from ansible_collections.sparkctl.spark.plugins.filter.ray_cluster import ray_cluster_expected

    profile = load("lab-standin")
    groups, hostvars = _groups_and_hostvars(["spark2", "spark3"])
    # Without `serving` the cluster is worked out from the profile by the same function.
    for serving in (None, profile_filter.profile_serving(groups, profile)["serving"]):
        cluster = profile_filter.profile_cluster(groups, hostvars, "spark", "/srv/m", "/etc/sparkctl/api-key.env",
                                                 profile, "/opt/v", serving=serving)
        assert [w["name"] for w in cluster["workers"]] == ["spark2"]
        out = P.render(profile, cluster)
        assert sorted(out["units"]) == ["spark1", "spark2"]
        assert sorted(out["inputs"]) == ["spark1", "spark2"]
        expected = ray_cluster_expected(cluster, 1)
        assert [(n["ip"], n["gpus"]) for n in expected] == [("192.168.100.10", 1.0), ("192.168.100.11", 1.0)]
    # The three-node profile on the same inventory: every node serves, Ray expects three.
    three = load("lab-standin-3")
    cluster = profile_filter.profile_cluster(groups, hostvars, "spark", "/srv/m", "/k", three, "/opt/v")
    out = P.render(three, cluster)
    assert sorted(out["units"]) == ["spark1", "spark2", "spark3"]
    assert "--tensor-parallel-size 3" in out["command_line"]
    assert [n["name"] for n in ray_cluster_expected(cluster, 1)] == ["spark1", "spark2", "spark3"]


def test_pipeline_parallel_renders_vllms_flag_and_splits_the_weights_over_every_rank():
    profile = load("solar-open-100b-bf16-vllm-fork-4x")
    argv = P.render(profile, cluster(profile))["argv"]
    assert argv[argv.index("--tensor-parallel-size") + 1] == "2"
    assert argv[argv.index("--pipeline-parallel-size") + 1] == "2"
    # Without a stated figure, the checkpoint splits over tensor_parallel x pipeline_parallel ranks.
    unstated = load("solar-open-100b-bf16-vllm-fork-4x", {"memory": {"weights_per_rank_bytes": None}})
    assert P.node_memory_bytes(unstated)["weights"] == 205000000000 // 4
    # One stage renders no pipeline flag (the two-node goldens stay as they were).
    assert "--pipeline-parallel-size" not in P.render(load("lab-standin"), cluster(load("lab-standin")))["argv"]


@pytest.mark.parametrize("topology, expected", [
    ({"tensor_parallel": 2, "pipeline_parallel": 2, "nodes": 2},
     "topology.tensor_parallel: 2 x 2 (tensor_parallel x pipeline_parallel) ranks need 4 GPUs; a DGX Spark has one "
     "GPU, so set nodes: 4."),
    ({"tensor_parallel": 2, "pipeline_parallel": 2, "nodes": 3},
     "topology.tensor_parallel: 2 x 2 (tensor_parallel x pipeline_parallel) ranks do not spread evenly over 3 nodes"),
    ({"tensor_parallel": 2, "pipeline_parallel": None, "nodes": 4},
     "topology.tensor_parallel: 2 ranks do not spread evenly over 4 nodes"),
    ({"pipeline_parallel": 0}, "topology.pipeline_parallel: expected an integer >= 1"),
])
def test_the_ranks_must_fill_the_nodes_one_per_spark(topology, expected):
    found = problems("solar-open-100b-bf16-vllm-fork-4x", {"topology": topology})
    assert any(expected in p for p in found), found


def test_sglang_ranks_take_no_pipeline_stages():
    found = problems("qwen38-flash-next-nvfp4-sglang-4x", {"topology": {"tensor_parallel": 2, "pipeline_parallel": 2}})
    assert any("topology.pipeline_parallel: sparkctl renders pipeline stages for vLLM only" in p
               for p in found), found
    # pipeline_parallel_size is the topology's to set, not engine.args' (SGLang's would break the ranks' layout).
    found = problems("solar-open-100b-bf16-vllm-fork-4x", {"engine": {"args": {"pipeline_parallel_size": 4}}})
    assert any("topology.pipeline_parallel" in p and "pipeline_parallel_size" in p for p in found), found
    found = problems("qwen38-flash-next-nvfp4-sglang-4x", {"engine": {"args": {"pipeline_parallel_size": 2}}})
    assert any("pipeline_parallel_size" in p and "one rank per node" in p for p in found), found


def test_four_spark_sglang_ranks_each_join_the_head():
    profile = load("qwen38-flash-next-nvfp4-sglang-4x")
    out = P.render(profile, cluster(profile))
    assert sorted(out["units"]) == ["spark1", "spark2", "spark3", "spark4"]
    for rank in range(4):
        unit = out["units"][f"spark{rank + 1}"]["sparkctl-sglang-rank.service"]
        assert f"--tp-size 4 --nnodes 4 --node-rank {rank} --dist-init-addr 192.168.100.10:25000" in unit, unit


def test_vllm_ranks_launch_every_node_as_a_rank_of_vllms_own_multi_node_serving():
    profile = load("solar-open2-nvfp4-vllm-ranks", {"topology": {"tensor_parallel": 4, "nodes": 4, "master_port": 29600}})
    out = P.render(profile, cluster(profile))
    assert sorted(out["units"]) == ["spark1", "spark2", "spark3", "spark4"]
    head = out["units"]["spark1"]
    # Rank 0 is the API server: the engine unit, the one with the key, whose log holds the startup lines.
    assert list(head) == ["sparkctl-engine.service"] and "EnvironmentFile=/etc/sparkctl/api-key.env" in head["sparkctl-engine.service"]
    assert "--nnodes 4 --node-rank 0 --master-addr 192.168.100.10 --master-port 29600 " in head["sparkctl-engine.service"]
    assert "--headless" not in head["sparkctl-engine.service"] and "ray" not in head["sparkctl-engine.service"].lower()
    for rank in range(1, 4):
        unit = out["units"][f"spark{rank + 1}"]
        assert list(unit) == ["sparkctl-vllm-rank.service"]
        text = unit["sparkctl-vllm-rank.service"]
        assert f"--node-rank {rank} --master-addr 192.168.100.10 --master-port 29600 --headless " in text, text
        assert "--distributed-executor-backend mp --tensor-parallel-size 4 " in text and "api-key" not in text
    names = P.unit_names(profile)
    assert names["api"] == names["startup"] == "sparkctl-engine.service"
    # No Ray: the venv gets no ray[default].
    assert not any(p.startswith("ray") for p in profile["runtime"]["venv"]["packages"])


@pytest.mark.parametrize("overrides, expected", [
    ({"engine": {"kind": "sglang"}}, "vllm_ranks runs vLLM's own multi-node launch; engine.kind is 'sglang': use sglang_ranks."),
    ({"topology": {"expert_parallel": 3}}, "set expert_parallel: 2 to shard the experts, or remove it (got 3)."),
    ({"engine": {"args": {"master_port": 1234}}}, "topology.master_port"),
    ({"engine": {"args": {"headless": True}}}, "the workers' rank units"),
    ({"api": {"engine_port": 29501}}, "29501"),
    ({"api": {"engine_port": 29590}}, "29590 is also topology.guard_port"),
    ({"topology": {"guard_port": 29501}}, "topology.guard_port: 29501 is also topology.master_port"),
])
def test_vllm_ranks_refuse_what_would_break_the_ranks(overrides, expected):
    found = problems("solar-open2-nvfp4-vllm-ranks", overrides)
    assert any(expected in message for message in found), found


def test_vllm_ranks_shard_experts_when_asked():
    profile = load("solar-open2-nvfp4-vllm-ranks", {"topology": {"expert_parallel": 2}})
    assert "--enable-expert-parallel" in P.render(profile, cluster(profile))["argv"]


# ----------------------------------------------------------------------------- the engine behind the API proxy


@pytest.mark.parametrize("overrides, expected", [
    ({"api": {"engine_port": 8000}}, "api.engine_port: 8000 is api.port, where the API proxy listens"),
    ({"api": {"engine_port": 70000}}, "api.engine_port: expected a TCP port (1-65535), got 70000."),
    ({"api": {"engine_port": "8001"}}, "api.engine_port: expected an integer, got '8001'."),
    ({"api": {"engine_port": 6379}}, "api.engine_port: 6379 is also topology.ray_port; set api.engine_port to a free port."),
    ({"api": {"port": 65535}}, "api.engine_port (default api.port + 1): api.port 65535 leaves no next port"),
    ({"api": {"port": 6378}}, "api.engine_port (default api.port + 1): 6379 is also topology.ray_port"),
])
def test_engine_port_problems_name_the_key(overrides, expected):
    found = problems("lab-standin", overrides)
    assert any(expected in msg for msg in found), found


def test_the_engine_listens_on_loopback_behind_the_proxy_and_publicly_without_it():
    profile = load("lab-standin", {"api": {"engine_port": 9123}})
    behind = P.render(profile, cluster(profile))
    assert behind["api"] == {"proxy": True, "public": {"bind": "0.0.0.0", "port": 8000},
                             "engine": {"bind": "127.0.0.1", "port": 9123}}
    assert "--host 127.0.0.1 --port 9123" in behind["command_line"]
    alone = P.render(profile, dict(cluster(profile), api_proxy=False))
    assert alone["api"]["proxy"] is False and alone["api"]["engine"] == alone["api"]["public"]
    assert "--host 0.0.0.0 --port 8000" in alone["command_line"]
    sglang = load("qwen38-flash-next-nvfp4-sglang")
    router = P.render(sglang, dict(cluster(sglang), api_proxy=False))["units"]["spark1"]["sparkctl-sglang-router.service"]
    assert "--host 0.0.0.0 --port 8888" in router
    # {bind} and {port} in engine.command are where the process listens.
    custom = load("lab-standin", {"engine": {"command": ["serve", "--listen={bind}:{port}", "{model_dir}"]}})
    assert "--listen=127.0.0.1:8001" in P.render(custom, cluster(custom))["argv"]


def test_profile_cluster_carries_the_proxy_switch():
    from ansible_collections.sparkctl.spark.plugins.filter.profile import profile_cluster

    groups = {"spark_head": ["a"], "spark_workers": ["b"]}
    hostvars = {h: {"spark_link": [{"interface": "enp1s0f1np1", "address": f"192.168.100.{i}/24"}]} for i, h in enumerate("ab", 10)}
    venv = {"name": "v", "runtime": {"kind": "venv"}}
    assert profile_cluster(groups, hostvars, "spark", "/srv/m", "/k", venv, "/opt/v")["api_proxy"] is True
    assert profile_cluster(groups, hostvars, "spark", "/srv/m", "/k", venv, "/opt/v", False)["api_proxy"] is False
    assert profile_cluster(groups, hostvars, "spark", "/srv/m", "/k", venv, "/opt/v", "false")["api_proxy"] is False


def test_engine_port_only_avoids_the_ports_its_topology_uses():
    assert problems("lab-standin", {"api": {"engine_port": 30000}}) == []
    found = problems("qwen38-flash-next-nvfp4-sglang", {"api": {"engine_port": 30000}})
    assert any("api.engine_port: 30000 is also topology.rank0_port" in m for m in found), found


# ----------------------------------------------------------------------------- restarts from state


@pytest.mark.parametrize("name", ["lab-standin", "lab-image"] + SHIPPED)
def test_every_unit_names_the_files_it_reads_at_start(name):
    profile = load(name)
    c = cluster(profile)
    out = P.render(profile, c)
    assert {h: set(u) for h, u in out["inputs"].items()} == {h: set(u) for h, u in out["units"].items()}
    key = c["api_key_file"]
    readers = {(h, u) for h, units in out["inputs"].items() for u, files in units.items() if key in files}
    image = profile["runtime"]["kind"] == "image"
    if profile["topology"]["kind"] == "sglang_ranks":
        # Behind the API proxy SGLang is given no key; without it, rank 0 reads it with --config.
        assert readers == set()
        alone = P.render(profile, dict(c, api_proxy=False))
        assert {(h, u) for h, units in alone["inputs"].items() for u, files in units.items() if key in files} == {
            ("spark1", "sparkctl-sglang-rank.service")}
    else:
        # An image's API server runs inside the head's Ray container, which took the key at its start.
        assert readers == {("spark1", "sparkctl-ray-head.service" if image else "sparkctl-engine.service")}
    for host, units in out["inputs"].items():
        for unit, files in units.items():
            if unit != "sparkctl-sglang-router.service" and not (image and unit == "sparkctl-engine.service"):
                assert "/etc/sparkctl/fabric.env" in files and "/etc/sparkctl/engine.env" in files, (host, unit)
    # Every unit of a venv runtime runs the venv's code (Ray's too): pins installed into it after
    # the unit started make the unit stale. An image's units run the image, which their files name.
    marker = c["venv_path"] + "/.sparkctl-changed"
    for host, units in out["inputs"].items():
        for unit, files in units.items():
            assert (marker in files) is not image, (host, unit, files)


def _docker_runs(profile):
    """Per (host, unit), the words of the unit's `docker run` (none for a unit that is not one)."""
    out = P.render(profile, cluster(profile))
    found = {}
    for host, units in out["units"].items():
        for unit, text in units.items():
            words = text.split()
            # ExecStart's first word carries the key ("ExecStart=/usr/bin/docker") unless a shell wraps it.
            starts = [i for i, w in enumerate(words[:-1]) if w.endswith("/usr/bin/docker") and words[i + 1] == "run"]
            if starts:
                found[(host, unit)] = words[starts[0]:]
    return found


def _ulimits(profile):
    """Per (host, unit), the --ulimit values of the unit's `docker run`."""
    return {key: [words[i + 1] for i, w in enumerate(words) if w == "--ulimit"] for key, words in _docker_runs(profile).items()}


def test_image_containers_lock_unlimited_memory_unless_the_profile_caps_it():
    shipped = _ulimits(load("solar-open2-nvfp4-ngc-ep", paths=()))
    assert shipped and set(map(tuple, shipped.values())) == {("memlock=-1", "stack=67108864")}
    capped = _ulimits(load("solar-open2-nvfp4-ngc-ep", {"runtime": {"image": {"memlock_bytes": 8388608}}}, paths=()))
    assert capped.keys() == shipped.keys()
    assert set(map(tuple, capped.values())) == {("memlock=8388608", "stack=67108864")}


@pytest.mark.parametrize("name", shipped_where(lambda profile: profile["runtime"]["kind"] == "image"))
def test_every_image_container_that_runs_nccl_ranks_gets_the_rdma_devices(name):
    profile = load(name, paths=())
    runs = _docker_runs(profile)
    # The containers NCCL runs in: Ray's (the engine's ranks are its actors) or SGLang's ranks, on every node.
    ranks = {key: words for key, words in runs.items() if "router" not in key[1]}
    assert len({host for host, _ in ranks}) == profile["topology"]["nodes"], runs.keys()
    for key, words in ranks.items():
        devices = [words[i + 1] for i, w in enumerate(words) if w == "--device"]
        assert devices == ["/dev/infiniband"], (key, devices)


def _meets_peers(profile, unit):
    """Whether a unit's process meets its peers over the cable: Ray's, and every engine rank (SGLang's, or
    vLLM's own ranks with the head's rank in the engine's unit); not the API server a Ray topology runs
    beside Ray, nor SGLang's router, which talk to loopback only."""
    if "-ray-" in unit or unit.endswith(("-sglang-rank.service", "-vllm-rank.service")):
        return True
    return unit == "sparkctl-engine.service" and profile["topology"]["kind"] == "vllm_ranks"


@pytest.mark.parametrize("name", SHIPPED)
def test_every_unit_that_meets_its_peers_over_the_cable_waits_for_it_in_exec_start(name):
    profile = load(name, paths=())
    spec = cluster(profile)
    interfaces = {node["name"]: node["interface"] for node in [spec["head"]] + spec["workers"]}
    out = P.render(profile, spec)
    for host, units in out["units"].items():
        meeting = [unit for unit in units if _meets_peers(profile, unit)]
        assert len(meeting) == 1, (host, units.keys())
        for unit in meeting:
            start = next(line for line in units[unit].splitlines() if line.startswith("ExecStart="))
            assert start.startswith("ExecStart=/bin/sh -c "), (host, unit, start)
            assert f"--interface={interfaces[host]}:routable" in start, (host, unit, start)


@pytest.mark.parametrize("value", [0, -1, "unlimited", 1.5])
def test_a_memlock_cap_that_is_not_a_positive_byte_count_is_refused(value):
    found = problems("solar-open2-nvfp4-ngc-ep", {"runtime": {"image": {"memlock_bytes": value}}}, paths=())
    assert [m for m in found if "runtime.image.memlock_bytes" in m], found


# ----------------------------------------------------------------------------- strings that reach units and nginx


@pytest.mark.parametrize("overrides, where", [
    ({"api": {"served_model_name": "x\nExecStartPre=/bin/touch /tmp/pwned"}}, "api.served_model_name"),
    ({"engine": {"args": {"chat_template": "a\nExecStartPre=/bin/true"}}}, "engine.args.chat_template"),
    ({"engine": {"args": {"override_generation_config": {"k": "v\r"}}}}, "engine.args.override_generation_config.k"),
    ({"engine": {"args": {"middleware": ["ok", "bad\x00"]}}}, "engine.args.middleware[1]"),
    ({"engine": {"command": ["{venv}/bin/python", "-m", "x\ty"]}}, "engine.command[2]"),
    ({"smoke": {"prompt": "The capital\x7f of Japan is"}}, "smoke.prompt"),
    ({"cpu_affinity": "5-9\n"}, "cpu_affinity"),
])
def test_control_characters_are_refused_with_the_key_path(overrides, where):
    found = problems("lab-standin", overrides)
    assert any(f"{where}: " in m and "control character" in m for m in found), found


def test_plain_text_with_spaces_and_punctuation_passes():
    assert problems("lab-standin", {"api": {"served_model_name": "lab standin-2 (test)"}}) == []


@pytest.mark.parametrize("bind", ["0.0.0.0", "::", "127.0.0.1", "172.30.77.11", "fe80::1", "::1"])
def test_api_bind_takes_an_ip_address(bind):
    assert problems("lab-standin", {"api": {"bind": bind}}) == []


@pytest.mark.parametrize("bind", ["0.0.0.0:80; include /etc/passwd", "localhost", "*", "1.2.3.4/24", "[::1]", "300.1.1.1",
                                  "0.0.0.0 ssl"])
def test_api_bind_refuses_anything_but_an_ip_address(bind):
    found = problems("lab-standin", {"api": {"bind": bind}})
    assert any(m.startswith("profile lab-standin: api.bind: ") and "IP address" in m for m in found), found


# ----------------------------------------------------------------------------- list-valued flags


def _occurrences(argv, flag):
    return [i for i, word in enumerate(argv) if word == flag]


def test_logits_processors_render_as_one_occurrence_with_every_value():
    # vLLM's --logits-processors is nargs='+' (action store): a second occurrence would
    # replace the first and drop ParallelToolCallLogitsProcessor without an error.
    profile = load("solar-open-100b-vllm-fork", SOLAR100_FP8)
    argv = P.render(profile, cluster(profile))["argv"]
    at = _occurrences(argv, "--logits-processors")
    assert len(at) == 1, argv
    assert argv[at[0] + 1:at[0] + 3] == profile["parsers"]["logits_processors"]


def test_engine_args_lists_follow_the_flags_definition():
    args = {"cudagraph_capture_sizes": [1, 2, 4], "middleware": ["a.b:C", "d.e:F"], "enforce_eager": True}
    assert P.args_argv(args, "vllm") == ["--cudagraph-capture-sizes", "1", "2", "4",
                                         "--middleware", "a.b:C", "--middleware", "d.e:F", "--enforce-eager"]
    assert P.args_argv({"cuda_graph_bs_decode": [1, 2]}, "sglang") == ["--cuda-graph-bs-decode", "1", "2"]


def test_every_list_flag_in_the_tables_has_a_known_arity():
    for engine in P.ENGINES:
        table = P.engine_list_flags(engine)
        assert table and set(table.values()) <= {"nargs", "append"}, (engine, table)


@pytest.mark.parametrize("engine, key", [("vllm", "max_model_len"), ("vllm", "device_ids"), ("sglang", "tool_server")])
def test_a_list_on_a_flag_not_known_to_take_one_is_refused(engine, key):
    name = "lab-standin" if engine == "vllm" else "qwen38-flash-next-nvfp4-sglang"
    found = problems(name, {"engine": {"args": {key: ["a", "b"]}}})
    assert any(f"engine.args.{key}: " in m and "engine_flags" in m for m in found), found


def test_an_empty_list_is_refused_rather_than_rendering_a_bare_flag():
    found = problems("lab-standin", {"engine": {"args": {"cudagraph_capture_sizes": []}}})
    assert any("engine.args.cudagraph_capture_sizes: " in m for m in found), found


# ----------------------------------------------------------------------------- Ray on a venv runtime


def test_default_profile_venv_installs_a_pinned_ray():
    # vllm 0.25.1 neither depends on ray nor has an extra pulling it in; `ray start` needs it.
    packages = P.venv_packages(load(ROLE_DEFAULTS["spark_model_profile"], paths=()))
    assert P.RAY_REQUIREMENT in packages
    assert packages[:2] == ["vllm==0.25.1", "torch==2.11.0+cu130"]
    assert P.RAY_REQUIREMENT.startswith("ray[default]==")


def test_lab_profile_gets_ray_from_sparkctl_not_by_hand():
    profile = load("lab-standin")
    assert not any(p.startswith("ray") for p in profile["runtime"]["venv"]["packages"])
    assert P.venv_packages(profile) == profile["runtime"]["venv"]["packages"] + [P.RAY_REQUIREMENT]


def test_a_profile_pinning_ray_itself_keeps_its_pin():
    profile = load("lab-standin", {"runtime": {"venv": {"packages": ["ray[default]==2.59.0", "sparklab-engine==0.2.0"]}}})
    assert P.venv_packages(profile) == ["ray[default]==2.59.0", "sparklab-engine==0.2.0"]


def test_ray_is_not_added_without_a_ray_topology():
    profile = load("lab-standin")
    profile["topology"]["kind"] = "sglang_ranks"
    assert P.venv_packages(profile) == profile["runtime"]["venv"]["packages"]


@pytest.mark.parametrize("spec", ["ray==2.60.0", "ray[client]==2.60.0"])
def test_a_profile_ray_pin_without_the_default_extra_is_refused(spec):
    found = problems("lab-standin", {"runtime": {"venv": {"packages": [spec, "sparklab-engine==0.2.0"]}}})
    assert any("runtime.venv.packages[0]: " in m and "ray[default]" in m for m in found), found


def test_venv_packages_filter_is_what_the_role_installs():
    assert profile_filter.profile_venv_packages(load("lab-standin"))[-1] == P.RAY_REQUIREMENT
    defaults = yaml.safe_load((REPO / "roles" / "engine_venv" / "defaults" / "main.yml").read_text())
    assert "sparkctl.spark.profile_venv_packages" in defaults["engine_venv_packages"]


# ----------------------------------------------------------------------------- engine flag manifests

SHIPPED_RENDERS = dict(GOLDEN_CASES)


def _argv_problems(argv, flags):
    """Parse a rendered argv the way the engine's parser would, by the manifest: unknown flag,
    value on a bare flag, value outside the choices, a nargs flag repeated."""
    found, seen = [], set()
    words = argv[next(i for i, w in enumerate(argv) if w.startswith("--")):]
    i = 0
    while i < len(words):
        word = words[i]
        assert word.startswith("--"), (word, argv)
        key = word[2:].replace("-", "_")
        entry = flags.get(key)
        i += 1
        if entry is None:
            found.append(f"unknown {word}")
            continue
        values = []
        while i < len(words) and not words[i].startswith("--"):
            values.append(words[i])
            i += 1
        arity = entry["kind"]
        if arity == "bool" and values:
            found.append(f"{word} is a bare flag but got {values}")
        elif arity in ("value", "append") and len(values) != 1:
            found.append(f"{word} takes one value, got {values}")
        elif arity == "nargs" and (not values or key in seen):
            found.append(f"{word} (nargs) given {'again' if key in seen else 'no value'}")
        for value in values:
            if entry.get("choices") and value not in entry["choices"]:
                found.append(f"{word} {value} not in {entry['choices']}")
        seen.add(key)
    return found


@pytest.mark.parametrize("case", list(SHIPPED_RENDERS))
def test_every_rendered_command_line_is_valid_for_the_pinned_engine(case):
    name, overrides = SHIPPED_RENDERS[case]
    profile = load(name, overrides)
    label, flags = P.engine_manifest(profile, profile["engine"]["kind"])
    out = P.render(profile, cluster(profile))
    argvs = [out["argv"]]
    if profile["topology"]["kind"] == "sglang_ranks":
        argvs.append(P.engine_argv(profile, cluster(profile), 1))
    for argv in argvs:
        assert _argv_problems(argv, flags) == [], (label, argv)


def test_the_pinned_releases_are_the_ones_with_manifests():
    assert P.engine_manifest(load(ROLE_DEFAULTS["spark_model_profile"], paths=()), "vllm")[0] == "vllm 0.25.1"
    assert P.engine_manifest(load("solar-open-100b-vllm-fork"), "vllm")[0] == "vllm 0.12.0"
    assert P.engine_manifest(load("solar-open2-nvfp4-ngc-ep"), "vllm")[0] == "vllm 0.22.0"
    # The SGLang image does not say its release: its flags must exist in one of 0.5.20-0.5.23.
    assert P.engine_manifest(load("qwen38-flash-next-nvfp4-sglang"), "sglang")[0].startswith("any sglang release")


def test_the_list_table_agrees_with_every_manifest():
    for engine in P.ENGINES:
        for version, flags in P.engine_manifests(engine).items():
            for key, arity in P.engine_list_flags(engine).items():
                if key in flags:
                    assert flags[key]["kind"] == arity, (engine, version, key)
    assert P.engine_manifests("vllm")["0.25.1"]["logits_processors"] == {"kind": "nargs"}
    assert P.engine_manifests("vllm")["0.12.0"]["logits_processors"] == {"kind": "nargs"}


def test_a_misspelled_flag_is_refused_naming_the_closest():
    found = problems("solar-open2-nvfp4-vllm-venv", {"engine": {"args": {"max_modle_len": 4096}}})
    assert found == ["profile solar-open2-nvfp4-vllm-venv: engine.args.max_modle_len: --max-modle-len is not an option "
                     "of vllm 0.25.1: did you mean max_model_len (--max-model-len)?"]


def test_a_flag_only_a_later_release_has_is_refused_for_the_earlier_pin():
    # --kv-cache-dtype-skip-layers exists in 0.25.1, not in the fork's 0.12.0.
    args = {"engine": {"args": {"kv_cache_dtype_skip_layers": ["a"]}}}
    assert problems("solar-open2-nvfp4-vllm-venv", args) == []
    found = problems("solar-open-100b-vllm-fork", {**SOLAR100_FP8, **args})
    assert any("--kv-cache-dtype-skip-layers is not an option of vllm 0.12.0" in m for m in found), found


@pytest.mark.parametrize("args, expected", [
    ({"enforce_eager": "yes"}, "--enforce-eager is a bare flag in vllm 0.25.1: write true"),
    ({"max_num_seqs": True}, "--max-num-seqs takes a value in vllm 0.25.1, not a bare flag"),
    ({"dtype": "fp64"}, "'fp64' is not one of the choices of --dtype in vllm 0.25.1: auto, bfloat16"),
])
def test_values_must_fit_the_flags_definition(args, expected):
    found = problems("solar-open2-nvfp4-vllm-venv", {"engine": {"args": args}})
    assert any(expected in m for m in found), found


def test_negated_boolean_flags_are_known():
    assert problems("solar-open2-nvfp4-vllm-venv", {"engine": {"args": {"no_enable_prefix_caching": True}}}) == []


def test_engine_version_must_look_like_a_version():
    found = problems("lab-standin", {"engine": {"version": "latest"}})
    assert any("engine.version: expected a version like" in m for m in found), found


def test_manifest_generator_reads_a_wheel_without_importing_it(tmp_path):
    import importlib.util
    import zipfile

    spec = importlib.util.spec_from_file_location("engine_manifest", REPO / "tools" / "engine_manifest.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    files = {
        "vllm/config/model.py": (
            "from typing import Literal\n"
            "Dtype = Literal['auto', 'half']\n"
            "class ModelConfig:\n"
            "    logits_processors: list[str | type[object]] | None = None\n"
            "    enforce_eager: bool = False\n"
            "    dtype: Dtype = 'auto'\n"
            "    max_model_len: int | None = None\n"
            "    import_that_breaks: 'torch.Tensor' = None\n"),
        "vllm/engine/arg_utils.py": (
            "import torch  # never imported by the generator\n"
            "class EngineArgs:\n"
            "    @staticmethod\n"
            "    def add_cli_args(parser):\n"
            "        model_kwargs = get_kwargs(ModelConfig)\n"
            "        g = parser.add_argument_group()\n"
            "        g.add_argument('--logits-processors', **model_kwargs['logits_processors'])\n"
            "        g.add_argument('--enforce-eager', **model_kwargs['enforce_eager'])\n"
            "        g.add_argument('--dtype', **model_kwargs['dtype'])\n"
            "        g.add_argument('--max-model-len', **model_kwargs['max_model_len'])\n"
            "        g.add_argument('--device-ids', type=str, default=None)\n"),
        "vllm/entrypoints/openai/cli_args.py": (
            "class BaseFrontendArgs:\n"
            "    lora_modules: list[str] | None = None\n"
            "class FrontendArgs(BaseFrontendArgs):\n"
            "    middleware: list[str] = None\n"
            "    allowed_origins: list[str] = None\n"
            "    @classmethod\n"
            "    def _customize_cli_kwargs(cls, kw):\n"
            "        kw['middleware']['action'] = 'append'\n"
            "        del kw['allowed_origins']['nargs']\n"
            "def make_arg_parser(parser):\n"
            "    parser.add_argument('--headless', action='store_true')\n"),
    }
    wheel = tmp_path / "vllm-9.9.9-cp38-abi3-manylinux_2_28_aarch64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    data = gen.manifest(str(wheel))
    assert data["engine"] == "vllm" and data["version"] == "9.9.9"
    assert data["flags"] == {
        "logits_processors": {"kind": "nargs"},
        "enforce_eager": {"kind": "bool", "negatable": True},
        "no_enforce_eager": {"kind": "bool"},
        "dtype": {"kind": "value", "choices": ["auto", "half"]},
        "max_model_len": {"kind": "value"},
        "device_ids": {"kind": "value"},
        "lora_modules": {"kind": "nargs"},
        "middleware": {"kind": "append"},
        "allowed_origins": {"kind": "value"},
        "headless": {"kind": "bool"},
    }
    assert gen.dumps(data).startswith('{\n  "engine": "vllm",')
    assert json.loads(gen.dumps(data)) == data


@pytest.mark.parametrize("name", shipped_where(lambda profile: profile["engine"]["kind"] == "sglang"
                                                or profile["runtime"]["kind"] == "image"))
def test_sglang_and_image_renders_carry_the_key_file_never_a_key(name):
    profile = load(name)
    c = cluster(profile)
    out = P.render(profile, c)
    rendered = json.dumps({k: out[k] for k in ("argv", "env", "units", "command_line")})
    assert "--api-key" not in rendered and "VLLM_API_KEY" not in rendered and "api_key" not in rendered
    readers = sorted((h, u) for h, units in out["units"].items() for u, text in units.items() if c["api_key_file"] in text)
    if profile["topology"]["kind"] == "sglang_ranks":
        # Behind the API proxy no unit names it; without the proxy rank 0 reads it with --config
        # (and a container gets it mounted read-only).
        assert readers == []
        alone = P.render(profile, dict(c, api_proxy=False))
        assert sorted((h, u) for h, units in alone["units"].items() for u, text in units.items()
                      if c["api_key_file"] in text) == [("spark1", "sparkctl-sglang-rank.service")]
    else:
        # The image's Ray head container takes it with --env-file; the API server runs inside it.
        assert readers == [("spark1", "sparkctl-ray-head.service")]
        assert f"--env-file {c['api_key_file']}" in out["units"]["spark1"]["sparkctl-ray-head.service"]


# ----------------------------------------------------------------------------- parser names and classes


def _generator():
    import importlib.util

    spec = importlib.util.spec_from_file_location("engine_manifest", REPO / "tools" / "engine_manifest.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    return gen


# The least a wheel needs for the generator to read its flags (none), per engine.
_WHEELS = {
    "vllm": ("vllm-9.9.9-cp38-abi3-manylinux_2_28_aarch64.whl",
             {"vllm/engine/arg_utils.py": "class EngineArgs:\n    pass\n", "vllm/entrypoints/openai/cli_args.py": ""}),
    "sglang": ("sglang-9.9.9-cp313-cp313-manylinux_2_34_x86_64.whl", {"sglang/srt/server_args.py": ""}),
}


def _fake_wheel(tmp_path, engine, files):
    """A wheel of engine 9.9.9 holding files (name -> text) beside the minimal parser files."""
    import zipfile

    name, base = _WHEELS[engine]
    path = tmp_path / name
    with zipfile.ZipFile(path, "w") as zf:
        for member, text in {**base, **files}.items():
            zf.writestr(member, text)
    return path


def test_manifests_record_the_parsers_each_release_registers():
    vllm = P.engine_parser_names("vllm")
    assert "hermes" in vllm["0.12.0"]["tool_call"] and "qwen3" in vllm["0.25.1"]["reasoning"]
    # Upstage's solar_open parsers live in its fork, not in the release it is based on.
    assert "solar_open" not in vllm["0.12.0"]["tool_call"] | vllm["0.12.0"]["reasoning"]
    for version, names in P.engine_parser_names("sglang").items():
        assert {"qwen3_coder"} <= names["tool_call"] and {"qwen3"} <= names["reasoning"], version


@pytest.mark.parametrize("name, section, value, expected", [
    ("solar-open2-nvfp4-vllm-venv", "tool_call", "hermez",
     "parsers.tool_call: 'hermez' is not a tool-call parser vllm 0.25.1 registers: did you mean hermes?"),
    ("solar-open2-nvfp4-vllm-venv", "reasoning", "qwen_3",
     "parsers.reasoning: 'qwen_3' is not a reasoning parser vllm 0.25.1 registers: did you mean qwen3?"),
    ("qwen38-flash-next-nvfp4-sglang", "tool_call", "qwen3-coder",
     "parsers.tool_call: 'qwen3-coder' is not a tool-call parser any sglang release with a manifest"),
])
def test_a_parser_name_the_pinned_release_lacks_is_refused(name, section, value, expected):
    found = problems(name, {"parsers": {section: value}})
    assert any(expected in m for m in found), found


def test_a_parser_registered_by_the_profiles_own_plugin_is_accepted(tmp_path):
    plugin = tmp_path / "plugins" / "my_parsers" / "vllm" / "tool_parsers"
    plugin.mkdir(parents=True)
    (plugin / "mine.py").write_text(
        "from vllm.tool_parsers import ToolParser, ToolParserManager\n"
        "@ToolParserManager.register_module(['mine', 'mine_v2'])\n"
        "class MineToolParser(ToolParser):\n    pass\n"
        "ReasoningParserManager.register_lazy_module(name='mine_think', module_path='x', class_name='Y')\n")
    (tmp_path / "mine.yml").write_text(yaml.safe_dump({
        "extends": "solar-open2-nvfp4-vllm-venv",
        "runtime": {"venv": {"plugin": {"source": "plugins/my_parsers"}}},
        "parsers": {"tool_call": "mine_v2", "reasoning": "mine_think"},
    }))
    assert problems("mine", paths=(str(tmp_path),)) == []
    found = problems("mine", {"parsers": {"tool_call": "mien"}}, paths=(str(tmp_path),))
    assert any("'mien' is not a tool-call parser vllm 0.25.1 registers" in m and "mine" in m for m in found), found


def test_a_fork_declares_the_parsers_it_adds_over_its_base_release():
    fork = load("solar-open-100b-vllm-fork", SOLAR100_FP8)
    assert {"solar_open"} <= set(fork["engine"]["provides"]["tool_call_parsers"])
    undeclared = {**SOLAR100_FP8, "engine": {"provides": {"tool_call_parsers": None}}}
    found = problems("solar-open-100b-vllm-fork", undeclared)
    assert any("parsers.tool_call: 'solar_open' is not a tool-call parser vllm 0.12.0 registers" in m
               and "engine.provides.tool_call_parsers" in m for m in found), found


@pytest.mark.parametrize("provides, expected", [
    ({"classes": ["nocolon"]}, "engine.provides.classes[0]: 'nocolon' is not a full dotted path 'package.module:ClassName'."),
    ({"tool_call_parsers": "solar_open"}, "engine.provides.tool_call_parsers: expected a list of non-empty strings"),
    ({"parsers": ["x"]}, "engine.provides"),
])
def test_engine_provides_is_checked(provides, expected):
    found = problems("solar-open2-nvfp4-vllm-venv", {"engine": {"provides": provides}})
    assert len(found) == 1 and expected in found[0], found


@pytest.mark.parametrize("case", list(SHIPPED_RENDERS))
def test_every_rendered_parser_is_registered_by_the_pinned_engine(case):
    name, overrides = SHIPPED_RENDERS[case]
    profile = load(name, overrides)
    argv = P.render(profile, cluster(profile))["argv"]
    registered = P.registered_parsers(profile)
    for flag, section in (("--tool-call-parser", "tool_call"), ("--reasoning-parser", "reasoning")):
        if flag in argv:
            assert argv[argv.index(flag) + 1] in registered[section][1], (case, flag)


def test_manifest_generator_reads_the_parser_registries(tmp_path):
    gen = _generator()
    vllm = _fake_wheel(tmp_path, "vllm", {
        "vllm/tool_parsers/__init__.py": (
            "_TOOL_PARSERS_TO_REGISTER = {'hermes': ('hermes_tool_parser', 'Hermes2ProToolParser')}\n"
            "def register():\n"
            "    for name, (f, c) in _TOOL_PARSERS_TO_REGISTER.items():\n"
            "        ToolParserManager.register_lazy_module(name, f, c)\n"
            "'''ToolParserManager.register_lazy_module(name=\"in_a_docstring\", module_path=\"x\", class_name=\"Y\")'''\n"),
        "vllm/tool_parsers/extra.py": (
            "@ToolParserManager.register_module('deco')\nclass A: pass\n"
            "@ToolParserManager.register_module(name=['deco2', 'deco3'])\nclass B: pass\n"),
        "vllm/reasoning/__init__.py": (
            "_REASONING_PARSERS_TO_REGISTER = {'qwen3': ('q', 'Q'), 'deepseek_r1': ('d', 'D')}\n"
            "ReasoningParserManager.register_lazy_module(name='granite', module_path='g', class_name='G')\n"),
    })
    data = gen.manifest(str(vllm))
    assert data["tool_call_parsers"] == ["deco", "deco2", "deco3", "hermes"]
    assert data["reasoning_parsers"] == ["deepseek_r1", "granite", "qwen3"]
    sglang = _fake_wheel(tmp_path, "sglang", {
        "sglang/srt/function_call/function_call_parser.py": (
            "class FunctionCallParser:\n"
            "    ToolCallParserEnum: Dict[str, Type[BaseFormatDetector]] = {'qwen3_coder': Q, 'gpt-oss': G}\n"),
        "sglang/srt/parser/reasoning_parser.py": "class ReasoningParser:\n    DetectorMap = {'qwen3': Q3, 'deepseek-r1': D}\n",
    })
    data = gen.manifest(str(sglang))
    assert data["tool_call_parsers"] == ["gpt-oss", "qwen3_coder"]
    assert data["reasoning_parsers"] == ["deepseek-r1", "qwen3"]


def _plugin_profile(tmp_path, processors):
    module = tmp_path / "plugins" / "procs" / "my_pkg"
    module.mkdir(parents=True)
    (module / "__init__.py").write_text("from .more import Reexported\n")
    (module / "logits.py").write_text("import torch  # never imported by validation\nclass GoodProcessor:\n    pass\n")
    (tmp_path / "procs.yml").write_text(yaml.safe_dump({
        "extends": "solar-open2-nvfp4-vllm-venv",
        "runtime": {"venv": {"plugin": {"source": "plugins/procs"}}},
        "parsers": {"logits_processors": processors},
    }))
    return problems("procs", paths=(str(tmp_path),))


def test_a_logits_processor_in_the_profiles_own_plugin_is_accepted(tmp_path):
    assert _plugin_profile(tmp_path, ["my_pkg.logits:GoodProcessor", "my_pkg:Reexported"]) == []


@pytest.mark.parametrize("path, expected", [
    ("my_pkg.logits:GoodProcesor", "parsers.logits_processors[0]: 'my_pkg.logits:GoodProcesor': my_pkg/logits.py of the "
     "profile's plugin defines no GoodProcesor: did you mean GoodProcessor?"),
    ("my_pkg.logitz:GoodProcessor", "'my_pkg.logitz:GoodProcessor': no module my_pkg.logitz in the profile's plugin "
     "source: did you mean my_pkg.logits?"),
    ("vllm.v1.sample.logits_processor:MinTokensLogitsProcesor", "'vllm.v1.sample.logits_processor:MinTokensLogitsProcesor' "
     "is in neither the profile's plugin source"),
])
def test_a_misspelled_logits_processor_is_refused(tmp_path, path, expected):
    found = _plugin_profile(tmp_path, [path])
    assert any(expected in m for m in found), found


def test_the_forks_logits_processors_must_be_ones_it_provides():
    typo = "vllm.model_executor.models.solar_open_logits_processor:SolarOpenTemplateLogitProcessor"
    found = problems("solar-open-100b-vllm-fork", {**SOLAR100_FP8, "parsers": {"logits_processors": [typo]}})
    assert any(f"parsers.logits_processors[0]: {typo!r} is in neither" in m and "engine.provides.classes" in m
               and "did you mean vllm.model_executor.models.solar_open_logits_processor:SolarOpenTemplateLogitsProcessor"
               in m for m in found), found


# ----------------------------------------------------------------------------- environment


def test_manifests_record_the_engine_variables_each_release_reads():
    # VLLM_HOST_IP is in the fabric environment; the Qwen profile sets the SGLang one.
    for kind, prefixes, known in (("vllm", ["VLLM_"], "VLLM_HOST_IP"), ("sglang", ["SGLANG_", "SGL_"],
                                                                          "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN")):
        manifests = P.engine_env_names(kind)
        assert manifests, kind
        for version, (found_prefixes, names) in manifests.items():
            assert found_prefixes == prefixes, (kind, version)
            assert len(names) > 50 and all(n.startswith(tuple(prefixes)) for n in names), (kind, version)
            assert known in names, (kind, version, known)


@pytest.mark.parametrize("name, overrides, wanted", [
    ("solar-open2-nvfp4-vllm-venv", {"engine": {"env": {"VLLM_ALLOW_LONG_MAX_MODEL_LEM": "1"}}},
     "engine.env.VLLM_ALLOW_LONG_MAX_MODEL_LEM: vllm 0.25.1 reads no such variable: did you mean VLLM_ALLOW_LONG_MAX_MODEL_LEN?"),
    ("qwen38-flash-next-nvfp4-sglang", {"engine": {"env": {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LENGTH": "1"}}},
     "did you mean SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN?"),
])
def test_an_engine_variable_the_release_does_not_read_is_refused(name, overrides, wanted):
    found = problems(name, overrides, paths=())
    assert any(wanted in message for message in found), found


def test_a_release_not_known_is_checked_against_every_manifested_one():
    found = problems("lab-standin", {"engine": {"env": {"VLLM_ALLOW_LONG_MAX_MODEL_LEM": "1"}}})
    assert any("engine.env.VLLM_ALLOW_LONG_MAX_MODEL_LEM: no vllm release with a manifest (0.12.0, 0.22.0, 0.25.1, 0.32.0+cpu) "
               "reads it (set engine.version to check against one): did you mean VLLM_ALLOW_LONG_MAX_MODEL_LEN?" in m
               for m in found), found
    assert problems("lab-standin", {"engine": {"env": {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}}}) == []


def test_a_fork_declares_the_variables_it_adds():
    given = {"engine": {"env": {"VLLM_SOLAR_ONLY_KNOB": "1"}}}
    assert any("engine.env.VLLM_SOLAR_ONLY_KNOB" in m for m in problems("solar-open2-nvfp4-vllm-venv", given, paths=()))
    given["engine"]["provides"] = {"env": ["VLLM_SOLAR_ONLY_KNOB"]}
    assert problems("solar-open2-nvfp4-vllm-venv", given, paths=()) == []


def test_variables_outside_the_engines_prefix_are_not_checked():
    # NCCL, PyTorch and the stand-in's own variables are not the engine's to define.
    assert problems("solar-open2-nvfp4-vllm-venv", {"engine": {"env": {"NCCL_DEBUG": "INFO", "PYTORCH_X": "1"}}},
                    paths=()) == []
    assert problems("lab-standin") == []


def test_manifest_generator_reads_the_engine_variables(tmp_path):
    gen = _generator()
    vllm = _fake_wheel(tmp_path, "vllm", {"vllm/envs.py": (
        "import os\nif TYPE_CHECKING:\n    VLLM_HOST_IP: str = ''\n"
        "environment_variables: dict[str, Callable[[], Any]] = {\n"
        "    'VLLM_HOST_IP': lambda: os.getenv('VLLM_HOST_IP', ''),\n"
        "    'VLLM_PORT': lambda: int(os.getenv('VLLM_PORT', '0')),\n"
        "    'CUDA_VISIBLE_DEVICES': lambda: os.getenv('CUDA_VISIBLE_DEVICES'),\n}\n"
        "print(os.getenv('VLLM_NOT_IN_THE_TABLE'))\n")})
    assert gen.manifest(str(vllm))["env"] == {"prefixes": ["VLLM_"], "names": ["VLLM_HOST_IP", "VLLM_PORT"]}
    sglang = _fake_wheel(tmp_path, "sglang", {
        "sglang/srt/environ.py": ("class Envs:\n    SGLANG_TEST_RETRACT = EnvBool(False)\n"
                                  "    SGLANG_LOG_MS: EnvInt = EnvInt(0)\n    not_a_var = 1\n"),
        "sglang/srt/utils.py": ("x = get_bool_env_var('SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN')\n"
                                "y = os.environ.get(\"SGL_CHUNKED_PREFIX_CACHE_THRESHOLD\")\nz = 'SGLANG_'\n"),
    })
    assert gen.manifest(str(sglang))["env"] == {
        "prefixes": ["SGLANG_", "SGL_"],
        "names": ["SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "SGLANG_LOG_MS", "SGLANG_TEST_RETRACT",
                  "SGL_CHUNKED_PREFIX_CACHE_THRESHOLD"]}


def test_the_topology_ports_have_one_table_of_defaults():
    """spark_topology_ports: what the profile sets, else profile_schema.TOPOLOGY_PORTS; the playbooks read
    it instead of repeating a default (6379, 8080) of their own."""
    ports = profile_filter.profile_topology_ports(load("lab-standin", {"topology": {"ray_port": 6390}}))
    assert ports == dict(P.TOPOLOGY_PORTS, ray_port=6390)
    assert set(ports) == {"ray_port", "ray_metrics_port", "dist_init_port", "rank0_port", "master_port", "guard_port"}
    repo = Path(__file__).resolve().parents[2]
    for where in ("roles", "playbooks"):
        for path in (repo / where).rglob("*.yml"):
            text = path.read_text()
            assert not re.search(r"(ray_port|ray_metrics_port|master_port|dist_init_port|rank0_port|guard_port) *\| *default\(",
                                 text), path

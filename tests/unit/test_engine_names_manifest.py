"""The manifests' `metrics` and `log_formats` sections (tools/engine_manifest.py reads them out of
a release's wheel) and the pure helpers that match sparkctl's names against them
(module_utils/engine_names.py): the series a release's /metrics page can expose, and whether a
log line a regex looks for is one the release can print."""
from __future__ import annotations

import json
import re

import pytest
from ansible_collections.sparkctl.spark.plugins.module_utils import engine_names as E
from ansible_collections.sparkctl.spark.plugins.plugin_utils import profile_engine
from test_profile import _fake_wheel, _generator

SGLANG_MEMORY = ("max_total_num_tokens={}, chunked_prefill_size={}, max_prefill_tokens={}, "
                 "max_running_requests={}, context_len={}, {}={} GB")


def _manifests(kind):
    """{version: manifest} of every committed manifest of the engine, read once by the profile checks' reader."""
    return profile_engine._manifest_data(kind)


# ----------------------------------------------------------------------------- the generator: metrics


def test_manifest_generator_reads_the_metrics_a_release_registers(tmp_path):
    gen = _generator()
    vllm = _fake_wheel(tmp_path, "vllm", {
        "vllm/v1/metrics/loggers.py": (
            "import prometheus_client\n"
            "class PrometheusStatLogger:\n"
            "    _gauge_cls = prometheus_client.Gauge\n"
            "    def __init__(self):\n"
            "        self.g = self._gauge_cls(name=\"vllm:num_requests_running\", documentation='x')\n"
            "        self.c = self._counter_cls(name=\"vllm:generation_tokens\", documentation='x')\n"
            "        self.h = self._histogram_cls(name=\"vllm:time_to_first_token_seconds\", buckets=[1])\n"
            "        self.t = self._histogram_cls(name=\"vllm:iteration_tokens_total\")\n"
            "        self.s = prometheus_client.Counter(\"vllm:request_success_total\", 'positional')\n"
            "        self.q = prometheus_client.Summary(\"vllm:queue_seconds\", 'x')\n"
            "        self.other = prometheus_client.Gauge(\"process_open_fds\", 'not the engine s')\n"
            "        self.fstring = self._gauge_cls(name=f\"vllm:{kind}_usage\")\n"
            "    def log_metrics_info(self, type):\n"
            "        name = None\n"
            "        if type == 'cache_config':\n"
            "            name = \"vllm:cache_config_info\"\n"
            "        self._gauge_cls(name=name, documentation='info as a gauge')\n"),
        "vllm/v1/spec_decode/metrics.py": (
            "_INVOCATIONS = \"vllm:tool_call_parser_invocations_total\"\n"
            "c = Counter(_INVOCATIONS, 'x')\n"
            "specs = [(\"vllm:spec_decode_num_drafts\", 'd'), (\"vllm:spec_decode_num_draft_tokens\", 't')]\n"
            "counters = [self._counter_cls(name=name, documentation=doc) for name, doc in specs]\n"),
        "vllm/utils/flashinfer.py": "@torch.library.custom_op(\"vllm::bmm_fp8\", mutates_args=[])\ndef f(): pass\n",
        "vllm/tests/test_metrics.py": "Gauge(name=\"vllm:only_in_a_test\")\n",
        "vllm/benchmarks/serve.py": "Counter(name=\"vllm:only_in_a_benchmark\")\n",
    })
    assert gen.manifest(str(vllm))["metrics"] == {
        "vllm:cache_config_info": "gauge",
        "vllm:generation_tokens": "counter",
        # A histogram keeps its _total: only a counter's is prometheus_client's own suffix.
        "vllm:iteration_tokens_total": "histogram",
        "vllm:num_requests_running": "gauge",
        "vllm:queue_seconds": "summary",
        "vllm:request_success": "counter",
        "vllm:spec_decode_num_draft_tokens": "counter",
        "vllm:spec_decode_num_drafts": "counter",
        "vllm:time_to_first_token_seconds": "histogram",
        "vllm:tool_call_parser_invocations": "counter",
    }
    sglang = _fake_wheel(tmp_path, "sglang", {
        "sglang/srt/observability/metrics_collector.py": (
            "from prometheus_client import Counter, Gauge, Histogram\n"
            "class SchedulerMetricsCollector:\n"
            "    def __init__(self, labels):\n"
            "        self.num_running_reqs = Gauge(name=\"sglang:num_running_reqs\", documentation='x')\n"
            "        self.generation_tokens_total = Counter(name=\"sglang:generation_tokens_total\", documentation='x')\n"
            "        self.active = RefCountedGauge(Gauge(name=\"sglang:routing_keys_active\"))\n"
            "        self.ttft = Histogram(\"sglang:time_to_first_token_seconds\", 'x', buckets=[1])\n"),
        "sglang/test/kits/occupancy.py": "Gauge(name=\"sglang:only_in_a_test\")\n",
    })
    assert gen.manifest(str(sglang))["metrics"] == {
        "sglang:generation_tokens": "counter",
        "sglang:num_running_reqs": "gauge",
        "sglang:routing_keys_active": "gauge",
        "sglang:time_to_first_token_seconds": "histogram",
    }


# ----------------------------------------------------------------------------- the generator: log formats


LOGGING_MODULE = '''\
import logging, warnings
logger = logging.getLogger(__name__)

def _make_log_backend(backend):
    return (
        f"Using '{backend.value}' NvFp4 MoE backend out "
        f"of potential backends: {AVAILABLE}."
    )

def report(self, num_tokens, path, msg, t, n, x):
    logger.info_once("GPU KV cache size: %s tokens", f"{num_tokens:,}")
    logger.info("Maximum concurrency for %s tokens per request: %.2fx", a, b)
    logger.info("100%% done, %(left)5.1f left, %-8r", {"left": 1.0})
    logger.warning("50% literal, no arguments: {x}")
    logger.info(
        f"max_total_num_tokens={self.max_total_num_tokens}, "
        f"chunked_prefill_size={server_args.chunked_prefill_size}, "
        f"max_prefill_tokens={self.max_prefill_tokens}, "
        f"max_running_requests={self.max_running_requests}, "
        f"context_len={self.model_config.context_len}, "
        f"{'available_cpu_mem' if self.device == 'cpu' else 'available_gpu_mem'}="
        f"{avail_mem:.2f} GB"
    )
    logger.error("cannot open " + path + " for {reading}")
    self.logger.exception("loaded %s in %d s" % (path, t))
    logger.critical("took {:.2f} s for {name}, {{kept}}".format(t, name=n))
    logger.warning_once(_make_log_backend(backend))
    warnings.warn("Deprecated: 50%s off", DeprecationWarning)
    logger.info(msg)
    logger.info(str(x))
    logger.info(msg.format(x))
    logger.info("%s", x)
    logger.info(f"{x} {t}")
    logger.debug("only at debug level")
'''


def test_manifest_generator_reads_the_messages_a_release_logs(tmp_path):
    gen = _generator()
    vllm = _fake_wheel(tmp_path, "vllm", {
        "vllm/v1/worker/report.py": LOGGING_MODULE,
        "vllm/tests/conftest.py": "logger.info('only in a test')\n",
        "vllm/benchmarks/serve.py": "logger.info('only in a benchmark')\n",
        "vllm/test/x.py": "logger.info('only in a test too')\n",
    })
    data = gen.manifest(str(vllm))
    assert data["log_formats"] == sorted([
        "GPU KV cache size: {} tokens",
        "Maximum concurrency for {} tokens per request: {}x",
        "100% done, {} left, {}",
        "50% literal, no arguments: {{x}}",
        SGLANG_MEMORY,
        "cannot open {} for {{reading}}",
        "loaded {} in {} s",
        "took {} s for {}, {{kept}}",
        "Using '{}' NvFp4 MoE backend out of potential backends: {}.",
        "Deprecated: 50%s off",
    ])
    for fmt in data["log_formats"]:  # each is a str.format string of `{}` placeholders
        fmt.format(*["x"] * fmt.count("{}"))
    text = gen.dumps(data)
    assert json.loads(text) == data
    lines = text.splitlines()
    start = lines.index('  "log_formats": [')
    assert lines[start + 1:start + 1 + len(data["log_formats"])] == [
        f"    {json.dumps(fmt)}," for fmt in data["log_formats"][:-1]] + [f"    {json.dumps(data['log_formats'][-1])}"]
    assert '  "metrics": {},' in lines


def test_manifest_sections_keep_one_line_each_and_an_empty_list_stays_valid(tmp_path):
    gen = _generator()
    data = gen.manifest(str(_fake_wheel(tmp_path, "sglang", {})))
    assert data["log_formats"] == [] and data["metrics"] == {} and data["flags"] == {}
    text = gen.dumps(data)
    assert json.loads(text) == data
    assert '  "log_formats": [],' in text.splitlines()


# ----------------------------------------------------------------------------- the helpers


def test_metric_series_are_the_names_prometheus_exposes():
    assert E.metric_series({"vllm:num_requests_running": "gauge", "vllm:generation_tokens": "counter",
                            "vllm:time_to_first_token_seconds": "histogram", "x:latency": "summary"}) == {
        "vllm:num_requests_running",
        "vllm:generation_tokens_total", "vllm:generation_tokens_created",
        "vllm:time_to_first_token_seconds_bucket", "vllm:time_to_first_token_seconds_sum",
        "vllm:time_to_first_token_seconds_count", "vllm:time_to_first_token_seconds_created",
        "x:latency", "x:latency_sum", "x:latency_count", "x:latency_created",
    }
    assert E.metric_series({}) == set()
    with pytest.raises(ValueError, match="unknown kind 'info'"):
        E.metric_series({"x": "info"})


@pytest.mark.parametrize("pattern, expected", [
    ("GPU KV cache size: ([0-9,]+) tokens", "GPU KV cache size: 0 tokens"),
    ("Maximum concurrency for ([0-9,]+) tokens per request: ([0-9.]+)x",
     "Maximum concurrency for 0 tokens per request: 0x"),
    (r"^\s*took\s+(\d+\.\d*)s?$", "took 0."),
    (r"(?:a|b)*c{2,3}[^a-z\d]\bx(?P<n>y|z)(?P=n)(?!q)", "cc xyy"),
    (r"[\w]\W[^\s]\S\D.[^\w\s]", "a aaaa-"),
    ("(?i)Loaded (?:model|weights)", "Loaded model"),
])
def test_example_of_builds_a_short_text_the_regex_matches(pattern, expected):
    assert E.example_of(pattern) == expected
    assert re.search(pattern, expected)


@pytest.mark.parametrize("pattern, text, open_positions", [
    ("GPU KV cache size: ([0-9,]+) tokens", "GPU KV cache size: 0 tokens", {19}),
    ("Using 'FLASHINFER_CUTLASS' NvFp4", "Using 'FLASHINFER_CUTLASS' NvFp4", set()),
    (r"took [.](\d{2}) (?:s|ms)\.", "took .00 s.", {6, 7}),
    (r"[Mm]odel.x+ (a)\1", "Modelax aa", {0, 5, 6}),
])
def test_example_with_open_positions_marks_what_the_regex_leaves_open(pattern, text, open_positions):
    assert E.example_with_open_positions(pattern) == (text, frozenset(open_positions))


@pytest.mark.parametrize("pattern", [r"foo(?=x)", r"(a)?(?(1)b|c)", "unbalanced (", r"a\Zb"])
def test_example_of_refuses_what_it_cannot_build(pattern):
    with pytest.raises(ValueError):
        E.example_of(pattern)


@pytest.mark.parametrize("pattern, fmt, expected", [
    ("GPU KV cache size: ([0-9,]+) tokens", "GPU KV cache size: {} tokens", True),
    ("Model loading took ([0-9.]+) GiB", "Model loading took {} GiB memory and {} seconds", True),
    ("Using 'FLASHINFER_CUTLASS' NvFp4 MoE backend", "Using '{}' NvFp4 MoE backend out of potential backends: {}", True),
    ("max_total_num_tokens=([0-9]+)", SGLANG_MEMORY, True),
    ("available_gpu_mem=([0-9.]+) GB", SGLANG_MEMORY, True),
    ("([0-9]+) tokens", "GPU KV cache size: {} tokens", True),
    ("KV cache", "GPU KV cache size: {} tokens", True),
    ("literal {braces} and 50%", "literal {{braces}} and 50%", True),
    # A misspelt word, words in another order, a word the format does not have.
    ("GPU KV cahce size: ([0-9,]+) tokens", "GPU KV cache size: {} tokens", False),
    ("max_total_num_tokenz=([0-9]+)", SGLANG_MEMORY, False),
    ("tokens GPU KV cache size", "GPU KV cache size: {} tokens", False),
    ("GPU KV cache size: ([0-9,]+) tokens", "GPU KV cache size: {} blocks", False),
    ("Model loading took ([0-9.]+) GiB", "Model weights took {} GiB", False),
    # A placeholder prints one value: not several words, and not the whole text on its own.
    ("Loading took 5 s", "Loading {}", False),
    ("Loading took_5_s", "Nothing of it: {}", False),
    # What only placeholders and punctuation print says nothing about the release.
    ("available_gpu_mem=([0-9.]+)", SGLANG_MEMORY, False),
])
def test_format_can_print(pattern, fmt, expected):
    assert E.format_can_print(fmt, *E.example_with_open_positions(pattern)) is expected
    if expected:  # a text alone: every character counts as written out
        assert E.format_can_print(fmt, E.example_of(pattern))


@pytest.mark.parametrize("pattern, fmt", [
    # One placeholder would print the key and the value the regex leaves open.
    ("available_gpu_mem=([0-9.]+) GB", "Load weight end. avail mem={} GB"),
    ("max_total_num_tokens=([0-9]+)", "Resizing from {}x{}"),
    ("max_total_num_tokens=([0-9]+)", "\x1b[1;33m{}\x1b[0m"),
    # The only letter or digit a literal matched is the value the regex leaves open.
    ("max_total_num_tokens=([0-9]+)", "warmup is disabled ({}=0)."),
])
def test_format_can_print_refuses_a_placeholder_printing_a_key_and_its_value(pattern, fmt):
    assert not E.format_can_print(fmt, *E.example_with_open_positions(pattern))


def test_format_can_print_edges():
    assert E.format_can_print("{}{}xy", "abxy") and E.format_can_print("a{}b", "ab")
    assert E.format_can_print("abc", "bc") and not E.format_can_print("abc", "abcd")
    assert not E.format_can_print("abc {}", "abc d e")
    # One letter next to placeholders, or none at all, says nothing about the format.
    assert not E.format_can_print("abc", "b") and not E.format_can_print("ab", "")
    assert not E.format_can_print("got sm{}{}; falling back", *E.example_with_open_positions("max_total_num_tokens=([0-9]+)"))


def test_log_line_possible_names_the_formats_that_print_it():
    formats = ["GPU KV cache size: {} tokens", "Maximum concurrency for {} tokens per request: {}x",
               SGLANG_MEMORY, "{} tokens left", "Loaded {}"]
    assert E.log_line_possible("GPU KV cache size: ([0-9,]+) tokens", formats) == ["GPU KV cache size: {} tokens"]
    assert E.log_line_possible("([0-9]+) tokens", formats) == [
        "GPU KV cache size: {} tokens", "Maximum concurrency for {} tokens per request: {}x", "{} tokens left"]
    assert E.log_line_possible("available_gpu_mem=([0-9.]+) GB", formats) == [SGLANG_MEMORY]
    assert E.log_line_possible("KV cache sizes", formats) == []
    assert E.log_line_possible("[Mm]odel loading took ([0-9.]+) GiB", ["Model loading took {} GiB"])


# ----------------------------------------------------------------------------- the committed manifests


def test_every_manifest_records_metrics_and_log_formats():
    for kind in ("vllm", "sglang"):
        for version, data in _manifests(kind).items():
            assert data["metrics"] and all(name.startswith(kind + ":") for name in data["metrics"]), (kind, version)
            assert set(data["metrics"].values()) <= set(E.SERIES_SUFFIXES), (kind, version)
            assert len(data["log_formats"]) > 500 and data["log_formats"] == sorted(set(data["log_formats"]))


@pytest.mark.parametrize("kind, version, metrics", [
    ("vllm", "0.25.1", {"vllm:num_requests_running": "gauge", "vllm:generation_tokens": "counter",
                        "vllm:time_to_first_token_seconds": "histogram", "vllm:kv_cache_usage_perc": "gauge"}),
    ("sglang", "0.5.23", {"sglang:num_running_reqs": "gauge", "sglang:generation_tokens": "counter",
                          "sglang:token_usage": "gauge", "sglang:num_queue_reqs": "gauge",
                          "sglang:time_to_first_token_seconds": "histogram"}),
])
def test_the_manifests_hold_the_metrics_sparkctl_knows(kind, version, metrics):
    recorded = _manifests(kind)[version]["metrics"]
    assert {name: recorded.get(name) for name in metrics} == metrics
    assert "vllm:generation_tokens_total" in E.metric_series(_manifests("vllm")["0.25.1"]["metrics"])


VLLM_LINES = ["GPU KV cache size: ([0-9,]+) tokens", "Maximum concurrency for ([0-9,]+) tokens per request: ([0-9.]+)x",
              "Model loading took ([0-9.]+) GiB"]


@pytest.mark.parametrize("version", ["0.12.0", "0.22.0", "0.25.1"])
def test_every_vllm_release_prints_the_memory_lines(version):
    formats = _manifests("vllm")[version]["log_formats"]
    for pattern in VLLM_LINES:
        assert E.log_line_possible(pattern, formats), (version, pattern)
    nvfp4 = E.log_line_possible("Using 'FLASHINFER_CUTLASS' NvFp4 MoE backend", formats)
    # 0.12.0 names its NVFP4 MoE kernels in another line.
    assert bool(nvfp4) is (version != "0.12.0"), nvfp4
    if version == "0.12.0":
        assert "Using FlashInfer {} kernels for ModelOptNvFp4FusedMoE." in formats


@pytest.mark.parametrize("version", ["0.5.20", "0.5.21", "0.5.22", "0.5.23"])
def test_every_sglang_release_prints_its_memory_pool_line(version):
    formats = _manifests("sglang")[version]["log_formats"]
    for pattern in ("max_total_num_tokens=([0-9]+)", "available_gpu_mem=([0-9.]+) GB"):
        assert SGLANG_MEMORY in E.log_line_possible(pattern, formats), (version, pattern)
    # The memory pool's line, not every line that ends in "{} GB".
    assert E.log_line_possible("available_gpu_mem=([0-9.]+) GB", formats) == [SGLANG_MEMORY]


def test_manifest_generator_reads_the_api_servers_arguments_where_vllm_032_moved_them(tmp_path):
    """vLLM 0.32 defines the API server's arguments in vllm/entrypoints/launchers/cli_args.py."""
    import zipfile

    path = tmp_path / "vllm-9.9.9-cp38-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("vllm/engine/arg_utils.py", "class EngineArgs:\n    pass\n")
        zf.writestr("vllm/entrypoints/launchers/cli_args.py", (
            "from dataclasses import dataclass\n"
            "@dataclass\n"
            "class FrontendArgs:\n"
            "    api_key: str | None = None\n"
            "def make_arg_parser(parser):\n"
            "    parser.add_argument('--headless', action='store_true')\n"
            "    return parser\n"))
    flags = _generator().manifest(str(path))["flags"]
    assert flags["headless"] == {"kind": "bool"} and "api_key" in flags

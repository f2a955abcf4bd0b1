"""The lab's stand-in engine (tests/lab/engine, LAB-ONLY): started in-process on 127.0.0.1
with the mp backend (no Ray), then its API, timing model, faults and fatal startup paths."""

import http.client
import io
import json
import subprocess
import sys
import threading
import time
import types
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ENGINE = Path(__file__).resolve().parents[1] / "lab" / "engine"
if str(ENGINE) not in sys.path:
    sys.path.insert(0, str(ENGINE))

import sparklab_engine  # noqa: E402
from sparklab_engine import cli, cluster, server  # noqa: E402
from sparklab_engine.app import EngineServer, hold_memory  # noqa: E402
from sparklab_engine.log import Log  # noqa: E402
from make_checkpoint import header_only_checkpoint, standin_checkpoint  # noqa: E402  tests/lab/hub, on sys.path through conftest.py

KEY = "unit-test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}


def make_checkpoint(root, shards=4, shard_bytes=1 << 20):
    return standin_checkpoint(root, shards=shards, shard_bytes=shard_bytes)


class Running:
    """An EngineServer running in a thread (run() returns its exit code into .code)."""

    def __init__(self, argv, env):
        self.stream = io.StringIO()
        self.engine = EngineServer(cli.parse_serve(argv, env), Log(self.stream))
        self.code = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 5
        while self.engine.httpd is None and self.thread.is_alive():
            assert time.monotonic() < deadline, "the server did not bind"
            time.sleep(0.005)

    def _run(self):
        self.code = self.engine.run()

    @property
    def port(self):
        return self.engine.httpd.server_address[1]

    @property
    def lines(self):
        return self.engine.log.lines

    def request(self, method, path, body=None, headers=None, timeout=10):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        conn.request(method, path, body=None if body is None else json.dumps(body),
                     headers=dict({"Content-Type": "application/json"}, **(headers or {})))
        response = conn.getresponse()
        data = response.read()
        conn.close()
        return response.status, (json.loads(data) if data else None)

    def wait_ready(self, timeout=5):
        deadline = time.monotonic() + timeout
        while self.request("GET", "/health")[0] != 200:
            assert time.monotonic() < deadline, "not ready:\n" + self.stream.getvalue()
            time.sleep(0.02)

    def stream_events(self, path, body, timeout=10):
        """POST a streaming request -> (t_sent, [(t, event)]) with event the parsed JSON or '[DONE]'."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        sent = time.monotonic()
        conn.request("POST", path, body=json.dumps(dict(body, stream=True)),
                     headers=dict(AUTH, **{"Content-Type": "application/json"}))
        response = conn.getresponse()
        assert response.status == 200 and response.getheader("Content-Type").startswith("text/event-stream")
        events = []
        try:
            while True:
                line = response.readline()
                if not line:
                    break
                line = line.strip()
                if not line:
                    continue
                assert line.startswith(b"data: ")
                payload = line[len(b"data: "):].decode()
                events.append((time.monotonic(), payload if payload == "[DONE]" else json.loads(payload)))
        finally:
            conn.close()
        return sent, events

    def stop(self):
        self.engine.shutdown(0)
        self.thread.join(5)


BASE_ENV = {"VLLM_API_KEY": KEY, "SPARKLAB_ENGINE_LOAD_S": "0.3"}


def serve_argv(model_dir, *extra):
    return [str(model_dir), "--served-model-name", "lab-standin", "--host", "127.0.0.1", "--port", "0",
            "--distributed-executor-backend", "mp", "--tensor-parallel-size", "2", "--max-model-len", "4096",
            "--kv-cache-memory-bytes", "268435456", "--max-num-seqs", "4", "--enforce-eager", *extra]


@pytest.fixture(scope="module")
def engine(tmp_path_factory, loopback_only):
    model = make_checkpoint(tmp_path_factory.mktemp("ckpt") / "lab-standin")
    running = Running(serve_argv(model, "--some-vllm-flag", "7", "--another-switch"), BASE_ENV)
    running.health_at_bind = running.request("GET", "/health")[0]
    running.wait_ready()
    yield running
    running.stop()
    assert running.code == 0


@pytest.fixture
def timing(engine):
    """Set the timing model for one test, restore it after."""
    before = engine.request("GET", "/_standin/timing")[1]

    def setter(**values):
        status, body = engine.request("POST", "/_standin/timing", values)
        assert status == 200, body
        return body

    yield setter
    engine.request("POST", "/_standin/timing", before)
    engine.request("POST", "/_standin/faults", {"reset": True})


# ------------------------------------------------------------------------------ startup


def test_health_is_503_until_startup_completes_then_200(engine):
    assert engine.health_at_bind == 503
    assert engine.request("GET", "/health")[0] == 200
    assert engine.request("GET", "/ping")[0] == 200


def test_startup_prints_the_lines_the_verify_stage_reads(engine):
    text = "\n".join(engine.lines)
    assert "Using 'SPARKLAB_STANDIN' NvFp4 MoE backend" in text
    # 4 MiB over TP2 = 0.00 GiB per rank, once per rank (rank 1 with vLLM's worker prefix).
    loading = [line for line in engine.lines if "Model loading took" in line]
    assert len(loading) == 2 and loading[1].startswith("(VllmWorker rank=1 pid=")
    assert "Model loading took 0.00 GiB and 0.3" in loading[0]
    # The checkpoint's config: 35 layers, 1 KV head (kept whole on each of the 2 ranks), head_dim 64, bf16:
    # 2 x 64 x 2 B = 256 B per token and layer; 268,435,456 // (16-token page x 256 B x 35) = 1,872 blocks.
    assert "Available KV cache memory: 0.25 GiB" in text
    assert "GPU KV cache size: 29,952 tokens" in text
    assert "Maximum concurrency for 4,096 tokens per request: 7.31x" in text
    assert "Ignoring flags the stand-in does not implement: --some-vllm-flag 7 --another-switch" in text
    assert engine.lines[-1].endswith("Application startup complete.")
    assert "api_key=set" in text and KEY not in text


def test_model_loading_gib_is_total_over_tensor_parallel(tmp_path, loopback_only):
    model = make_checkpoint(tmp_path / "m", shards=2, shard_bytes=3 << 20)
    running = Running(serve_argv(model), dict(BASE_ENV, SPARKLAB_ENGINE_LOAD_S="0", SPARKLAB_ENGINE_KV_BYTES_PER_TOKEN="1"))
    try:
        running.wait_ready()
    finally:
        running.stop()
    # 6 MiB / 2 ranks = 3 MiB = 0.0029 GiB; 268435456 B / 1 B per token.
    assert any("Model loading took 0.00 GiB" in line for line in running.lines)
    assert any("GPU KV cache size: 268,435,456 tokens" in line for line in running.lines)


# ------------------------------------------------------------------------------ API


def test_api_key_is_required_on_v1_routes_only(engine):
    assert engine.request("GET", "/v1/models") == (401, {"error": "Unauthorized"})
    assert engine.request("GET", "/v1/models", headers={"Authorization": "Bearer wrong"})[0] == 401
    status, body = engine.request("GET", "/v1/models", headers=AUTH)
    assert status == 200 and body["data"][0]["id"] == "lab-standin" and body["data"][0]["max_model_len"] == 4096
    assert engine.request("POST", "/v1/completions", {"prompt": "x"})[0] == 401
    assert engine.request("GET", "/health")[0] == 200
    assert engine.request("GET", "/version")[1]["version"] == sparklab_engine.__version__


def test_completion_of_the_smoke_prompt_says_tokyo_and_stops(engine, timing):
    timing(ttft_s=0, ttft_per_token_s=0, token_rate=1000)
    status, body = engine.request("POST", "/v1/completions", {"model": "lab-standin", "prompt": "The capital of Japan is",
                                                              "max_tokens": 8}, headers=AUTH)
    assert status == 200
    assert body["choices"][0]["text"] == " Tokyo." and body["choices"][0]["finish_reason"] == "stop"
    assert body["usage"] == {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}


def test_other_prompts_emit_max_tokens_of_filler(engine, timing):
    timing(ttft_s=0, ttft_per_token_s=0, token_rate=1000)
    status, body = engine.request("POST", "/v1/completions", {"prompt": "Tell me a story", "max_tokens": 5}, headers=AUTH)
    assert status == 200 and len(body["choices"][0]["text"].split()) == 5 and body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 5


def test_chat_completion(engine, timing):
    timing(ttft_s=0, ttft_per_token_s=0, token_rate=1000)
    status, body = engine.request("POST", "/v1/chat/completions", {
        "messages": [{"role": "system", "content": "Be brief."},
                     {"role": "user", "content": [{"type": "text", "text": "What is the capital of Japan?"}]}]}, headers=AUTH)
    assert status == 200 and body["object"] == "chat.completion"
    assert body["choices"][0]["message"]["content"] == " Tokyo." and body["usage"]["prompt_tokens"] == 8


def test_bad_requests_are_rejected_like_vllm(engine):
    assert engine.request("POST", "/v1/completions", {"model": "other", "prompt": "x"}, headers=AUTH)[0] == 404
    status, body = engine.request("POST", "/v1/completions", {"prompt": "a b c", "max_tokens": 4094}, headers=AUTH)
    assert status == 400 and "maximum context length is 4096 tokens" in body["error"]["message"]
    assert engine.request("POST", "/v1/completions", {"prompt": "x", "max_tokens": 0}, headers=AUTH)[0] == 400
    assert engine.request("POST", "/v1/chat/completions", {"messages": []}, headers=AUTH)[0] == 400
    status, body = engine.request("POST", "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f"}}]}, headers=AUTH)
    assert status == 400 and "--enable-auto-tool-choice" in body["error"]["message"]
    assert engine.request("GET", "/v1/nothing", headers=AUTH)[0] == 404


def test_streaming_chunks_parse_and_end_with_done(engine, timing):
    timing(ttft_s=0, ttft_per_token_s=0, token_rate=1000)
    _, events = engine.stream_events("/v1/completions", {"prompt": "The capital of Japan is", "max_tokens": 8,
                                                         "stream_options": {"include_usage": True}})
    payloads = [e for _, e in events]
    assert payloads[-1] == "[DONE]"
    assert "".join(p["choices"][0]["text"] for p in payloads[:-2]) == " Tokyo."
    assert payloads[-3]["choices"][0]["finish_reason"] == "stop"
    assert payloads[-2]["choices"] == [] and payloads[-2]["usage"]["completion_tokens"] == 2

    _, events = engine.stream_events("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3})
    payloads = [e for _, e in events]
    assert payloads[-1] == "[DONE]" and len(payloads) == 4
    assert payloads[0]["choices"][0]["delta"]["role"] == "assistant"
    assert all(p["object"] == "chat.completion.chunk" for p in payloads[:-1])
    assert payloads[2]["choices"][0]["finish_reason"] == "length"


# ------------------------------------------------------------------------------ timing model


def _measure(engine, prompt_words, max_tokens):
    sent, events = engine.stream_events("/v1/completions", {"prompt": " ".join(["w"] * prompt_words), "max_tokens": max_tokens})
    times = [t for t, e in events if e != "[DONE]"]
    assert len(times) == max_tokens
    return times[0] - sent, (len(times) - 1) / (times[-1] - times[0])


# Both judge measured times (token rates within 10 %, TTFT within 30 ms): the suite's timing
# stage runs them with nothing beside them.
@pytest.mark.timing
def test_ttft_and_token_rate_match_the_configured_model_at_one_stream(engine, timing):
    timing(ttft_s=0.2, ttft_per_token_s=0.01, token_rate=50, max_total_token_rate=0)
    ttft, rate = _measure(engine, 5, 20)
    assert ttft == pytest.approx(0.25, rel=0.1)
    assert rate == pytest.approx(50, rel=0.1)


@pytest.mark.timing
@pytest.mark.parametrize("cap, per_stream", [(0, 50), (60, 30)])
def test_two_streams_share_the_aggregate_cap(engine, timing, cap, per_stream):
    timing(ttft_s=0.1, ttft_per_token_s=0, token_rate=50, max_total_token_rate=cap)
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda _: _measure(engine, 3, 20), range(2)))
    for ttft, rate in results:
        assert ttft == pytest.approx(0.1, abs=0.03)
        assert rate == pytest.approx(per_stream, rel=0.1)


def test_timing_updates_are_validated(engine):
    assert engine.request("POST", "/_standin/timing", {"token_rate": 0})[0] == 400
    assert engine.request("POST", "/_standin/timing", {"nope": 1})[0] == 400
    assert engine.request("POST", "/_standin/timing", {"ttft_s": "1"})[0] == 400


# ------------------------------------------------------------------------------ faults and control


def test_wrong_answer_fault(engine, timing):
    timing(ttft_s=0, ttft_per_token_s=0, token_rate=1000)
    assert engine.request("POST", "/_standin/faults", {"wrong_answer": True}) == (200, {"hang_after_health": False, "wrong_answer": True})
    status, body = engine.request("POST", "/v1/completions", {"prompt": "The capital of Japan is", "max_tokens": 8}, headers=AUTH)
    assert body["choices"][0]["text"] == " Kyoto."
    engine.request("POST", "/_standin/faults", {"reset": True})
    status, body = engine.request("POST", "/v1/completions", {"prompt": "The capital of Japan is", "max_tokens": 8}, headers=AUTH)
    assert body["choices"][0]["text"] == " Tokyo."


def test_hang_after_health_fault_wedges_generation_but_not_health(engine, timing):
    timing(ttft_s=0, ttft_per_token_s=0, token_rate=1000)
    engine.request("POST", "/_standin/faults", {"hang_after_health": True})
    assert engine.request("GET", "/health")[0] == 200
    assert engine.request("GET", "/v1/models", headers=AUTH)[0] == 200
    with pytest.raises(TimeoutError):
        engine.stream_events("/v1/completions", {"prompt": "The capital of Japan is"}, timeout=0.5)
    with pytest.raises(TimeoutError):
        engine.request("POST", "/v1/completions", {"prompt": "x", "max_tokens": 1}, headers=AUTH, timeout=0.5)
    assert engine.request("POST", "/_standin/faults", {"reset": True})[1]["hang_after_health"] is False
    assert engine.request("POST", "/v1/completions", {"prompt": "x", "max_tokens": 1}, headers=AUTH)[0] == 200
    # The wedged requests resume once the fault is reset (their clients are gone by now).
    wait_idle(engine)


def test_faults_are_validated(engine):
    assert engine.request("POST", "/_standin/faults", {"explode": True})[0] == 400
    assert engine.request("POST", "/_standin/faults", {"wrong_answer": "yes"})[0] == 400


def wait_idle(engine, timeout=3):
    deadline = time.monotonic() + timeout
    while engine.request("GET", "/_standin/stats")[1]["active_generations"]:
        assert time.monotonic() < deadline, "generations still running"
        time.sleep(0.02)


def test_stats_count_requests_and_tokens(engine, timing):
    timing(ttft_s=0, ttft_per_token_s=0, token_rate=1000)
    wait_idle(engine)
    before = engine.request("GET", "/_standin/stats")[1]
    engine.request("POST", "/v1/completions", {"prompt": "one two three", "max_tokens": 4}, headers=AUTH)
    after = engine.request("GET", "/_standin/stats")[1]
    assert after["completion_tokens"] - before["completion_tokens"] == 4
    assert after["prompt_tokens"] - before["prompt_tokens"] == 3
    assert after["by_route"]["POST /v1/completions"] > before["by_route"].get("POST /v1/completions", 0)
    assert after["ready"] is True and after["active_generations"] == 0


def test_control_routes_refuse_a_non_loopback_client(engine, monkeypatch):
    monkeypatch.setattr(server, "is_loopback", lambda host: False)
    status, body = engine.request("POST", "/_standin/faults", {"wrong_answer": True})
    assert status == 403 and "loopback clients only" in body["error"]
    assert engine.request("GET", "/_standin/stats")[0] == 403


@pytest.mark.parametrize("host, expected", [
    ("127.0.0.1", True), ("127.8.9.10", True), ("::1", True), ("::ffff:127.0.0.1", True),
    ("192.168.100.11", False), ("172.30.77.2", False), ("::ffff:10.0.0.1", False), ("fe80::1%eth0", False), ("nonsense", False),
])
def test_is_loopback(host, expected):
    assert server.is_loopback(host) is expected


# ------------------------------------------------------------------------------ tools and reasoning


def test_tool_calls_and_reasoning_when_the_parsers_are_set(tmp_path, loopback_only):
    model = make_checkpoint(tmp_path / "m")
    running = Running(serve_argv(model, "--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--reasoning-parser", "qwen3"),
                      dict(BASE_ENV, SPARKLAB_ENGINE_LOAD_S="0", SPARKLAB_ENGINE_TTFT_S="0", SPARKLAB_ENGINE_TOKEN_RATE="1000"))
    try:
        running.wait_ready()
        tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}}]
        status, body = running.request("POST", "/v1/chat/completions", {
            "messages": [{"role": "user", "content": "Weather in the capital of Japan?"}], "tools": tools}, headers=AUTH)
        assert status == 200
        choice = body["choices"][0]
        assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
        call = choice["message"]["tool_calls"][0]
        assert call["function"]["name"] == "get_weather" and json.loads(call["function"]["arguments"]) == {"city": "Tokyo"}

        status, body = running.request("POST", "/v1/chat/completions", {
            "messages": [{"role": "user", "content": "The capital of Japan is"}], "max_tokens": 16}, headers=AUTH)
        message = body["choices"][0]["message"]
        assert message["reasoning_content"].startswith("The user asks") and message["content"] == " Tokyo."
        _, events = running.stream_events("/v1/chat/completions", {
            "messages": [{"role": "user", "content": "The capital of Japan is"}], "max_tokens": 16})
        deltas = [e["choices"][0]["delta"] for _, e in events if e != "[DONE]"]
        assert "reasoning_content" in deltas[0] and "".join(d.get("content") or "" for d in deltas) == " Tokyo."
    finally:
        running.stop()


# ------------------------------------------------------------------------------ fatal startup


def _fatal_run(argv, env):
    running = Running(argv, env)
    running.thread.join(5)
    assert not running.thread.is_alive()
    return running.code, "\n".join(running.lines)


def test_a_directory_without_the_index_is_fatal(tmp_path, loopback_only):
    (tmp_path / "empty").mkdir()
    code, text = _fatal_run(serve_argv(tmp_path / "empty"), BASE_ENV)
    assert code == 1 and "EngineCore failed to start: no model.safetensors.index.json" in text


def test_a_kv_cache_smaller_than_max_model_len_is_fatal(tmp_path, loopback_only):
    model = make_checkpoint(tmp_path / "m")
    code, text = _fatal_run(serve_argv(model, "--kv-cache-memory-bytes", "1M"), dict(BASE_ENV, SPARKLAB_ENGINE_LOAD_S="0"))
    assert code == 1 and "max seq len (4096) is larger than the maximum number of tokens that can be stored in KV cache (112)" in text


@pytest.mark.parametrize("switch, crashes", [("1", True), ("0", False), ("", False)])
def test_the_crash_switch_fails_every_boot_after_loading(tmp_path, loopback_only, switch, crashes):
    model = make_checkpoint(tmp_path / "m")
    env = dict(BASE_ENV, SPARKLAB_ENGINE_LOAD_S="0", SPARKLAB_ENGINE_CRASH_DURING_BOOT=switch)
    if not crashes:
        running = Running(serve_argv(model), env)
        running.wait_ready()
        running.engine.shutdown(0)
        running.thread.join(5)
        assert running.code == 0
        return
    code, text = _fatal_run(serve_argv(model), env)
    assert code == 1
    assert "Loading weights" in text and "EngineCore failed to start: crashing during boot on purpose" in text
    assert "Application startup complete." not in text


def test_a_release_with_a_boot_defect_fails_every_boot_after_loading(tmp_path, loopback_only, monkeypatch):
    # The lab's broken runtime upgrade: nothing in the environment asks for the crash, the release does.
    monkeypatch.setattr(sparklab_engine, "RELEASE_DEFECT", "crash-during-boot")
    model = make_checkpoint(tmp_path / "m")
    code, text = _fatal_run(serve_argv(model), dict(BASE_ENV, SPARKLAB_ENGINE_LOAD_S="0"))
    assert code == 1 and "Loading weights" in text and "Application startup complete." not in text
    assert ("EngineCore failed to start: crashing during boot on purpose (release %s carries the defect "
            "'crash-during-boot')" % sparklab_engine.__version__) in text


def test_ray_backend_without_ray_is_fatal(tmp_path, loopback_only, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    model = make_checkpoint(tmp_path / "m")
    argv = [a if a != "mp" else "ray" for a in serve_argv(model)]
    code, text = _fatal_run(argv, BASE_ENV)
    assert code == 1 and "--distributed-executor-backend ray needs the ray package" in text


# ------------------------------------------------------------------------------ Ray placement (fake ray)


def fake_ray(monkeypatch, gpu_nodes):
    """A stand-in `ray` module: nodes() lists `gpu_nodes` IPs, each with one GPU."""
    nodes = [{"NodeID": f"id-{ip}", "NodeManagerAddress": ip, "Alive": True, "Resources": {"GPU": 1.0, "CPU": 4.0}}
             for ip in gpu_nodes]
    calls = {}
    ray = types.ModuleType("ray")
    ray.init = lambda **kwargs: calls.setdefault("init", kwargs)
    ray.is_initialized = lambda: "init" in calls
    ray.shutdown = lambda: calls.setdefault("shutdown", True)
    ray.nodes = lambda: nodes
    ray.get = lambda refs, timeout=None: [r() for r in refs] if isinstance(refs, list) else refs()
    ray.util = types.ModuleType("ray.util")
    ray.util.get_node_ip_address = lambda: gpu_nodes[0] if gpu_nodes else "127.0.0.1"
    ray.util.remove_placement_group = lambda group: None

    class Group:
        def __init__(self, specs, strategy, name):
            calls["group"] = (specs, strategy)

        def ready(self):
            return lambda: True

    placement = types.ModuleType("ray.util.placement_group")
    placement.placement_group = Group
    strategies = types.ModuleType("ray.util.scheduling_strategies")
    strategies.PlacementGroupSchedulingStrategy = lambda placement_group, placement_group_bundle_index: placement_group_bundle_index

    def remote(num_gpus, num_cpus):
        calls["num_gpus"], calls["num_cpus"] = num_gpus, num_cpus

        class Task:
            def options(self, scheduling_strategy):
                index = scheduling_strategy
                return types.SimpleNamespace(remote=lambda: lambda: {"ip": gpu_nodes[::-1][index], "pid": 100 + index,
                                                                     "hostname": f"h{index}"})

        return lambda fn: Task()

    ray.remote = remote
    for name, module in {"ray": ray, "ray.util": ray.util, "ray.util.placement_group": placement,
                         "ray.util.scheduling_strategies": strategies}.items():
        monkeypatch.setitem(sys.modules, name, module)
    return calls


def test_ray_placement_puts_one_gpu_task_per_node_rank0_on_the_driver(monkeypatch):
    calls = fake_ray(monkeypatch, ["192.168.100.10", "192.168.100.11"])
    log = Log(io.StringIO())
    placement = cluster.RayPlacement(2, "auto", 5, log)
    ranks = placement.connect()
    assert [r["ip"] for r in ranks] == ["192.168.100.10", "192.168.100.11"]
    assert calls["group"] == ([{"GPU": 1.0}, {"GPU": 1.0}], "STRICT_SPREAD") and (calls["num_gpus"], calls["num_cpus"]) == (1, 0)
    assert calls["init"]["address"] == "auto"
    assert "Ray placement: 2 ranks on nodes 192.168.100.10, 192.168.100.11" in "\n".join(log.lines)
    placement.disconnect()
    assert calls["shutdown"]


def test_ray_placement_fails_clearly_when_nodes_are_missing(monkeypatch):
    fake_ray(monkeypatch, ["192.168.100.10"])
    with pytest.raises(cluster.PlacementError, match=r"needs 2 alive nodes with a GPU, the Ray cluster has 1: 192.168.100.10 \(1 GPU\)"):
        cluster.RayPlacement(2, "auto", 0, Log(io.StringIO())).connect()


def test_ray_watch_reports_a_lost_rank(monkeypatch):
    fake_ray(monkeypatch, ["192.168.100.10", "192.168.100.11"])
    placement = cluster.RayPlacement(2, "auto", 5, Log(io.StringIO()))
    placement.connect()
    sys.modules["ray"].nodes = lambda: [{"NodeID": "id-192.168.100.10", "Alive": True}, {"NodeID": "id-192.168.100.11", "Alive": False}]
    lost, stop = [], threading.Event()
    placement.watch(0.01, lost.append, stop)
    deadline = time.monotonic() + 2
    while not lost and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    assert lost and "192.168.100.11" in lost[0]


# ------------------------------------------------------------------------------ command line and memory


def test_hold_memory_allocates_the_bytes_in_steps(monkeypatch):
    monkeypatch.setattr("sparklab_engine.app.HOLD_CHUNK_BYTES", 1 << 20)
    held = []
    hold_memory((5 << 20) + 7, Log(io.StringIO()), held)
    assert [len(c) for c in held] == [1 << 20] * 5 + [7] and all(c[:1] == b"\x01" for c in held)



def test_command_line_contract():
    s = cli.parse_serve(["/m", "--served-model-name", "a", "b", "--tensor-parallel-size", "2", "--distributed-executor-backend", "ray",
                         "--kv-cache-memory-bytes", "2G", "--trust-remote-code", "--max-num-batched-tokens", "8192", "--x=1"],
                        {"VLLM_API_KEY": "k", "SPARKLAB_ENGINE_TOKEN_RATE": "64.4", "RAY_ADDRESS": "192.168.100.10:6379",
                         "SPARKLAB_ENGINE_HOLD_BYTES": "1.5GiB"})
    assert (s.served_model_name, s.tensor_parallel_size, s.distributed_executor_backend) == ("a", 2, "ray")
    assert s.kv_cache_memory_bytes == 2 << 30 and s.hold_bytes == 3 << 29
    assert s.api_key == "k" and s.timing.token_rate == 64.4 and s.ray_address == "192.168.100.10:6379"
    assert s.ignored == ["--trust-remote-code", "--max-num-batched-tokens 8192", "--x=1"]
    assert cli.parse_serve(["/m"], {}).served_model_name == "/m"
    with pytest.raises(cli.UsageError):
        cli.parse_serve(["/m", "stray"], {})
    with pytest.raises(cli.UsageError):
        cli.parse_serve(["/m"], {"SPARKLAB_ENGINE_TTFT_S": "soon"})


# ------------------------------------------------------------------------------ compile step (jit.py)

from sparklab_engine import jit  # noqa: E402


def test_compile_step_is_cold_then_warm_and_a_new_version_compiles_again(tmp_path):
    env = {jit.CACHE_VARIABLE: str(tmp_path), jit.DELAY_VARIABLE: "3"}
    slept = []
    first = jit.compile_step(env, "0.2.1", sleep=slept.append)
    assert first["state"] == "cold" and slept == [3.0]
    assert (tmp_path / jit.KERNEL_REL).read_bytes() == jit.kernel_content("0.2.1")
    second = jit.compile_step(env, "0.2.1", sleep=slept.append)
    assert second["state"] == "warm" and slept == [3.0]
    assert "compile skipped" in jit.describe(second)
    # Another runtime's kernel is not this one's: a stale cache compiles.
    assert jit.compile_step(env, "0.2.2", sleep=slept.append)["state"] == "cold" and slept == [3.0, 3.0]


def test_compile_step_without_a_cache_directory_compiles_every_boot(tmp_path):
    slept = []
    result = jit.compile_step({jit.DELAY_VARIABLE: "0.5"}, "0.2.1", sleep=slept.append)
    assert result["state"] == "uncached" and slept == [0.5]
    assert "FLASHINFER_WORKSPACE_BASE is not set" in jit.describe(result)
    blocked = tmp_path / "file"
    blocked.write_text("")
    result = jit.compile_step({jit.CACHE_VARIABLE: str(blocked)}, "0.2.1", sleep=slept.append)
    assert result["state"] == "uncached" and result["error"]


def test_startup_logs_each_ranks_compile_state(tmp_path, loopback_only):
    model = make_checkpoint(tmp_path / "ckpt")
    env = dict(BASE_ENV, **{jit.CACHE_VARIABLE: str(tmp_path / "cache"), jit.DELAY_VARIABLE: "0.1"})
    for expected in ("cold", "warm"):
        running = Running(serve_argv(model), env)
        running.wait_ready()
        running.stop()
        lines = [line for line in running.lines if "JIT cache" in line]
        assert len(lines) == 2 and all(f"JIT cache {expected}:" in line for line in lines), lines
        assert lines[1].startswith("(VllmWorker rank=1 ")


def test_ray_ranks_report_their_compile_state(monkeypatch, tmp_path):
    fake_ray(monkeypatch, ["192.168.100.10", "192.168.100.11"])
    original = cluster.RayPlacement.connect

    def connect(self):
        ranks = original(self)
        return [dict(rank, jit={"state": "warm", "path": "/x", "seconds": 0.0}) for rank in ranks]

    monkeypatch.setattr(cluster.RayPlacement, "connect", connect)
    monkeypatch.setattr(sys.modules["ray"], "init", lambda **kw: None, raising=False)
    model = make_checkpoint(tmp_path / "ckpt")
    argv = [a if a != "mp" else "ray" for a in serve_argv(model)]
    running = Running(argv, BASE_ENV)
    running.wait_ready()
    running.stop()
    lines = [line for line in running.lines if "JIT cache warm" in line]
    assert len(lines) == 2 and lines[1].startswith("(RayWorkerWrapper pid=") and "ip=192.168.100.11) " in lines[1]


# ------------------------------------------------------------------------------ /metrics


def _metrics(engine):
    conn = http.client.HTTPConnection("127.0.0.1", engine.port, timeout=10)
    conn.request("GET", "/metrics")
    response = conn.getresponse()
    text = response.read().decode()
    conn.close()
    assert response.status == 200 and response.getheader("Content-Type").startswith("text/plain; version=0.0.4")
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return text, samples


LABELS = 'model_name="lab-standin",engine="0"'


def test_metrics_carry_vllm_names_and_follow_the_generations(engine, timing):
    """/metrics answers without the key (as vLLM's does; the API proxy asks for it), under vLLM's v1 names."""
    timing(ttft_s=0.05, ttft_per_token_s=0, token_rate=200)
    wait_idle(engine)
    _, before = _metrics(engine)
    engine.request("POST", "/v1/completions", {"prompt": "one two three", "max_tokens": 5}, headers=AUTH)
    text, after = _metrics(engine)
    assert after[f"vllm:generation_tokens_total{{{LABELS}}}"] - before[f"vllm:generation_tokens_total{{{LABELS}}}"] == 5
    assert after[f"vllm:prompt_tokens_total{{{LABELS}}}"] - before[f"vllm:prompt_tokens_total{{{LABELS}}}"] == 3
    assert after[f"vllm:num_requests_running{{{LABELS}}}"] == 0 and after[f"vllm:num_requests_waiting{{{LABELS}}}"] == 0
    assert after[f"vllm:kv_cache_usage_perc{{{LABELS}}}"] == 0
    ttft = "vllm:time_to_first_token_seconds"
    assert after[f"{ttft}_count{{{LABELS}}}"] - before.get(f"{ttft}_count{{{LABELS}}}", 0) == 1
    # The 50 ms TTFT (a floor: the stand-in sleeps it, and a loaded machine only adds to it) lands
    # above the 0.04 s bucket, within the 1 s one, and the sum grows by what was measured.
    gained = {le: after[f'{ttft}_bucket{{{LABELS},le="{le}"}}'] - before.get(f'{ttft}_bucket{{{LABELS},le="{le}"}}', 0)
              for le in ("0.04", "1.0")}
    assert gained == {"0.04": 0, "1.0": 1}
    assert 0.05 <= after[f"{ttft}_sum{{{LABELS}}}"] - before.get(f"{ttft}_sum{{{LABELS}}}", 0) < 1.0
    itl = "vllm:inter_token_latency_seconds"
    assert after[f"{itl}_count{{{LABELS}}}"] - before.get(f"{itl}_count{{{LABELS}}}", 0) == 4
    assert after[f'vllm:request_success_total{{{LABELS},finished_reason="length"}}'] >= 1
    assert "# TYPE vllm:time_to_first_token_seconds histogram" in text


def test_metrics_count_a_running_request(engine, timing):
    timing(ttft_s=0, ttft_per_token_s=0, token_rate=20)
    wait_idle(engine)
    worker = threading.Thread(target=engine.request, args=("POST", "/v1/completions", {"prompt": "x", "max_tokens": 20}),
                              kwargs={"headers": AUTH})
    worker.start()
    deadline = time.monotonic() + 5
    while _metrics(engine)[1][f"vllm:num_requests_running{{{LABELS}}}"] != 1:
        assert time.monotonic() < deadline, "the running request never showed"
        time.sleep(0.02)
    assert _metrics(engine)[1][f"vllm:kv_cache_usage_perc{{{LABELS}}}"] == 0.25  # 1 of --max-num-seqs 4
    worker.join(10)


def test_the_exposition_parses_as_prometheus_text(engine):
    promtool = Path(sys.prefix) / "prometheus" / "usr" / "bin" / "promtool"
    if not promtool.is_file():
        pytest.skip("no promtool: tests/bootstrap.sh unpacks the prometheus package into .venv/prometheus")
    text, _ = _metrics(engine)
    done = subprocess.run([str(promtool), "check", "metrics"], input=text, capture_output=True, text=True, check=False)
    # promtool's lint may only remark on vLLM's own naming (the colon of `vllm:`); anything else fails.
    remarks = (done.stdout + done.stderr).splitlines()
    assert remarks and all(line.endswith("metric names should not contain ':'") for line in remarks), remarks


def test_every_wheel_the_build_writes_says_its_own_version():
    """The build writes one wheel per version from the same sources: the package's __version__
    in each must be that wheel's version, not the source's (the second lab profile's runtime
    would otherwise report the first's)."""
    import re
    import zipfile

    build_dir = str(ENGINE / "_build")
    if build_dir not in sys.path:
        sys.path.insert(0, build_dir)
    import sparklab_build

    assert len(sparklab_build.versions()) > 1
    for version in sparklab_build.versions():
        with zipfile.ZipFile(io.BytesIO(sparklab_build.wheel_bytes(version))) as archive:
            init = archive.read("sparklab_engine/__init__.py").decode()
            record = archive.read(f"sparklab_engine-{version}.dist-info/RECORD").decode()
        assert re.findall(r'^__version__ = "(.*)"$', init, re.M) == [version]
        # Only the releases named as defective carry a defect; the sources carry none.
        assert re.findall(r'^RELEASE_DEFECT = "(.*)"$', init, re.M) == [sparklab_build.RELEASE_DEFECTS.get(version, "")]
        # The RECORD's hash is of the file as packed.
        line = next(entry for entry in record.splitlines() if entry.startswith("sparklab_engine/__init__.py,"))
        assert line.endswith(f",{len(init.encode())}")


# ------------------------------------------------------------------------------ sizing

from sparklab_engine import memory  # noqa: E402


def _header_only_lab_checkpoint(root):
    return header_only_checkpoint(root)


def test_the_lab_checkpoint_sizes_like_vllm(tmp_path):
    root, names = _header_only_lab_checkpoint(tmp_path / "lab")
    config = json.loads((root / "config.json").read_text())
    # 40 layers x 2 (K, V) x 2 KV heads per rank (4 over TP2) x head_dim 64 x 2 B (bf16) = 20,480 B per token.
    layout = memory.kv_layout(config, 2)
    assert layout == {"page_bytes": 16 * 512, "layers": 40, "bytes_per_token": 20480}
    # 1 GiB // (8 KiB page x 40 layers) = 3,276 whole blocks of 16 tokens.
    assert memory.kv_tokens(1 << 30, layout) == 52416
    # Norms whole on each rank, every projection, the embedding and the LM head halved.
    weights = memory.weights_per_rank(root, names, config, 2)
    tensors = {}
    for name in names:
        tensors.update(memory.read_header(root / name))
    whole = sum(size for size, shape in tensors.values() if len(shape) == 1)
    split = sum(size for size, shape in tensors.values() if len(shape) > 1)
    assert weights == whole + split // 2


def test_the_engine_and_sparkctls_fit_estimate_agree_on_the_lab_checkpoint(tmp_path):
    """Two computations, the stand-in's (memory.py) and sparkctl's (module_utils/fit.py), of the same
    checkpoint: what verify compares on the lab, within its 10 % (here within 0.1 %)."""
    from ansible_collections.sparkctl.spark.plugins.module_utils import fit

    root, names = _header_only_lab_checkpoint(tmp_path / "lab")
    config, tensors, _shards = fit.read_local_checkpoint(str(root))
    profile = {"name": "lab", "topology": {"kind": "ray_tp", "tensor_parallel": 2},
               "engine": {"args": {"kv_cache_memory_bytes": 1 << 30, "max_model_len": 40960}},
               "memory": {"kv_pool_bytes": 1 << 30, "node_budget_bytes": 64 << 30}}
    estimate = fit.profile_estimate(profile, config, tensors)
    assert estimate["kv_bytes_per_token"] == memory.kv_layout(config, 2)["bytes_per_token"]
    engine_tokens = memory.kv_tokens(1 << 30, memory.kv_layout(config, 2))
    engine_weights = memory.weights_per_rank(root, names, config, 2)
    assert fit.within(estimate["kv_tokens"], engine_tokens, 0.001)
    assert fit.within(estimate["weights_per_rank_bytes"], engine_weights, 0.001)


@pytest.mark.parametrize("config, tp, dtype, expected", [
    # Fewer KV heads than ranks: each rank keeps one whole head.
    ({"num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 1, "head_dim": 128}, 2, "auto", 2 * 2 * 128 * 2),
    # An fp8 KV cache halves a bf16 model's figure.
    ({"num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 8, "head_dim": 128}, 2, "fp8", 2 * 2 * 4 * 128),
    # MLA: one latent vector per token and layer, the same on every rank.
    ({"num_hidden_layers": 3, "num_attention_heads": 16, "kv_lora_rank": 512, "qk_rope_head_dim": 64}, 2, "auto", 3 * 576 * 2),
    # Linear-attention layers keep no KV per token.
    ({"num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
      "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"]}, 1, "auto", 2 * 2 * 64 * 2),
])
def test_kv_bytes_per_token_follow_the_config(config, tp, dtype, expected):
    assert memory.kv_layout(config, tp, dtype)["bytes_per_token"] == expected


def test_a_shard_without_a_safetensors_header_is_fatal(tmp_path, loopback_only):
    model = make_checkpoint(tmp_path / "m", shards=1, shard_bytes=64 << 10)
    next(model.glob("*.safetensors")).write_bytes(b"\0" * 1024)
    code, text = _fatal_run(serve_argv(model), dict(BASE_ENV, SPARKLAB_ENGINE_LOAD_S="0"))
    assert code == 1 and "is not a safetensors file (header length 0)" in text


# ------------------------------------------------------------------------------ rank mode (ranks.py)

import os  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402

from sparklab_engine.__main__ import main as engine_main  # noqa: E402


@pytest.mark.parametrize("extra, message", [
    (["--nnodes", "0"], "--nnodes must be at least 1"),
    (["--headless"], "they need --nnodes > 1"),
    (["--node-rank", "1", "--headless"], "they need --nnodes > 1"),
    (["--nnodes", "2", "--node-rank", "2", "--headless"], r"--node-rank 2 is outside 0\.\.1"),
    (["--nnodes", "2", "--node-rank", "-1"], r"--node-rank -1 is outside 0\.\.1"),
    (["--nnodes", "2", "--headless"], "--headless on rank 0"),
    (["--nnodes", "2", "--node-rank", "1"], "--node-rank 1 needs --headless"),
    (["--nnodes", "2", "--distributed-executor-backend", "ray"], "needs --distributed-executor-backend mp, not ray"),
    (["--nnodes", "2", "--master-port", "70000"], "not a TCP port"),
])
def test_rank_mode_usage_errors(extra, message):
    with pytest.raises(cli.UsageError, match=message):
        cli.parse_serve(["/m", *extra], {})


def test_rank_mode_flags_are_parsed_not_ignored(capsys):
    s = cli.parse_serve(["/m", "--nnodes", "3", "--node-rank", "2", "--master-addr", "192.168.100.10", "--master-port", "29600",
                         "--headless", "--trust-remote-code"], {"SPARKLAB_ENGINE_RANK_LOST_EXIT_S": "0.5"})
    assert (s.nnodes, s.node_rank, s.master_addr, s.master_port, s.headless) == (3, 2, "192.168.100.10", 29600, True)
    assert s.ignored == ["--trust-remote-code"] and s.rank_lost_exit_s == 0.5
    s = cli.parse_serve(["/m"], {})
    assert (s.nnodes, s.node_rank, s.master_addr, s.master_port, s.headless, s.rank_lost_exit_s) == (1, 0, "127.0.0.1", 29501, False, 5.0)
    # A usage error is exit status 2 with the reason.
    assert engine_main(["serve", "/m", "--nnodes", "2", "--headless"]) == 2
    assert "--headless on rank 0" in capsys.readouterr().err


def free_port():
    """A TCP port free on every interface (rank 0's master port listens on all of them)."""
    with socket.socket() as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def rank_argv(model, rank, http_port, master_port, nnodes=2, tp=2):
    return [str(model), "--served-model-name", "lab-standin", "--host", "127.0.0.1", "--port", str(http_port),
            "--distributed-executor-backend", "mp", "--tensor-parallel-size", str(tp), "--max-model-len", "4096",
            "--kv-cache-memory-bytes", "268435456", "--max-num-seqs", "4", "--nnodes", str(nnodes), "--node-rank", str(rank),
            "--master-addr", "127.0.0.1", "--master-port", str(master_port), *(["--headless"] if rank else [])]


def call(port, method, path, body=None, timeout=10):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=None if body is None else json.dumps(body),
                     headers=dict(AUTH, **{"Content-Type": "application/json"}))
        response = conn.getresponse()
        data = response.read()
    finally:
        conn.close()
    return response.status, (json.loads(data) if data else None)


def wait_until(check, what, timeout=60):
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except OSError:
            pass
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def listening_ports(pid):
    """TCP ports a process listens on, from /proc (Linux)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    ports = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # TCP_LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


class RankProcess:
    """`python -m sparklab_engine serve ...` as a real process, its output in a file."""

    def __init__(self, argv, env, log_path):
        self.log_path = log_path
        with open(log_path, "wb") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "sparklab_engine", "serve", *argv], env=env,
                                         stdout=out, stderr=subprocess.STDOUT)

    def text(self):
        return self.log_path.read_text()

    def wait_for(self, needle, timeout=60):
        def seen():
            if needle in self.text():
                return True
            assert self.proc.poll() is None, f"exited ({self.proc.returncode}) before {needle!r}:\n{self.text()}"
            return False

        wait_until(seen, f"{needle!r} in {self.log_path}", timeout)

    def exit_code(self, timeout=60):
        return self.proc.wait(timeout)


@pytest.fixture
def ranks(tmp_path):
    """Start rank processes; every one still running at the end is killed (by its PID)."""
    started = []
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARKLAB_ENGINE_", "FLASHINFER_", "VLLM_", "PYTHON"))}
    env.update(PYTHONPATH=str(ENGINE), VLLM_API_KEY=KEY, SPARKLAB_ENGINE_LOAD_S="0.2", SPARKLAB_ENGINE_COMPILE_S="0.1",
               SPARKLAB_ENGINE_TTFT_S="0", SPARKLAB_ENGINE_TOKEN_RATE="1000")

    def start(name, argv, **extra):
        process = RankProcess(argv, dict(env, FLASHINFER_WORKSPACE_BASE=str(tmp_path / f"jit-{name}"), **extra),
                              tmp_path / f"{name}-{len(started)}.log")
        started.append(process)
        return process

    yield start
    for process in started:
        if process.proc.poll() is None:
            process.proc.kill()
            process.proc.wait(30)


def test_rank_mode_head_serves_after_the_headless_rank_joined_and_dies_on_the_next_request_once_it_is_lost(tmp_path, ranks):
    model = make_checkpoint(tmp_path / "m")
    head_port, worker_port, master = free_port(), free_port(), free_port()
    head = ranks("head", rank_argv(model, 0, head_port, master), SPARKLAB_ENGINE_RANK_LOST_EXIT_S="0.5")
    head.wait_for(f"Waiting for 1 more rank(s) of 2 to join at 127.0.0.1:{master}")
    # The API is bound (503) while rank 0 waits, with no timeout, for the other rank.
    wait_until(lambda: call(head_port, "GET", "/health")[0] == 503, "the head's API")
    assert master in listening_ports(head.proc.pid)

    worker = ranks("worker", rank_argv(model, 1, worker_port, master))
    worker.wait_for(f"Rank 1 joined the master at 127.0.0.1:{master}")
    wait_until(lambda: call(head_port, "GET", "/health")[0] == 200, "the head ready")
    text = head.text()
    assert "All 2 ranks joined: rank 1 from 127.0.0.1" in text
    assert text.index("All 2 ranks joined") < text.index("JIT cache cold") < text.index("Application startup complete.")
    # The head logs its own rank's startup lines; rank 1 logs its own on its node.
    for line in ("Using 'SPARKLAB_STANDIN' NvFp4 MoE backend", "Model loading took 0.00 GiB", "GPU KV cache size: 29,952 tokens",
                 "Maximum concurrency for 4,096 tokens per request: 7.31x"):
        assert text.count(line) == 1, line
    assert "VllmWorker" not in text and "Ignoring flags" not in text
    worker_text = worker.text()
    assert "(VllmWorker rank=1 pid=" in worker_text and "JIT cache cold: compiled kernel in" in worker_text
    assert (tmp_path / "jit-worker" / jit.KERNEL_REL).is_file()
    # A headless rank serves no API: it listens on no port at all.
    assert listening_ports(worker.proc.pid) == set()
    with pytest.raises(ConnectionRefusedError):
        call(worker_port, "GET", "/health")

    status, body = call(head_port, "POST", "/v1/completions", {"prompt": "The capital of Japan is", "max_tokens": 8})
    assert status == 200 and body["choices"][0]["text"] == " Tokyo."

    worker.proc.kill()
    worker.exit_code()
    # The head notices (its control route shows it) and nothing else changes while idle, as vLLM.
    wait_until(lambda: call(head_port, "GET", "/_standin/stats")[1]["ranks"]["lost"], "the head to notice the lost rank")
    assert call(head_port, "GET", "/health")[0] == 200
    assert "EngineCore" not in head.text() and head.proc.poll() is None
    status, body = call(head_port, "POST", "/v1/completions", {"prompt": "The capital of Japan is", "max_tokens": 8})
    assert status == 500 and "EngineCore encountered an issue" in body["error"]["message"]
    assert head.exit_code() == 1
    text = head.text()
    assert "Lost tensor-parallel rank(s) of the multi-node launch: node rank 1 (127.0.0.1)" in text
    assert "ERROR" in text and "EngineCore encountered an issue. See stack trace (above) for the root cause." in text


def test_rank_mode_headless_rank_outlives_its_head_and_a_new_head_waits_for_it_forever(tmp_path, ranks):
    model = make_checkpoint(tmp_path / "m")
    head_port, worker_port, master = free_port(), free_port(), free_port()
    # The worker first: it retries until the master listens.
    worker = ranks("worker", rank_argv(model, 1, worker_port, master))
    worker.wait_for(f"Waiting for the master at 127.0.0.1:{master} (rank 1)")
    head = ranks("head", rank_argv(model, 0, head_port, master))
    wait_until(lambda: call(head_port, "GET", "/health")[0] == 200, "the head ready")

    head.proc.kill()
    head.exit_code()
    again = ranks("head", rank_argv(model, 0, head_port, master))
    again.wait_for(f"Waiting for 1 more rank(s) of 2 to join at 127.0.0.1:{master}")
    # The old rank stays up and never rejoins: the new head keeps waiting.
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        assert worker.proc.poll() is None
        wait_until(lambda: call(head_port, "GET", "/health")[0] == 503, "the new head's API")
        time.sleep(0.1)
    assert "All 2 ranks joined" not in again.text() and worker.text().count("joined the master") == 1

    # SIGTERM is a clean stop, for the waiting head as for the headless rank.
    again.proc.send_signal(signal.SIGTERM)
    assert again.exit_code() == 0 and "Shutting down" in again.text()
    worker.proc.send_signal(signal.SIGTERM)
    assert worker.exit_code() == 0 and "Shutting down" in worker.text()


def test_rank_mode_master_refuses_what_is_not_an_awaited_rank_and_a_dead_engine_fails_streams_too(tmp_path, loopback_only):
    model = make_checkpoint(tmp_path / "m")
    master = free_port()
    running = Running(rank_argv(model, 0, 0, master, nnodes=3, tp=3), dict(BASE_ENV, SPARKLAB_ENGINE_LOAD_S="0",
                                                                            SPARKLAB_ENGINE_RANK_LOST_EXIT_S="60"))
    joined = []
    try:
        wait_until(lambda: any("Waiting for 2 more rank(s) of 3" in line for line in running.lines), "the master")

        def say(data):
            conn = socket.create_connection(("127.0.0.1", master), timeout=60)
            conn.sendall(data)
            return conn

        for data in (b"hello\n", b"sparklab-rank 3\n", b"sparklab-rank 0\n"):
            with say(data) as conn:
                assert conn.recv(1) == b""  # closed by the master
        joined.append(say(b"sparklab-rank 1\n"))
        wait_until(lambda: running.request("GET", "/_standin/stats")[1]["ranks"]["joined"] == {"1": "127.0.0.1"}, "rank 1")
        with say(b"sparklab-rank 1\n") as conn:
            assert conn.recv(1) == b""  # rank 1 is in already
        assert running.request("GET", "/health")[0] == 503
        joined.append(say(b"sparklab-rank 2\n"))
        running.wait_ready(timeout=60)
        assert any("All 3 ranks joined: rank 1 from 127.0.0.1, rank 2 from 127.0.0.1" in line for line in running.lines)
        assert sum("Closed a connection from 127.0.0.1 to the master port" in line for line in running.lines) == 4

        joined[1].close()
        wait_until(lambda: running.request("GET", "/_standin/stats")[1]["ranks"]["lost"], "the lost rank")
        assert running.request("GET", "/health")[0] == 200
        status, body = running.request("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                                                        "stream": True}, headers=AUTH)
        assert status == 500 and body["error"]["message"].startswith("EngineCore encountered an issue")
        assert running.request("POST", "/v1/completions", {"prompt": "x"}, headers=AUTH)[0] == 500
        # vLLM's health check fails once the engine is known dead; the exit follows.
        assert running.request("GET", "/health")[0] == 503
        assert sum("EngineCore encountered an issue" in line for line in running.lines) == 1
        assert any("node rank 2 (127.0.0.1): connection closed by the rank" in line for line in running.lines)
    finally:
        running.stop()
        for conn in joined:
            conn.close()


def _headless(argv, env):
    engine = EngineServer(cli.parse_serve(argv, env), Log(io.StringIO()))
    done = {}
    thread = threading.Thread(target=lambda: done.setdefault("code", engine.run()), daemon=True)
    thread.start()
    return engine, thread, done


def test_rank_mode_headless_rank_joins_compiles_and_stays_up_without_its_master(tmp_path, loopback_only):
    master = free_port()
    engine, thread, done = _headless(rank_argv(tmp_path / "m", 1, 0, master),
                                     dict(BASE_ENV, SPARKLAB_ENGINE_HOLD_BYTES="1M",
                                          **{jit.CACHE_VARIABLE: str(tmp_path / "jit"), jit.DELAY_VARIABLE: "0"}))
    try:
        wait_until(lambda: any(f"Waiting for the master at 127.0.0.1:{master} (rank 1)" in line for line in engine.log.lines),
                   "the waiting line")
        assert engine.httpd is None
        with socket.create_server(("127.0.0.1", master)) as listener:
            listener.settimeout(60)
            conn, _ = listener.accept()
            with conn:
                conn.settimeout(60)
                assert conn.recv(64) == b"sparklab-rank 1\n"
                wait_until(lambda: any(f"Rank 1 joined the master at 127.0.0.1:{master}" in line for line in engine.log.lines),
                           "the joined line")
        # The master is gone: the headless rank stays up.
        time.sleep(0.5)
        assert thread.is_alive()
        text = "\n".join(engine.log.lines)
        assert "JIT cache cold" in text and "SPARKLAB_ENGINE_HOLD_BYTES: holding" in text
    finally:
        engine.shutdown(0)
        thread.join(30)
    assert done["code"] == 0


def test_rank_mode_a_release_with_a_boot_defect_fails_the_headless_rank_too(tmp_path, loopback_only, monkeypatch):
    monkeypatch.setattr(sparklab_engine, "RELEASE_DEFECT", "crash-during-boot")
    master = free_port()
    with socket.create_server(("127.0.0.1", master)) as listener:
        engine, thread, done = _headless(rank_argv(tmp_path / "m", 1, 0, master), BASE_ENV)
        listener.settimeout(60)
        conn, _ = listener.accept()
        thread.join(60)
        conn.close()
    assert done["code"] == 1
    text = "\n".join(engine.log.lines)
    assert "EngineCore failed to start: crashing during boot on purpose (release" in text
    assert "joined the master" not in text

"""sparkctl.spark.engine_probe: the verify stage's endpoint probe, against the lab's stand-in
engine (tests/lab/engine) run in-process on 127.0.0.1, and against tiny misbehaving servers.

The stand-in, like vLLM, answers /ping and /version without the key; in the lab the API proxy
(nginx, role api_proxy) closes them. Most tests here probe the stand-in as the proxy serves it
(KeyEverywhere: every route but /health needs the key, answered 401 as the proxy does); the raw
stand-in shows that the auth check catches the open routes. tests/unit/test_api_proxy.py runs
the probe through the real nginx configuration where an nginx binary is at hand."""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time

import module_runner
import pytest
from ports import free_port
from make_checkpoint import standin_checkpoint  # tests/lab/hub, on sys.path through conftest.py
from standin_engine import start_standin
from sparklab_engine.server import Handler  # tests/lab/engine, on sys.path through standin_engine
from json_stub import QuietJSONHandler
from ansible_collections.sparkctl.spark.plugins.module_utils import engine_probe as ep
from ansible_collections.sparkctl.spark.plugins.modules import engine_probe as engine_probe_module

# A sentinel: if it shows up in any output, the key leaked.
KEY = "sk-probe-sentinel-4f1d9a7c0b2e"
MODEL = "lab-standin"
SMOKE = {"endpoint": "completions", "prompt": "The capital of Japan is", "expect": "Tokyo", "max_tokens": 8}
ALL_CHECKS = ["health", "auth", "smoke", "chat", "reasoning", "tools", "generation"]
PARSERS = ("--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--reasoning-parser", "qwen3")
FAST = {"SPARKLAB_ENGINE_LOAD_S": "0", "SPARKLAB_ENGINE_TTFT_S": "0", "SPARKLAB_ENGINE_TTFT_PER_TOKEN_S": "0",
        "SPARKLAB_ENGINE_TOKEN_RATE": "1000", "SPARKLAB_ENGINE_MAX_TOTAL_TOKEN_RATE": "0"}


class KeyEverywhere(Handler):
    """The stand-in as the API proxy serves it: without the key every route but /health answers
    401 (the proxy's policy, in front of the engine's own check)."""

    def _dispatch(self, method):
        path = self.path.split("?", 1)[0]
        if path != "/health" and self.engine.settings.api_key and not self._authorized():
            if method == "POST":
                self._body()
            return self._send(401, {"error": {"message": "Missing or invalid API key", "type": "invalid_request_error",
                                              "param": None, "code": "invalid_api_key"}})
        return super()._dispatch(method)


class StandIn:
    """The stand-in engine serving in a thread on 127.0.0.1 (mp backend, no Ray); closed=True puts
    the API proxy's policy in front (KeyEverywhere)."""

    def __init__(self, model_dir, *flags, api_key=KEY, closed=True):
        env = dict(FAST, VLLM_API_KEY=api_key) if api_key else dict(FAST)
        self.engine, self.thread = start_standin(model_dir, MODEL, flags, env)
        if closed and api_key:
            self.engine.httpd.RequestHandlerClass = KeyEverywhere
        self.api_key = api_key
        self.url = "http://127.0.0.1:%d" % self.engine.httpd.server_address[1]

    def control(self, path, body):
        conn = socket.create_connection(("127.0.0.1", self.engine.httpd.server_address[1]), timeout=5)
        data = json.dumps(body).encode()
        auth = b"Authorization: Bearer %s\r\n" % self.api_key.encode() if self.api_key else b""
        conn.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                     b"%sConnection: close\r\n\r\n%s" % (path.encode(), len(data), auth, data))
        reply = b""
        while chunk := conn.recv(65536):
            reply += chunk
        conn.close()
        assert reply.startswith(b"HTTP/1.1 200"), reply

    def stop(self):
        self.engine.shutdown(0)
        self.thread.join(5)


@pytest.fixture(scope="module")
def servers(tmp_path_factory, loopback_only):
    """Four stand-ins: with parsers and a key, without parsers, without a key (these three as the API
    proxy serves them), and the raw engine with a key, leaving /ping and /version open."""
    model = standin_checkpoint(tmp_path_factory.mktemp("ckpt") / MODEL)
    started = {"parsers": StandIn(model, *PARSERS), "plain": StandIn(model), "open": StandIn(model, *PARSERS, api_key=None),
               "engine": StandIn(model, *PARSERS, closed=False)}
    yield started
    for server in started.values():
        server.stop()


@pytest.fixture
def standin(servers):
    server = servers["parsers"]
    yield server
    server.control("/_standin/faults", {"reset": True})


@pytest.fixture
def key_file(tmp_path):
    path = tmp_path / "api-key.env"  # as the serve stage writes it for vLLM
    path.write_text("VLLM_API_KEY=%s\n" % KEY)
    path.chmod(0o600)
    return path


def probe(url, checks=None, key=KEY, **kwargs):
    kwargs.setdefault("smoke", SMOKE)
    return ep.run_checks(url, key, MODEL, checks=checks, **kwargs)


def by_name(result):
    return {check["name"]: check for check in result["checks"]}


# --- a healthy server --------------------------------------------------------------------------


def test_every_check_passes_on_a_healthy_server_with_parsers(standin):
    result = probe(standin.url, ALL_CHECKS, generation_deadline=5)

    assert [c["name"] for c in result["checks"]] == ["health", "auth", "generation", "smoke", "chat", "reasoning", "tools"]
    assert result["failed_checks"] == [] and result["skipped_checks"] == [] and result["passed"] == 7, result
    checks = by_name(result)
    assert all(c["ok"] and not c["skipped"] and c["message"].startswith(c["name"] + ": ") for c in checks.values())
    assert checks["auth"]["detail"]["served_models"] == [MODEL]
    assert checks["smoke"]["detail"]["answer"] == " Tokyo."
    generation = checks["generation"]["detail"]
    assert generation["tokens"] == 2 and generation["text"] == " Tokyo." and 0 <= generation["ttft_s"] < 1
    assert checks["reasoning"]["detail"]["field"] == "reasoning_content"
    assert checks["reasoning"]["detail"]["reasoning"].startswith("The user asks")
    assert checks["tools"]["detail"]["function"] == "get_weather"
    assert json.loads(checks["tools"]["detail"]["arguments"]) == {"city": "Tokyo"}
    assert result["summary"] == "7 of 7 checks passed"


def test_default_checks_leave_out_reasoning_and_tools(standin):
    result = probe(standin.url, None, generation_deadline=5)
    assert [c["name"] for c in result["checks"]] == ["health", "auth", "generation", "smoke", "chat"]
    assert result["passed"] == 5


def test_a_chat_smoke_with_thinking_off_still_lets_the_reasoning_check_think(standin):
    smoke = dict(SMOKE, endpoint="chat", chat_template_kwargs={"enable_thinking": False})
    result = probe(standin.url, ["smoke", "chat", "reasoning"], smoke=smoke)
    checks = by_name(result)
    assert result["failed_checks"] == [], result
    assert checks["smoke"]["detail"]["answer"] == " Tokyo."
    assert checks["chat"]["detail"]["reasoning"] == ""  # thinking off, as the smoke section says
    assert checks["reasoning"]["detail"]["chat_template_kwargs"] == {"enable_thinking": True}


def test_tool_request_overrides_are_merged_into_the_tools_request(standin):
    # tool_choice "none" from the overrides wins over the probe's "auto": no tool call comes back.
    result = probe(standin.url, ["tools"], tool_request_overrides={"tool_choice": "none"})
    tools = by_name(result)["tools"]
    assert not tools["ok"] and "no tool_calls" in tools["message"] and tools["detail"]["overrides"] == ["tool_choice"]


def test_merge_request_merges_nested_mappings():
    base = {"tool_choice": "auto", "chat_template_kwargs": {"a": 1, "enable_thinking": True}}
    merged = ep.merge_request(base, {"chat_template_kwargs": {"enable_thinking": False}, "top_k": 1})
    assert merged == {"tool_choice": "auto", "chat_template_kwargs": {"a": 1, "enable_thinking": False}, "top_k": 1}
    assert base["chat_template_kwargs"]["enable_thinking"] is True


# --- faults ------------------------------------------------------------------------------------


def test_a_wrong_answer_fails_the_smoke_check_with_what_came_back(standin):
    standin.control("/_standin/faults", {"wrong_answer": True})
    result = probe(standin.url, None, generation_deadline=5)
    smoke = by_name(result)["smoke"]
    assert result["failed_checks"] == ["smoke"] and result["passed"] == 4
    assert smoke["message"] == "smoke: expected 'Tokyo' in the answer to 'The capital of Japan is', got ' Kyoto.'"
    assert smoke["detail"]["answer"] == " Kyoto."


@pytest.mark.timing
def test_a_wedged_engine_fails_generation_within_the_deadline_while_health_passes(standin):
    standin.control("/_standin/faults", {"hang_after_health": True})
    started = time.monotonic()
    result = probe(standin.url, ALL_CHECKS, generation_deadline=1.0, request_timeout=30)
    elapsed = time.monotonic() - started
    checks = by_name(result)

    assert checks["health"]["ok"] and checks["auth"]["ok"]
    generation = checks["generation"]
    assert not generation["ok"] and generation["detail"]["wedged"] is True
    assert generation["message"] == ("generation: /health answers but no token arrived within 1 s: the engine is wedged "
                                     "(restart it: sparkctl serve, or systemctl restart sparkctl-engine)")
    assert 1.0 <= generation["seconds"] < 2.5 and elapsed < 4
    assert result["failed_checks"] == ["generation"]
    assert result["skipped_checks"] == ["smoke", "chat", "reasoning", "tools"]
    assert all(checks[n]["message"] == "%s: skipped: the engine is wedged (see generation)" % n for n in result["skipped_checks"])


def test_a_wedge_with_only_non_streaming_checks_times_out_with_a_message(standin):
    standin.control("/_standin/faults", {"hang_after_health": True})
    result = probe(standin.url, ["smoke"], request_timeout=0.5)
    assert by_name(result)["smoke"]["message"] == "smoke: POST /v1/completions failed: no answer within 0.5 s"


# --- auth and keys -----------------------------------------------------------------------------


def test_a_server_without_a_key_fails_auth(servers):
    result = probe(servers["open"].url, ["health", "auth"])
    auth = by_name(result)["auth"]
    assert result["failed_checks"] == ["auth"]
    assert auth["message"].startswith("auth: the API answers without a key (GET /v1/models answered 200)")
    assert auth["detail"]["GET /v1/models without key"] == 200


def test_routes_the_engine_leaves_open_fail_auth(servers):
    # The raw stand-in, like vLLM, guards /v1 only: /version, /ping and /metrics answer without the key.
    auth = by_name(probe(servers["engine"].url, ["auth"]))["auth"]
    assert not auth["ok"]
    assert auth["message"] == (
        "auth: routes outside /v1 answer without a key (GET /version answered 200, GET /ping answered 200, "
        "GET /metrics answered 200; expected "
        "401, 403 or 404): put the API proxy in front of the engine (spark_api_proxy: true, the default) and run "
        "sparkctl serve")
    detail = auth["detail"]
    assert detail["GET /v1/models without key"] == 401 and detail["POST /v1/completions without key"] == 401
    # Routes the stand-in does not have answer 404: nothing is served there.
    assert detail["GET /metrics without key"] == 200
    assert detail["POST /tokenize without key"] == 404
    assert detail["POST /invocations without key"] == 404
    assert detail["served_models"] == [MODEL]


def test_routes_closed_as_the_proxy_closes_them_pass_auth(servers):
    auth = by_name(probe(servers["parsers"].url, ["health", "auth"]))["auth"]
    assert auth["ok"], auth["message"]
    assert all(auth["detail"]["%s without key" % route] == 401 for route in ep.OPEN_ROUTE_PROBES)
    # Health stays open behind the proxy.
    assert by_name(probe(servers["parsers"].url, ["health"], key=None))["health"]["ok"]


def test_auth_routes_can_be_narrowed_to_v1(servers):
    # An engine run without the proxy by choice: the /v1 check alone passes.
    assert by_name(probe(servers["engine"].url, ["auth"], auth_routes=[]))["auth"]["ok"]
    with pytest.raises(ValueError, match="auth_routes"):
        probe(servers["engine"].url, ["auth"], auth_routes=["DELETE /x"])


def test_a_wrong_key_or_model_fails_auth(servers):
    auth = by_name(probe(servers["plain"].url, ["auth"], key="not-the-key"))["auth"]
    assert not auth["ok"] and "the API refuses the key from the key file (GET /v1/models answered 401)" in auth["message"]
    auth = by_name(ep.run_checks(servers["plain"].url, KEY, "other-model", checks=["auth"]))["auth"]
    assert not auth["ok"] and auth["message"] == "auth: the API serves 'lab-standin', not 'other-model'"


@pytest.mark.parametrize("text", ["VLLM_API_KEY=%s\n" % KEY, "export VLLM_API_KEY='%s'\n" % KEY, "api-key: %s\n" % KEY,
                                  "host: 0.0.0.0\napi-key: \"%s\"\n" % KEY, "%s\n" % KEY])
def test_the_key_is_read_from_the_engines_own_file_or_alone(tmp_path, text):
    (tmp_path / "key").write_text(text)
    assert ep.read_api_key(str(tmp_path / "key")) == KEY


def test_the_key_file(tmp_path, key_file):
    assert ep.read_api_key(str(key_file)) == KEY
    (tmp_path / "blank.env").write_text("VLLM_API_KEY=\n")
    with pytest.raises(ep.KeyFileError, match="holds no API key"):
        ep.read_api_key(str(tmp_path / "blank.env"))
    missing = tmp_path / "nope"
    with pytest.raises(ep.KeyFileError) as error:
        ep.read_api_key(str(missing))
    assert error.value.missing
    message = ep.key_file_message(error.value, ["health", "auth"])
    assert str(missing) in message and "auth check" in message and "sparkctl serve" in message
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ep.KeyFileError) as error:
        ep.read_api_key(str(tmp_path / "empty"))
    message = ep.key_file_message(error.value, ["smoke"])
    assert message.startswith("cannot read the API key file %s: the file is empty" % (tmp_path / "empty"))


def test_checks_that_need_the_key_refuse_to_run_without_it(standin):
    with pytest.raises(ValueError, match="need the API key"):
        probe(standin.url, ["health", "smoke"], key=None)
    assert probe(standin.url, ["health"], key=None)["passed"] == 1


# --- missing parsers ---------------------------------------------------------------------------


def test_reasoning_and_tools_fail_without_the_parsers_with_the_servers_error(servers):
    result = probe(servers["plain"].url, ["chat", "reasoning", "tools"])
    checks = by_name(result)
    assert result["failed_checks"] == ["reasoning", "tools"] and checks["chat"]["ok"]
    assert checks["reasoning"]["message"].startswith("reasoning: no reasoning_content or reasoning in the answer")
    assert checks["tools"]["message"] == ('tools: POST /v1/chat/completions answered 400: "auto" tool choice requires '
                                          '--enable-auto-tool-choice and --tool-call-parser to be set')


# --- nothing listening, and misbehaving servers ------------------------------------------------


@pytest.mark.timing
def test_connection_refused_fails_health_and_skips_the_rest(loopback_only):
    url = "http://127.0.0.1:%d" % free_port()
    started = time.monotonic()
    result = probe(url, None)
    checks = by_name(result)
    assert time.monotonic() - started < 2
    assert result["failed_checks"] == ["health"] and result["passed"] == 0
    assert checks["health"]["message"] == "health: GET /health failed: connection refused at %s (is the engine running?)" % url
    assert result["skipped_checks"] == ["auth", "generation", "smoke", "chat"]
    assert checks["auth"]["message"] == "auth: skipped: nothing answers at %s (see health)" % url

    # Without health, each check says it for itself.
    generation = by_name(probe(url, ["generation"]))["generation"]
    assert generation["message"] == (
        "generation: POST /v1/completions (stream) failed: connection refused at %s (is the engine running?)" % url)


class Misbehaving(QuietJSONHandler):
    """/health 200; POST streams per the server's mode; 'echo' puts the Authorization header in a 400."""

    def do_GET(self):  # noqa: N802
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        mode = self.server.mode
        if mode in ("empty_chat", "blank_chat"):
            # Tokens that decode to empty text (or only blanks, as a tiny random model's greedy
            # answer was): usage counts them, the message shows nothing readable.
            content = "" if mode == "empty_chat" else " " * 16
            self.send_json(200, {"choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                               "finish_reason": "length"}],
                                  "usage": {"prompt_tokens": 12, "completion_tokens": 16, "total_tokens": 28}})
            return
        if mode == "echo":
            self.send_json(400, {"error": {"message": "bad header %s" % self.headers.get("Authorization")}})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.flush()
        try:
            if mode in ("no_done", "cut"):
                # no_done: three tokens, the last with its finish_reason, a usage chunk, then the end of
                # the body without data: [DONE] (accepted, as the OpenAI client accepts it); cut: the
                # body ends after two tokens with no finish_reason at all.
                for i, text in enumerate([" Tok", "yo", "."][: 2 if mode == "cut" else 3]):
                    finish = "length" if mode == "no_done" and i == 2 else None
                    self.wfile.write(b"data: %s\n\n" % json.dumps({"choices": [{"index": 0, "text": text,
                                                                                    "finish_reason": finish}]}).encode())
                if mode == "no_done":
                    self.wfile.write(b'data: {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 4}}\n\n')
                self.wfile.flush()
                return
            if mode == "one_token":
                self.wfile.write(b'data: {"choices": [{"text": " Tokyo"}]}\n\n')
                self.wfile.flush()
            # Keep-alive comments and nothing else: each read returns, no token ever comes.
            for _ in range(50):
                if self.server.stopping.wait(0.1):
                    return
                self.wfile.write(b": keep-alive\n\n")
                self.wfile.flush()
        except OSError:
            pass


@pytest.fixture
def misbehaving(loopback_only):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Misbehaving)
    server.daemon_threads = True
    server.stopping = threading.Event()
    server.mode = "comments"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, "http://127.0.0.1:%d" % server.server_address[1]
    server.stopping.set()
    server.shutdown()
    server.server_close()


def test_keep_alive_comments_do_not_hide_a_wedge(misbehaving):
    server, url = misbehaving
    generation = by_name(probe(url, ["generation"], generation_deadline=1.0))["generation"]
    assert not generation["ok"] and generation["detail"]["wedged"] and 1.0 <= generation["seconds"] < 2
    assert "no token arrived within 1 s" in generation["message"]


def test_a_stream_that_stalls_after_its_first_token_is_a_wedge(misbehaving):
    server, url = misbehaving
    server.mode = "one_token"
    generation = by_name(probe(url, ["generation"], generation_deadline=0.7))["generation"]
    assert not generation["ok"] and generation["detail"]["tokens"] == 1 and generation["detail"]["ttft_s"] < 0.5
    assert "then the stream stalled for 0.7 s: the engine is wedged" in generation["message"]


def test_a_stream_that_ends_after_its_finish_reason_without_done_passes_generation(misbehaving):
    server, url = misbehaving
    server.mode = "no_done"
    generation = by_name(probe(url, ["generation"], generation_deadline=5))["generation"]
    assert generation["ok"], generation["message"]
    # usage counts 4 tokens where 3 chunks came (a chunk may carry several tokens).
    assert generation["detail"]["tokens"] == 4 and generation["detail"]["text"] == " Tokyo."
    assert ", 4 tokens in " in generation["message"]


def test_a_stream_cut_off_before_its_finish_reason_fails_generation(misbehaving):
    server, url = misbehaving
    server.mode = "cut"
    generation = by_name(probe(url, ["generation"], generation_deadline=5))["generation"]
    assert not generation["ok"] and not generation["detail"]["wedged"]
    assert "ended after 2 token chunk(s) without a finish_reason or data: [DONE]" in generation["message"]


@pytest.mark.parametrize("mode, seen", [("empty_chat", "empty text (special tokens only"),
                                        ("blank_chat", "blank text (whitespace tokens only")])
def test_an_answer_whose_tokens_decode_to_empty_or_blank_text_says_which(misbehaving, mode, seen):
    server, url = misbehaving
    server.mode = mode
    chat = by_name(probe(url, ["chat"]))["chat"]
    assert not chat["ok"] and chat["detail"]["completion_tokens"] == 16
    assert f"usage counts 16 completion tokens that decode to {seen}" in chat["message"]


def test_the_key_is_redacted_even_when_a_server_echoes_it(misbehaving):
    server, url = misbehaving
    server.mode = "echo"
    result = probe(url, ["smoke"])
    assert KEY not in json.dumps(result)
    assert by_name(result)["smoke"]["message"] == "smoke: POST /v1/completions answered 400: bad header Bearer ********"


# --- small pieces ------------------------------------------------------------------------------


@pytest.mark.parametrize("body, text", [
    ({"error": {"message": "m1", "type": "BadRequestError"}}, "m1"),
    ({"error": "Unauthorized"}, "Unauthorized"),
    ({"object": "error", "message": "m2"}, "m2"),
    ({"detail": "Not Found"}, "Not Found"),
    ({"detail": [{"loc": ["body"], "msg": "x"}]}, '[{"loc": ["body"], "msg": "x"}]'),
])
def test_server_error_text_shapes(body, text):
    assert ep.Answer(400, json.dumps(body).encode()).server_error() == text
    assert ep.Answer(500, b"Internal Server Error").describe() == "answered 500: Internal Server Error"


@pytest.mark.parametrize("url", ["127.0.0.1:8000", "ftp://x", "http://", "http://h:8000/?a=1"])
def test_bad_urls_are_refused(url):
    with pytest.raises(ValueError):
        ep.parse_base_url(url)


def test_base_url_with_a_path_prefix():
    assert ep.parse_base_url("http://127.0.0.1:8000/") == ("http", "127.0.0.1", 8000, "")
    assert ep.parse_base_url("https://h/engine/") == ("https", "h", 443, "/engine")


def test_unknown_checks_and_bad_smoke_are_refused():
    with pytest.raises(ValueError, match="unknown check"):
        ep.ordered_checks(["health", "vibes"])
    with pytest.raises(ValueError, match="smoke.endpoint"):
        ep.validate_smoke(dict(SMOKE, endpoint="embeddings"))
    with pytest.raises(ValueError, match="smoke.expect"):
        ep.validate_smoke({"prompt": "x"})
    assert ep.ordered_checks(["generation", "health", "health"]) == ["health", "generation"]


def test_no_smoke_section_skips_the_smoke_check(standin):
    result = probe(standin.url, ["smoke"], smoke=None)
    assert result["skipped_checks"] == ["smoke"] and result["failed_checks"] == [] and result["passed"] == 0


# --- the module --------------------------------------------------------------------------------


def module_args(url, key_file, **extra):
    return dict({"url": url, "api_key_file": str(key_file), "model": MODEL, "smoke": SMOKE}, **extra)


def test_module_probes_and_never_returns_the_key(standin, key_file, capsys):
    args = module_args(standin.url, key_file, checks=ALL_CHECKS, generation_deadline=5, _ansible_check_mode=True)
    rc, raw = module_runner.run_module(engine_probe_module.main, args, capsys, raw=True)
    assert KEY not in raw
    result = json.loads(raw)
    assert rc == 0 and result["changed"] is False and "failed" not in result and result["failed_checks"] == []
    assert result["passed"] == 7 and [c["name"] for c in result["checks"]][:3] == ["health", "auth", "generation"]


def test_module_reports_failed_checks_without_failing(standin, key_file, capsys):
    standin.control("/_standin/faults", {"wrong_answer": True})
    rc, raw = module_runner.run_module(engine_probe_module.main, module_args(standin.url, key_file), capsys, raw=True)
    result = json.loads(raw)
    assert rc == 0 and KEY not in raw and "failed" not in result and result["failed_checks"] == ["smoke"]
    assert result["passed"] == 4 and [c["name"] for c in result["checks"] if not c["ok"]] == ["smoke"]
    assert "got ' Kyoto.'" in raw


def test_module_fails_on_a_missing_key_file(standin, tmp_path, capsys):
    missing = tmp_path / "secrets" / "api_key"
    rc, result = module_runner.run_module(engine_probe_module.main, module_args(standin.url, missing), capsys)
    assert rc == 1 and result["failed"] is True
    assert str(missing) in result["msg"] and "auth check" in result["msg"] and "sparkctl serve" in result["msg"]

    # health alone needs no key.
    rc, result = module_runner.run_module(engine_probe_module.main, module_args(standin.url, missing, checks=["health"]), capsys)
    assert rc == 0 and result["passed"] == 1


def test_module_fails_on_bad_params(key_file, capsys, loopback_only):
    rc, result = module_runner.run_module(engine_probe_module.main, module_args("localhost:8000", key_file), capsys)
    assert rc == 1 and "base URL" in result["msg"]
    rc, result = module_runner.run_module(engine_probe_module.main, module_args("http://127.0.0.1:1", key_file,
                                                                                 checks=["vibes"]), capsys)
    assert rc == 1 and "vibes" in result["msg"]
    rc, result = module_runner.run_module(engine_probe_module.main, module_args("http://127.0.0.1:1", key_file,
                                                                                 generation_deadline=0), capsys)
    assert rc == 1 and "generation_deadline must be > 0" in result["msg"]
    rc, result = module_runner.run_module(engine_probe_module.main, module_args("http://127.0.0.1:1", key_file,
                                                                                 auth_routes=["GET version"]), capsys)
    assert rc == 1 and "auth_routes: expected 'GET /path' or 'POST /path', got 'GET version'" in result["msg"]

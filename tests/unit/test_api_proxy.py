"""The API proxy (nginx in front of the engine, role api_proxy): its rendered configuration and
unit for every shipped profile and the lab's are compared with reviewed golden files
(tests/unit/golden/api_proxy/, regenerate with SPARKCTL_UPDATE_GOLDEN=1 and review the diff);
the key include matches the whole header, case-sensitively, and refuses keys a Bearer token
cannot carry without quoting them.

Where an nginx binary is at hand ($SPARKCTL_NGINX, `nginx` on PATH, /usr/sbin/nginx; e.g.
`apt-get download nginx && dpkg-deb -x nginx_*.deb DIR` gives DIR/usr/sbin/nginx without
starting a service), the rendered configuration runs for real on loopback in front of the lab's
stand-in engine (which, like vLLM, leaves /ping and /version open): every route but /health
answers 401 without the key, streams arrive token by token, the verify probe passes through it,
the validate commands accept good files and refuse broken ones, a reload takes a new key, and the
per-client limits hold: half-sent requests neither starve an authenticated stream nor stay open past
the header timeout, a 401 closes its connection, concurrent streams pass the defaults, and a
client over its connection limit or request rate gets 429, whether it sends the key, none or a
wrong one."""

from __future__ import annotations

import getpass
import http.client
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from ports import free_port
from make_checkpoint import standin_checkpoint  # tests/lab/hub, on sys.path through conftest.py
from standin_engine import start_standin
from ansible.errors import AnsibleFilterError
from ansible_collections.sparkctl.spark.plugins.filter import api_proxy as api_proxy_filter
from ansible_collections.sparkctl.spark.plugins.plugin_utils import api_proxy as A
from ansible_collections.sparkctl.spark.plugins.module_utils import engine_probe as ep
from ansible_collections.sparkctl.spark.plugins.plugin_utils import profile as P
from golden_files import assert_golden_tree
from test_profile import FIXES, SHIPPED
from test_profile import cluster as profile_cluster

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
from labrun import api_call, stream_arrivals  # noqa: E402  (tests/integration: what the lab's proxy test asks with too)

REPO = Path(__file__).resolve().parents[2]
LAB_PROFILES = REPO / "tests" / "lab" / "profiles"
GOLDEN = Path(__file__).parent / "golden" / "api_proxy"

# A sentinel: if it shows up in any output, the key leaked. '.', '+', '/', '~', '-', '_' and '='
# are all Bearer-token characters; '.' and '+' are special in a regular expression.
KEY = "sk-proxy.sentinel+4f1d/9a7c~0b2e_c3d5=="
MODEL = "lab-standin"
# Every shipped profile, a fixed one with its fix (as test_profile renders them), and the lab's stand-in:
# the overrides each renders with.
CASES = {name: FIXES.get(name, {}) for name in SHIPPED + ["lab-standin"]}
# The location auth_request asks for the key check (the golden configurations show it).
KEY_CHECK_LOCATION = "sparkctl-api-key-check"
ROUTES = ["/v1/models", "/v1/completions", "/v1/chat/completions", "/version", "/ping", "/metrics", "/tokenize",
          "/invocations", "/_standin/stats", "/anything", "/" + KEY_CHECK_LOCATION]


def load(name, overrides=None):
    return P.load_profile(name, [str(LAB_PROFILES)], overrides or {})


# ----------------------------------------------------------------------------- golden files


def _rendered_files(name):
    out = api_proxy_filter.api_proxy_render(load(name, CASES[name]), {})
    return {"api-proxy.conf": out["config"], out["unit_name"]: out["unit"]}


@pytest.mark.parametrize("case", list(CASES))
def test_rendering_matches_golden(case):
    files = _rendered_files(case)
    assert_golden_tree(GOLDEN / case, files)


def test_the_golden_files_are_of_the_rendered_profiles_only():
    assert sorted(path.name for path in GOLDEN.iterdir()) == sorted(CASES)


@pytest.mark.parametrize("case", list(CASES))
def test_proxy_and_engine_ports_agree_with_the_engines_argv(case):
    profile = load(case, CASES[case])
    out = api_proxy_filter.api_proxy_render(profile, {})
    public, upstream = out["listen"], out["upstream"]
    assert public == {"bind": profile["api"].get("bind", "0.0.0.0"), "port": profile["api"]["port"]}
    assert upstream == {"bind": "127.0.0.1", "port": profile["api"]["port"] + 1}
    assert f"listen {public['bind']}:{public['port']};" in out["config"]
    assert f"server 127.0.0.1:{upstream['port']};" in out["config"]
    # The engine's unit listens exactly where the proxy sends requests (on as many nodes as the profile serves on).
    rendered = P.render(profile, profile_cluster(profile))
    assert rendered["api"]["engine"] == upstream and rendered["api"]["proxy"] is True
    api_unit = "sparkctl-sglang-router.service" if profile["engine"]["kind"] == "sglang" else "sparkctl-engine.service"
    assert f"--host 127.0.0.1 --port {upstream['port']}" in rendered["units"]["spark1"][api_unit]


def test_the_key_never_reaches_the_main_configuration_or_the_unit():
    out = api_proxy_filter.api_proxy_render(load("lab-standin"), {})
    # The main configuration only includes the key's file; the match lives there alone.
    assert "include /etc/sparkctl/nginx-api-key.conf;" in out["config"]
    assert "map " not in out["config"] and "~^Bearer" not in out["config"] + out["unit"]
    assert "$sparkctl_api_authorized != 1" in out["config"]


def test_streaming_body_size_and_timeouts():
    config = api_proxy_filter.api_proxy_render(load("lab-standin"), {})["config"]
    for line in ("proxy_buffering off;", "proxy_http_version 1.1;", 'proxy_set_header Connection "";',
                 "client_max_body_size 64m;", "proxy_read_timeout 3600s;", "location = /health {",
                 "proxy_pass http://sparkctl_engine/health;"):
        assert line in config, line
    # The profile's boot timeout wins when it is longer than an hour; an option wins over both.
    long_boot = load("solar-open2-nvfp4-vllm-venv", {"boot": {"timeout_seconds": 7200}})
    assert A.read_timeout(long_boot) == 7200
    assert A.read_timeout(load("lab-standin")) == 3600
    assert A.read_timeout(load("lab-standin"), {"read_timeout_s": 90}) == 90
    assert A.read_timeout(load("lab-standin"), {"read_timeout_s": 0}) == 3600


def test_the_unit_checks_before_start_and_reload_and_reloads_gracefully():
    unit = api_proxy_filter.api_proxy_render(load("lab-standin"), {})["unit"]
    test = "/usr/sbin/nginx -t -q -e stderr -c /etc/sparkctl/api-proxy.conf"
    assert f"ExecStartPre={test}\n" in unit and f"ExecReload={test}\nExecReload=/bin/kill -s HUP $MAINPID\n" in unit
    assert "ExecStart=/usr/sbin/nginx -e stderr -c /etc/sparkctl/api-proxy.conf\n" in unit
    assert "StateDirectory=sparkctl-api-proxy\n" in unit and "WantedBy=multi-user.target" in unit


def test_ipv6_binds_are_bracketed():
    config = A.config(load("lab-standin", {"api": {"bind": "::"}}))
    assert "listen [::]:8000 ipv6only=off;" in config
    assert "listen [fd00::1]:8000;" in A.config(load("lab-standin", {"api": {"bind": "fd00::1"}}))


@pytest.mark.parametrize("options, expected", [
    ({"surprise": 1}, "unknown option 'surprise'"),
    ({"config_file": "relative.conf"}, "config_file must be an absolute path"),
    ({"key_include": "/etc/x;evil"}, "key_include must be an absolute path"),
    ({"worker_user": "Bad User"}, "worker_user must be a user name"),
    ({"worker_processes": "many"}, "worker_processes must be a positive integer"),
    ({"client_max_body_size_mb": 0}, "client_max_body_size_mb must be a positive integer"),
    ({"state_dir": "/srv/proxy"}, "state_dir must be /var/lib/<name>"),
])
def test_bad_options_are_refused_with_the_option(options, expected):
    with pytest.raises(AnsibleFilterError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        api_proxy_filter.api_proxy_render(load("lab-standin"), {}, options)


def test_render_refuses_a_profile_with_problems():
    with pytest.raises(AnsibleFilterError, match="quantized"):
        api_proxy_filter.api_proxy_render(load("solar-open-100b-vllm-fork"), {})


# ----------------------------------------------------------------------------- the key include


def test_the_key_include_matches_the_whole_header_case_sensitively():
    text = A.key_include(KEY)
    assert text.splitlines()[1:] == [
        "map $http_authorization $sparkctl_api_authorized {",
        "    default 0;",
        '    "~^Bearer sk-proxy\\.sentinel\\+4f1d/9a7c~0b2e_c3d5==$" 1;',
        "}",
    ]


@pytest.mark.parametrize("text", ["VLLM_API_KEY=%s\n" % KEY, "api-key: %s\n" % KEY, "api-key: '%s'\n" % KEY, "%s\n" % KEY])
def test_the_key_include_reads_the_engines_key_file(text):
    assert api_proxy_filter.api_proxy_key_include(text) == A.key_include(KEY)


@pytest.mark.parametrize("key", ['sk-"quoted"-0123456789abcdef0123456789', "sk with spaces 0123456789abcdef0123",
                                 "sk-dollar$var-0123456789abcdef012345", "sk-brace}-0123456789abcdef0123456789",
                                 "sk-=in-the-middle-0123456789abcdef012"])
def test_keys_a_bearer_token_cannot_carry_are_refused_without_quoting_them(key):
    with pytest.raises(AnsibleFilterError) as error:
        api_proxy_filter.api_proxy_key_include("VLLM_API_KEY=%s\n" % key if " " not in key else key)
    message = str(error.value)
    assert key not in message
    assert "spark_api_key" in message or "holds no key" in message
    assert error.value.__cause__ is None


def test_an_empty_key_file_is_refused_naming_the_stage():
    with pytest.raises(AnsibleFilterError, match="the serve stage writes it"):
        api_proxy_filter.api_proxy_key_include("VLLM_API_KEY=\n")


# ----------------------------------------------------------------------------- the profile's engine port


def test_engine_port_follows_the_api_port_and_can_be_set():
    assert P.engine_port(load("lab-standin")) == 8001
    assert P.engine_port(load("qwen38-flash-next-nvfp4-sglang")) == 8889
    assert P.engine_port(load("lab-standin", {"api": {"engine_port": 9100}})) == 9100
    profile = load("lab-standin")
    assert P.api_endpoints(profile, {"api_proxy": False}) == {
        "proxy": False, "public": {"bind": "0.0.0.0", "port": 8000}, "engine": {"bind": "0.0.0.0", "port": 8000}}


# ----------------------------------------------------------------------------- with a real nginx


def nginx_binary():
    for candidate in (os.environ.get("SPARKCTL_NGINX"), shutil.which("nginx"), "/usr/sbin/nginx"):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


NGINX = nginx_binary()
needs_nginx = pytest.mark.skipif(NGINX is None, reason="no nginx binary ($SPARKCTL_NGINX, PATH, /usr/sbin/nginx)")


class Engine:
    """The raw stand-in (key on /v1 only, /ping and /version open, like vLLM) in a thread on loopback."""

    def __init__(self, model_dir, api_key=KEY):
        flags = ["--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--reasoning-parser", "qwen3"]
        # 20 tokens/s: a stream of 8 tokens takes ~0.4 s, so chunks arriving one by one are visible.
        env = {"SPARKLAB_ENGINE_LOAD_S": "0", "SPARKLAB_ENGINE_TTFT_S": "0", "SPARKLAB_ENGINE_TTFT_PER_TOKEN_S": "0",
               "SPARKLAB_ENGINE_TOKEN_RATE": "20", "SPARKLAB_ENGINE_MAX_TOTAL_TOKEN_RATE": "0", "VLLM_API_KEY": api_key}
        self.engine, self.thread = start_standin(model_dir, MODEL, flags, env)
        self.port = self.engine.httpd.server_address[1]

    def stop(self):
        self.engine.shutdown(0)
        self.thread.join(5)


class Nginx:
    """nginx in the foreground with the rendered configuration, every path in a private directory."""

    def __init__(self, root, engine_port, key=KEY, options=None):
        self.root = root
        self.port = free_port()
        self.key_include = root / "nginx-api-key.conf"
        self.conf = root / "api-proxy.conf"
        (root / "state").mkdir()
        self.options = {"nginx": NGINX, "config_file": str(self.conf), "key_include": str(self.key_include),
                        "state_dir": str(root / "state"), "worker_user": getpass.getuser(), "worker_processes": 1,
                        **(options or {})}
        profile = load("lab-standin", {"api": {"bind": "127.0.0.1", "port": self.port, "engine_port": engine_port}})
        self.key_include.write_text(A.key_include(key))
        self.conf.write_text(A.config(profile, {}, self.options))
        self.log = open(root / "nginx.log", "w")
        self.proc = subprocess.Popen([NGINX, "-e", "stderr", "-c", str(self.conf)], stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                assert self.proc.poll() is None, (root / "nginx.log").read_text()
                assert time.monotonic() < deadline, "nginx did not listen"
                time.sleep(0.05)
        self.url = "http://127.0.0.1:%d" % self.port

    def workers(self):
        """PIDs of the master's worker processes."""
        pids = set()
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    stat = (entry / "stat").read_text()
                except OSError:
                    continue  # exited while listed
                if int(stat.rsplit(")", 1)[1].split()[1]) == self.proc.pid:
                    pids.add(int(entry.name))
        return pids

    def reload_with_key(self, key):
        """Reload with a new key and return once every worker holding the old one has exited.
        nginx's master starts the new workers and leaves the old ones accepting for 100 ms more
        (then they finish the requests they hold): a request sent in that window may still meet
        the old key, and so may a test that runs next."""
        old = self.workers()
        self.key_include.write_text(A.key_include(key))
        self.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while True:
            workers = self.workers()
            if workers and not workers & old:
                return
            assert self.proc.poll() is None, (self.root / "nginx.log").read_text()
            assert time.monotonic() < deadline, "the old workers did not exit within 10 s of the reload: %s" % sorted(workers & old)
            time.sleep(0.01)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self.log.close()


def request(url, method, path, key=None, body=None, headers=None):
    """(status, headers, body bytes) of one request."""
    host, port = url.split("//", 1)[1].split(":")
    return api_call(host, int(port), method, path, key=key, body=body, headers=headers, timeout=10)


@pytest.fixture(scope="module")
def proxied(tmp_path_factory, loopback_only):
    if NGINX is None:
        pytest.skip("no nginx binary ($SPARKCTL_NGINX, PATH, /usr/sbin/nginx)")
    engine = Engine(standin_checkpoint(tmp_path_factory.mktemp("ckpt") / MODEL))
    proxy = Nginx(tmp_path_factory.mktemp("proxy"), engine.port)
    yield engine, proxy
    proxy.stop()
    engine.stop()


@needs_nginx
def test_without_the_key_every_route_but_health_answers_401(proxied):
    engine, proxy = proxied
    direct = "http://127.0.0.1:%d" % engine.port
    # The engine alone leaves /version and /ping open (as vLLM leaves /version, /tokenize, ...).
    assert request(direct, "GET", "/version")[0] == 200 and request(direct, "GET", "/ping")[0] == 200
    for path in ROUTES:
        for method in ("GET", "POST"):
            status, headers, body = request(proxy.url, method, path, body={"model": MODEL} if method == "POST" else None)
            assert status == 401, (method, path, status, body)
            assert headers["Content-Type"] == "application/json" and headers["WWW-Authenticate"] == 'Bearer realm="sparkctl"'
            error = json.loads(body)["error"]
            assert error["type"] == "invalid_request_error" and error["code"] == "invalid_api_key"
    assert request(proxy.url, "GET", "/health")[0] == 200
    # Only GET/HEAD on health; another path spelling is still the engine's /health only.
    assert request(proxy.url, "POST", "/health")[0] == 403
    assert request(proxy.url, "GET", "/v1/../health")[0] == 200
    assert request(proxy.url, "GET", "/health/../version")[0] == 401
    # The key check's own location answers auth_request's subrequest only: a request line naming
    # it is malformed, and in absolute form its path is an ordinary route that needs the key.
    raw = "GET %s HTTP/1.1\r\nHost: spark\r\n\r\n"
    assert _raw_status(proxy.port, raw % KEY_CHECK_LOCATION) == 400
    assert _raw_status(proxy.port, raw % ("http://127.0.0.1:%d/%s" % (proxy.port, KEY_CHECK_LOCATION))) == 401


def _raw_status(port, request_text):
    """The status of the answer to a request sent byte for byte as given."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request_text.encode())
        status_line = sock.makefile("rb").readline()
    return int(status_line.split()[1])


@needs_nginx
def test_only_the_exact_key_opens_the_routes(proxied):
    engine, proxy = proxied
    assert request(proxy.url, "GET", "/v1/models", key=KEY)[0] == 200
    assert request(proxy.url, "GET", "/version", key=KEY)[0] == 200
    assert request(proxy.url, "GET", "/anything", key=KEY)[0] == 404  # the engine's answer, through the proxy
    for wrong in (KEY.upper(), KEY + "x", KEY[:-1], KEY.replace(".", "X"), KEY.replace("+", "")):
        assert request(proxy.url, "GET", "/version", key=wrong)[0] == 401, wrong
    assert request(proxy.url, "GET", "/version", headers={"Authorization": "Basic " + KEY})[0] == 401


@needs_nginx
def test_a_stream_arrives_token_by_token_through_the_proxy(proxied):
    engine, proxy = proxied
    body = {"model": MODEL, "prompt": "count with me", "max_tokens": 8, "stream": True}
    response, arrivals = stream_arrivals("127.0.0.1", proxy.port, body, KEY, timeout=10)
    assert response.status == 200 and response.getheader("Content-Type").startswith("text/event-stream")
    assert len(arrivals) == 8
    # 20 tokens/s: the first chunk comes ~0.35 s before the last; a buffering proxy would deliver them together.
    assert arrivals[-1] - arrivals[0] > 0.25, arrivals


@needs_nginx
def test_the_verify_probe_passes_through_the_proxy(proxied):
    engine, proxy = proxied
    smoke = {"endpoint": "completions", "prompt": "The capital of Japan is", "expect": "Tokyo", "max_tokens": 8}
    result = ep.run_checks(proxy.url, KEY, MODEL, checks=["health", "auth", "smoke", "chat", "reasoning", "tools", "generation"],
                           smoke=smoke, generation_deadline=5)
    assert result["failed_checks"] == [] and result["passed"] == 7, result
    auth = next(c for c in result["checks"] if c["name"] == "auth")
    assert all(auth["detail"]["%s without key" % route] == 401 for route in ep.OPEN_ROUTE_PROBES)
    # The same probe straight at the engine finds its open routes.
    direct = ep.run_checks("http://127.0.0.1:%d" % engine.port, KEY, MODEL, checks=["auth"])
    assert direct["failed_checks"] == ["auth"] and "GET /version answered 200" in direct["checks"][0]["message"]
    assert KEY not in json.dumps(result) + json.dumps(direct)


@needs_nginx
def test_a_reload_takes_a_new_key(proxied):
    engine, proxy = proxied
    new = "sk-rotated-0123456789abcdef0123456789abcdef"
    try:
        proxy.reload_with_key(new)
        # reload_with_key returns once the workers holding the old key are gone: from the very
        # next request on, only the new key opens the API.
        assert [request(proxy.url, "GET", "/version", key=KEY)[0] for _ in range(5)] == [401] * 5
        assert request(proxy.url, "GET", "/version", key=new)[0] == 200
    finally:
        proxy.reload_with_key(KEY)
    assert request(proxy.url, "GET", "/version", key=new)[0] == 401
    assert request(proxy.url, "GET", "/version", key=KEY)[0] == 200


@needs_nginx
@pytest.mark.parametrize("case", list(CASES))
def test_every_rendered_configuration_passes_nginx_t(case, tmp_path):
    (tmp_path / "state").mkdir()
    options = {"nginx": NGINX, "key_include": str(tmp_path / "key.conf"), "state_dir": str(tmp_path / "state"),
               "worker_user": getpass.getuser()}
    (tmp_path / "key.conf").write_text(A.key_include(KEY))
    (tmp_path / "api.conf").write_text(A.config(load(case, CASES[case]), {}, options))
    check = subprocess.run(shlex.split(A.validate_commands(options)["config"] % (tmp_path / "api.conf")),
                           capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stderr


@needs_nginx
def test_the_validate_commands_accept_good_files_and_refuse_broken_ones(tmp_path):
    commands = A.validate_commands({"nginx": NGINX})
    distribution_pid = Path("/run/nginx.pid")
    existed = distribution_pid.exists()
    good, broken = tmp_path / "good.conf", tmp_path / "broken.conf"
    good.write_text(A.key_include(KEY))
    broken.write_text(A.key_include(KEY).replace("}\n", ""))

    def run(command, path):
        return subprocess.run(shlex.split(command % path), capture_output=True, text=True, timeout=30)

    assert run(commands["key_include"], good).returncode == 0
    refused = run(commands["key_include"], broken)
    assert refused.returncode != 0 and "unexpected end of file" in refused.stderr
    # `nginx -t` creates the pid file it is given: the fragment's check gives it a throwaway one.
    assert distribution_pid.exists() == existed
    broken_config = tmp_path / "api.conf"
    broken_config.write_text("events {}\nhttp {\n    server { listen 127.0.0.1:1 }\n}\n")
    assert run(commands["config"], broken_config).returncode != 0


def test_inventory_validation_refuses_a_key_a_bearer_token_cannot_carry():
    from ansible_collections.sparkctl.spark.plugins.filter.inventory_problems import _api_key_problems
    from inventory_check import ROLE_DEFAULTS

    bad = "sk with a space 0123456789abcdef0123456789"
    (message,) = _api_key_problems({"spark_api_key": bad}, ROLE_DEFAULTS)
    assert message.startswith("'spark_api_key' holds characters a Bearer token cannot carry") and bad not in message
    assert _api_key_problems({"spark_api_key": KEY}, ROLE_DEFAULTS) == []
    assert _api_key_problems({"spark_api_key": ""}, ROLE_DEFAULTS) == []


# ----------------------------------------------------------------------------- limits per client


def _stream(port, key=KEY, tokens=8, timeout=15):
    """(status, data chunks, body) of one streamed completion through the proxy."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    body = json.dumps({"model": MODEL, "prompt": "count with me", "max_tokens": tokens, "stream": True}).encode()
    try:
        conn.request("POST", "/v1/completions", body=body, headers={"Authorization": "Bearer " + key,
                                                                   "Content-Type": "application/json"})
        response = conn.getresponse()
        data = response.read()
        chunks = [line for line in data.splitlines() if line.startswith(b"data:") and b"[DONE]" not in line]
        return response.status, chunks, data
    finally:
        conn.close()


def _slow_connections(port, count):
    """count connections from this client that send half a request header and then nothing."""
    import resource

    needed = count + 256
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (needed, max(hard, needed)))
        except (ValueError, OSError):
            pytest.skip(f"needs {needed} open files; the hard limit is {hard}")
    held = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: spark\r\nContent-Type: application/json\r\n")
        held.append(sock)
    return held


def _closed_by_peer(sock, timeout):
    sock.settimeout(timeout)
    try:
        return sock.recv(1024) == b""
    except socket.timeout:
        return False
    except OSError:
        return True  # reset


@needs_nginx
def test_slow_unauthenticated_connections_do_not_starve_a_stream(proxied):
    # More half-sent requests than one worker of the old configuration had connections for
    # (1024): the proxy must still serve an authenticated stream from the same client.
    engine, proxy = proxied
    held = _slow_connections(proxy.port, 1100)
    try:
        status, chunks, body = _stream(proxy.port, timeout=10)
        assert status == 200 and len(chunks) == 8, body[-500:]
    finally:
        for sock in held:
            sock.close()


@pytest.mark.timing
@needs_nginx
def test_slow_connections_are_closed_after_the_header_timeout(tmp_path_factory, proxied):
    engine, _ = proxied
    proxy = Nginx(tmp_path_factory.mktemp("proxy_header_timeout"), engine.port, options={"client_header_timeout_s": 1})
    try:
        assert "client_header_timeout 1s;" in proxy.conf.read_text()
        held = _slow_connections(proxy.port, 50)
        started = time.monotonic()
        assert all(_closed_by_peer(sock, 5) for sock in held)
        assert time.monotonic() - started < 4
        for sock in held:
            sock.close()
    finally:
        proxy.stop()


@needs_nginx
def test_an_unauthenticated_client_holds_no_connection_after_the_401(proxied):
    engine, proxy = proxied
    status, headers, body = request(proxy.url, "GET", "/v1/models")
    assert status == 401 and headers.get("Connection") == "close"
    assert json.loads(body)["error"]["code"] == "invalid_api_key"
    # An authorized client keeps its connection for the next request.
    status, headers, _ = request(proxy.url, "GET", "/v1/models", key=KEY)
    assert status == 200 and headers.get("Connection", "keep-alive") == "keep-alive"


def _concurrently(count, call):
    results = [None] * count

    def run(i):
        results[i] = call()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results


@needs_nginx
def test_eight_concurrent_streams_from_one_client_pass_the_default_limits(proxied):
    engine, proxy = proxied
    config = proxy.conf.read_text()
    assert "limit_conn sparkctl_conn_per_client 64;" in config
    assert "limit_req zone=sparkctl_req_per_client burst=80 nodelay;" in config
    results = _concurrently(8, lambda: _stream(proxy.port))
    assert [(status, len(chunks)) for status, chunks, _ in results] == [(200, 8)] * 8


@needs_nginx
def test_a_client_over_its_connection_limit_gets_429(tmp_path_factory, proxied):
    engine, _ = proxied
    proxy = Nginx(tmp_path_factory.mktemp("proxy_conn_limit"), engine.port, options={"max_connections_per_client": 4})
    try:
        results = _concurrently(6, lambda: _stream(proxy.port, tokens=16))
        statuses = sorted(status for status, _, _ in results)
        assert statuses == [200] * 4 + [429] * 2, statuses
        refused = next(body for status, _, body in results if status == 429)
        error = json.loads(refused)["error"]
        assert error["code"] == "rate_limit_exceeded" and error["type"] == "rate_limit_error"
    finally:
        proxy.stop()


@needs_nginx
def test_a_client_over_its_request_rate_gets_429_after_the_burst(tmp_path_factory, proxied):
    engine, _ = proxied
    # Its own proxy: a fresh per-client bucket, and the shared one is left alone for the other tests.
    proxy = Nginx(tmp_path_factory.mktemp("proxy_rate"), engine.port)
    try:
        answers = [request(proxy.url, "GET", "/v1/models", key=KEY) for _ in range(200)]
        statuses = [status for status, _, _ in answers]
        assert set(statuses[:60]) == {200}, statuses[:60]  # the burst (80) is served at once
        assert 429 in statuses, statuses
        # A refusal as the loop met it: a request sent after the loop may find a token the
        # bucket has refilled since (one every 50 ms), and be served.
        _, headers, body = next(answer for answer in answers if answer[0] == 429)
        assert headers["Retry-After"] == "1" and json.loads(body)["error"]["type"] == "rate_limit_error"
        time.sleep(1.5)  # the bucket drains at 20 requests a second
        assert request(proxy.url, "GET", "/v1/models", key=KEY)[0] == 200
    finally:
        proxy.stop()


def _request_from(source, port, path, key=None):
    """The status of one GET sent from the loopback address source (another client address to nginx)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10, source_address=(source, 0))
    try:
        conn.request("GET", path, headers={"Authorization": "Bearer " + key} if key else {})
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


@needs_nginx
def test_requests_without_the_right_key_meet_the_same_request_limit(tmp_path_factory, proxied):
    engine, _ = proxied
    # A bucket that refills once a second, with a burst of 5: six requests pass at once, then
    # one more per second the loop takes. However slowly this machine sends the 30 requests
    # (up to ~20 s), most of them arrive with the bucket empty, so the counts below hold.
    proxy = Nginx(tmp_path_factory.mktemp("proxy_keyless_rate"), engine.port,
                  options={"requests_per_second_per_client": 1, "request_burst_per_client": 5})
    try:
        wrong = "sk-wrong-0123456789abcdef0123456789abcdef"
        started = time.monotonic()
        answers = [request(proxy.url, "GET", path, key=key)
                   for path in ("/v1/models", "/version", "/metrics") for key in (None, wrong) for _ in range(5)]
        elapsed = time.monotonic() - started
        statuses = [status for status, _, _ in answers]
        assert statuses[:6] == [401] * 6, statuses
        assert set(statuses) == {401, 429} and statuses.count(401) <= 7 + int(elapsed), (elapsed, statuses)
        _, headers, body = next(answer for answer in answers if answer[0] == 429)
        assert headers["Retry-After"] == "1" and json.loads(body)["error"]["code"] == "rate_limit_exceeded"
        # One bucket per client address, with or without the key: the key buys this address no
        # second bucket, and another address keeps its own.
        assert _request_from("127.0.0.1", proxy.port, "/v1/models", key=KEY) == 429
        assert _request_from("127.0.0.2", proxy.port, "/v1/models", key=KEY) == 200
        assert _request_from("127.0.0.2", proxy.port, "/v1/models") == 401
    finally:
        proxy.stop()


def test_limits_are_options_and_zero_turns_one_off():
    profile = load("lab-standin")
    config = A.config(profile)
    for line in ("worker_connections 4096;", "worker_rlimit_nofile 8256;", "client_header_timeout 10s;",
                 "client_body_timeout 30s;", "limit_conn_zone $binary_remote_addr zone=sparkctl_conn_per_client:10m;",
                 "limit_req_zone $binary_remote_addr zone=sparkctl_req_per_client:10m rate=20r/s;",
                 "limit_conn_status 429;", "limit_req_status 429;", "proxy_read_timeout 3600s;"):
        assert line in config, line
    off = A.config(profile, {}, {"max_connections_per_client": 0, "requests_per_second_per_client": 0})
    assert "limit_conn " not in off and "limit_req " not in off and "limit_req_zone" not in off
    tuned = A.config(profile, {}, {"requests_per_second_per_client": 5, "request_burst_per_client": 10,
                                   "worker_connections": 1000})
    assert "rate=5r/s;" in tuned and "burst=10 nodelay;" in tuned and "worker_rlimit_nofile 2064;" in tuned
    with pytest.raises(A.ApiProxyError, match="client_header_timeout_s must be a positive integer"):
        A.config(profile, {}, {"client_header_timeout_s": 0})

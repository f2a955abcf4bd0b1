"""The API proxy on the two-node lab (role api_proxy), seen from the control node as a user
on the management network sees it: every route but /health answers 401 without the key
(the stand-in engine itself, like vLLM, leaves /ping and /version open), /health answers
200, a streamed completion with the key arrives token by token through the proxy, the
engine's own port (8001) is bound to loopback and closed to the network, the key include is
root-only (a hand-edited proxy configuration that opened a route is the fault
catalogue's, proxy_config_hand_edited), and the proxy turned off and on
again over a serving cluster (the engine moving between the public and its own port)
takes one serve run each way."""

from __future__ import annotations

import json
import socket

import pytest
from labrun import api_call, api_key, management_address, node_exec, stream_arrivals

pytestmark = pytest.mark.lab

HOSTS = ("spark1", "spark2")
HEAD = management_address("spark1")
API_PORT = 8000
ENGINE_PORT = 8001
PROXY_CONF = "/etc/sparkctl/api-proxy.conf"
KEY_INCLUDE = "/etc/sparkctl/nginx-api-key.conf"
PROXY_UNIT = "sparkctl-api-proxy.service"
ROUTES = ["/v1/models", "/v1/completions", "/version", "/ping", "/metrics", "/tokenize", "/_standin/stats", "/anything"]


@pytest.fixture(scope="module")
def served(site_converged):
    # site.yml once for the session (conftest.py); this module leaves the cluster as it found it.
    return site_converged


@pytest.fixture(scope="module")
def key(served):
    """The generated key, read on the head; it only ever goes into Authorization headers."""
    value = api_key()
    assert len(value) >= 32
    return value


def _serve(run_site, *extra):
    return run_site(*extra, playbook="playbooks/serve.yml")


def call(method, path, key=None, body=None, port=API_PORT, timeout=30):
    """(status, headers, body) of one request from the control node to the head's management address."""
    return api_call(HEAD, port, method, path, key=key, body=body, timeout=timeout)


def test_every_route_but_health_needs_the_key(served):
    for path in ROUTES:
        for method in ("GET", "POST"):
            body = {"model": "lab-standin", "prompt": "ping", "max_tokens": 1} if method == "POST" else None
            status, headers, raw = call(method, path, body=body)
            assert status == 401, (method, path, status, raw[:200])
            assert headers["content-type"] == "application/json"
            error = json.loads(raw)["error"]
            assert error["type"] == "invalid_request_error" and error["code"] == "invalid_api_key"
    assert call("GET", "/health")[0] == 200


def test_the_key_opens_the_routes_and_a_case_variant_does_not(served, key):
    assert call("GET", "/v1/models", key=key)[0] == 200
    assert call("GET", "/version", key=key)[0] == 200
    assert call("GET", "/version", key=key.swapcase())[0] == 401
    assert call("GET", "/version", key=key + "x")[0] == 401


def test_a_stream_arrives_token_by_token_through_the_proxy(served, key):
    # The stand-in decodes ~50 tokens/s per stream: 40 filler tokens take ~0.8 s.
    body = {"model": "lab-standin", "prompt": "count with me", "max_tokens": 40, "stream": True}
    response, arrivals = stream_arrivals(HEAD, API_PORT, body, key, timeout=60)
    assert response.status == 200
    assert len(arrivals) == 40, arrivals
    # A buffering proxy would hand every chunk over at once, at the end.
    assert arrivals[-1] - arrivals[0] > 0.4, arrivals
    assert arrivals[0] < arrivals[-1] / 2, arrivals


def test_the_engines_own_port_is_closed_to_the_management_network(served):
    with pytest.raises(OSError):
        socket.create_connection((HEAD, ENGINE_PORT), timeout=5).close()
    listening = node_exec("spark1", "ss", "-ltnpH").stdout.splitlines()
    engine = [line for line in listening if f":{ENGINE_PORT} " in line]
    assert engine and all(f"127.0.0.1:{ENGINE_PORT} " in line for line in engine), engine
    proxy = [line for line in listening if f":{API_PORT} " in line]
    assert proxy and all("nginx" in line for line in proxy), proxy
    # The distribution's nginx (default site on port 80) is masked and not running.
    assert node_exec("spark1", "systemctl", "is-enabled", "nginx.service", check=False).stdout.strip() == "masked"
    assert node_exec("spark1", "systemctl", "is-active", "nginx.service", check=False).stdout.strip() == "inactive"
    with pytest.raises(OSError):
        socket.create_connection((HEAD, 80), timeout=5).close()


def test_the_key_lives_only_in_the_root_only_include(served, key):
    assert node_exec("spark1", "stat", "-c", "%a %U", KEY_INCLUDE).stdout.split() == ["600", "root"]
    assert node_exec("spark1", "grep", "-c", "-F", "$sparkctl_api_authorized", KEY_INCLUDE).stdout.strip() == "1"
    for command in (["cat", PROXY_CONF], ["systemctl", "cat", PROXY_UNIT], ["ps", "-eo", "args"]):
        assert key not in node_exec("spark1", *command).stdout, command[0]


def test_the_proxy_turned_off_then_on_over_a_serving_cluster(served, run_site, key):
    # Off: the engine moves onto the public port itself (its own routes open, as vLLM leaves them).
    off = _serve(run_site, "-e", "spark_api_proxy=false")
    try:
        assert off.rc == 0, off.output[-4000:]
        assert node_exec("spark1", "systemctl", "is-active", PROXY_UNIT, check=False).stdout.strip() != "active"
        assert call("GET", "/version")[0] == 200, "without the proxy the engine answers /version itself"
        assert call("GET", "/v1/models")[0] == 401 and call("GET", "/v1/models", key=key)[0] == 200
        # On again, over the running engine: the proxy cannot bind the public port until the
        # engine restarts onto its own; its unit retries, and one run ends with both in place.
        on = _serve(run_site)
        assert on.rc == 0, on.output[-4000:]
        assert "engine_service : Start the engine's units on this node, enabled for reboot" in on.changed_tasks("spark1")
        assert node_exec("spark1", "systemctl", "is-active", PROXY_UNIT).stdout.strip() == "active"
        assert call("GET", "/version")[0] == 401 and call("GET", "/v1/models", key=key)[0] == 200
        with pytest.raises(OSError):
            call("GET", "/health", port=ENGINE_PORT, timeout=3)
        again = _serve(run_site)
        assert again.rc == 0, again.output[-4000:]
        assert all(again.changed(h) == 0 for h in HOSTS), {h: again.changed_tasks(h) for h in HOSTS}
    finally:
        if node_exec("spark1", "systemctl", "is-active", PROXY_UNIT, check=False).stdout.strip() != "active":
            _serve(run_site)

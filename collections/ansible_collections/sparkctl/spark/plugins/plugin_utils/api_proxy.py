# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The API proxy: nginx on the head in front of the engine, so that every route but /health
needs the API key whatever the engine leaves open (vLLM's --api-key guards /v1/* only:
/tokenize, /invocations, /metrics, /version, /ping stay open; SGLang's leaves /health* and
/metrics open; the lab's stand-in leaves /health, /ping and /version open).

The engine listens on 127.0.0.1:api.engine_port (profile.api_endpoints); nginx listens on the
public api.bind:api.port, answers /health without a key (proxied to the engine's /health, always
that path) and everything else only with `Authorization: Bearer <key>`, else 401 with an
OpenAI-shaped JSON error. The Authorization header goes on to the engine, which checks the key
too where it is given one (vLLM; SGLang behind the proxy gets none, since it logs the key it is
given at every start: profile_render.engine_takes_key).

The per-client limits (limit_conn, limit_req: nginx's preaccess phase) count every request, with
the key or without it: the key is checked after them, in the access phase (auth_request asking a
location no client can name), so a client sending no key or a wrong one meets the same 429 as one
sending the right key, and one address has one bucket whatever it sends. A `return 401` in the
location would answer in the rewrite phase, before the limits, and let anyone without the key
send requests unlimited.

Three texts are rendered here, each pure (no host is contacted):
- config(): nginx's own main configuration (run by sparkctl-api-proxy.service, not the
  distribution's nginx.service, whose configuration and default site stay untouched);
- key_include(): the root-only 0600 file the configuration includes, holding the key in a `map`
  (the key never appears in the main configuration, a unit, an argv or output);
- unit(): sparkctl-api-proxy.service.
"""

from __future__ import annotations

import json
import re

from ansible_collections.sparkctl.spark.plugins.plugin_utils import profile as profiles
from ansible_collections.sparkctl.spark.plugins.module_utils.api_key import api_key_from_text
from ansible_collections.sparkctl.spark.plugins.module_utils.units import UNITS

UNIT_NAME = UNITS["api_proxy"]
# The variable the key include defines: "1" when the request carries the key, else "0".
AUTH_VARIABLE = "$sparkctl_api_authorized"
# The location auth_request asks whether a request carries the key. Without a leading '/', no
# client's request can name it (nginx refuses a request line whose URI does not start with one).
KEY_CHECK_URI = "sparkctl-api-key-check"

DEFAULTS = {
    # nginx's main configuration and the key include, both read by the master (root) only.
    "config_file": "/etc/sparkctl/api-proxy.conf",
    "key_include": "/etc/sparkctl/nginx-api-key.conf",
    "nginx": "/usr/sbin/nginx",
    # The pid file and temporary files, apart from the distribution's nginx (/run/nginx.pid,
    # /var/lib/nginx). Persistent (StateDirectory=): `nginx -t` opens the pid file's directory,
    # and the role validates the configuration while the proxy may be stopped.
    "state_dir": "/var/lib/sparkctl-api-proxy",
    # Workers drop to this account (Debian and Ubuntu ship it); the master stays root to read the key.
    "worker_user": "www-data",
    # Streams are I/O bound: two workers carry thousands of connections. Each proxied request
    # holds two (client and engine); a client that opens connections and sends nothing holds one
    # until client_header_timeout: 4096 per worker keeps a few thousand of those from starving
    # everyone else (1024 did not).
    "worker_processes": 2,
    "worker_connections": 4096,
    # Seconds a client may take to send its request header (a slowloris sends it byte by byte
    # to hold the connection), and between two reads of its body.
    "client_header_timeout_s": 10,
    "client_body_timeout_s": 30,
    # Per client address ($binary_remote_addr), every request with the key or without it:
    # requests in progress at once (a stream counts for as long as it runs), and requests per
    # second with the burst served at once beyond it. A user's 4-8 concurrent streams, a
    # benchmark's sweep and health polling stay far below; a runaway script or a flood meets
    # 429. 0 turns a limit off (clients behind one NAT or gateway share one address: raise
    # them, or turn them off, for such a front).
    "max_connections_per_client": 64,
    "requests_per_second_per_client": 20,
    "request_burst_per_client": 80,
    # A 1M-token prompt as text is ~4 MB (~4 bytes per token), as JSON-escaped non-ASCII text up to
    # ~12 MB (\\uXXXX is 6 bytes a character), as token ids ~7 MB ("123456,"); chat requests add
    # tool definitions and history. 64 MiB carries any of these with room, and still bounds what
    # one request can make nginx buffer.
    "client_max_body_size_mb": 64,
    # Request bodies up to this stay in memory; larger ones go to state_dir/body.
    "client_body_buffer_size_kb": 1024,
    # Seconds nginx waits between two reads from the engine. A non-streamed answer to a 1M-token
    # prompt arrives only after the whole prefill and decode: at least an hour, or the profile's
    # boot timeout when that is longer. None: derived so.
    "read_timeout_s": None,
    "send_timeout_s": 600,
    "connect_timeout_s": 10,
    # Idle keep-alive connections nginx keeps open to the engine.
    "upstream_keepalive": 16,
}
MIN_READ_TIMEOUT_S = 3600
# Options where 0 turns the limit off.
_ZERO_IS_OFF = ("max_connections_per_client", "requests_per_second_per_client")
# File descriptors a worker may open: two per proxied connection, and some for logs and files.
_SPARE_FILES = 64

# RFC 6750 b64token: what a Bearer credential may hold. Anything else cannot be sent as one.
_B64TOKEN_RE = re.compile(r"^[A-Za-z0-9._~+/-]+=*$")
_REGEX_SPECIAL = set(".+")  # of the b64token characters, the only ones special in a PCRE
_PATH_RE = re.compile(r"^/[A-Za-z0-9._/-]*$")
_USER_RE = re.compile(r"^[a-z_][a-z0-9_-]*\$?$")

UNAUTHORIZED_BODY = {
    "error": {
        "message": "Missing or invalid API key: send the header Authorization: Bearer <key> "
                   "(the key is kept on the head; sparkctl shows it on request).",
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_api_key",
    }
}
TOO_MANY_BODY = {
    "error": {
        "message": "Too many requests from this address at once or in a short time: retry shortly "
                   "(per-client limits of the API proxy: api_proxy_max_connections_per_client, "
                   "api_proxy_requests_per_second_per_client).",
        "type": "rate_limit_error",
        "param": None,
        "code": "rate_limit_exceeded",
    }
}
ENGINE_DOWN_BODY = {
    "error": {
        "message": "The engine behind the API proxy is not answering (still starting, or stopped): "
                   "see `sparkctl status` and `sparkctl logs`.",
        "type": "server_error",
        "param": None,
        "code": "engine_unavailable",
    }
}


class ApiProxyError(Exception):
    """Bad input for the proxy; the message names the setting and the fix, never the key."""


def options_with_defaults(options=None):
    merged = dict(DEFAULTS)
    for key, value in (options or {}).items():
        if key not in DEFAULTS:
            raise ApiProxyError(f"api proxy: unknown option {key!r}; known: {', '.join(sorted(DEFAULTS))}.")
        if key == "read_timeout_s" and value in (0, "0"):
            value = None  # 0: derived from the profile
        if value is not None and value != "":
            merged[key] = value
    for key in ("config_file", "key_include", "nginx", "state_dir"):
        if not isinstance(merged[key], str) or not _PATH_RE.match(merged[key]):
            raise ApiProxyError(f"api proxy: {key} must be an absolute path of letters, digits, '.', '_', '-' and '/', "
                                f"got {merged[key]!r}.")
    if not isinstance(merged["worker_user"], str) or not _USER_RE.match(merged["worker_user"]):
        raise ApiProxyError(f"api proxy: worker_user must be a user name, got {merged['worker_user']!r}.")
    for key in ("worker_processes", "worker_connections", "client_max_body_size_mb", "client_body_buffer_size_kb",
                "send_timeout_s", "connect_timeout_s", "upstream_keepalive", "read_timeout_s",
                "client_header_timeout_s", "client_body_timeout_s", "max_connections_per_client",
                "requests_per_second_per_client", "request_burst_per_client"):
        value = merged[key]
        if value is None and key == "read_timeout_s":
            continue
        kind = "a positive integer, or 0 to turn the limit off" if key in _ZERO_IS_OFF else "a positive integer"
        try:
            merged[key] = int(value)
        except (TypeError, ValueError):
            raise ApiProxyError(f"api proxy: {key} must be {kind}, got {value!r}.") from None
        if merged[key] < (0 if key in _ZERO_IS_OFF else 1) or isinstance(value, bool):
            raise ApiProxyError(f"api proxy: {key} must be {kind}, got {value!r}.")
    return merged


def _limit_lines(opts):
    """The per-client limits in the http block (zones) and in the server block (the limits)."""
    zones, limits = [], []
    if opts["max_connections_per_client"]:
        zones.append("    limit_conn_zone $binary_remote_addr zone=sparkctl_conn_per_client:10m;")
        limits.append(f"        limit_conn sparkctl_conn_per_client {opts['max_connections_per_client']};")
    if opts["requests_per_second_per_client"]:
        zones.append("    limit_req_zone $binary_remote_addr zone=sparkctl_req_per_client:10m "
                     f"rate={opts['requests_per_second_per_client']}r/s;")
        limits.append(f"        limit_req zone=sparkctl_req_per_client burst={opts['request_burst_per_client']} nodelay;")
    if zones:
        zones += ["    limit_conn_status 429;", "    limit_req_status 429;",
                  "    limit_conn_log_level warn;", "    limit_req_log_level warn;"]
    return zones, limits


def read_timeout(profile, options=None):
    """Seconds between two reads from the engine: the option, else max(an hour, the boot timeout)."""
    opts = options_with_defaults(options)
    if opts["read_timeout_s"]:
        return opts["read_timeout_s"]
    boot = (profile.get("boot") or {}).get("timeout_seconds") or 0
    return max(MIN_READ_TIMEOUT_S, int(boot))


def _listen(bind, port):
    if ":" in bind:
        # IPv6: "::" is every address, both families, as the engines bind it.
        return f"[{bind}]:{port}" + (" ipv6only=off" if bind == "::" else "")
    return f"{bind}:{port}"


def _nginx_string(value):
    """A single-quoted nginx string (the JSON bodies hold no single quote or backslash)."""
    text = json.dumps(value, separators=(",", ":")) if not isinstance(value, str) else value
    if "'" in text or "\\" in text:
        raise ApiProxyError("api proxy: a fixed response body must not hold a quote or a backslash.")
    return "'" + text + "\\n'"


def config(profile, cluster=None, options=None):
    """nginx's main configuration for the profile (the public listener, the engine upstream)."""
    opts = options_with_defaults(options)
    endpoints = profiles.api_endpoints(profile, dict(cluster or {}, api_proxy=True))
    public, engine = endpoints["public"], endpoints["engine"]
    timeout = read_timeout(profile, opts)
    state = opts["state_dir"]
    zones, limits = _limit_lines(opts)
    lines = [
        f"# sparkctl API proxy for profile {profile.get('name', '?')}: rendered by sparkctl (role api_proxy).",
        "# A serve run rewrites it; change the inventory or the profile instead. Run by",
        f"# {UNIT_NAME} with its own pid and temporary files; the distribution's nginx is not involved.",
        "daemon off;",
        f"user {opts['worker_user']};",
        f"worker_processes {opts['worker_processes']};",
        "# Two descriptors per proxied connection (client and engine), and a few for files.",
        f"worker_rlimit_nofile {2 * opts['worker_connections'] + _SPARE_FILES};",
        f"pid {state}/nginx.pid;",
        "error_log stderr warn;",
        "",
        "events {",
        f"    worker_connections {opts['worker_connections']};",
        "}",
        "",
        "http {",
        f"    # Defines {AUTH_VARIABLE}: 1 when Authorization is exactly 'Bearer <key>' (root-only file).",
        f"    include {opts['key_include']};",
        "",
        "    access_log off;",
        "    server_tokens off;",
        "    default_type application/json;",
        "",
        "    # A client that sends its request slowly (or not at all) is closed, and its memory freed",
        "    # at once; streamed answers are not affected (they are bounded by proxy_read_timeout).",
        f"    client_header_timeout {opts['client_header_timeout_s']}s;",
        f"    client_body_timeout {opts['client_body_timeout_s']}s;",
        "    reset_timedout_connection on;",
        *(["", "    # Per client address: requests in progress at once, and requests per second (429 beyond)."]
          + zones if zones else []),
        "",
        f"    client_body_temp_path {state}/body;",
        f"    proxy_temp_path {state}/proxy;",
        f"    fastcgi_temp_path {state}/fastcgi;",
        f"    uwsgi_temp_path {state}/uwsgi;",
        f"    scgi_temp_path {state}/scgi;",
        "",
        "    upstream sparkctl_engine {",
        f"        server {_listen(engine['bind'], engine['port'])};",
        f"        keepalive {opts['upstream_keepalive']};",
        "    }",
        "",
        "    server {",
        f"        listen {_listen(public['bind'], public['port'])};",
        "        server_name _;",
        "",
        *(limits + [""] if limits else []),
        "        # A 1M-token prompt (text, escaped JSON or token ids) fits with room.",
        f"        client_max_body_size {opts['client_max_body_size_mb']}m;",
        f"        client_body_buffer_size {opts['client_body_buffer_size_kb']}k;",
        "",
        "        # Streams go through token by token; a long prefill may keep the engine silent.",
        "        proxy_http_version 1.1;",
        "        proxy_set_header Connection \"\";",
        "        proxy_set_header Host $host;",
        "        proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;",
        "        proxy_set_header X-Forwarded-Proto $scheme;",
        "        proxy_buffering off;",
        f"        proxy_connect_timeout {opts['connect_timeout_s']}s;",
        f"        proxy_read_timeout {timeout}s;",
        f"        proxy_send_timeout {opts['send_timeout_s']}s;",
        "        error_page 502 504 = @sparkctl_engine_down;",
        "        error_page 401 @sparkctl_unauthorized;",
        "        error_page 429 @sparkctl_too_many;",
        "",
        "        # Health needs no key: always the engine's /health, whatever the client's path spelling.",
        "        location = /health {",
        "            limit_except GET {",
        "                deny all;",
        "            }",
        "            proxy_pass http://sparkctl_engine/health;",
        "        }",
        "",
        "        # Everything else needs the key. It is checked in",
        "        # the access phase, after the per-client limits: a `return 401` would answer in the",
        "        # rewrite phase, before them, and leave requests without the key uncounted.",
        "        location / {",
        f"            auth_request {KEY_CHECK_URI};",
        "            proxy_pass http://sparkctl_engine;",
        "        }",
        "",
        "        # auth_request's subrequest: 204 with the key, else 401. No client reaches it: every",
        "        # URI a client sends starts with '/', this one does not.",
        f"        location = {KEY_CHECK_URI} {{",
        f"            if ({AUTH_VARIABLE} != 1) {{",
        "                return 401;",
        "            }",
        "            return 204;",
        "        }",
        "",
        "        # Refused without the key: the connection is closed with the answer, so a client",
        "        # without the key holds no connection open by sending requests.",
        "        location @sparkctl_unauthorized {",
        "            keepalive_timeout 0;",
        "            add_header WWW-Authenticate 'Bearer realm=\"sparkctl\"' always;",
        f"            return 401 {_nginx_string(UNAUTHORIZED_BODY)};",
        "        }",
        "",
        "        location @sparkctl_too_many {",
        "            add_header Retry-After 1 always;",
        f"            return 429 {_nginx_string(TOO_MANY_BODY)};",
        "        }",
        "",
        "        location @sparkctl_engine_down {",
        f"            return 502 {_nginx_string(ENGINE_DOWN_BODY)};",
        "        }",
        "    }",
        "}",
        "",
    ]
    return "\n".join(lines)


def key_problem(api_key):
    """Why `api_key` cannot be the proxy's key, or None. Never quotes the key."""
    if not isinstance(api_key, str) or not api_key:
        return "the API key is empty"
    if not _B64TOKEN_RE.match(api_key):
        return ("the API key holds characters a Bearer token cannot carry (RFC 6750 allows letters, digits and "
                "- . _ ~ + /, then trailing =); choose another spark_api_key (e.g. `openssl rand -hex 24`), or leave "
                "it empty to have one generated")
    return None


def _regex_literal(text):
    return "".join("\\" + ch if ch in _REGEX_SPECIAL else ch for ch in text)


def key_include(api_key):
    """The include holding the key: a case-sensitive, anchored match of the whole header (nginx
    compares plain map strings ignoring case; a regular expression with '~' does not)."""
    problem = key_problem(api_key)
    if problem:
        raise ApiProxyError(problem + ".")
    return "\n".join([
        "# sparkctl API proxy: the API key (root only, mode 0600). Rewritten by every serve run.",
        f"map $http_authorization {AUTH_VARIABLE} {{",
        "    default 0;",
        f"    \"~^Bearer {_regex_literal(api_key)}$\" 1;",
        "}",
        "",
    ])


def key_include_from_file_text(text):
    """key_include() of the key in the engine's key file (VLLM_API_KEY=..., api-key: ..., or the key alone)."""
    key = api_key_from_text(text)
    if key is None:
        words = str(text or "").split()
        alone = len(words) == 1 and not words[0].startswith(("VLLM_API_KEY=", "api-key:", "api_key:", "export"))
        key = words[0] if alone else None
    if not key:
        raise ApiProxyError("the API key file holds no key (expected VLLM_API_KEY=KEY or api-key: KEY); "
                            "the serve stage writes it: run it again.")
    return key_include(key)


def unit(profile, options=None):
    """sparkctl-api-proxy.service: nginx in the foreground with this configuration. Checked before
    every start and reload (nginx -t); a reload (HUP) re-reads the key include and lets streams in
    flight finish on the old workers."""
    opts = options_with_defaults(options)
    nginx, conf = opts["nginx"], opts["config_file"]
    test = f"{nginx} -t -q -e stderr -c {conf}"
    engine = (profile.get("engine") or {}).get("kind", "engine")
    lines = [
        "[Unit]",
        f"Description=sparkctl API proxy (nginx, key required but for /health) in front of {engine} for "
        f"{profile.get('name', '?')}",
        "After=network-online.target",
        "Wants=network-online.target",
        # Cheap to retry: while the engine still holds the public port (spark_api_proxy just
        # turned on), the start fails until the engine restarts onto its own port.
        "StartLimitIntervalSec=0",
        "",
        "[Service]",
        "Type=exec",
        f"StateDirectory={opts['state_dir'].rsplit('/', 1)[-1]}",
        f"ExecStartPre={test}",
        f"ExecStart={nginx} -e stderr -c {conf}",
        f"ExecReload={test}",
        "ExecReload=/bin/kill -s HUP $MAINPID",
        # SIGQUIT: graceful; streams get TimeoutStopSec to end, then the rest is killed.
        "KillSignal=SIGQUIT",
        "KillMode=mixed",
        "TimeoutStopSec=10",
        "Restart=on-failure",
        "RestartSec=3",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
        "",
    ]
    return "\n".join(lines)


def validate_commands(options=None):
    """Ansible `validate:` commands (`%s` is the file about to be installed).

    The main configuration is checked as it is (`nginx -t` reads the installed key include).
    The key include is a fragment, which `nginx -t` cannot check alone: it is included into
    the http block of a throwaway configuration in a temporary directory, whose own pid file
    keeps `nginx -t` (which creates the pid file it is given) away from any running nginx's."""
    nginx = options_with_defaults(options)["nginx"]
    # Ansible substitutes %s with Python's % operator: printf's own %s is written %%s.
    script = ('d=$(mktemp -d) && trap "rm -rf \\"$d\\"" EXIT && '
              'printf "pid %%s/nginx.pid;\\nevents {}\\nhttp {\\n    include %%s;\\n}\\n" "$d" "$0" > "$d/check.conf" && '
              f'{nginx} -t -q -e stderr -p "$d/" -c "$d/check.conf"')
    return {
        "config": f"{nginx} -t -q -e stderr -c %s",
        "key_include": "/bin/sh -c '" + script + "' %s",
    }


def render(profile, cluster=None, options=None):
    """Everything the api_proxy role writes but the key: {config, unit, unit_name, listen, upstream,
    read_timeout_s, validate}."""
    opts = options_with_defaults(options)
    if not opts["state_dir"].startswith("/var/lib/") or opts["state_dir"].count("/") != 3:
        raise ApiProxyError(f"api proxy: state_dir must be /var/lib/<name> (systemd's StateDirectory=), "
                            f"got {opts['state_dir']!r}.")
    endpoints = profiles.api_endpoints(profile, dict(cluster or {}, api_proxy=True))
    return {
        "config": config(profile, cluster, opts),
        "unit": unit(profile, opts),
        "unit_name": UNIT_NAME,
        "listen": endpoints["public"],
        "upstream": endpoints["engine"],
        "read_timeout_s": read_timeout(profile, opts),
        "validate": validate_commands(opts),
    }

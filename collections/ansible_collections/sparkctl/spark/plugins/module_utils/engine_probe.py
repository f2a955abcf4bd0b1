# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Does the endpoint really serve? The verify stage's probe of the OpenAI-compatible API.

`/health` answering 200 proves little: a wedged engine (a dead NCCL peer, a stuck scheduler)
keeps answering it while no generation ever produces a token. So besides health this asks
for the things a user needs: the key is required, the profile's smoke prompt gets the
expected answer, chat works, reasoning and tool calls come back structured when the profile
has the parsers, and a small streamed generation delivers its first token within a deadline.

Runs on the head node with the system python3 (>= 3.9): stdlib only (http.client, json).
The API key is sent in the Authorization header and never appears in a result.
"""

from __future__ import annotations

import errno
import http.client
import json
import socket
import time
from urllib.parse import urlsplit

from ansible_collections.sparkctl.spark.plugins.module_utils.api_key import api_key_from_text

# Generation checks come right after auth: on a wedged engine every non-streaming request
# would hang for request_timeout, so the cheap deadline-bound stream goes first and, when it
# finds the wedge, the generation checks after it are skipped.
CHECK_ORDER = ("health", "auth", "generation", "smoke", "chat", "reasoning", "tools")
DEFAULT_CHECKS = ("health", "auth", "smoke", "chat", "generation")
KEYLESS_CHECKS = frozenset(["health"])
SKIPPED_WHEN_WEDGED = frozenset(["smoke", "chat", "reasoning", "tools"])

COMPLETIONS = "/v1/completions"
CHAT = "/v1/chat/completions"
MODELS = "/v1/models"

SMOKE_ENDPOINTS = {"completions": COMPLETIONS, "chat": CHAT}
SMOKE_DEFAULT_MAX_TOKENS = 16

CHAT_QUESTION = "What is the capital of Japan? Answer in one word."
CHAT_MAX_TOKENS = 16
# Enough for a thinking model to emit some reasoning, not to finish thinking: the check asks
# only where reasoning arrives, and the parsers return unfinished thinking as reasoning. Every
# token is paid on every verify (a 250B MoE at ~20 tokens/s: 32 tokens ~1.6 s, 128 ~6.4 s).
REASONING_QUESTION = "What is 17 + 25? Think it through, then give the number."
REASONING_MAX_TOKENS = 32
TOOLS_QUESTION = "What is the weather like in the capital of Japan right now? Use the tool."
TOOLS_MAX_TOKENS = 256
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city name, e.g. Paris"}},
            "required": ["city"],
        },
    },
}
GENERATION_PROMPT = "The capital of Japan is"
GENERATION_MAX_TOKENS = 8
# Routes outside /v1 that engines leave open although started with a key (vLLM: /version,
# /ping, /metrics, /tokenize, /invocations, ...; SGLang: /metrics; the lab's stand-in: /ping, /metrics,
# /version). Without the key each must answer 401 or 403 (the API proxy's answer) or 404 (the
# engine has no such route); any other answer means the route is served without the key.
OPEN_ROUTE_PROBES = ("GET /version", "GET /ping", "GET /metrics", "POST /tokenize", "POST /invocations")
CLOSED_STATUSES = (401, 403, 404)
OPEN_ROUTES_FIX = ("put the API proxy in front of the engine (spark_api_proxy: true, the default) and run "
                   "sparkctl serve")
HEALTH_RECHECK_TIMEOUT = 5.0
RESTART_HINT = "restart it: sparkctl serve, or systemctl restart sparkctl-engine"
QUOTE_LIMIT = 80
REDACTED = "********"


class KeyFileError(Exception):
    """The API key file cannot be used; str() is the message for the user."""

    def __init__(self, path, reason, missing=False):
        super().__init__(reason)
        self.path, self.reason, self.missing = path, reason, missing


def read_api_key(path):
    """The key in `path`: the file the engine reads it from (vLLM's env file `VLLM_API_KEY=...`,
    SGLang's config `api-key: ...`) or a file holding just the key. KeyFileError when the file
    is unreadable or holds no key."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise KeyFileError(path, exc.strerror or str(exc), missing=exc.errno == errno.ENOENT) from None
    except UnicodeDecodeError:
        raise KeyFileError(path, "the file is not UTF-8 text") from None
    key = api_key_from_text(text)
    if key:
        return key
    words = text.split()
    if not words:
        raise KeyFileError(path, "the file is empty")
    if len(words) == 1 and not words[0].startswith(("VLLM_API_KEY=", "api-key:", "api_key:")):
        return words[0]
    raise KeyFileError(path, "it holds no API key (expected VLLM_API_KEY=KEY, api-key: KEY, or the key alone)")


def key_file_message(error, checks):
    """One message for an unusable key file, naming the path and the stage that writes it."""
    fix = "the serve stage writes it (run: sparkctl serve)"
    if error.missing and "auth" in checks:
        return ("the API key file %s does not exist, so the auth check cannot prove that the API requires the key, "
                "and no request that needs the key can be sent; %s" % (error.path, fix))
    return "cannot read the API key file %s: %s; %s" % (error.path, error.reason, fix)


def ordered_checks(checks):
    """The requested checks in the order they run, duplicates dropped; ValueError on an unknown name."""
    requested = list(DEFAULT_CHECKS if checks is None else checks)
    unknown = sorted(set(requested) - set(CHECK_ORDER))
    if unknown:
        raise ValueError("unknown check(s) %s; known: %s" % (", ".join(unknown), ", ".join(CHECK_ORDER)))
    return [name for name in CHECK_ORDER if name in requested]


def needs_key(checks):
    """Whether any of the checks sends the key."""
    return any(name not in KEYLESS_CHECKS for name in checks)


def parse_base_url(url):
    """(scheme, host, port, path prefix) of a base URL like http://127.0.0.1:8000; ValueError otherwise."""
    parts = urlsplit(str(url or "").strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("url must be a base URL like http://127.0.0.1:8000, got %r" % (url,))
    if parts.query or parts.fragment:
        raise ValueError("url must be a base URL without query or fragment, got %r" % (url,))
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise ValueError("url %r: %s" % (url, exc)) from None
    return parts.scheme, parts.hostname, port, parts.path.rstrip("/")


def merge_request(base, overrides):
    """`base` with `overrides` merged in, nested mappings merged key by key (a profile's
    tool_request_overrides sets chat_template_kwargs.enable_thinking without dropping the rest)."""
    merged = dict(base)
    for key, value in (overrides or {}).items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge_request(merged[key], value)
        else:
            merged[key] = value
    return merged


def quote(text, limit=QUOTE_LIMIT):
    """A short repr of an answer for a one-line message."""
    text = "" if text is None else str(text)
    if len(text) > limit:
        text = text[:limit] + "..."
    return repr(text)


def seconds_text(value):
    return "%g s" % round(float(value), 3)


def redact(value, secret):
    """`value` with every occurrence of `secret` in its strings replaced."""
    if not secret:
        return value
    if isinstance(value, str):
        return value.replace(secret, REDACTED)
    if isinstance(value, dict):
        return {redact(k, secret): redact(v, secret) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v, secret) for v in value]
    return value


# --- HTTP -------------------------------------------------------------------------------------


class Answer:
    """One HTTP exchange: `status` (None when nothing answered), the body, or why nothing came."""

    def __init__(self, status=None, raw=b"", error=None, kind=None):
        self.status, self.raw, self.error, self.kind = status, raw, error, kind

    @property
    def json(self):
        try:
            return json.loads(self.raw.decode("utf-8", errors="replace")) if self.raw else None
        except ValueError:
            return None

    def server_error(self):
        """The error text the server put in its body (OpenAI, FastAPI and plain shapes)."""
        body = self.json
        if isinstance(body, dict):
            error = body.get("error")
            if isinstance(error, dict) and error.get("message"):
                return str(error["message"])
            for value in (error, body.get("message"), body.get("detail")):
                if isinstance(value, str) and value:
                    return value
            if body.get("detail") is not None:
                return json.dumps(body["detail"])
        text = self.raw.decode("utf-8", errors="replace").strip()
        return text[:200]

    def describe(self):
        """'answered 400: <server text>' or 'failed: connection refused ...'."""
        if self.status is None:
            return "failed: %s" % self.error
        text = self.server_error()
        return "answered %d%s" % (self.status, ": " + text if text else "")


class Api:
    """The engine's API at a base URL, with the key for /v1 routes."""

    def __init__(self, url, api_key=None, timeout=120.0, clock=time.monotonic):
        self.base = str(url).rstrip("/")
        self.scheme, self.host, self.port, self.prefix = parse_base_url(url)
        self.api_key = api_key
        self.timeout = float(timeout)
        self.clock = clock

    def _connection(self, timeout):
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        return cls(self.host, self.port, timeout=timeout)

    def _headers(self, body, with_key):
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        if with_key and self.api_key:
            headers["Authorization"] = "Bearer " + self.api_key
        return headers

    def _failure(self, exc, timeout):
        if isinstance(exc, socket.timeout):
            return Answer(error="no answer within %s" % seconds_text(timeout), kind="timeout")
        if isinstance(exc, ConnectionRefusedError):
            return Answer(error="connection refused at %s (is the engine running?)" % self.base, kind="refused")
        return Answer(error="%s (%s)" % (str(exc) or type(exc).__name__, self.base), kind="error")

    def call(self, method, path, body=None, with_key=True, timeout=None):
        """One request; never raises for network trouble (it becomes Answer.error)."""
        timeout = self.timeout if timeout is None else float(timeout)
        data = None if body is None else json.dumps(body).encode("utf-8")
        connection = self._connection(timeout)
        try:
            connection.request(method, self.prefix + path, body=data, headers=self._headers(body, with_key))
            response = connection.getresponse()
            return Answer(status=response.status, raw=response.read())
        except (OSError, http.client.HTTPException) as exc:
            return self._failure(exc, timeout)
        finally:
            connection.close()

    def stream_first_token(self, path, body, deadline, stall_timeout=None):
        """POST a streaming request and read its server-sent events.

        The first token must arrive within `deadline` seconds of sending, each later one within
        `stall_timeout` (default `deadline`) of the one before. Both limits are enforced by the
        socket timeout, re-armed with the time left before every read, and by a wall-clock
        check between reads, so a server that sends headers and then nothing, or sends
        keep-alive comments but no token, is caught. The stream may end with data: [DONE] or,
        as the OpenAI client allows, with the end of the body after a finish_reason or usage
        chunk; a body that ends before either was cut off (kind "error"). Returns a dict:
        status, error, kind (timeout|refused|error|http|None), ttft_s, tokens (usage's
        completion_tokens when the server sends it, else the chunks with a choice), text, done,
        finish_reason, usage_tokens, seconds."""
        stall_timeout = deadline if stall_timeout is None else stall_timeout
        outcome = {"status": None, "error": None, "kind": None, "ttft_s": None, "tokens": 0, "text": "", "done": False,
                   "finish_reason": None, "usage_tokens": None, "seconds": None}
        chunks = 0
        data = json.dumps(dict(body, stream=True)).encode("utf-8")
        headers = dict(self._headers(body, True), Accept="text/event-stream")
        connection = self._connection(deadline)
        sent = self.clock()
        wall_limit = sent + deadline
        try:
            connection.connect()
            sock = connection.sock
            connection.request("POST", self.prefix + path, body=data, headers=headers)
            sock.settimeout(_time_left(wall_limit, self.clock))
            response = connection.getresponse()
            outcome["status"] = response.status
            if response.status != 200:
                sock.settimeout(self.timeout)
                answer = Answer(status=response.status, raw=response.read())
                outcome.update(kind="http", error=answer.describe())
                return outcome
            while True:
                sock.settimeout(_time_left(wall_limit, self.clock))
                line = response.readline()
                if not line:
                    # The body ended without data: [DONE]. After a finish_reason or a usage chunk that
                    # is a clean end (the OpenAI client accepts it); before either, the stream was cut.
                    if outcome["finish_reason"] is None and outcome["usage_tokens"] is None and chunks:
                        cut = "the stream ended after %d token chunk(s) without a finish_reason or data: [DONE] (cut off)"
                        outcome.update(kind="error", error=cut % chunks)
                    break
                line = line.strip()
                if not line.startswith(b"data:"):
                    continue  # blank separators and ': keep-alive' comments are no token
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    outcome["done"] = True
                    # Read the chunked terminator too: closing with it unread makes the kernel reset
                    # the connection, which the server logs as an error.
                    try:
                        sock.settimeout(1.0)
                        response.read()
                    except (OSError, http.client.HTTPException):
                        pass
                    break
                try:
                    event = json.loads(payload.decode("utf-8", errors="replace"))
                except ValueError:
                    continue
                if isinstance(event, dict) and event.get("error"):
                    outcome.update(kind="error", error="sent an error event: %s" % Answer(raw=payload).server_error())
                    break
                usage = event.get("usage") if isinstance(event, dict) else None
                if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
                    outcome["usage_tokens"] = usage["completion_tokens"]
                choices = event.get("choices") if isinstance(event, dict) else None
                if not choices:
                    continue  # a usage-only chunk
                choice = choices[0] if isinstance(choices[0], dict) else {}
                if choice.get("finish_reason"):
                    outcome["finish_reason"] = choice["finish_reason"]
                # Any chunk with a choice proves the engine generates, even a token that decodes to
                # empty text; what it carries is counted below from usage when the server sends one.
                now = self.clock()
                if outcome["ttft_s"] is None:
                    outcome["ttft_s"] = round(now - sent, 3)
                chunks += 1
                outcome["tokens"] = chunks
                outcome["text"] += str(choice.get("text") or "")
                wall_limit = now + stall_timeout
        except socket.timeout:
            outcome.update(kind="timeout", error="no token within %s" % seconds_text(
                deadline if outcome["ttft_s"] is None else stall_timeout))
        except (OSError, http.client.HTTPException) as exc:
            failure = self._failure(exc, deadline)
            outcome.update(kind=failure.kind, error=failure.describe())
        finally:
            outcome["seconds"] = round(self.clock() - sent, 3)
            connection.close()
        if outcome["usage_tokens"] is not None:
            outcome["tokens"] = outcome["usage_tokens"]  # a chunk may carry several tokens
        return outcome


def _time_left(wall_limit, clock):
    """Seconds until wall_limit; socket.timeout once it has passed (the wall-clock half of the deadline)."""
    left = wall_limit - clock()
    if left <= 0:
        raise socket.timeout("deadline passed")
    return left


# --- checks -----------------------------------------------------------------------------------


class Probe:
    """Runs the checks against one engine; see run_checks()."""

    def __init__(self, api, model, smoke=None, tool_request_overrides=None, generation_deadline=60.0,
                 auth_routes=OPEN_ROUTE_PROBES):
        self.api = api
        self.model = model
        self.smoke = smoke
        self.tool_request_overrides = tool_request_overrides or {}
        self.generation_deadline = float(generation_deadline)
        self.auth_routes = parse_routes(auth_routes)

    # Each check returns (ok, message, detail).

    def check_health(self):
        answer = self.api.call("GET", "/health", with_key=False)
        detail = {"http_status": answer.status}
        if answer.status == 200:
            return True, "health: GET /health answers 200", detail
        if answer.status is None:
            detail["unreachable"] = True
            return False, "health: GET /health %s" % answer.describe(), detail
        hint = " (the engine is still starting or unhealthy)" if answer.status == 503 else ""
        return False, "health: GET /health %s, expected 200%s" % (answer.describe(), hint), detail

    def check_auth(self):
        problems = []
        detail = {}
        probe_body = {"model": self.model, "prompt": "ping", "max_tokens": 1}
        unkeyed = [("GET", MODELS, None), ("POST", COMPLETIONS, probe_body)]
        for method, path, body in unkeyed:
            answer = self.api.call(method, path, body=body, with_key=False)
            detail["%s %s without key" % (method, path)] = answer.status
            if answer.status in (401, 403):
                continue
            if answer.status is not None and 200 <= answer.status < 300:
                problems.append("the API answers without a key (%s %s answered %d): start the engine with an API key"
                                % (method, path, answer.status))
                break  # one open route is proof enough; a second unkeyed request would run a generation
            if answer.status is None:
                return False, "auth: %s %s %s" % (method, path, answer.describe()), detail
            problems.append("%s %s without a key %s, expected 401 or 403" % (method, path, answer.describe()))
        # Routes outside /v1: a small body for the POST ones, so an open route answers rather than
        # failing on a missing field (an open /invocations then runs a 1-token generation).
        route_body = {"model": self.model, "prompt": "ping", "max_tokens": 1}
        open_routes = []
        for method, path in self.auth_routes:
            answer = self.api.call(method, path, body=route_body if method == "POST" else None, with_key=False)
            detail["%s %s without key" % (method, path)] = answer.status
            if answer.status is None:
                return False, "auth: %s %s %s" % (method, path, answer.describe()), detail
            if answer.status not in CLOSED_STATUSES:
                open_routes.append("%s %s answered %d" % (method, path, answer.status))
        if open_routes:
            problems.append("routes outside /v1 answer without a key (%s; expected 401, 403 or 404): %s"
                            % (", ".join(open_routes), OPEN_ROUTES_FIX))
        answer = self.api.call("GET", MODELS)
        detail["GET %s with key" % MODELS] = answer.status
        served = _model_ids(answer.json) if answer.status == 200 else []
        detail["served_models"] = served
        if answer.status in (401, 403):
            problems.append("the API refuses the key from the key file (GET %s answered %d): the engine runs with "
                            "another key; %s" % (MODELS, answer.status, RESTART_HINT))
        elif answer.status != 200:
            problems.append("GET %s with the key %s" % (MODELS, answer.describe()))
        elif self.model not in served:
            problems.append("the API serves %s, not %r" % (", ".join(repr(m) for m in served) or "no model", self.model))
        if problems:
            return False, "auth: " + "; ".join(problems), detail
        return True, "auth: the API refuses requests without the key and serves %r with it" % self.model, detail

    def check_generation(self):
        body = {"model": self.model, "prompt": GENERATION_PROMPT, "max_tokens": GENERATION_MAX_TOKENS, "temperature": 0}
        deadline = self.generation_deadline
        outcome = self.api.stream_first_token(COMPLETIONS, body, deadline)
        detail = {"deadline_s": deadline, "ttft_s": outcome["ttft_s"], "tokens": outcome["tokens"],
                  "text": outcome["text"][:200], "http_status": outcome["status"], "seconds_total": outcome["seconds"],
                  "wedged": False}
        if outcome["kind"] == "timeout":
            health = self.api.call("GET", "/health", with_key=False, timeout=min(HEALTH_RECHECK_TIMEOUT, self.api.timeout))
            detail["health_status"] = health.status
            if outcome["ttft_s"] is None:
                lost = "no token arrived within %s" % seconds_text(deadline)
            else:
                lost = "the first token arrived after %s, then the stream stalled for %s" % (
                    seconds_text(outcome["ttft_s"]), seconds_text(deadline))
            if health.status == 200:
                detail["wedged"] = True
                return False, "generation: /health answers but %s: the engine is wedged (%s)" % (lost, RESTART_HINT), detail
            return False, "generation: %s, and GET /health %s" % (lost, health.describe()), detail
        if outcome["kind"] is not None:
            return False, "generation: POST %s (stream) %s" % (COMPLETIONS, outcome["error"]), detail
        if outcome["ttft_s"] is None:
            return False, "generation: the stream ended without a token (POST %s answered 200)" % COMPLETIONS, detail
        return True, "generation: first token after %s (deadline %s), %d tokens in %s" % (
            seconds_text(outcome["ttft_s"]), seconds_text(deadline), outcome["tokens"], seconds_text(outcome["seconds"])), detail

    def check_smoke(self):
        smoke = self.smoke
        endpoint = smoke.get("endpoint") or "completions"
        path = SMOKE_ENDPOINTS[endpoint]
        prompt, expect = str(smoke["prompt"]), str(smoke["expect"])
        max_tokens = smoke.get("max_tokens") or SMOKE_DEFAULT_MAX_TOKENS
        body = {"model": self.model, "max_tokens": max_tokens, "temperature": 0}
        if endpoint == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
            if smoke.get("chat_template_kwargs"):
                body["chat_template_kwargs"] = dict(smoke["chat_template_kwargs"])
        else:
            body["prompt"] = prompt
        answer = self.api.call("POST", path, body=body)
        detail = {"endpoint": endpoint, "prompt": prompt, "expect": expect, "http_status": answer.status}
        if answer.status != 200:
            return False, "smoke: POST %s %s" % (path, answer.describe()), detail
        choice = _first_choice(answer.json)
        if endpoint == "chat":
            message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
            text, reasoning = message.get("content"), _reasoning_of(message)[1]
        else:
            text, reasoning = choice.get("text"), None
        detail["answer"] = None if text is None else str(text)[:500]
        if not isinstance(text, str):
            return False, "smoke: POST %s answered 200 without %s" % (
                path, "choices[0].message.content" if endpoint == "chat" else "choices[0].text"), detail
        if expect.lower() in text.lower():
            return True, "smoke: %s -> %s contains %r" % (quote(prompt), quote(text), expect), detail
        message = "smoke: expected %r in the answer to %s, got %s" % (expect, quote(prompt), quote(text))
        detail["completion_tokens"] = _completion_tokens(answer.json)
        if not text.strip() and not reasoning:
            message += _empty_text_note(detail["completion_tokens"], text)
        if not text.strip() and reasoning:
            message += (" (the model only reasoned within smoke.max_tokens=%d: raise it, or turn thinking off in "
                        "smoke.chat_template_kwargs)" % max_tokens)
        return False, message, detail

    def check_chat(self):
        body = {"model": self.model, "messages": [{"role": "user", "content": CHAT_QUESTION}],
                "max_tokens": CHAT_MAX_TOKENS, "temperature": 0}
        if self.smoke and self.smoke.get("chat_template_kwargs"):
            body["chat_template_kwargs"] = dict(self.smoke["chat_template_kwargs"])
        answer = self.api.call("POST", CHAT, body=body)
        detail = {"http_status": answer.status}
        if answer.status != 200:
            return False, "chat: POST %s %s" % (CHAT, answer.describe()), detail
        message = _first_choice(answer.json).get("message")
        if not isinstance(message, dict):
            return False, "chat: POST %s answered 200 without choices[0].message" % CHAT, detail
        content = message.get("content") if isinstance(message.get("content"), str) else ""
        reasoning = _reasoning_of(message)[1]
        detail.update(content=content[:200], reasoning=reasoning[:200], completion_tokens=_completion_tokens(answer.json))
        if content.strip():
            return True, "chat: answered %s" % quote(content), detail
        if reasoning.strip():
            return True, "chat: answered with reasoning only within %d tokens: %s" % (CHAT_MAX_TOKENS, quote(reasoning)), detail
        return False, "chat: POST %s answered 200 with an empty message (no content, no reasoning)%s" % (
            CHAT, _empty_text_note(detail["completion_tokens"], content)), detail

    def check_reasoning(self):
        body = {"model": self.model, "messages": [{"role": "user", "content": REASONING_QUESTION}],
                "max_tokens": REASONING_MAX_TOKENS, "temperature": 0}
        kwargs = dict((self.smoke or {}).get("chat_template_kwargs") or {})
        if "enable_thinking" in kwargs:
            # A profile may turn thinking off for its smoke prompt (short answers); this check
            # is about thinking, so it asks for it.
            kwargs["enable_thinking"] = True
        if kwargs:
            body["chat_template_kwargs"] = kwargs
        answer = self.api.call("POST", CHAT, body=body)
        detail = {"http_status": answer.status, "chat_template_kwargs": kwargs}
        if answer.status != 200:
            return False, "reasoning: POST %s %s" % (CHAT, answer.describe()), detail
        message = _first_choice(answer.json).get("message")
        message = message if isinstance(message, dict) else {}
        field, reasoning = _reasoning_of(message)
        content = message.get("content") if isinstance(message.get("content"), str) else ""
        detail.update(field=field, reasoning=reasoning[:200], content=content[:200])
        if reasoning.strip():
            return True, "reasoning: arrives separately in message.%s: %s" % (field, quote(reasoning)), detail
        inline = " (it came inline in the content)" if "<think>" in content or "</think>" in content else ""
        return False, ("reasoning: no reasoning_content or reasoning in the answer%s: the engine separates no reasoning "
                       "(is its reasoning parser set, profile parsers.reasoning?); content: %s" % (inline, quote(content))), detail

    def check_tools(self):
        body = merge_request({"model": self.model, "messages": [{"role": "user", "content": TOOLS_QUESTION}],
                              "tools": [WEATHER_TOOL], "tool_choice": "auto", "max_tokens": TOOLS_MAX_TOKENS,
                              "temperature": 0}, self.tool_request_overrides)
        name = WEATHER_TOOL["function"]["name"]
        answer = self.api.call("POST", CHAT, body=body)
        detail = {"http_status": answer.status, "overrides": sorted(self.tool_request_overrides)}
        if answer.status != 200:
            return False, "tools: POST %s %s" % (CHAT, answer.describe()), detail
        message = _first_choice(answer.json).get("message")
        message = message if isinstance(message, dict) else {}
        calls = message.get("tool_calls")
        content = message.get("content") if isinstance(message.get("content"), str) else ""
        if not isinstance(calls, list) or not calls:
            detail["content"] = content[:200]
            return False, ("tools: the answer has no tool_calls (is the engine's tool-call parser set, profile "
                           "parsers.tool_call?); content: %s" % quote(content)), detail
        function = (calls[0] or {}).get("function") if isinstance(calls[0], dict) else None
        function = function if isinstance(function, dict) else {}
        called, arguments = function.get("name"), function.get("arguments")
        detail.update(function=called, arguments=arguments if isinstance(arguments, (str, dict)) else None,
                      tool_calls=len(calls))
        if called != name:
            return False, "tools: the first tool call names %r, expected %r" % (called, name), detail
        try:
            parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
        except ValueError:
            return False, "tools: the arguments of %s are not JSON: %s" % (name, quote(arguments)), detail
        if not isinstance(parsed, dict) or "city" not in parsed:
            return False, "tools: the arguments of %s lack 'city': %s" % (name, quote(arguments)), detail
        return True, "tools: structured tool call %s(%s)" % (name, json.dumps(parsed, sort_keys=True)), detail


def parse_routes(routes):
    """["GET /version", ...] -> [("GET", "/version"), ...]; ValueError on anything else."""
    parsed = []
    for route in routes or ():
        parts = str(route).split()
        if len(parts) != 2 or parts[0] not in ("GET", "POST") or not parts[1].startswith("/"):
            raise ValueError("auth_routes: expected 'GET /path' or 'POST /path', got %r" % (route,))
        parsed.append((parts[0], parts[1]))
    return parsed


def _first_choice(body):
    choices = body.get("choices") if isinstance(body, dict) else None
    first = choices[0] if isinstance(choices, list) and choices else None
    return first if isinstance(first, dict) else {}


def _completion_tokens(body):
    usage = body.get("usage") if isinstance(body, dict) else None
    tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
    return tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else None


def _empty_text_note(completion_tokens, text=""):
    """For an empty answer: what usage says the engine generated (an engine that generated
    nothing and one whose tokens decode to nothing printable need different fixes), and
    whether the text was empty or only blanks."""
    if not completion_tokens:
        return ""
    seen = "blank text (whitespace tokens only" if text else "empty text (special tokens only"
    return (" although usage counts %d completion tokens that decode to %s: check the model's tokenizer and "
            "chat template)" % (completion_tokens, seen))


def _reasoning_of(message):
    """(field, text): vLLM renamed reasoning_content to reasoning; either counts."""
    for field in ("reasoning_content", "reasoning"):
        value = message.get(field)
        if isinstance(value, str) and value.strip():
            return field, value
    return None, ""


def _model_ids(body):
    data = body.get("data") if isinstance(body, dict) else None
    return [str(m.get("id")) for m in data if isinstance(m, dict) and m.get("id") is not None] if isinstance(data, list) else []


def _check_result(name, ok, message, seconds, detail, skipped=False):
    return {"name": name, "ok": bool(ok), "skipped": skipped, "message": message, "seconds": round(seconds, 3),
            "detail": detail or {}}


def validate_smoke(smoke):
    """ValueError naming what is wrong with a profile's smoke mapping (None is allowed: no smoke test)."""
    if smoke is None:
        return
    if not isinstance(smoke, dict):
        raise ValueError("smoke must be a mapping, got %r" % (smoke,))
    endpoint = smoke.get("endpoint") or "completions"
    if endpoint not in SMOKE_ENDPOINTS:
        raise ValueError("smoke.endpoint must be one of %s, got %r" % (", ".join(SMOKE_ENDPOINTS), endpoint))
    for key in ("prompt", "expect"):
        if not isinstance(smoke.get(key), str) or not smoke[key]:
            raise ValueError("smoke.%s must be a non-empty string, got %r" % (key, smoke.get(key)))
    max_tokens = smoke.get("max_tokens")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
        raise ValueError("smoke.max_tokens must be an integer >= 1, got %r" % (max_tokens,))
    kwargs = smoke.get("chat_template_kwargs")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise ValueError("smoke.chat_template_kwargs must be a mapping, got %r" % (kwargs,))


def run_checks(url, api_key, model, checks=None, smoke=None, tool_request_overrides=None, generation_deadline=60.0,
               request_timeout=120.0, clock=time.monotonic, auth_routes=OPEN_ROUTE_PROBES):
    """Run the requested checks (CHECK_ORDER decides the order) against the API at `url`.

    Returns {checks: [{name, ok, skipped, message, seconds, detail}], failed_checks: [names],
    skipped_checks: [names], passed: count, summary: one line}. A skipped check is neither passed
    nor failed: the smoke check without a smoke section, everything after health when nothing
    answers, the generation checks after generation found the engine wedged. `api_key` is
    needed by every check but health and is redacted from everything returned."""
    names = ordered_checks(checks)
    validate_smoke(smoke)
    if float(generation_deadline) <= 0 or float(request_timeout) <= 0:
        raise ValueError("generation_deadline and request_timeout must be > 0")
    if tool_request_overrides is not None and not isinstance(tool_request_overrides, dict):
        raise ValueError("tool_request_overrides must be a mapping, got %r" % (tool_request_overrides,))
    if needs_key(names) and not api_key:
        raise ValueError("checks %s need the API key" % ", ".join(n for n in names if n not in KEYLESS_CHECKS))
    api = Api(url, api_key, timeout=request_timeout, clock=clock)
    probe = Probe(api, model, smoke=smoke, tool_request_overrides=tool_request_overrides,
                  generation_deadline=generation_deadline, auth_routes=auth_routes)
    results = []
    skip_reason = None
    for name in names:
        started = clock()
        if skip_reason and (name in SKIPPED_WHEN_WEDGED or skip_reason[0] == "unreachable"):
            results.append(_check_result(name, False, "%s: skipped: %s" % (name, skip_reason[1]), 0.0, {}, skipped=True))
            continue
        if name == "smoke" and not smoke:
            results.append(_check_result(name, False, "smoke: skipped: the profile has no smoke section", 0.0, {},
                                         skipped=True))
            continue
        ok, message, detail = getattr(probe, "check_" + name)()
        results.append(_check_result(name, ok, message, clock() - started, detail))
        if name == "health" and detail.get("unreachable"):
            skip_reason = ("unreachable", "nothing answers at %s (see health)" % api.base)
        elif name == "generation" and detail.get("wedged"):
            skip_reason = ("wedged", "the engine is wedged (see generation)")
    results = redact(results, api_key)
    failed = [r["name"] for r in results if not r["ok"] and not r["skipped"]]
    skipped = [r["name"] for r in results if r["skipped"]]
    passed = sum(1 for r in results if r["ok"])
    summary = "%d of %d checks passed" % (passed, len(results))
    if failed:
        summary += "; failed: %s" % ", ".join(failed)
    if skipped:
        summary += "; skipped: %s" % ", ".join(skipped)
    # Not "failed"/"skipped": Ansible reads those top-level keys of a module's result as the
    # task's own status, and a failed check must not fail the task (the caller decides).
    return {"checks": results, "failed_checks": failed, "skipped_checks": skipped, "passed": passed, "summary": summary}

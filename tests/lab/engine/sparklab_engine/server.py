"""The OpenAI-compatible HTTP API of the stand-in (stdlib ThreadingHTTPServer, HTTP/1.1,
chunked server-sent events for streams), plus the loopback-only /_standin control routes.

Auth like vLLM's --api-key middleware: every /v1/* route needs `Authorization: Bearer KEY`;
/health, /ping and /version answer without it. /_standin/* answers only a loopback client."""

from __future__ import annotations

import hmac
import ipaddress
import json
import socket
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from sparklab_engine import __version__, metrics
from sparklab_engine.engine import REASONING, answer, count_tokens
from sparklab_engine.timing import validate_update

DEFAULT_MAX_TOKENS = 16


class ApiError(Exception):
    def __init__(self, status, message, kind="BadRequestError", param=None):
        super().__init__(message)
        self.status, self.message, self.kind, self.param = status, message, kind, param

    def body(self):
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.status}}


def is_loopback(host):
    """True for 127.0.0.0/8, ::1 and IPv4-mapped loopback; the control routes' only check."""
    try:
        address = ipaddress.ip_address(str(host).split("%", 1)[0])
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback


def _text_of(content):
    """A chat message's content: a string or a list of {"type": "text", "text": ...} parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def _int_field(body, names, default):
    for name in names:
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ApiError(400, f"{name} must be an integer >= 1, got {value!r}", param=name)
        return value
    return default


def _argument_value(schema, text):
    kind = (schema or {}).get("type")
    if kind in ("integer", "number"):
        return 1
    if kind == "boolean":
        return True
    if kind == "array":
        return []
    if kind == "object":
        return {}
    return "Tokyo" if "japan" in text.lower() else "sparklab"


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address, engine):
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.engine = engine
        super().__init__(address, Handler)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = f"sparklab-engine/{__version__}"

    # ---- plumbing -----------------------------------------------------------------------

    def setup(self):
        super().setup()
        # Token chunks are tiny: without this, Nagle + delayed ACK would pace them, not the model.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, fmt, *args):  # no access log: /health polling would flood the journal
        pass

    @property
    def engine(self):
        return self.server.engine

    def _send(self, status, body=None):
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if data:
            self.wfile.write(data)

    def _send_text(self, status, text, content_type):
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self):
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _json(self, raw):
        try:
            body = json.loads(raw or b"{}")
        except ValueError as exc:
            raise ApiError(400, f"invalid JSON body: {exc}") from None
        if not isinstance(body, dict):
            raise ApiError(400, "the body must be a JSON object")
        return body

    def _authorized(self):
        key = self.engine.settings.api_key
        if not key:
            return True
        given = self.headers.get("Authorization", "")
        return hmac.compare_digest(given.encode(), f"Bearer {key}".encode())

    def _start_stream(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()

    def _event(self, payload):
        data = ("data: " + (payload if isinstance(payload, str) else json.dumps(payload)) + "\n\n").encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _end_stream(self):
        self._event("[DONE]")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    # ---- dispatch -----------------------------------------------------------------------

    def do_GET(self):
        self._dispatch("GET")

    def do_POST(self):
        self._dispatch("POST")

    def _dispatch(self, method):
        path = self.path.split("?", 1)[0]
        raw = self._body() if method == "POST" else b""
        engine = self.engine
        engine.stats.request(f"{method} {path}")
        try:
            if path in ("/health", "/ping"):
                return self._send(200 if engine.healthy else 503)
            # vLLM serves /metrics without its --api-key (the API proxy asks for the key).
            if path == "/metrics" and method == "GET":
                return self._send_text(200, metrics.render(engine.settings.served_model_name, engine.stats.snapshot(),
                                                           metrics.latencies_of(engine), engine.settings.max_num_seqs),
                                       "text/plain; version=0.0.4; charset=utf-8")
            if path == "/version":
                return self._send(200, {"version": __version__, "engine": "sparklab_engine (lab stand-in, not vLLM)"})
            if path.startswith("/_standin/"):
                return self._control(method, path, raw)
            if path.startswith("/v1/"):
                if not self._authorized():
                    engine.stats.add("unauthorized")
                    return self._send(401, {"error": "Unauthorized"})
                if not engine.ready:
                    raise ApiError(503, "the engine is starting", kind="ServiceUnavailableError")
                if (method, path) == ("GET", "/v1/models"):
                    return self._send(200, self._models())
                if (method, path) == ("POST", "/v1/completions"):
                    return self._generate(self._json(raw), chat=False)
                if (method, path) == ("POST", "/v1/chat/completions"):
                    return self._generate(self._json(raw), chat=True)
            return self._send(404, {"detail": "Not Found"})
        except ApiError as exc:
            engine.stats.add("rejected")
            return self._send(exc.status, exc.body())
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _control(self, method, path, raw):
        host = self.client_address[0]
        if not is_loopback(host):
            return self._send(403, {"error": f"/_standin/* answers loopback clients only, not {host}"})
        engine = self.engine
        try:
            if path == "/_standin/faults":
                if method == "POST":
                    engine.log.warning(f"stand-in faults set: {raw.decode(errors='replace')}")
                    engine.faults.update(self._json(raw))
                return self._send(200, dict(engine.faults.state))
            if path == "/_standin/timing":
                if method == "POST":
                    for key, value in validate_update(self._json(raw)).items():
                        setattr(engine.timing, key, value)
                    engine.log.info(f"stand-in timing set: {engine.timing.as_dict()}")
                return self._send(200, engine.timing.as_dict())
            if path == "/_standin/stats" and method == "GET":
                return self._send(200, dict(engine.stats.snapshot(), ready=engine.ready, faults=dict(engine.faults.state),
                                            timing=engine.timing.as_dict(), ranks=self._ranks()))
        except ValueError as exc:
            raise ApiError(400, str(exc)) from None
        return self._send(404, {"detail": "Not Found"})

    def _ranks(self):
        """Rank mode's state, for tests and the lab (vLLM itself shows nothing of a lost rank)."""
        ranks = self.engine.ranks
        if ranks is None:
            return None
        return {"joined": {str(rank): ip for rank, ip in dict(ranks.joined).items()}, "lost": ranks.lost_ranks(),
                "dead": self.engine.dead}

    # ---- OpenAI routes ------------------------------------------------------------------

    def _models(self):
        s = self.engine.settings
        return {"object": "list", "data": [{
            "id": s.served_model_name, "object": "model", "created": int(self.engine.started_at), "owned_by": "sparklab",
            "root": s.model_dir, "parent": None, "max_model_len": self.engine.max_model_len}]}

    def _request(self, body, chat):
        """Validate a request -> (prompt_tokens, plan) with plan = [(field, tokens)], finish."""
        engine = self.engine
        s = engine.settings
        model = body.get("model")
        if model is not None and model != s.served_model_name:
            raise ApiError(404, f"The model `{model}` does not exist.", kind="NotFoundError", param="model")
        max_tokens = _int_field(body, ("max_completion_tokens", "max_tokens") if chat else ("max_tokens",), DEFAULT_MAX_TOKENS)
        wrong = engine.faults["wrong_answer"]
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
                raise ApiError(400, "messages must be a non-empty list of objects", param="messages")
            prompt_tokens = sum(count_tokens(_text_of(m.get("content"))) for m in messages)
            users = [_text_of(m.get("content")) for m in messages if m.get("role") == "user"]
            text = users[-1] if users else ""
        else:
            prompt = body.get("prompt")
            if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
                prompt = prompt[0]
            if isinstance(prompt, str):
                prompt_tokens, text = count_tokens(prompt), prompt
            elif isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
                prompt_tokens, text = len(prompt), ""
            else:
                raise ApiError(400, "prompt must be a string, a one-string list or a list of token ids", param="prompt")
        limit = engine.max_model_len
        if prompt_tokens + max_tokens > limit:
            raise ApiError(400, f"This model's maximum context length is {limit} tokens. However, you requested "
                                f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the messages, {max_tokens} in the "
                                f"completion). Please reduce the length of the messages or completion.", param="max_tokens")
        plan = []
        if chat:
            tool_call = self._tool_call(body, text)
            if tool_call is not None:
                return prompt_tokens, [("tool_calls", [tool_call])], "tool_calls"
            thinking = (body.get("chat_template_kwargs") or {}).get("enable_thinking", True)
            if s.reasoning_parser and thinking:
                reasoning = REASONING[:max_tokens]
                plan.append(("reasoning_content", reasoning))
                max_tokens -= len(reasoning)
        tokens, finish = answer(text, max_tokens, wrong=wrong) if max_tokens > 0 else ([], "length")
        plan.append(("content" if chat else "text", tokens))
        return prompt_tokens, plan, finish

    def _tool_call(self, body, text):
        tools = body.get("tools") or []
        choice = body.get("tool_choice", "auto" if tools else "none")
        if not tools or choice == "none":
            return None
        s = self.engine.settings
        if choice == "auto" and not (s.enable_auto_tool_choice and s.tool_call_parser):
            raise ApiError(400, '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set')
        functions = [t.get("function") or {} for t in tools if isinstance(t, dict)]
        chosen = functions[0] if functions else {}
        if isinstance(choice, dict):
            wanted = (choice.get("function") or {}).get("name")
            chosen = next((f for f in functions if f.get("name") == wanted), None)
            if chosen is None:
                raise ApiError(400, f"tool_choice names a function that is not in tools: {wanted!r}", param="tool_choice")
        params = chosen.get("parameters") or {}
        props = params.get("properties") or {}
        names = params.get("required") or list(props)
        arguments = json.dumps({n: _argument_value(props.get(n), text) for n in names})
        return {"id": f"chatcmpl-tool-{uuid.uuid4().hex[:24]}", "type": "function",
                "function": {"name": chosen.get("name", ""), "arguments": arguments}}

    def _generate(self, body, chat):
        engine = self.engine
        prompt_tokens, plan, finish = self._request(body, chat)
        dead = engine.check_ranks()
        if dead:
            # vLLM's EngineDeadError: the request that first needs the lost rank fails at once.
            raise ApiError(500, dead, kind="InternalServerError")
        stream = bool(body.get("stream"))
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        created = int(time.time())
        base = {"id": rid, "object": "chat.completion.chunk" if chat else "text_completion", "created": created,
                "model": engine.settings.served_model_name}
        engine.stats.add("generations")
        engine.stats.add("prompt_tokens", prompt_tokens)
        # A tool call is emitted whole, as one paced unit; its size in "tokens" is its words.
        units = [(name, tok) for name, tokens in plan for tok in tokens]
        weights = [count_tokens(tok["function"]["arguments"]) or 1 if name == "tool_calls" else 1 for name, tok in units]
        paced = engine.generator.paced(units, prompt_tokens)
        produced = {}
        sent = 0
        latencies = metrics.latencies_of(engine)
        started = last_token = time.monotonic()
        try:
            if stream:
                self._start_stream()
            for index, (name, tok) in enumerate(paced):
                now = time.monotonic()
                (latencies.next_token if index else latencies.first_token)(now - (last_token if index else started))
                last_token = now
                produced.setdefault(name, []).append(tok)
                sent += weights[index]
                if not stream:
                    continue
                last = index == len(units) - 1
                if chat:
                    delta = {"role": "assistant", "content": ""} if index == 0 else {}
                    if name == "tool_calls":
                        delta = dict(delta, content=None, tool_calls=[dict(tok, index=0)])
                    else:
                        delta[name] = tok
                    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish if last else None}
                else:
                    choice = {"index": 0, "text": tok, "logprobs": None, "finish_reason": finish if last else None,
                              "stop_reason": None}
                self._event(dict(base, choices=[choice]))
            if engine.stop.is_set():
                self.close_connection = True
                return None
        finally:
            paced.close()
        latencies.finish(time.monotonic() - started, finish)
        usage = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + sent, "completion_tokens": sent}
        if stream:
            if include_usage:
                self._event(dict(base, choices=[], usage=usage))
            self._end_stream()
            return None
        if chat:
            message = {"role": "assistant", "content": "".join(produced.get("content", [])) if "tool_calls" not in produced else None,
                       "tool_calls": produced.get("tool_calls", [])}
            if "reasoning_content" in produced:
                message["reasoning_content"] = "".join(produced["reasoning_content"])
            choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish, "stop_reason": None}
            return self._send(200, dict(base, object="chat.completion", choices=[choice], usage=usage))
        choice = {"index": 0, "text": "".join(produced.get("text", [])), "logprobs": None, "finish_reason": finish,
                  "stop_reason": None}
        return self._send(200, dict(base, choices=[choice], usage=usage))

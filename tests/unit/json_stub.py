"""The base of the unit tests' stand-in HTTP servers: HTTP/1.1 keep-alive, no access log on
stderr, and one way to answer with a JSON body."""

from __future__ import annotations

import http.server
import json


class QuietJSONHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send_json(self, status, payload):
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

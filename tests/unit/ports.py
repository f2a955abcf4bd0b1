"""A free TCP port on 127.0.0.1 for a test's own server (the kernel picks it; the socket is closed
before the server binds it)."""

from __future__ import annotations

import socket


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]

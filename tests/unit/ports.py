"""A free TCP port on 127.0.0.1 for a test's own server (the kernel picks it; the socket is closed
before the server binds it), and the wait until that server listens."""

from __future__ import annotations

import socket
import time


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_listening(port: int, process, seconds: float = 10.0) -> bool:
    """Whether the server process started listens on 127.0.0.1:port within seconds (False as soon
    as the process has ended)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return True
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                return False
            time.sleep(0.05)

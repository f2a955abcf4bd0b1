"""vLLM-shaped log lines: `LEVEL MM-DD HH:MM:SS [sparklab_engine] message`, one per line,
flushed at once (the unit's journal and the verify stage read them as they come)."""

from __future__ import annotations

import sys
import threading
import time


class Log:
    def __init__(self, stream=None):
        self._stream = stream
        self._lock = threading.Lock()
        self.lines: list[str] = []

    def _write(self, level, message, prefix=""):
        stamp = time.strftime("%m-%d %H:%M:%S")
        line = f"{prefix}{level} {stamp} [sparklab_engine] {message}"
        with self._lock:
            self.lines.append(line)
            stream = self._stream or sys.stdout
            stream.write(line + "\n")
            stream.flush()

    def info(self, message, prefix=""):
        self._write("INFO", message, prefix)

    def warning(self, message, prefix=""):
        self._write("WARNING", message, prefix)

    def error(self, message, prefix=""):
        self._write("ERROR", message, prefix)

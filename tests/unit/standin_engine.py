"""The lab's stand-in engine (tests/lab/engine, vLLM-shaped flags) serving in a thread on
127.0.0.1 with the mp backend, no Ray: what the API proxy and engine probe tests talk to."""

from __future__ import annotations

import io
import sys
import threading
import time
from pathlib import Path

ENGINE = Path(__file__).resolve().parents[1] / "lab" / "engine"
if str(ENGINE) not in sys.path:
    sys.path.insert(0, str(ENGINE))

from sparklab_engine import cli  # noqa: E402
from sparklab_engine.app import EngineServer  # noqa: E402
from sparklab_engine.log import Log  # noqa: E402


def start_standin(model_dir, model, flags, env):
    """(engine server, its thread) once it answers: model_dir served as `model` on a free port,
    with the extra flags and the environment given."""
    argv = [str(model_dir), "--served-model-name", model, "--host", "127.0.0.1", "--port", "0",
            "--distributed-executor-backend", "mp", "--max-model-len", "4096", "--max-num-seqs", "16", *flags]
    engine = EngineServer(cli.parse_serve(argv, env), Log(io.StringIO()))
    thread = threading.Thread(target=engine.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 5
    while engine.httpd is None or not engine.ready:
        assert thread.is_alive() and time.monotonic() < deadline, "the stand-in did not start"
        time.sleep(0.01)
    return engine, thread

"""A real OpenAI-compatible server nobody here wrote, on loopback: Hugging Face's
`transformers serve` on the CPU, serving a tiny model built locally (build_tiny_model.py),
from its own venv (setup.sh). The suite's real-server stage runs setup.sh first."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
VENV = Path(os.environ.get("SPARKCTL_REALSERVER_VENV", REPO / ".venv-realserver"))
START_TIMEOUT_S = 180


def _free_loopback_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _offline_env(home: Path) -> dict:
    """Nothing reaches a model hub or leaves loopback: the model is a local directory."""
    env = {key: value for key, value in os.environ.items() if not key.lower().endswith("_proxy")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HOME=str(home / "hf-home"),
               HF_HUB_DISABLE_TELEMETRY="1", TOKENIZERS_PARALLELISM="false", NO_PROXY="127.0.0.1,localhost")
    return env


@pytest.fixture(scope="session")
def real_server(tmp_path_factory):
    python, serve = VENV / "bin" / "python", VENV / "bin" / "transformers"
    if not serve.exists():
        pytest.fail(f"the real server's venv is missing ({VENV}): run `bash tests/realserver/setup.sh` first")
    work = tmp_path_factory.mktemp("realserver")
    model = work / "tiny-llama"
    env = _offline_env(work)
    subprocess.run([str(python), str(HERE / "build_tiny_model.py"), str(model)], check=True, env=env,
                   capture_output=True, text=True, timeout=300)
    port = _free_loopback_port()
    log_path = work / "serve.log"
    with open(log_path, "wb") as log:
        server = subprocess.Popen([str(serve), "serve", "--host", "127.0.0.1", "--port", str(port),
                                   "--device", "cpu", str(model)],
                                  stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if server.poll() is not None:
                pytest.fail(f"transformers serve exited ({server.returncode}):\n{log_path.read_text()[-3000:]}")
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"transformers serve not healthy after {START_TIMEOUT_S} s:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.5)
        yield {"url": url, "model": str(model), "log": log_path, "env": env, "repo": REPO}
    finally:
        # Only the process this fixture started, by its PID.
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=30)

"""Make the project's collection importable as ansible_collections.sparkctl.spark, and share
the fixtures that keep hub tests on loopback with a private huggingface_hub home, and the hub
stand-in serving a test module's checkpoint."""

import ipaddress
import socket
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
COLLECTIONS = REPO / "collections"
if str(COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS))

# The wrapper package, importable without installing it.
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

# The lab's fixture generators (tests/lab/node/roce_fixture.py) double as test helpers.
LAB_NODE = REPO / "tests" / "lab" / "node"
if str(LAB_NODE) not in sys.path:
    sys.path.insert(0, str(LAB_NODE))

# The observe stage's alert rules as rendered and promtool (tests/lab/alert_rules.py), shared with the lab's tests.
LAB_DIR = REPO / "tests" / "lab"
if str(LAB_DIR) not in sys.path:
    sys.path.insert(0, str(LAB_DIR))

# The hub stand-in and checkpoint generator (tests/lab/hub) double as test helpers.
HUB_DIR = REPO / "tests" / "lab" / "hub"
if str(HUB_DIR) not in sys.path:
    sys.path.insert(0, str(HUB_DIR))


def _is_loopback(host) -> bool:
    if host in (None, "localhost"):
        return True
    try:
        return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
    except ValueError:
        return False


@pytest.fixture(scope="module")
def loopback_only():
    """Refuse, and record, any connection or name lookup that is not loopback."""
    attempts = []
    real_connect, real_getaddrinfo = socket.socket.connect, socket.getaddrinfo

    def connect(sock, address):
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not _is_loopback(address[0]):
            attempts.append(("connect", address))
            raise ConnectionRefusedError(f"test guard: {address} is not loopback")
        return real_connect(sock, address)

    def getaddrinfo(host, *args, **kwargs):
        if not _is_loopback(host):
            attempts.append(("getaddrinfo", host))
            raise socket.gaierror(f"test guard: refusing to resolve {host!r}")
        return real_getaddrinfo(host, *args, **kwargs)

    mp = pytest.MonkeyPatch()
    mp.setattr(socket.socket, "connect", connect)
    mp.setattr(socket, "getaddrinfo", getaddrinfo)
    yield attempts
    mp.undo()
    assert attempts == [], f"requests left loopback: {attempts}"


@pytest.fixture(scope="module")
def hf(tmp_path_factory):
    """huggingface_hub with a private HF_HOME, telemetry off, online, and no ambient token."""
    home = tmp_path_factory.mktemp("hf_home")
    mp = pytest.MonkeyPatch()
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_OIDC_RESOURCE", "HF_ENDPOINT"):
        mp.delenv(var, raising=False)
    mp.setenv("HF_HOME", str(home))
    mp.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    mp.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    import huggingface_hub
    from huggingface_hub import constants

    # The constants are read at import time; re-point them in case something imported the
    # library before this module.
    for name, value in {
        "HF_HOME": str(home),
        "HF_HUB_CACHE": str(home / "hub"),
        "HF_TOKEN_PATH": str(home / "token"),
        "HF_STORED_TOKENS_PATH": str(home / "stored_tokens"),
        "HF_HUB_OFFLINE": False,
        "HF_HUB_DISABLE_TELEMETRY": True,
    }.items():
        mp.setattr(constants, name, value)
    yield huggingface_hub
    mp.undo()


# -- a hub stand-in serving the test module's checkpoint ---------------------------------------
# A module that serves one sets HUB_CHECKPOINT (make_checkpoint's shards, shard_bytes, seed) and
# REPO_ID, and HUB_TOKEN when the stand-in must require a token; `ckpt` is the checkpoint,
# `stub` the stand-in serving it for the whole module, `hub` that stand-in reset around a test.


@pytest.fixture(scope="module")
def ckpt(request, tmp_path_factory):
    from make_checkpoint import make_checkpoint

    root = tmp_path_factory.mktemp("ckpt")
    make_checkpoint(root, workers=1, **request.module.HUB_CHECKPOINT)
    return root


@pytest.fixture(scope="module")
def big_ckpt(tmp_path_factory):
    """Shards just over huggingface_hub's 10 MiB write chunk, so a cut can be resumed with a Range."""
    from make_checkpoint import make_checkpoint

    root = tmp_path_factory.mktemp("ckpt_big")
    make_checkpoint(root, shards=2, shard_bytes=12 << 20, seed=12, workers=1)
    return root


@pytest.fixture(scope="module")
def stub(request, ckpt):
    from hubstub import HubStub

    with HubStub(ckpt, request.module.REPO_ID, token=getattr(request.module, "HUB_TOKEN", None)) as server:
        yield server


@pytest.fixture
def hub(stub):
    stub.reset()
    yield stub
    stub.reset()


# tests/suite.sh runs the timed tests alone, collecting only the files whose text names the marker
# (grep 'pytest.mark.timing'); the other unit stage deselects them by marker. A timed test marked
# any other way would run in neither stage: the collection that sees it fails instead.
TIMING_MARK_TEXT = "pytest.mark.timing"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    hidden = sorted({str(item.path) for item in items if item.get_closest_marker("timing")
                     and TIMING_MARK_TEXT not in item.path.read_text(encoding="utf-8")})
    if hidden:
        raise pytest.UsageError(f"timed tests in files that do not name {TIMING_MARK_TEXT!r} "
                                f"(tests/suite.sh would not run them): {', '.join(hidden)}")


@pytest.fixture
def no_network():
    """(the requests a benchmark client sent, an httpx transport that records and refuses them): for the
    usage errors that must stop it before any request."""
    import httpx

    calls = []

    def handler(request):
        calls.append(request)
        return httpx.Response(599)

    return calls, httpx.MockTransport(handler)

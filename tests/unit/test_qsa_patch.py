"""The Qwen SGLang image's attention patch (profiles/contexts/qwen38-flash-next-sglang/
patch_qsa_backend.py), run on stand-in copies of the file it patches: a stock resolver
without a GB10 path gets the Triton fallback once; one that already dispatches sm_121 to
SGLang's own kernel is left alone (the patch would route around it); a moved anchor fails
the build."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

PATCH = (Path(__file__).resolve().parents[2] / "collections/ansible_collections/sparkctl/spark/profiles/contexts"
         / "qwen38-flash-next-sglang" / "patch_qsa_backend.py")

WITHOUT_GB10_PATH = '''
def _resolve_flash_attn_varlen_func():
    try:
        from flash_attn import flash_attn_varlen_func

        return flash_attn_varlen_func
    except ImportError:
        from flash_attn.cute import flash_attn_varlen_func

        return flash_attn_varlen_func
'''

# The shape of the pinned SGLang releases' resolver (0.5.20 to 0.5.23 wheels): sm_121 first.
WITH_OWN_GB10_PATH = '''
def _resolve_flash_attn_varlen_func():
    from sglang.srt.utils import is_hip, is_sm121

    if is_sm121():
        from sglang.kernels.ops.attention import (
            qwen38_qsa_sm121_varlen,
        )

        return qwen38_qsa_sm121_varlen
    from flash_attn import flash_attn_varlen_func

    return flash_attn_varlen_func


def _other():
    return None
'''


def run(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(PATCH), str(path)], capture_output=True, text=True, check=False)


@pytest.fixture
def backend(tmp_path):
    return tmp_path / "qwen_sparse_attn_backend.py"


def test_a_resolver_without_a_gb10_path_is_patched_once(backend):
    backend.write_text(WITHOUT_GB10_PATH)
    assert run(backend).returncode == 0
    patched = backend.read_text()
    assert patched.startswith(WITHOUT_GB10_PATH) and "# sparkctl: sm_121 Triton fallback" in patched
    compile(patched, str(backend), "exec")
    assert run(backend).returncode == 0
    assert backend.read_text() == patched


def test_a_resolver_that_dispatches_sm121_itself_is_left_alone(backend):
    backend.write_text(WITH_OWN_GB10_PATH)
    proc = run(backend)
    assert proc.returncode == 0, proc.stderr
    assert backend.read_text() == WITH_OWN_GB10_PATH
    assert "already routes sm_121 to its own kernel" in proc.stdout


def test_a_moved_anchor_fails_the_build(backend):
    backend.write_text("def something_else():\n    return None\n")
    proc = run(backend)
    assert proc.returncode == 1
    assert "_resolve_flash_attn_varlen_func not found" in proc.stderr

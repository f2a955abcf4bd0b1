"""The stand-in's compile step: what a real engine's first boot spends minutes on (FlashInfer JIT,
torch.compile, Triton), modelled as a delay and one cache file.

Each rank runs it on its own node, before loading weights. The cache lives where FlashInfer puts
its JIT kernels: under $FLASHINFER_WORKSPACE_BASE (sparkctl points it at its per-runtime cache
directory in engine.env). A rank that finds the kernel file with the expected content skips the
delay (warm); one that does not sleeps SPARKLAB_ENGINE_COMPILE_S and writes it (cold). Without
the variable there is nowhere to keep the kernel: every boot compiles (uncached)."""

from __future__ import annotations

import hashlib
import os
import time

CACHE_VARIABLE = "FLASHINFER_WORKSPACE_BASE"
DELAY_VARIABLE = "SPARKLAB_ENGINE_COMPILE_S"
KERNEL_REL = os.path.join(".cache", "flashinfer", "sparklab", "fused_moe_standin.so")


def kernel_content(version):
    """The 'compiled kernel': a function of the engine's version only, as a real JIT's output
    depends on the runtime that compiled it."""
    return ("sparklab_engine %s fused_moe_standin\n" % version).encode() + hashlib.sha256(version.encode()).digest()


def compile_step(env, version, sleep=time.sleep, clock=time.monotonic):
    """{state: warm|cold|uncached, path, seconds}; never raises for a cache it cannot write (a
    real JIT that cannot cache still serves, it only compiles again next time)."""
    try:
        delay = max(0.0, float(env.get(DELAY_VARIABLE) or 0))
    except ValueError:
        delay = 0.0
    base = env.get(CACHE_VARIABLE)
    expected = kernel_content(version)
    path = os.path.join(base, KERNEL_REL) if base else None
    if path:
        try:
            with open(path, "rb") as handle:
                if handle.read() == expected:
                    return {"state": "warm", "path": path, "seconds": 0.0}
        except OSError:
            pass
    started = clock()
    sleep(delay)
    result = {"state": "uncached", "path": path, "seconds": clock() - started}
    if path:
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = "%s.%d.tmp" % (path, os.getpid())
            with open(tmp, "wb") as handle:
                handle.write(expected)
            os.replace(tmp, path)
            result["state"] = "cold"
        except OSError as exc:
            result["error"] = str(exc)
    return result


def describe(result):
    """The rank's startup line."""
    if result["state"] == "warm":
        return f"JIT cache warm: kernel found in {result['path']} (compile skipped)"
    if result["state"] == "cold":
        return f"JIT cache cold: compiled kernel in {result['seconds']:.2f} s into {result['path']}"
    reason = result.get("error") or f"{CACHE_VARIABLE} is not set"
    return f"JIT cache none: compiled kernel in {result['seconds']:.2f} s, not cached ({reason})"

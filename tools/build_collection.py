"""Build the sparkctl.spark collection artifact, complete: its plugins and profiles, and the
repository's roles/ and playbooks/, which the checkout keeps at its top level (one copy of
every task; `ansible-galaxy collection build` itself would take only what sits inside the
collection directory, and skips a link to a directory outside it).

    python3 tools/build_collection.py [--output DIR] [--install DIR]

Copies collections/ansible_collections/sparkctl/spark, roles/ and playbooks/ into a staging
directory, runs `ansible-galaxy collection build` on it and prints the artifact's path;
--install then installs that artifact into DIR (`ansible-galaxy collection install -p DIR`).
Roles are named by their short names in the playbooks: the checkout finds them through its
ansible.cfg's roles_path, an installed collection's playbook through its own collection,
which Ansible searches first for a playbook inside a collection."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COLLECTION = REPO / "collections" / "ansible_collections" / "sparkctl" / "spark"
# Repository directories that become directories of the same name in the collection.
SHARED = ("roles", "playbooks")
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache", "output")


def stage(into: Path, repo: Path = REPO) -> Path:
    """The collection directory as the artifact holds it, assembled under `into`."""
    collection = repo / "collections" / "ansible_collections" / "sparkctl" / "spark"
    staged = into / "ansible_collections" / "sparkctl" / "spark"
    shutil.copytree(collection, staged, ignore=IGNORED)
    for name in SHARED:
        if (staged / name).exists():
            raise SystemExit(f"{collection / name} exists: the collection's {name}/ is the repository's "
                             f"top-level {name}/ (remove the one inside the collection)")
        shutil.copytree(repo / name, staged / name, ignore=IGNORED)
    return staged


def ansible_tool(name: str) -> str:
    """The ansible CLI of this Python's environment (a venv need not be on PATH)."""
    beside = Path(sys.executable).with_name(name)
    return str(beside) if beside.is_file() else name


def build(output: Path, repo: Path = REPO) -> Path:
    output.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="sparkctl-collection-") as tmp:
        staged = stage(Path(tmp), repo)
        subprocess.run([ansible_tool("ansible-galaxy"), "collection", "build", "--force",
                        "--output-path", str(output), str(staged)], check=True, stdout=subprocess.DEVNULL)
    artifacts = sorted(output.glob("sparkctl-spark-*.tar.gz"), key=lambda path: path.stat().st_mtime)
    return artifacts[-1]


def install(artifact: Path, into: Path) -> Path:
    subprocess.run([ansible_tool("ansible-galaxy"), "collection", "install", "--force", "-p", str(into),
                    str(artifact)], check=True, stdout=subprocess.DEVNULL)
    return into / "ansible_collections" / "sparkctl" / "spark"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, default=REPO / "build",
                        help="where the artifact goes (default: build/ in the checkout)")
    parser.add_argument("--install", type=Path, metavar="DIR",
                        help="then install it into DIR (a collection path: DIR/ansible_collections/sparkctl/spark)")
    args = parser.parse_args(argv)
    artifact = build(args.output.absolute())
    print(artifact)
    if args.install:
        print(install(artifact, args.install.absolute()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

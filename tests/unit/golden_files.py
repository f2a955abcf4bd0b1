"""Golden-file comparison shared by the rendering tests: the rendered text must equal the
file under tests/unit/golden/; SPARKCTL_UPDATE_GOLDEN=1 rewrites the files first (review
the diff before committing)."""

from __future__ import annotations

import os
from pathlib import Path


def _updating() -> bool:
    return os.environ.get("SPARKCTL_UPDATE_GOLDEN") == "1"


def assert_golden_text(path: Path, rendered: str) -> None:
    """One rendered file against its golden copy."""
    if _updating():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(rendered)
    assert rendered == path.read_text()


def assert_golden_tree(directory: Path, files: dict[str, str]) -> None:
    """Rendered files {relative path: text} against a golden directory holding exactly them."""
    if _updating():
        for old in sorted(directory.rglob("*"), reverse=True) if directory.exists() else []:
            old.unlink() if old.is_file() else old.rmdir()
        for rel, text in files.items():
            (directory / rel).parent.mkdir(parents=True, exist_ok=True)
            (directory / rel).write_text(text)
    on_disk = {str(p.relative_to(directory)): p.read_text() for p in directory.rglob("*") if p.is_file()}
    assert sorted(on_disk) == sorted(files)
    for rel, text in files.items():
        assert text == on_disk[rel], rel

"""A program the roles install on nodes (a file without .py under roles/*/files/), imported as a
module so its functions can be tested one by one."""

from __future__ import annotations

import importlib.util
from importlib.machinery import SourceFileLoader
from pathlib import Path

ROLES = Path(__file__).resolve().parents[2] / "roles"


def load(role: str, name: str):
    """roles/<role>/files/<name>, as a module."""
    loader = SourceFileLoader(name.replace("-", "_"), str(ROLES / role / "files" / name))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module

"""Lab nodes only: keep the bytecode Python compiles for modules it imports from a zip file.

Every Ansible module run on a node imports `ansible.module_utils.basic` and its friends from
the module's zip payload, and Python's zipimport compiles each of those sources again on every
run (it reads bytecode from a zip only if the zip holds it, and Ansible ships sources). On the
lab's shared cores that compile is about a quarter of a module run's CPU
(docs/performance.md, "Module runs on the lab's nodes"; tests/bench/zipcache_bench.py).

The node image installs this file and sparklab_zipcache.pth beside it in the system Python's
dist-packages; the .pth imports it at each start of /usr/bin/python3, and it replaces
zipimport's compile step with one that keeps the code object in a per-user directory, keyed by
the interpreter's bytecode magic and the source's SHA-256: the same source always gives the
same code, so a module run sees exactly what a compile would give it, with its own file name
put back in the code object for tracebacks. Nothing of sparkctl's depends on it; it is not
installed on a real Spark.

A directory that is not the user's own, or that others may write to, is never read (root
must not run bytecode another user could have put there); any error falls back to compiling.
"""

from __future__ import annotations

import os
import zipimport

# Tests point it elsewhere; on a node it is per user, under /var/tmp (kept across reboots).
CACHE_ENV = "SPARKLAB_ZIPCACHE_DIR"
_compile = getattr(zipimport, "_compile_source", None)


def cache_dir() -> str:
    return os.environ.get(CACHE_ENV) or f"/var/tmp/sparklab-zipcache-{os.geteuid()}"


_checked: dict[str, bool] = {}


def _trusted(directory: str) -> bool:
    """The directory exists (made here if not), is the user's own and only the user may write to
    it; judged once per process."""
    if directory not in _checked:
        import stat
        try:
            os.makedirs(directory, mode=0o700, exist_ok=True)
            info = os.lstat(directory)
        except OSError:
            _checked[directory] = False
        else:
            _checked[directory] = (stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid()
                                   and not info.st_mode & 0o022)
    return _checked[directory]


def _with_filename(code, filename: str):
    """The code object (and every code object nested in it) naming filename."""
    import types
    consts = tuple(_with_filename(c, filename) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def cached_compile(pathname: str, source):
    if not isinstance(source, bytes):
        return _compile(pathname, source)
    directory = cache_dir()
    if not _trusted(directory):
        return _compile(pathname, source)
    import hashlib
    import importlib.util
    import marshal
    import types
    path = os.path.join(directory, hashlib.sha256(importlib.util.MAGIC_NUMBER + source).hexdigest())
    try:
        with open(path, "rb") as cached:
            code = marshal.load(cached)
        if not isinstance(code, types.CodeType):
            raise ValueError(f"{path} holds no code object")
    except (OSError, EOFError, ValueError, TypeError):
        code = _compile(pathname, source)
        temporary = f"{path}.{os.getpid()}.tmp"
        try:
            with open(temporary, "wb") as out:
                marshal.dump(code, out)
            os.replace(temporary, path)
        except OSError:
            try:
                os.unlink(temporary)
            except OSError:
                pass
        return code
    return code if code.co_filename == pathname else _with_filename(code, pathname)


if _compile is not None:
    zipimport._compile_source = cached_compile

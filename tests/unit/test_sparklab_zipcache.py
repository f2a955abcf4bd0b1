"""The lab nodes' bytecode cache for zip-imported modules (tests/lab/node/sparklab_zipcache.py,
LAB-ONLY): each case runs fresh interpreters that import a package from a zip file, as an
Ansible module run imports its payload, and report how many sources they compiled."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

NODE = Path(__file__).resolve().parents[1] / "lab" / "node"
SOURCE = "def fail():\n    raise RuntimeError('from the zip')\n"
# Imports the package from the zip with the cache on, counting zipimport's compile calls, those of
# them that reached Python's own compile step, and where a traceback from the imported code points.
# (zipimport may compile a module more than once per import: 3.13 does for the spec and the code.)
CHILD = """
import json, sys, traceback, zipimport
sys.path.insert(0, sys.argv[1])
import sparklab_zipcache
calls, compiled = [], []
original = sparklab_zipcache._compile
sparklab_zipcache._compile = lambda path, source: compiled.append(path) or original(path, source)
cached = zipimport._compile_source
zipimport._compile_source = lambda path, source: calls.append(path) or cached(path, source)
sys.path.insert(0, sys.argv[2])
import pkg.mod
try:
    pkg.mod.fail()
except RuntimeError:
    frame = traceback.extract_tb(sys.exc_info()[2])[-1]
print(json.dumps({"compiled": len(compiled), "hits": len(calls) - len(compiled), "file": frame.filename,
                  "line": frame.line}))
"""


def make_zip(path: Path, source: str = SOURCE) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("pkg/__init__.py", "")
        archive.writestr("pkg/mod.py", source)
    return path


def run(zip_path: Path, cache: Path) -> dict:
    env = dict(os.environ, SPARKLAB_ZIPCACHE_DIR=str(cache), PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run([sys.executable, "-c", CHILD, str(NODE), str(zip_path)], env=env,
                          capture_output=True, text=True, timeout=60, check=True)
    return json.loads(proc.stdout)


def test_a_second_interpreter_compiles_nothing_and_tracebacks_name_its_own_zip(tmp_path):
    cache = tmp_path / "cache"
    first = run(make_zip(tmp_path / "first.zip"), cache)
    assert first["compiled"] == 2 and len(list(cache.iterdir())) == 2
    assert oct(cache.stat().st_mode & 0o777) == "0o700"
    second = run(make_zip(tmp_path / "second.zip"), cache)
    assert second["compiled"] == 0 and second["hits"] >= 2
    assert second["file"] == str(tmp_path / "second.zip" / "pkg" / "mod.py")
    assert second["line"] == "raise RuntimeError('from the zip')"


def test_a_changed_source_is_compiled_again(tmp_path):
    cache = tmp_path / "cache"
    run(make_zip(tmp_path / "first.zip"), cache)
    changed = run(make_zip(tmp_path / "changed.zip", SOURCE.replace("from the zip", "changed")), cache)
    assert changed["compiled"] == 1 and changed["line"] == "raise RuntimeError('changed')"


def test_a_damaged_cache_file_is_compiled_again_and_replaced(tmp_path):
    cache = tmp_path / "cache"
    run(make_zip(tmp_path / "first.zip"), cache)
    for entry in cache.iterdir():
        entry.write_bytes(b"\xe3not marshal")
    assert run(make_zip(tmp_path / "second.zip"), cache)["compiled"] == 2
    assert run(make_zip(tmp_path / "third.zip"), cache)["compiled"] == 0


def test_an_entry_that_holds_no_code_is_compiled_again_and_replaced(tmp_path):
    import marshal
    cache = tmp_path / "cache"
    run(make_zip(tmp_path / "first.zip"), cache)
    for entry in cache.iterdir():
        entry.write_bytes(marshal.dumps(42))
    assert run(make_zip(tmp_path / "second.zip"), cache)["compiled"] == 2
    assert run(make_zip(tmp_path / "third.zip"), cache)["compiled"] == 0


def test_a_directory_others_may_write_to_is_never_read(tmp_path):
    cache = tmp_path / "cache"
    run(make_zip(tmp_path / "first.zip"), cache)
    cache.chmod(0o777)
    assert run(make_zip(tmp_path / "second.zip"), cache)["hits"] == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the directory to another user")
def test_a_directory_of_another_user_is_never_read(tmp_path):
    cache = tmp_path / "cache"
    run(make_zip(tmp_path / "first.zip"), cache)
    os.chown(cache, 65534, 65534)
    assert run(make_zip(tmp_path / "second.zip"), cache)["hits"] == 0


def test_the_node_image_installs_it_where_the_system_python_reads_pth_files():
    sys.path.insert(0, str(NODE.parent))
    try:
        import sparklab
    finally:
        sys.path.remove(str(NODE.parent))
    installed = {name: path for name, (path, _mode) in sparklab.NODE_FILES_IN_IMAGE.items()}
    assert installed["sparklab_zipcache.py"] == installed["sparklab_zipcache.pth"].replace(".pth", ".py")
    assert installed["sparklab_zipcache.pth"].startswith("/usr/lib/python3/dist-packages/")
    lines = (NODE / "sparklab_zipcache.pth").read_text().splitlines()
    assert "import sparklab_zipcache" in lines

"""A stdlib-only PEP 517 build backend for the lab's stand-in engine, and the script that
writes its wheel into dist/: `python3 tests/lab/engine/_build/sparklab_build.py` (run by
tests/bootstrap.sh; dist/ is not committed).

Why not setuptools: building with it needs a download of setuptools (pip's isolated build
environment) on a control node that reaches no index. Why a wheel in dist/: the lab
profile pins `sparklab-engine==0.3.0` from a find_links directory, like a user's private
wheel. The build is reproducible (sorted entries, fixed timestamps and modes), so the
unit tests can check that a wheel in dist/ matches the sources."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import sys
import tarfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "sparklab_engine"
EPOCH = (1980, 1, 1, 0, 0, 0)
# The same sources under a second version number: the lab's second profile
# (tests/lab/profiles/lab-standin-b.yml) pins it, so a switch between the two lab profiles
# puts a venv with another runtime version beside the first, at the cost of one more small
# wheel rather than a second package to maintain.
EXTRA_VERSIONS = ("0.3.1", "0.3.2")
# Releases that carry a defect (sparklab_engine.RELEASE_DEFECT): a pin bump to one of them is
# the lab's broken runtime upgrade, built and installed like any other, failing only at boot.
RELEASE_DEFECTS = {"0.3.2": "crash-during-boot"}


def _project():
    text = open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8").read()
    section = text.split("[project]", 1)[1]
    fields = dict(re.findall(r'^(\w[\w-]*)\s*=\s*"([^"]*)"', section, re.M))
    return fields["name"], fields["version"], fields.get("description", ""), fields.get("requires-python", "")


def _sources():
    """Package files (path relative to ROOT), sorted; no bytecode."""
    found = []
    for directory, dirs, files in os.walk(os.path.join(ROOT, PACKAGE)):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py"):
                found.append(os.path.relpath(os.path.join(directory, name), ROOT).replace(os.sep, "/"))
    return sorted(found)


def _record_hash(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _zip_add(archive, name, data):
    info = zipfile.ZipInfo(name, date_time=EPOCH)
    info.external_attr = 0o644 << 16
    # Stored, not deflated: the bytes must not depend on the zlib build.
    info.compress_type = zipfile.ZIP_STORED
    archive.writestr(info, data)


# The package's __version__, rewritten in each wheel to that wheel's version.
VERSION_SOURCE = "sparklab_engine/__init__.py"
VERSION_LINE = re.compile(rb'^__version__ = ".*"$', re.M)
DEFECT_LINE = re.compile(rb'^RELEASE_DEFECT = ".*"$', re.M)


def versions():
    """Every version main() writes: the project's, then EXTRA_VERSIONS."""
    return (_project()[1], *EXTRA_VERSIONS)


def wheel_name(version=None):
    name, version_, _, _ = _project()
    version = version or version_
    return f"{name.replace('-', '_')}-{version}-py3-none-any.whl"


def wheel_bytes(version=None):
    name, version_, description, requires = _project()
    version = version or version_
    dist_info = f"{name.replace('-', '_')}-{version}.dist-info"
    entries = []
    for rel in _sources():
        with open(os.path.join(ROOT, rel), "rb") as handle:
            data = handle.read()
        if rel == VERSION_SOURCE:
            # Every wheel is built from the same sources: each says its own version.
            data = VERSION_LINE.sub(b'__version__ = "%s"' % version.encode(), data)
            data = DEFECT_LINE.sub(b'RELEASE_DEFECT = "%s"' % RELEASE_DEFECTS.get(version, "").encode(), data)
        entries.append((rel, data))
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nSummary: {description}\n"
    if requires:
        metadata += f"Requires-Python: {requires}\n"
    entries.append((f"{dist_info}/METADATA", metadata.encode()))
    entries.append((f"{dist_info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: sparklab_build\n"
                                          b"Root-Is-Purelib: true\nTag: py3-none-any\n"))
    record = "".join(f"{rel},{_record_hash(data)},{len(data)}\n" for rel, data in entries)
    record += f"{dist_info}/RECORD,,\n"
    entries.append((f"{dist_info}/RECORD", record.encode()))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for rel, data in entries:
            _zip_add(archive, rel, data)
    return buffer.getvalue()


# ---- PEP 517 hooks -------------------------------------------------------------------------


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    name = wheel_name()
    with open(os.path.join(wheel_directory, name), "wb") as handle:
        handle.write(wheel_bytes())
    return name


def build_sdist(sdist_directory, config_settings=None):
    name, version, _, _ = _project()
    base = f"{name.replace('-', '_')}-{version}"
    target = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, target), "w:gz") as archive:
        for rel in ["pyproject.toml", "_build/sparklab_build.py"] + _sources():
            info = archive.gettarinfo(os.path.join(ROOT, rel), arcname=f"{base}/{rel}")
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            with open(os.path.join(ROOT, rel), "rb") as handle:
                archive.addfile(info, handle)
    return target


def main():
    dist = os.path.join(ROOT, "dist")
    os.makedirs(dist, exist_ok=True)
    written = set()
    for version in versions():
        name = wheel_name(version)
        with open(os.path.join(dist, name), "wb") as handle:
            handle.write(wheel_bytes(version))
        written.add(name)
        print(f"wrote {os.path.join(dist, name)}")
    # dist/ holds only this script's output: a wheel of an earlier version would leave the
    # lab's find_links directory with two candidates for one pin.
    for name in os.listdir(dist):
        if name.startswith("sparklab_engine-") and name.endswith(".whl") and name not in written:
            os.remove(os.path.join(dist, name))
            print(f"removed {name} (an earlier build)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

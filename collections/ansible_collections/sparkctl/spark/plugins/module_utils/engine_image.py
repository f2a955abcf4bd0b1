# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The container-image runtime's logic: the stable identity of an image build context (a
directory tree plus the base image), what a docker-save archive holds, and the docker
daemon.json the NVIDIA container runtime needs.

The context hash labels a built image: a re-run rebuilds only when the tag is missing or its
label differs from the hash of the context it would build now. The same function runs on the
control node (the profile's context, the source of truth) and on a node (the staged copy), so
the two can be compared."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tarfile

# Bumped when what the hash covers changes: every image then rebuilds once.
HASH_SCHEME = "sparkctl-context-hash/1"
# The label sparkctl puts on images it builds.
HASH_LABEL = "org.sparkctl.context-hash"
_CHUNK = 1 << 20


class ContextError(Exception):
    """The context cannot be hashed (missing, not a directory, unreadable), an archive or
    daemon.json cannot be read."""


def _file_digest(path):
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def scan_context(path):
    """Every entry under path, sorted by relative POSIX path: dicts with 'path', 'type' (dir|file)
    and, for files, 'mode' (permission bits), 'size' and 'sha256'.

    Symlinks are followed (ansible.builtin.copy follows them when it stages the context, so the
    node holds the target's content). Directory modes are left out: the copy that stages a context
    creates directories with the node's umask, and docker COPY of a single file ignores them."""
    root = os.path.abspath(str(path))
    if not os.path.isdir(root):
        raise ContextError(f"build context {root} is not a directory")
    entries = []
    seen = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True, onerror=_raise):
        real = os.path.realpath(dirpath)
        if real in seen:
            raise ContextError(f"build context {root}: symlink loop at {dirpath}")
        seen.add(real)
        dirnames.sort()
        rel_dir = os.path.relpath(dirpath, root)
        if rel_dir != ".":
            entries.append({"path": rel_dir.replace(os.sep, "/"), "type": "dir"})
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root).replace(os.sep, "/")
            try:
                st = os.stat(full)
            except OSError as exc:
                raise ContextError(f"build context {root}: cannot read {rel}: {exc.strerror}") from exc
            if not stat.S_ISREG(st.st_mode):
                raise ContextError(f"build context {root}: {rel} is not a regular file (a socket, fifo or device)")
            try:
                digest = _file_digest(full)
            except OSError as exc:
                raise ContextError(f"build context {root}: cannot read {rel}: {exc.strerror}") from exc
            entries.append({"path": rel, "type": "file", "mode": "%04o" % stat.S_IMODE(st.st_mode),
                            "size": st.st_size, "sha256": digest})
    entries.sort(key=lambda e: e["path"])
    return entries


def _raise(exc):
    raise ContextError(f"build context: cannot list {exc.filename}: {exc.strerror}")


def context_hash(path, base=""):
    """{'hash': 'sha256:<hex>', 'files': [...], 'dirs': [...], 'bytes': N} of the context at path,
    built FROM base. The hash covers the scheme, the base reference and each entry's relative path,
    type, mode and content digest, in a canonical JSON encoding: renaming, chmod or editing any file
    or changing the base changes it; mtimes, owners and the context's own location do not."""
    entries = scan_context(path)
    canonical = json.dumps({"scheme": HASH_SCHEME, "base": str(base or ""), "entries": entries},
                           sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return {
        "hash": "sha256:" + hashlib.sha256(canonical.encode("ascii")).hexdigest(),
        "files": [e["path"] for e in entries if e["type"] == "file"],
        "dirs": [e["path"] for e in entries if e["type"] == "dir"],
        "bytes": sum(e["size"] for e in entries if e["type"] == "file"),
    }


def stale_entries(found, root, files, dirs):
    """Paths under root (absolute, as ansible.builtin.find lists them) that are neither one of
    the context's files nor one of its directories: what a staged copy must lose to equal it.
    Sorted deepest first, so a directory is removed after what it held."""
    keep = set(files) | set(dirs)
    root = os.path.normpath(str(root))
    stale = []
    for item in found:
        full = os.path.normpath(str(item))
        rel = os.path.relpath(full, root).replace(os.sep, "/")
        if rel.startswith("../") or rel == "..":
            continue
        if rel != "." and rel not in keep:
            stale.append(full)
    return sorted(stale, key=lambda p: (-p.count("/"), p))


def archive_images(path):
    """The images a `docker save` archive holds, from its manifest.json, without loading it:
    [{'id': 'sha256:<hex>', 'repo_tags': [...]}]. The image ID is the digest of the image's config
    blob, in both the classic layout (Config: '<hex>.json') and the OCI one Docker 25+ writes
    (Config: 'blobs/sha256/<hex>'), so it can be compared with `docker image inspect`'s Id."""
    try:
        with tarfile.open(str(path), "r:*") as tar:
            try:
                member = tar.getmember("manifest.json")
            except KeyError:
                raise ContextError(f"{path} is not a docker-save archive (no manifest.json)") from None
            manifest = json.load(tar.extractfile(member))
    except (OSError, tarfile.TarError, ValueError) as exc:
        raise ContextError(f"cannot read image archive {path}: {exc}") from exc
    if not isinstance(manifest, list):
        raise ContextError(f"{path}: manifest.json is not a list")
    images = []
    for entry in manifest:
        config = str((entry or {}).get("Config") or "")
        digest = os.path.basename(config)
        if digest.endswith(".json"):
            digest = digest[: -len(".json")]
        if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise ContextError(f"{path}: manifest.json names an unexpected config blob {config!r}")
        images.append({"id": "sha256:" + digest, "repo_tags": list(entry.get("RepoTags") or [])})
    return images


def daemon_config(current_text="", nvidia_runtime_path="", set_default_runtime=False, settings=None,
                  source="/etc/docker/daemon.json"):
    """The daemon.json mapping dockerd should read, from the file's current text.

    Keys sparkctl does not manage are kept. With nvidia_runtime_path (the node has the NVIDIA
    container toolkit), the runtime is registered the way `nvidia-ctk runtime configure
    --runtime=docker` does it (runtimes.nvidia = {path, args: []}), and made the default with
    set_default_runtime (`--set-as-default`); without it the default-runtime key is left as found.
    settings (engine_image_daemon_settings) replace top-level keys; a None value removes one."""
    text = (current_text or "").strip()
    try:
        config = json.loads(text) if text else {}
    except ValueError as exc:
        raise ContextError(f"{source} is not valid JSON ({exc}); fix or remove it, dockerd cannot read it either") from exc
    if not isinstance(config, dict):
        raise ContextError(f"{source} must hold a JSON object, found {type(config).__name__}")
    if nvidia_runtime_path:
        runtimes = config.get("runtimes")
        runtimes = dict(runtimes) if isinstance(runtimes, dict) else {}
        nvidia = dict(runtimes.get("nvidia") or {})
        nvidia["path"] = str(nvidia_runtime_path)
        nvidia.setdefault("args", [])
        runtimes["nvidia"] = nvidia
        config["runtimes"] = runtimes
        if set_default_runtime:
            config["default-runtime"] = "nvidia"
    for key, value in (settings or {}).items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    return config


def daemon_json_text(config):
    """The file's text: sorted keys, 4-space indent, trailing newline (what nvidia-ctk writes, sorted)."""
    return json.dumps(config, indent=4, sort_keys=True) + "\n"

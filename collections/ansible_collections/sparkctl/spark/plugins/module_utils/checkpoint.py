# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Verify a model checkpoint directory: shard list, leftovers, sizes, sha256, safetensors headers.

Every tensor-parallel rank reads all shards, so every node needs the complete checkpoint at
the same path, and a partial tree only fails deep into an 11-minute load. The checks here run
on the head after the download and on each worker after the mirror.

Only the Python standard library is used (the nodes have nothing else for Ansible). The
safetensors format is checked from its public description: an 8-byte little-endian header
length N, N bytes of UTF-8 JSON starting with '{', then the data section; every tensor names
a dtype, a shape and data_offsets [begin, end] relative to the data section, the offsets tile
the data section with no gap or overlap, and each span is exactly dtype bits x shape.

Nothing here modifies the checkpoint; the only file ever written is the stamp.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import posixpath
import re
import stat
import time
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.sparkctl.spark.plugins.module_utils.files import read_bytes_and_mode, write_file_atomic

STAMP_NAME = ".sparkctl-verified.json"
STAMP_VERSION = 1
STAMP_MODE = 0o644
DEFAULT_IGNORE = (".sparkctl-*", ".cache/**")

PROBLEM_KINDS = ("missing", "size", "sha256", "header", "incomplete", "symlink", "extra", "stray", "index")

INDEX_SUFFIX = ".safetensors.index.json"
SAFETENSORS_SUFFIX = ".safetensors"
INDEX_NAME = "model" + INDEX_SUFFIX

# What vLLM and SGLang load from a checkpoint directory with their default load format
# (DefaultModelLoader._prepare_weights in both): they glob the top of the directory, never a
# subdirectory, for *.safetensors, then *.bin, then *.pt, and take the first pattern that matches
# anything (vLLM, finding no *.safetensors there, first takes the shards the index names in
# subdirectories). Safetensors files are then kept only when the weight_map of
# model.safetensors.index.json names them, if that index exists; without it every *.safetensors at
# the top is loaded (SGLang drops consolidated.safetensors only when the one other file is
# model.safetensors). *.bin and *.pt files are loaded less the files trainers leave (the names
# below). vLLM also takes a checkpoint with a consolidated*.safetensors file anywhere in its tree for
# a Mistral-format one, and then loads only the top's consolidated*.safetensors. Neither globs *.pth
# or *.gguf in a directory (GGUF is loaded from the file's own path). Any other file of the user's
# in the directory is never read by them, and is left where it is.
TRAINER_FILES = ("training_args.bin", "optimizer.bin", "optimizer.pt", "scheduler.pt", "scaler.pt")
MISTRAL_PATTERN = "consolidated*" + SAFETENSORS_SUFFIX

# Names download tools and copiers give a file that is still being written.
LEFTOVER_SUFFIXES = (".incomplete", ".part", ".tmp")
# rsync --delay-updates stages into .~tmp~; .rsync-partial is the conventional --partial-dir.
PARTIAL_DIRS = (".~tmp~", ".rsync-partial")
# rsync without --inplace writes into ".<name>.<6 random characters>" next to the target.
_RSYNC_TEMP_RE = re.compile(r"^\.(?P<name>.+)\.[A-Za-z0-9]{6}$")

HASH_CHUNK_BYTES = 8 * 1024 * 1024
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
GIT_SHA1_RE = re.compile(r"^[0-9a-f]{40}$")

# The reference implementation refuses headers above 100 MB; a length beyond that is garbage
# (e.g. a zero-filled or foreign file), and reading it would only waste memory.
MAX_HEADER_BYTES = 100_000_000
DTYPE_BITS = {
    "BOOL": 8,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "I64": 64,
    "U64": 64,
    "F64": 64,
    "C64": 64,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
}

# A file whose ctime is this close to the moment its hash started is not recorded in the stamp:
# a second write within the same timestamp tick would leave size and times unchanged and the
# stamp would vouch for content it never read ("racy git"). Any later write moves ctime (which,
# unlike mtime, cannot be set back), so a ctime older than one tick is safe. Local Linux
# filesystems tick in jiffies (<= 10 ms); a ctime on a whole second suggests a filesystem with
# 1-2 s granularity, which gets the wider window. Kept small so that a verify right after a
# re-copy still records the file and the next converged run does not hash it again.
RACY_WINDOW_NS = 100_000_000
COARSE_RACY_WINDOW_NS = 2_000_000_000


class CheckpointError(ValueError):
    """The request itself is unusable (bad manifest, path is a file); not a checkpoint problem."""


# --- ignore patterns -----------------------------------------------------------------------------


def _glob_to_regex(pattern):
    """Translate a glob to a regex over '/'-separated paths: '*' and '?' stay within a component,
    '**' spans components, a trailing '/**' also matches the directory itself."""
    out = []
    i = 0
    length = len(pattern)
    while i < length:
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("/**", i) and i + 3 == length:
            out.append("(?:/.*)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and "]" in pattern[i + 2 :]:
            end = pattern.index("]", i + 2)
            body = pattern[i + 1 : end]
            if body.startswith("!"):
                body = "^" + body[1:]
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def compile_ignore(patterns):
    """Return a predicate rel_path -> bool.

    A pattern without '/' matches a file or directory name at any depth (like .gitignore);
    a pattern with '/' matches the path relative to the checkpoint root. Everything under an
    ignored directory is ignored.
    """
    by_name = []
    by_path = []
    for pattern in patterns or ():
        pattern = pattern.strip()
        if not pattern:
            continue
        if "/" in pattern.strip("/"):
            by_path.append(_glob_to_regex(pattern.lstrip("/")))
        else:
            by_name.append(_glob_to_regex(pattern.strip("/")))

    def ignored(rel):
        parts = rel.split("/")
        for depth in range(1, len(parts) + 1):
            prefix = "/".join(parts[:depth])
            if any(regex.match(parts[depth - 1]) for regex in by_name):
                return True
            if any(regex.match(prefix) for regex in by_path):
                return True
        return False

    return ignored


# --- manifest ------------------------------------------------------------------------------------


def _as_size(value):
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def _normalize_rel(name):
    if not isinstance(name, str) or not name.strip():
        raise CheckpointError("manifest file names must be non-empty strings, got %r" % (name,))
    if name.startswith("/") or "\\" in name:
        raise CheckpointError("manifest file names are paths relative to the checkpoint with '/', got %r" % name)
    rel = posixpath.normpath(name)
    if rel in (".", "..") or rel.startswith("../"):
        raise CheckpointError("manifest file name %r points outside the checkpoint" % name)
    return rel


def normalize_manifest(raw):
    """Return {rel: {'size': int, 'sha256': lowercase hex or None[, 'git_blob_sha1': lowercase hex]}}
    from a manifest mapping. Files the hub stores in git (config, index, tokenizer) have no sha256
    but a git blob sha1, which is checked instead, as `hf cache verify` does.

    Accepts the mapping itself or a wrapper {'files': mapping} (so a stamp written by this
    module can serve as another node's manifest). Extra keys per file are ignored. Raises
    CheckpointError naming the first bad entry.
    """
    if not isinstance(raw, dict):
        raise CheckpointError("the manifest must be a mapping of file name to {size, sha256}, got %s" % type(raw).__name__)
    files = raw.get("files")
    if isinstance(files, dict) and "size" not in files:
        raw = files
    if not raw:
        raise CheckpointError("the manifest lists no files")
    manifest = {}
    for name, entry in raw.items():
        rel = _normalize_rel(name)
        if not isinstance(entry, dict):
            raise CheckpointError("manifest entry %r must be a mapping with size and sha256" % name)
        size = _as_size(entry.get("size"))
        if size is None:
            raise CheckpointError("manifest entry %r: size must be a non-negative integer, got %r" % (name, entry.get("size")))
        digest = entry.get("sha256")
        if digest is not None:
            if not isinstance(digest, str):
                raise CheckpointError("manifest entry %r: sha256 must be a hex string or null" % name)
            digest = digest.strip().lower()
            if digest.startswith("sha256:"):
                digest = digest[len("sha256:") :]
            if not SHA256_RE.match(digest):
                raise CheckpointError("manifest entry %r: sha256 %r is not 64 hex digits" % (name, entry.get("sha256")))
        blob = entry.get("git_blob_sha1")
        if blob is not None:
            if not isinstance(blob, str) or not GIT_SHA1_RE.match(blob.strip().lower()):
                raise CheckpointError("manifest entry %r: git_blob_sha1 %r is not 40 hex digits" % (name, blob))
            blob = blob.strip().lower()
        if rel in manifest:
            raise CheckpointError("manifest names %r twice" % rel)
        manifest[rel] = {"size": size, "sha256": digest}
        if blob and not digest:
            manifest[rel]["git_blob_sha1"] = blob
    return manifest


def load_manifest_file(path):
    """Read a JSON manifest from the node; CheckpointError when unreadable or not JSON."""
    try:
        with open(path, "rb") as handle:
            return json.loads(handle.read().decode("utf-8"))
    except OSError as exc:
        raise CheckpointError("cannot read manifest_file %s: %s" % (path, exc.strerror or exc)) from exc
    except ValueError as exc:
        raise CheckpointError("manifest_file %s is not JSON: %s" % (path, exc)) from exc


def manifest_digest(manifest):
    """sha256 of the normalized manifest in canonical JSON; None without a manifest."""
    if manifest is None:
        return None
    canonical = json.dumps(manifest, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


# --- tree scan -----------------------------------------------------------------------------------


class FileInfo:
    """What a regular file's lstat says; identity (ino, ctime) catches copied stamps and restored mtimes."""

    __slots__ = ("size", "mtime_ns", "ctime_ns", "ino")

    def __init__(self, size, mtime_ns, ctime_ns, ino):
        self.size = size
        self.mtime_ns = mtime_ns
        self.ctime_ns = ctime_ns
        self.ino = ino

    @classmethod
    def from_stat(cls, st):
        return cls(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)

    def key(self):
        return (self.size, self.mtime_ns, self.ctime_ns, self.ino)


class Scan:
    """Result of walking the tree: regular files, symlinks, partial dirs, other oddities."""

    def __init__(self):
        self.files = {}
        self.symlinks = {}
        self.partial_dirs = []
        self.special = {}
        self.unreadable = {}


def _special_kind(mode):
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def scan_tree(root, ignored=None, skip=None):
    """Walk root without following symlinks; ignored(rel) prunes, skip(rel) drops single files."""
    ignored = ignored or (lambda rel: False)
    skip = skip or (lambda rel: False)
    scan = Scan()
    pending = [""]
    while pending:
        rel_dir = pending.pop()
        directory = os.path.join(root, rel_dir) if rel_dir else root
        try:
            entries = sorted(os.scandir(directory), key=lambda entry: entry.name)
        except OSError as exc:
            scan.unreadable[rel_dir or "."] = exc.strerror or str(exc)
            continue
        for entry in entries:
            rel = posixpath.join(rel_dir, entry.name) if rel_dir else entry.name
            if ignored(rel) or skip(rel):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError as exc:
                scan.unreadable[rel] = exc.strerror or str(exc)
                continue
            if stat.S_ISLNK(st.st_mode):
                try:
                    scan.symlinks[rel] = os.readlink(entry.path)
                except OSError:
                    scan.symlinks[rel] = "?"
            elif stat.S_ISDIR(st.st_mode):
                if entry.name in PARTIAL_DIRS:
                    scan.partial_dirs.append(rel)
                else:
                    pending.append(rel)
            elif stat.S_ISREG(st.st_mode):
                scan.files[rel] = FileInfo.from_stat(st)
            else:
                scan.special[rel] = _special_kind(st.st_mode)
    return scan


def leftover_reason(rel, known_names):
    """Why rel looks like an unfinished transfer, or None. known_names: names expected or present in its directory."""
    name = posixpath.basename(rel)
    for suffix in LEFTOVER_SUFFIXES:
        if name.endswith(suffix):
            return "unfinished download or copy (%s file)" % suffix
    match = _RSYNC_TEMP_RE.match(name)
    if match and match.group("name") in known_names:
        return "rsync temporary file of %s" % posixpath.join(posixpath.dirname(rel), match.group("name"))
    return None


def owned_leftover(rel, manifest_names):
    """Whether rel is an unfinished copy of a file the manifest lists (its name plus a leftover
    suffix, or rsync's temporary name for it): sparkctl's own to clean. Any other leftover-looking
    file belongs to someone else (another download into a shared directory) and is left alone."""
    name = posixpath.basename(rel)
    directory = posixpath.dirname(rel)
    for suffix in LEFTOVER_SUFFIXES:
        if name.endswith(suffix) and posixpath.join(directory, name[: -len(suffix)]) in manifest_names:
            return True
    match = _RSYNC_TEMP_RE.match(name)
    return bool(match and posixpath.join(directory, match.group("name")) in manifest_names)


def manifest_dirs(manifest_names):
    """The directories that hold a manifest file ('' for the root)."""
    return set(posixpath.dirname(rel) for rel in manifest_names)


# --- safetensors ---------------------------------------------------------------------------------


def _reject_duplicate_keys(pairs):
    result = {}
    for key, value in pairs:
        if key in result:
            raise ValueError("duplicate key %r" % key)
        result[key] = value
    return result


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _shape_text(shape):
    return "[%s]" % ", ".join(str(dim) for dim in shape)


def safetensors_header_problem(header_bytes, data_len):
    """Return None when the JSON header fits a data section of data_len bytes, else what is wrong."""
    if not header_bytes.startswith(b"{"):
        return "header does not start with '{' (first bytes %r); not a safetensors file" % header_bytes[:8]
    try:
        header = json.loads(header_bytes.decode("utf-8"), object_pairs_hook=_reject_duplicate_keys)
    except UnicodeDecodeError:
        return "header is not UTF-8"
    except ValueError as exc:
        return "header is not valid JSON: %s" % exc
    if not isinstance(header, dict):
        return "header is not a JSON object"
    metadata = header.pop("__metadata__", None)
    if metadata is not None and not (isinstance(metadata, dict) and all(isinstance(value, str) for value in metadata.values())):
        return "__metadata__ must map strings to strings"
    spans = []
    for name, info in header.items():
        if not isinstance(info, dict):
            return "tensor %r: entry is not an object" % name
        dtype = info.get("dtype")
        shape = info.get("shape")
        offsets = info.get("data_offsets")
        if dtype not in DTYPE_BITS:
            return "tensor %r: unknown dtype %r" % (name, dtype)
        if not isinstance(shape, list) or not all(_is_int(dim) and dim >= 0 for dim in shape):
            return "tensor %r: shape %r is not a list of non-negative integers" % (name, shape)
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_int(value) for value in offsets)):
            return "tensor %r: data_offsets %r is not [begin, end]" % (name, offsets)
        begin, end = offsets
        if begin < 0 or end < begin:
            return "tensor %r: data_offsets [%d, %d] are not 0 <= begin <= end" % (name, begin, end)
        if end > data_len:
            return "tensor %r: data_offsets [%d, %d] end past the %d-byte data section (truncated file?)" % (name, begin, end, data_len)
        elements = 1
        for dim in shape:
            elements *= dim
        bits = elements * DTYPE_BITS[dtype]
        if bits % 8:
            return "tensor %r: %s x %s is not a whole number of bytes" % (name, dtype, _shape_text(shape))
        if end - begin != bits // 8:
            return "tensor %r: data_offsets [%d, %d] span %d bytes, %s x %s needs %d" % (
                name,
                begin,
                end,
                end - begin,
                dtype,
                _shape_text(shape),
                bits // 8,
            )
        spans.append((begin, end, name))
    position = 0
    for begin, end, name in sorted(spans):
        if begin > position:
            return "%d bytes at data offset %d belong to no tensor (gap before %r)" % (begin - position, position, name)
        if begin < position:
            return "tensor %r at data offset %d overlaps the previous tensor, which ends at %d" % (name, begin, position)
        position = end
    if position != data_len:
        return "tensors cover %d bytes but the data section has %d (%d trailing bytes)" % (position, data_len, data_len - position)
    return None


def safetensors_file_problem(path, size):
    """Read only the header of a .safetensors file of size bytes; None when sound, else what is wrong."""
    if size < 8:
        return "file is %d bytes, shorter than the 8-byte header length" % size
    try:
        with open(path, "rb") as handle:
            header_len = int.from_bytes(handle.read(8), "little")
            if header_len > MAX_HEADER_BYTES:
                return "header length %d is over %d bytes; not a safetensors file" % (header_len, MAX_HEADER_BYTES)
            if 8 + header_len > size:
                return "header length %d runs past the end of the %d-byte file (truncated?)" % (header_len, size)
            header_bytes = handle.read(header_len)
    except OSError as exc:
        return "cannot read: %s" % (exc.strerror or exc)
    if len(header_bytes) != header_len:
        return "file shrank while its header was read"
    return safetensors_header_problem(header_bytes, size - 8 - header_len)


# --- model.safetensors.index.json ----------------------------------------------------------------


def index_shards(index_bytes):
    """Return the deduplicated weight_map values of an index file, or raise ValueError saying why not."""
    try:
        index = json.loads(index_bytes.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError("not valid JSON: %s" % exc) from exc
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise ValueError("has no weight_map")
    shards = set()
    for tensor, shard in weight_map.items():
        if not isinstance(shard, str) or not shard.endswith(SAFETENSORS_SUFFIX) or shard.startswith("/") or "\\" in shard:
            raise ValueError("weight_map[%r] = %r is not a .safetensors file name" % (tensor, shard))
        normalized = posixpath.normpath(shard)
        if normalized.startswith("../"):
            raise ValueError("weight_map[%r] = %r points outside the checkpoint" % (tensor, shard))
        shards.add(normalized)
    return sorted(shards)


# --- hashing -------------------------------------------------------------------------------------


def sha256_file(path, chunk_bytes=HASH_CHUNK_BYTES):
    """Stream the file through sha256; return (hexdigest, FileInfo from fstat after the last read)."""
    digest = hashlib.sha256()
    buffer = bytearray(chunk_bytes)
    view = memoryview(buffer)
    # O_NOFOLLOW: a symlink swapped in after the scan is refused, never followed.
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb", buffering=0) as handle:
        if hasattr(os, "posix_fadvise"):
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
            except OSError:
                pass
        while True:
            count = handle.readinto(buffer)
            if not count:
                break
            digest.update(view[:count])
        after = FileInfo.from_stat(os.fstat(fd))
    return digest.hexdigest(), after


def git_blob_sha1_file(path, chunk_bytes=HASH_CHUNK_BYTES):
    """`git hash-object` of a file (sha1 of "blob <size>\\0" + content): what the hub reports as the
    blob id of a file stored in git. Same return as sha256_file."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb", buffering=0) as handle:
        digest = hashlib.sha1(b"blob %d\0" % os.fstat(fd).st_size)
        while True:
            chunk = handle.read(chunk_bytes)
            if not chunk:
                break
            digest.update(chunk)
        after = FileInfo.from_stat(os.fstat(fd))
    return digest.hexdigest(), after


def expected_digest(entry):
    """("sha256", hex) for an LFS file, ("git_blob_sha1", hex) for a file stored in git, else None."""
    if entry.get("sha256"):
        return "sha256", entry["sha256"]
    if entry.get("git_blob_sha1"):
        return "git_blob_sha1", entry["git_blob_sha1"]
    return None


def digest_file(path, algorithm):
    return (git_blob_sha1_file if algorithm == "git_blob_sha1" else sha256_file)(path)


def _hash_task(root, rel, clock_ns, algorithm="sha256"):
    started_ns = clock_ns()
    try:
        hexdigest, after = digest_file(os.path.join(root, rel), algorithm)
    except OSError as exc:
        return rel, None, None, started_ns, exc.strerror or str(exc)
    return rel, hexdigest, after, started_ns, None


def hash_many(root, rels, sizes, jobs, clock_ns=time.time_ns, algorithms=None):
    """Hash rels (largest first, so the pool drains evenly) with jobs threads; hashlib and reads
    release the GIL. algorithms: {rel: "sha256" (default) or "git_blob_sha1"}.
    Returns {rel: (hexdigest or None, FileInfo or None, started_ns, error or None)}."""
    algorithms = algorithms or {}
    order = sorted(rels, key=lambda rel: (-sizes.get(rel, 0), rel))
    results = {}
    if jobs <= 1 or len(order) <= 1:
        for rel in order:
            name, hexdigest, after, started_ns, error = _hash_task(root, rel, clock_ns, algorithms.get(rel, "sha256"))
            results[name] = (hexdigest, after, started_ns, error)
        return results
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        tasks = pool.map(lambda rel: _hash_task(root, rel, clock_ns, algorithms.get(rel, "sha256")), order)
        for name, hexdigest, after, started_ns, error in tasks:
            results[name] = (hexdigest, after, started_ns, error)
    return results


# --- stamp ---------------------------------------------------------------------------------------


def read_stamp(path):
    """Return the stamp as a dict, or None when absent, unreadable, foreign or of another version."""
    try:
        with open(path, "rb") as handle:
            stamp = json.loads(handle.read().decode("utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(stamp, dict) or stamp.get("version") != STAMP_VERSION or not isinstance(stamp.get("files"), dict):
        return None
    return stamp


def is_racy(ctime_ns, hash_started_ns, window_ns=None):
    """Whether a file last changed at ctime_ns may change again unseen after a hash started at hash_started_ns."""
    if window_ns is None:
        window_ns = RACY_WINDOW_NS
    if ctime_ns % 1_000_000_000 == 0:
        window_ns = max(window_ns, COARSE_RACY_WINDOW_NS)
    return ctime_ns >= hash_started_ns - window_ns


def stamp_entry(info, sha256, git_blob_sha1=None):
    entry = {"size": info.size, "mtime_ns": info.mtime_ns, "ctime_ns": info.ctime_ns, "ino": info.ino, "sha256": sha256}
    if git_blob_sha1:
        entry["git_blob_sha1"] = git_blob_sha1
    return entry


def stamp_vouches(stamp, digest, rel, info, expected_sha256, expected_git_blob_sha1=None):
    """True when the stamp recorded rel with this exact size, times and inode against the same manifest."""
    if not stamp or stamp.get("manifest_digest") != digest:
        return False
    entry = stamp["files"].get(rel)
    if not isinstance(entry, dict) or entry.get("sha256") != expected_sha256:
        return False
    if entry.get("git_blob_sha1") != expected_git_blob_sha1:
        return False
    recorded = (entry.get("size"), entry.get("mtime_ns"), entry.get("ctime_ns"), entry.get("ino"))
    return recorded == info.key()


def render_stamp(files, digest):
    """Canonical bytes of a stamp, so that an unchanged verification renders identically (changed=false)."""
    payload = {"version": STAMP_VERSION, "manifest_digest": digest, "files": files}
    return (json.dumps(payload, sort_keys=True, indent=1) + "\n").encode("utf-8")


# --- problems ------------------------------------------------------------------------------------


class Problems:
    """Problems keyed by (file, kind); the first detail for a pair wins."""

    def __init__(self):
        self._items = {}

    def add(self, rel, kind, detail):
        if kind not in PROBLEM_KINDS:
            raise ValueError("unknown problem kind %r" % kind)
        self._items.setdefault((rel, kind), detail)

    def as_list(self):
        return [{"file": rel, "kind": kind, "detail": self._items[(rel, kind)]} for rel, kind in sorted(self._items)]


def problem_line(problem):
    """One line per problem, naming the file: 'model-00002-of-00004.safetensors: size: ...'."""
    return "%s: %s: %s" % (problem["file"], problem["kind"], problem["detail"])


def summarize(path, problems, limit=10):
    """The one-line failure message; the full list is in problems and summary."""
    lines = [problem_line(problem) for problem in problems]
    shown = "; ".join(lines[:limit])
    more = " (and %d more)" % (len(lines) - limit) if len(lines) > limit else ""
    return "checkpoint %s failed verification with %d problem%s: %s%s" % (path, len(lines), "" if len(lines) == 1 else "s", shown, more)


# --- the verification ----------------------------------------------------------------------------


def _check_indexes(root, scan, present, manifest, problems):
    """Each *.safetensors.index.json: its weight_map shards are present, and no other shard sits beside it."""
    index_files = sorted(rel for rel in present if rel.endswith(INDEX_SUFFIX) and (manifest is None or rel in manifest))
    expected_by_dir = {}
    for index_rel in index_files:
        base = posixpath.dirname(index_rel)
        try:
            with open(os.path.join(root, index_rel), "rb") as handle:
                shards = index_shards(handle.read())
        except OSError as exc:
            problems.add(index_rel, "index", "cannot read: %s" % (exc.strerror or exc))
            continue
        except ValueError as exc:
            problems.add(index_rel, "index", str(exc))
            continue
        expected = expected_by_dir.setdefault(base, {})
        for shard in shards:
            expected.setdefault(posixpath.normpath(posixpath.join(base, shard)), index_rel)
    for base, expected in sorted(expected_by_dir.items()):
        for shard, index_rel in sorted(expected.items()):
            if shard in scan.symlinks:
                continue  # reported as a symlink
            if shard not in present:
                problems.add(shard, "missing", "listed in the weight_map of %s, not present" % index_rel)
        beside = [rel for rel in present if rel.endswith(SAFETENSORS_SUFFIX) and posixpath.dirname(rel) == base]
        names = sorted(set(expected.values()))
        for rel in sorted(beside):
            # A manifest is the authority on what belongs (e.g. Mistral repos ship
            # consolidated.safetensors next to the indexed shards); what it does not list is
            # judged as someone else's (extra or stray).
            if rel not in expected and manifest is None:
                problems.add(rel, "index", "not in the weight_map of %s (stale shard from another revision?)" % ", ".join(names))


def verify_checkpoint(
    root,
    manifest=None,
    hash_files=True,
    stamp_file=None,
    write_stamp=True,
    extra_files="report",
    ignore=DEFAULT_IGNORE,
    jobs=2,
    check_mode=False,
    racy_window_ns=None,
    clock_ns=time.time_ns,
    full=False,
):
    """Verify the checkpoint under root and return the module's result (without changed/msg).

    manifest: normalized (see normalize_manifest) or None. With a manifest, only the files it
    lists and their own leftovers are judged; anything else in the directory belongs to someone
    else and is reported as an extra file, never as a broken one. full: hash every file even when
    the stamp vouches for it (bit rot leaves size and times alone). Raises CheckpointError when
    root exists but is not a directory, or the stamp cannot be written.
    """
    started = time.monotonic()
    if extra_files not in ("report", "fail"):
        raise CheckpointError("extra_files must be 'report' or 'fail', got %r" % (extra_files,))
    if jobs < 1:
        raise CheckpointError("jobs must be 1 or more, got %d" % jobs)
    root = os.path.abspath(root)
    stamp_file = os.path.abspath(stamp_file or os.path.join(root, STAMP_NAME))
    digest = manifest_digest(manifest)
    ignored = compile_ignore(ignore)
    if manifest is not None:
        manifest = dict((rel, entry) for rel, entry in manifest.items() if not ignored(rel))

    problems = Problems()
    result = {
        "path": root,
        "stamp_file": stamp_file,
        "manifest_digest": digest,
        "files": 0,
        "bytes": 0,
        "rehashed": [],
        "skipped_hash": [],
        "stamp_written": False,
        "stamp_would_change": False,
    }

    if not os.path.lexists(root):
        problems.add(".", "missing", "checkpoint directory %s does not exist" % root)
        for rel, entry in sorted((manifest or {}).items()):
            problems.add(rel, "missing", "expected %d bytes, not present" % entry["size"])
        return _finish(result, problems, extra_files, started)
    if not os.path.isdir(root):
        raise CheckpointError("path %s exists but is not a directory" % root)

    scan = scan_tree(root, ignored, stamp_matcher(root, stamp_file))
    names = set(manifest or ())
    _judge_unusable(root, scan, manifest, names, problems)
    present = _present_files(root, scan, manifest, names, problems)
    result["files"] = len(present)
    result["bytes"] = sum(info.size for info in present.values())

    _check_indexes(root, scan, present, manifest, problems)
    _check_membership(root, scan, present, manifest, problems)
    sized = _check_sizes(scan, present, manifest, problems)
    to_hash = sized if hash_files else []
    _check_headers(root, present, manifest, names, problems)

    stamp = read_stamp(stamp_file) if hash_files and manifest is not None and not full else None
    stamp_files, rehash, skipped = _check_hashes(
        root, manifest, present, to_hash, stamp, digest, problems, jobs, clock_ns, racy_window_ns)
    result["rehashed"] = sorted(rehash)
    result["skipped_hash"] = sorted(skipped)

    final = _finish(result, problems, extra_files, started)
    if final["ok"] and hash_files and manifest is not None and write_stamp:
        _update_stamp(final, stamp_file, stamp_files, manifest, present, digest, check_mode)
    final["elapsed"] = round(time.monotonic() - started, 3)
    return final


def stamp_matcher(root, stamp_file):
    """A test of a path relative to root: is it the stamp or one of its temp files? Those are
    never part of the checkpoint, whatever the ignore list says."""
    stamp_rel = os.path.relpath(stamp_file, root).replace(os.sep, "/")
    stamp_dir_rel = posixpath.dirname(stamp_rel)
    stamp_base = posixpath.basename(stamp_rel)

    def is_stamp(rel):
        return rel == stamp_rel or (
            posixpath.dirname(rel) == stamp_dir_rel and posixpath.basename(rel).startswith(stamp_base + ".") and rel.endswith(".tmp")
        )

    return is_stamp


def _foreign(manifest, names, rel):
    """With a manifest, a path it does not list belongs to someone else."""
    return manifest is not None and rel not in names


def engine_load_reason(rel, names):
    """Why vLLM or SGLang would read rel, a path the manifest (names) does not list, as weights of
    the checkpoint; None when neither would (their rules are described above TRAINER_FILES)."""
    base = posixpath.basename(rel)
    if fnmatch.fnmatchcase(base, MISTRAL_PATTERN) and not any(
        fnmatch.fnmatchcase(posixpath.basename(name), MISTRAL_PATTERN) for name in names
    ):
        return "vLLM takes a checkpoint with a %s file anywhere in it for a Mistral-format one and loads only those" % MISTRAL_PATTERN
    if "/" in rel:
        return None
    top = [name for name in names if "/" not in name]
    if base.endswith(SAFETENSORS_SUFFIX):
        if INDEX_NAME in top:
            # Both engines skip a shard the index does not name, yet one there is refused all the
            # same: it is most likely a shard of another revision of this checkpoint, and the index
            # spares only some names (vLLM's consolidated*.safetensors above, the mtp.safetensors
            # SGLang adds for GLM-4 MoE models with MTP layers when the index omits it).
            return ("not in the weight_map of %s (a shard of another revision?), at the top of the directory, where the engines "
                    "look for weights" % INDEX_NAME)
        return "vLLM and SGLang load every *.safetensors file at the top of the directory when no %s names the shards" % INDEX_NAME
    if base.endswith((".bin", ".pt")) and not base.endswith(TRAINER_FILES) and not any(name.endswith(SAFETENSORS_SUFFIX) for name in top):
        return "with no *.safetensors at the top of the directory, vLLM and SGLang load its *.bin and *.pt files"
    return None


def _add_foreign(problems, root, names, rel, detail):
    """A path the manifest does not list: stray when an engine would load it as weights (refused,
    with the fix), extra otherwise (someone else's, kept with a warning)."""
    reason = engine_load_reason(rel, names)
    if reason is None:
        problems.add(rel, "extra", detail + ", not in the manifest")
    else:
        problems.add(rel, "stray", "%s, not in the manifest; %s: move %s out of %s (to a directory of its own), then run again"
                     % (detail, reason, os.path.join(root, *rel.split("/")), root))


def _judge_unusable(root, scan, manifest, names, problems):
    """What the scan could not use: unreadable paths, symlinks and rsync's partial directories,
    judged as sparkctl's (broken) or someone else's (extra, or stray when an engine would load it)."""
    own_dirs = manifest_dirs(names)
    for rel, reason in sorted(scan.unreadable.items()):
        if _foreign(manifest, names, rel) and rel != ".":
            _add_foreign(problems, root, names, rel, "cannot be read (%s)" % reason)
        else:
            problems.add(rel, "missing", "cannot read: %s" % reason)
    for rel, target in sorted(scan.symlinks.items()):
        if _foreign(manifest, names, rel):
            # The engines' glob follows a symlink.
            _add_foreign(problems, root, names, rel, "symlink to %s" % target)
        else:
            problems.add(
                rel, "symlink", "symlink to %s; copies of a symlinked tree can ship empty files, the tree must hold real files" % target
            )
    for rel in scan.partial_dirs:
        if manifest is not None and posixpath.dirname(rel) not in own_dirs:
            problems.add(rel, "extra", "a partial-transfer directory beside no checkpoint file, not sparkctl's")
        else:
            problems.add(rel, "incomplete", "rsync partial/staging directory left by an interrupted transfer")


def _present_files(root, scan, manifest, names, problems):
    """{rel: info} of the regular files that count as the checkpoint's: the scan's files less
    the transfer leftovers (reported as incomplete); special files are reported as extra (or stray)."""
    # Names that may legitimately exist per directory, to tell rsync temp files from hidden files.
    known = {}
    for rel in list(scan.files) + list(manifest or ()):
        known.setdefault(posixpath.dirname(rel), set()).add(posixpath.basename(rel))
    present = {}
    for rel, info in sorted(scan.files.items()):
        reason = None if manifest is not None and rel in manifest else leftover_reason(rel, known.get(posixpath.dirname(rel), ()))
        if reason and (manifest is None or owned_leftover(rel, names)):
            problems.add(rel, "incomplete", reason)
        else:
            present[rel] = info
    for rel, kind in sorted(scan.special.items()):
        if manifest is None:
            problems.add(rel, "extra", "%s, not a regular file" % kind)
        elif rel not in manifest:
            _add_foreign(problems, root, names, rel, "%s, not a regular file" % kind)
    return present


def _check_membership(root, scan, present, manifest, problems):
    """Without a manifest, some *.safetensors must be there; with one, every file it does not list
    is extra, or stray when an engine would load it."""
    if manifest is None:
        if not any(rel.endswith(SAFETENSORS_SUFFIX) for rel in present) and not scan.symlinks:
            problems.add(".", "missing", "no *.safetensors files, and no manifest says what else belongs here")
    else:
        for rel in sorted(set(present) - set(manifest)):
            _add_foreign(problems, root, set(manifest), rel, "%d bytes" % present[rel].size)


def _check_sizes(scan, present, manifest, problems):
    """Each manifest file is present with its size; returns those of the right size that have a
    digest to check. Sizes first: a wrong size makes the hash pointless."""
    to_hash = []
    for rel, entry in sorted((manifest or {}).items()):
        if rel in scan.symlinks:
            continue
        info = present.get(rel)
        if info is None:
            if rel in scan.special:
                problems.add(rel, "missing", "expected %d bytes, found %s" % (entry["size"], scan.special[rel]))
            else:
                problems.add(rel, "missing", "expected %d bytes, not present" % entry["size"])
            continue
        if info.size != entry["size"]:
            problems.add(rel, "size", "is %d bytes, expected %d" % (info.size, entry["size"]))
            continue
        if expected_digest(entry):
            to_hash.append(rel)
    return to_hash


def _check_headers(root, present, manifest, names, problems):
    """Every *.safetensors that is the checkpoint's has a sound header for its size."""
    for rel in sorted(present):
        if rel.endswith(SAFETENSORS_SUFFIX) and not _foreign(manifest, names, rel):
            detail = safetensors_file_problem(os.path.join(root, rel), present[rel].size)
            if detail:
                problems.add(rel, "header", detail)


def _check_hashes(root, manifest, present, to_hash, stamp, digest, problems, jobs, clock_ns, racy_window_ns):
    """Hash what the stamp does not vouch for and compare with the manifest. Returns (the stamp's
    entries for every file that proved sound, the files hashed, the files the stamp vouched for)."""
    stamp_files = {}
    skipped = []
    rehash = []
    for rel in to_hash:
        entry = manifest[rel]
        if stamp_vouches(stamp, digest, rel, present[rel], entry["sha256"], entry.get("git_blob_sha1")):
            skipped.append(rel)
            stamp_files[rel] = stamp_entry(present[rel], entry["sha256"], entry.get("git_blob_sha1"))
        else:
            rehash.append(rel)
    algorithms = dict((rel, expected_digest(manifest[rel])[0]) for rel in rehash)
    hashed = hash_many(root, rehash, dict((rel, present[rel].size) for rel in rehash), jobs, clock_ns, algorithms)
    for rel in rehash:
        hexdigest, after, started_ns, error = hashed[rel]
        algorithm, expected = expected_digest(manifest[rel])
        label = "sha256" if algorithm == "sha256" else "git blob sha1"
        if error:
            problems.add(rel, "sha256", "cannot read: %s" % error)
        elif after.key() != present[rel].key():
            problems.add(rel, "incomplete", "changed while it was being verified (still being written?)")
        elif hexdigest != expected:
            problems.add(rel, "sha256", "content differs: %s %s, expected %s" % (label, hexdigest, expected))
        elif not is_racy(after.ctime_ns, started_ns, racy_window_ns):
            stamp_files[rel] = stamp_entry(after, manifest[rel]["sha256"], manifest[rel].get("git_blob_sha1"))
    return stamp_files, rehash, skipped


def _update_stamp(final, stamp_file, stamp_files, manifest, present, digest, check_mode):
    """Write the stamp of a passing verification when its bytes or mode differ (only say so in check mode)."""
    for rel, entry in manifest.items():
        if expected_digest(entry) is None and rel in present:
            stamp_files[rel] = stamp_entry(present[rel], None)
    data = render_stamp(stamp_files, digest)
    try:
        current, mode = read_bytes_and_mode(stamp_file)
    except OSError:
        # Unreadable: written anew below, whose failure says why.
        current, mode = None, None
    if current != data or mode != STAMP_MODE:
        final["stamp_would_change"] = True
        if not check_mode:
            try:
                write_file_atomic(stamp_file, data, STAMP_MODE)
            except OSError as exc:
                raise CheckpointError("cannot write the stamp %s: %s" % (stamp_file, exc.strerror or exc)) from exc
            final["stamp_written"] = True


def _finish(result, problems, extra_files, started):
    listed = problems.as_list()
    result["problems"] = listed
    result["summary"] = [problem_line(problem) for problem in listed]
    counted = [problem for problem in listed if problem["kind"] != "extra" or extra_files == "fail"]
    result["ok"] = not counted
    result["elapsed"] = round(time.monotonic() - started, 3)
    return result

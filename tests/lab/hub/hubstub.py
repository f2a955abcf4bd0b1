#!/usr/bin/env python3
"""A local stand-in for the Hugging Face hub (LAB-ONLY test double).

Serves one directory as the model repo ORG/NAME at one commit, implementing the endpoints
huggingface_hub 2.4.0 calls for `snapshot_download(...)`, `hf_hub_download(...)`,
`HfApi().model_info(..., files_metadata=True)`, `list_repo_tree`, `get_paths_info` and
`get_safetensors_metadata` (see README.md next to this file for the exact list and what is
left out). Fault injection (cut a transfer mid-file, fail a request, throttle to a WAN-like
rate) and request counters are exposed to tests through /_stub/* control endpoints.

Stdlib only, Python >= 3.11, so it also runs on a lab node (Debian bookworm).

    python hubstub.py --root DIR --repo org/name --port 0 --port-file F [--token T]
                      [--cut-after-bytes N --cut-path GLOB --cut-times K]
                      [--throttle-bytes-per-s R] [--lfs-redirect] [--host 127.0.0.1]
                      [--gated auto|manual [--gated-token T ...] [--gated-metadata]] [--xet]

Control endpoints (no token needed; bind to loopback or a private lab address only):
    GET  /_stub/faults           current fault settings and remaining counts
    POST /_stub/faults           JSON object merged into the settings ({"reset": true} clears all)
    GET  /_stub/stats            counters (per file: bytes served, GETs, range GETs, cuts, ...)
    POST /_stub/stats/reset      zero the counters
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import hmac
import json
import os
import secrets
import signal
import socket
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlsplit

# Files at or above this size are LFS files even when not *.safetensors (the hub's default
# .gitattributes tracks weights; large files end up in LFS one way or another).
LFS_THRESHOLD = 1 << 20
LFS_PATTERNS = ("*.safetensors", "*.bin", "*.pt", "*.gguf")
# Directories never served: git metadata and the bookkeeping huggingface_hub writes into a
# local_dir, so a downloaded tree can itself be served.
SKIPPED_DIRS = {".git", ".cache"}
HASH_CHUNK = 8 << 20
LOG_LIMIT = 2000

FAULT_DEFAULTS: dict = {
    # Close the connection after sending this many body bytes of one response (a resumed
    # request counts from its own first byte, so with cut_times=0 every request of the file
    # makes cut_after_bytes of progress and is then cut).
    "cut_after_bytes": None,
    "cut_path": "*",  # fnmatch glob on the repo path
    "cut_times": 1,  # how many responses to cut; 0 = every time
    # Answer matching resolve GETs with this HTTP status instead of the content.
    "fail_status": None,
    "fail_path": "*",
    "fail_times": 1,  # 0 = every time
    "fail_only_ranges": False,  # only requests carrying a Range header (i.e. resumes)
    # Answer model info (the file list) with this HTTP status, e.g. 503 while the hub is
    # down for maintenance or 429 when rate limited; null = answer normally.
    "model_info_status": None,
    # WAN-like rate limit on response bodies. scope "global": one token bucket shared by
    # all connections (a site uplink: parallel downloads share it); "connection": one
    # bucket per response.
    "throttle_bytes_per_s": None,
    "throttle_scope": "global",
    # A gated repo, like the hub's "accept the terms to access" models: the metadata stays
    # public, file content needs a token whose account was granted access. "auto" or
    # "manual" (the hub's two kinds, both answered the same way here); null = not gated.
    "gated": None,
    # Bearer tokens whose account was granted access (the --token of a private repo is too).
    "gated_tokens": [],
    # Gate the metadata endpoints (model info, tree, paths-info) too, as the hub does for
    # some gated repos (model_info answering 401 GatedRepo without a token).
    "gated_metadata": False,
    # Advertise Xet storage for LFS files, as the hub does for the repos it keeps in Xet:
    # resolve answers carry X-Xet-Hash and a `Link: <token route>; rel="xet-auth"`, tree
    # entries an xetHash, and the token route answers with a CAS URL. The CAS protocol is
    # not implemented (its requests are counted and answered 501): a client that takes the
    # Xet path fails, one with Xet disabled downloads the same files over plain HTTP.
    "xet": False,
}

GATED_KINDS = ("auto", "manual")


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


@dataclass
class RepoFile:
    path: str  # repo path, "/"-separated
    disk: Path
    size: int
    mtime_ns: int
    lfs: bool
    sha256: str  # content sha256 (for LFS files it is also the ETag)
    blob_id: str  # git blob sha1 (of the LFS pointer for LFS files)
    pointer_size: int | None
    # The key of the file's counters in /_stub/stats: its path in the first repo, "ORG/NAME/path" in another.
    stat_key: str = ""

    @property
    def etag(self) -> str:
        return self.sha256 if self.lfs else self.blob_id

    @property
    def xet_hash(self) -> str:
        """A stand-in for the file's Xet content hash (64 hex, like the hub's; derived, not Xet's merkle hash)."""
        return hashlib.sha256(b"sparklab-xet\0" + self.sha256.encode()).hexdigest()


def _hash_file(disk: Path, size: int, mtime_ns: int, path: str) -> dict:
    sha256 = hashlib.sha256()
    sha1 = hashlib.sha1(b"blob %d\0" % size)
    is_lfs = size >= LFS_THRESHOLD or any(fnmatch.fnmatch(path, p) for p in LFS_PATTERNS)
    with open(disk, "rb") as f:
        while chunk := f.read(HASH_CHUNK):
            sha256.update(chunk)
            if not is_lfs:
                sha1.update(chunk)
    digest = sha256.hexdigest()
    if is_lfs:
        pointer = lfs_pointer(digest, size)
        blob_id = git_blob_sha1(pointer)
        return {"size": size, "mtime_ns": mtime_ns, "lfs": True, "sha256": digest, "blob_id": blob_id, "pointer_size": len(pointer)}
    return {"size": size, "mtime_ns": mtime_ns, "lfs": False, "sha256": digest, "blob_id": sha1.hexdigest(), "pointer_size": None}


class Repo:
    """The served repository: files, their hashes and a commit sha derived from the content."""

    def __init__(self, root: str | os.PathLike, repo_id: str, revision_name: str = "main", index_cache: str | None = None,
                 stat_prefix: str = ""):
        if repo_id.count("/") != 1:
            raise ValueError(f"repo id must be ORG/NAME, got {repo_id!r}")
        self.root = Path(root).resolve()
        self.repo_id = repo_id
        self.stat_prefix = stat_prefix
        self.revision_name = revision_name
        self.index_cache = Path(index_cache) if index_cache else None
        self.scan()

    def scan(self) -> None:
        found = []
        for dirpath, dirnames, filenames in os.walk(self.root):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIPPED_DIRS)
            for name in sorted(filenames):
                disk = Path(dirpath) / name
                if ".tmp-" in name or name.endswith(".incomplete"):
                    continue
                st = disk.stat()
                found.append((disk.relative_to(self.root).as_posix(), disk, st.st_size, st.st_mtime_ns))
        cached = {}
        if self.index_cache and self.index_cache.is_file():
            cached = json.loads(self.index_cache.read_text())
        jobs = {}
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            for path, disk, size, mtime_ns in found:
                hit = cached.get(path)
                if hit and hit["size"] == size and hit["mtime_ns"] == mtime_ns:
                    continue
                jobs[path] = pool.submit(_hash_file, disk, size, mtime_ns, path)
        index = {path: (jobs[path].result() if path in jobs else cached[path]) for path, *_ in found}
        if self.index_cache and jobs:
            self.index_cache.write_text(json.dumps(index, indent=1))
        self.files: dict[str, RepoFile] = {
            path: RepoFile(path=path, disk=disk, **index[path], stat_key=f"{self.stat_prefix}{path}")
            for path, disk, _, _ in found
        }
        self.by_sha256 = {f.sha256: f for f in self.files.values() if f.lfs}
        dirs = set()
        for path in self.files:
            parts = path.split("/")[:-1]
            dirs.update("/".join(parts[: n + 1]) for n in range(len(parts)))
        self.dirs = dirs
        listing = "".join(f"{p}\0{f.blob_id}\n" for p, f in sorted(self.files.items()))
        # A fixed 40-hex commit sha that changes whenever any file changes.
        self.commit = hashlib.sha1(f"{self.repo_id}\n{listing}".encode()).hexdigest()
        newest = max((f.mtime_ns for f in self.files.values()), default=0)
        self.last_modified = datetime.fromtimestamp(newest / 1e9, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")
        self.safetensors = self._parameter_counts()

    def _parameter_counts(self) -> dict | None:
        """The hub's `safetensors` summary (parameters per dtype), from the shard headers."""
        counts: dict[str, int] = {}
        shards = [f for p, f in self.files.items() if p.endswith(".safetensors")]
        for shard in shards:
            try:
                with open(shard.disk, "rb") as fh:
                    length = int.from_bytes(fh.read(8), "little")
                    header = json.loads(fh.read(length))
            except (OSError, ValueError):
                return None
            for name, info in header.items():
                if name == "__metadata__":
                    continue
                n = 1
                for dim in info["shape"]:
                    n *= dim
                counts[info["dtype"]] = counts.get(info["dtype"], 0) + n
        return {"parameters": counts, "total": sum(counts.values())} if shards else None

    def tree_entry(self, path: str, expand: bool = False, xet: bool = False) -> dict:
        if path in self.files:
            f = self.files[path]
            entry = {"type": "file", "oid": f.blob_id, "size": f.size, "path": path}
            if f.lfs:
                entry["lfs"] = {"oid": f.sha256, "size": f.size, "pointerSize": f.pointer_size}
                if xet:
                    entry["xetHash"] = f.xet_hash
        else:
            children = sorted(p for p in self.files if p.startswith(path + "/"))
            oid = hashlib.sha1("".join(f"{p}\0{self.files[p].blob_id}\n" for p in children).encode()).hexdigest()
            entry = {"type": "directory", "oid": oid, "size": 0, "path": path}
        if expand:
            entry["lastCommit"] = {"id": self.commit, "title": "Upload checkpoint", "date": self.last_modified}
        return entry

    def sibling(self, f: RepoFile, blobs: bool) -> dict:
        entry: dict = {"rfilename": f.path}
        if blobs:
            entry["size"] = f.size
            entry["blobId"] = f.blob_id
            if f.lfs:
                entry["lfs"] = {"sha256": f.sha256, "size": f.size, "pointerSize": f.pointer_size}
        return entry


class TokenBucket:
    """Reservation-style token bucket: callers take n bytes and sleep off any debt.

    Thread-safe, so one bucket shared by all handler threads caps the aggregate rate.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.tokens = 0.0
        self.stamp = time.monotonic()

    def take(self, n: int, rate: float) -> None:
        burst = max(rate / 20, 16384.0)  # at most 50 ms worth of bytes ahead of the rate
        with self.lock:
            now = time.monotonic()
            self.tokens = min(burst, self.tokens + (now - self.stamp) * rate)
            self.stamp = now
            self.tokens -= n
            debt = -self.tokens
        if debt > 0:
            time.sleep(debt / rate)


class Hub:
    """Shared state of the stub: the repos (the first one, `repo`, is the one /_stub/info names), auth, faults
    and counters."""

    def __init__(self, repo: Repo, token: str | None = None, lfs_redirect: bool = False, verbose: bool = False):
        self.repo = repo
        self.repos = {repo.repo_id: repo}
        self.token = token
        self.lfs_redirect = lfs_redirect
        self.verbose = verbose
        self.cdn_base: str | None = None  # set once the CDN listener is bound
        self.secret = secrets.token_bytes(16)  # signs CDN urls, like a pre-signed S3 url
        self.lock = threading.Lock()
        self.bucket = TokenBucket()
        self.faults = dict(FAULT_DEFAULTS)
        self.remaining = {"cut": 0, "fail": 0}
        self.reset_stats()

    def add_repo(self, repo: Repo) -> None:
        """Serve one more repo beside the first (same auth, faults and counters)."""
        if repo.repo_id in self.repos:
            raise ValueError(f"repo {repo.repo_id} is served already")
        self.repos[repo.repo_id] = repo

    def by_sha256(self, sha256: str) -> RepoFile | None:
        for repo in self.repos.values():
            if sha256 in repo.by_sha256:
                return repo.by_sha256[sha256]
        return None

    # -- faults -------------------------------------------------------------------------
    def set_faults(self, changes: dict) -> dict:
        """Merge `changes` into the fault settings; {"reset": true} starts from the defaults.

        Setting a cut_* (fail_*) key re-arms the cut (fail) counter to cut_times (fail_times).
        """
        unknown = set(changes) - set(FAULT_DEFAULTS) - {"reset"}
        if unknown:
            raise ValueError(f"unknown fault settings: {sorted(unknown)}")
        with self.lock:
            faults = dict(FAULT_DEFAULTS) if changes.get("reset") else dict(self.faults)
            for key, value in changes.items():
                if key != "reset":
                    # null clears a setting; for the ones with a default, back to the default
                    faults[key] = FAULT_DEFAULTS[key] if value is None else value
            for key in ("cut_after_bytes", "cut_times", "fail_status", "fail_times", "throttle_bytes_per_s",
                        "model_info_status"):
                value = faults[key]
                if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0):
                    raise ValueError(f"{key} must be a non-negative number or null, got {value!r}")
            if faults["throttle_scope"] not in ("global", "connection"):
                raise ValueError("throttle_scope must be 'global' or 'connection'")
            if faults["gated"] not in (None, *GATED_KINDS):
                raise ValueError(f"gated must be one of {', '.join(GATED_KINDS)} or null, got {faults['gated']!r}")
            tokens = faults["gated_tokens"]
            if not isinstance(tokens, list) or not all(isinstance(t, str) and t for t in tokens):
                raise ValueError("gated_tokens must be a list of non-empty strings")
            if not isinstance(faults["gated_metadata"], bool):
                raise ValueError("gated_metadata must be true or false")
            if not isinstance(faults["xet"], bool):
                raise ValueError("xet must be true or false")
            self.faults = faults
            if changes.get("reset") or any(k.startswith("cut_") for k in changes):
                self.remaining["cut"] = faults["cut_times"]
            if changes.get("reset") or any(k.startswith("fail_") for k in changes):
                self.remaining["fail"] = faults["fail_times"]
            return self.fault_state()

    def fault_state(self) -> dict:
        return {**self.faults, "cut_remaining": self.remaining["cut"], "fail_remaining": self.remaining["fail"]}

    def claim(self, kind: str, path: str, is_range: bool) -> bool:
        """Whether the next response for `path` gets fault `kind` ("cut" or "fail"); consumes one use."""
        with self.lock:
            f = self.faults
            armed = f["cut_after_bytes"] is not None if kind == "cut" else f["fail_status"] is not None
            if not armed or not fnmatch.fnmatch(path, f[f"{kind}_path"]):
                return False
            if kind == "fail" and f["fail_only_ranges"] and not is_range:
                return False
            if f[f"{kind}_times"] == 0:
                return True
            if self.remaining[kind] <= 0:
                return False
            self.remaining[kind] -= 1
            return True

    # -- counters -----------------------------------------------------------------------
    def reset_stats(self) -> None:
        with self.lock:
            self.stats = {
                "requests": 0,  # every request except the /_stub control endpoints
                "by_route": {},
                "status": {},
                "bytes_served": 0,
                "range_requests": 0,
                "auth": {"ok": 0, "missing": 0, "wrong": 0},
                # Requests a gated repo answered: without a token (401), with a token not granted
                # access (403), with a granted one (served).
                "gated": {"unauthenticated": 0, "denied": 0, "granted": 0},
                "cdn_requests_with_authorization": 0,
                "files": {},
                "log": [],
            }

    def count(self, route: str, method: str, target: str, status: int, headers, nbytes: int = 0) -> None:
        with self.lock:
            s = self.stats
            s["requests"] += 1
            s["by_route"][route] = s["by_route"].get(route, 0) + 1
            s["status"][str(status)] = s["status"].get(str(status), 0) + 1
            s["bytes_served"] += nbytes
            if headers.get("Range"):
                s["range_requests"] += 1
            s["log"].append({"method": method, "path": target, "status": status, "range": headers.get("Range"), "bytes": nbytes})
            del s["log"][:-LOG_LIMIT]

    def count_file(self, path: str, **deltas: int) -> None:
        with self.lock:
            entry = self.stats["files"].setdefault(
                path, {"bytes_served": 0, "heads": 0, "gets": 0, "full_gets": 0, "range_gets": 0, "probes": 0, "cuts": 0,
                       "failed": 0}
            )
            for key, value in deltas.items():
                entry[key] += value

    def snapshot_stats(self) -> dict:
        with self.lock:
            return json.loads(json.dumps(self.stats))

    def cdn_signature(self, sha256: str) -> str:
        return hmac.new(self.secret, sha256.encode(), hashlib.sha256).hexdigest()[:32]


class HubError(Exception):
    def __init__(self, status: int, message: str, error_code: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.error_code, self.headers = status, message, error_code, headers or {}


class Handler(BaseHTTPRequestHandler):
    # Keep-alive, as the hub: huggingface_hub pools connections.
    protocol_version = "HTTP/1.1"
    server_version = "sparklab-hubstub/1"

    @property
    def hub(self) -> Hub:
        return self.server.hub  # type: ignore[attr-defined]

    def log_message(self, format, *args):  # noqa: A002 (signature of the base class)
        if self.hub.verbose:
            sys.stderr.write(f"hubstub {self.address_string()} {format % args}\n")

    # -- plumbing -----------------------------------------------------------------------
    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(self, status: int, body: bytes = b"", headers: dict | None = None, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)

    def _json(self, status: int, obj, headers: dict | None = None) -> None:
        self._send(status, json.dumps(obj).encode(), headers)

    def _error(self, err: HubError) -> None:
        headers = dict(err.headers)
        headers["X-Error-Message"] = err.message
        if err.error_code:
            headers["X-Error-Code"] = err.error_code
        self._json(err.status, {"error": err.message}, headers)

    def _check_auth(self) -> None:
        if self.hub.token is None:
            return
        given = self.headers.get("Authorization", "")
        if not given:
            self._count_auth("missing")
            # What the hub answers for a private repo without credentials.
            raise HubError(401, "Repository not found", "RepoNotFound")
        scheme, _, value = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), self.hub.token.encode()):
            self._count_auth("wrong")
            raise HubError(401, "Invalid credentials in Authorization header")
        self._count_auth("ok")

    def _count_auth(self, outcome: str) -> None:
        with self.hub.lock:
            self.hub.stats["auth"][outcome] += 1

    def _check_gate(self, repo: Repo, content: bool) -> None:
        """A gated repo: the hub answers file content (and, with gated_metadata, the metadata)
        only for a token whose account was granted access. Without a token: 401 GatedRepo;
        with a token that was not granted: 403 GatedRepo (huggingface_hub: GatedRepoError)."""
        faults = self.hub.faults
        if faults["gated"] is None or not (content or faults["gated_metadata"]):
            return
        scheme, _, value = self.headers.get("Authorization", "").partition(" ")
        value = value.strip() if scheme.lower() == "bearer" else ""
        granted = set(faults["gated_tokens"]) | ({self.hub.token} if self.hub.token else set())
        outcome = "granted" if value and value in granted else ("denied" if value else "unauthenticated")
        with self.hub.lock:
            self.hub.stats["gated"][outcome] += 1
        if outcome == "unauthenticated":
            raise HubError(401, f"Access to model {repo.repo_id} is restricted. You must have access to it and be "
                                "authenticated to access it. Please log in.", "GatedRepo")
        if outcome == "denied":
            host = self.headers.get("Host", "huggingface.co")
            raise HubError(403, f"Access to model {repo.repo_id} is restricted and you are not in the authorized list. "
                                f"Visit http://{host}/{repo.repo_id} to ask for access.", "GatedRepo")

    def _repo_and_revision(self, org: str, name: str, revision: str | None) -> Repo:
        repo = self.hub.repos.get(f"{org}/{name}")
        if repo is None:
            raise HubError(404, "Repository not found", "RepoNotFound")
        if revision is not None and revision not in (repo.revision_name, repo.commit):
            raise HubError(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        return repo

    # -- dispatch -----------------------------------------------------------------------
    def do_GET(self):  # noqa: N802 (http.server naming)
        self._dispatch()

    def do_HEAD(self):  # noqa: N802
        self._dispatch()

    def do_POST(self):  # noqa: N802
        self._dispatch()

    def _dispatch(self) -> None:
        split = urlsplit(self.path)
        segments = [unquote(s) for s in split.path.split("/")[1:]]
        query = parse_qs(split.query, keep_blank_values=True)
        body = self._read_body() if self.command == "POST" else b""
        if segments[:1] == ["_stub"] and segments[1:2] != ["lfs"]:
            return self._control(segments[1:], body)
        route, self._status, self._nbytes = "other", 0, 0
        try:
            route, handler, args = self._route(segments, query, body)
            if handler is None:
                raise HubError(404, "Not found")
            handler(*args)
        except HubError as err:
            self._status = err.status
            self._error(err)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            self.hub.count(route, self.command, self.path, self._status, self.headers, self._nbytes)

    def send_response(self, code, message=None):
        self._status = code
        super().send_response(code, message)

    def _route(self, s: list[str], query: dict, body: bytes):
        method = self.command
        if self.server.role == "cdn":  # type: ignore[attr-defined]
            if len(s) == 3 and s[:2] == ["_stub", "lfs"] and method in ("GET", "HEAD"):
                return "cdn", self._cdn_blob, (s[2], query)
            return "other", None, ()
        if len(s) >= 4 and s[0] == "api" and s[1] == "models":
            org, name, rest = s[2], s[3], s[4:]
            if not rest and method == "GET":
                return "model_info", self._model_info, (org, name, None, query)
            if len(rest) == 2 and rest[0] == "revision" and method == "GET":
                return "model_info", self._model_info, (org, name, rest[1], query)
            if len(rest) >= 2 and rest[0] == "tree" and method == "GET":
                return "tree", self._tree, (org, name, rest[1], "/".join(rest[2:]), query)
            if len(rest) == 2 and rest[0] == "paths-info" and method == "POST":
                return "paths_info", self._paths_info, (org, name, rest[1], body)
            if len(rest) == 2 and rest[0] == "xet-read-token" and method == "GET":
                return "xet_token", self._xet_token, (org, name, rest[1])
        if s[:1] == ["xet-cas"]:
            return "xet_cas", self._xet_cas, ()
        if len(s) >= 5 and s[2] == "resolve" and method in ("GET", "HEAD"):
            return f"resolve_{method.lower()}", self._resolve, (s[0], s[1], s[3], "/".join(s[4:]))
        return "other", None, ()

    # -- control ------------------------------------------------------------------------
    def _control(self, s: list[str], body: bytes) -> None:
        try:
            if s == ["faults"] and self.command == "GET":
                return self._json(200, self.hub.fault_state())
            if s == ["faults"] and self.command == "POST":
                return self._json(200, self.hub.set_faults(json.loads(body or b"{}")))
            if s == ["stats"] and self.command == "GET":
                return self._json(200, self.hub.snapshot_stats())
            if s == ["stats", "reset"] and self.command == "POST":
                self.hub.reset_stats()
                return self._json(200, {"reset": True})
            if s == ["info"] and self.command == "GET":
                repo = self.hub.repo
                info = {"repo_id": repo.repo_id, "commit": repo.commit, "revision": repo.revision_name, "files": len(repo.files)}
                return self._json(200, info)
        except ValueError as err:
            return self._json(400, {"error": str(err)})
        self._json(404, {"error": "unknown control endpoint"})

    # -- API ----------------------------------------------------------------------------
    def _model_info(self, org: str, name: str, revision: str | None, query: dict) -> None:
        status = self.hub.faults["model_info_status"]
        if status is not None:
            raise HubError(int(status), f"Injected failure ({int(status)})")
        self._check_auth()
        repo = self._repo_and_revision(org, name, revision)
        self._check_gate(repo, content=False)
        blobs = query.get("blobs", ["false"])[-1].lower() in ("1", "true")
        expand = query.get("expand", []) + query.get("expand[]", [])
        config = {}
        if "config.json" in repo.files:
            try:
                raw = json.loads(repo.files["config.json"].disk.read_text())
                config = {k: raw[k] for k in ("architectures", "model_type") if k in raw}
            except ValueError:
                pass
        info = {
            "_id": repo.commit[:24],
            "id": repo.repo_id,
            "modelId": repo.repo_id,
            "author": repo.repo_id.split("/")[0],
            "sha": repo.commit,
            "lastModified": repo.last_modified,
            "createdAt": repo.last_modified,
            "private": self.hub.token is not None,
            "gated": self.hub.faults["gated"] or False,
            "disabled": False,
            "downloads": 0,
            "likes": 0,
            "tags": ["safetensors", "text-generation"],
            "library_name": "transformers",
            "pipeline_tag": "text-generation",
            "config": config,
            "siblings": [repo.sibling(f, blobs) for f in repo.files.values()],
            "spaces": [],
            "usedStorage": sum(f.size for f in repo.files.values()),
        }
        if repo.safetensors:
            info["safetensors"] = repo.safetensors
        if expand:
            # With `expand`, the hub returns only the requested properties (plus the ids).
            info = {k: v for k, v in info.items() if k in ("_id", "id") or k in expand}
        self._json(200, info)

    def _tree(self, org: str, name: str, revision: str, path: str, query: dict) -> None:
        self._check_auth()
        repo = self._repo_and_revision(org, name, revision)
        self._check_gate(repo, content=False)
        recursive = query.get("recursive", ["false"])[-1].lower() in ("1", "true")
        expand = query.get("expand", ["false"])[-1].lower() in ("1", "true")
        if path and path not in repo.dirs:
            raise HubError(404, f"Entry not found: {path}", "EntryNotFound", {"X-Repo-Commit": repo.commit})
        prefix = f"{path}/" if path else ""
        entries = []
        for candidate in sorted(repo.dirs | set(repo.files)):
            if not candidate.startswith(prefix) or candidate == path:
                continue
            if not recursive and "/" in candidate[len(prefix):]:
                continue
            entries.append(repo.tree_entry(candidate, expand, xet=self.hub.faults["xet"]))
        # Directories first, like the hub. One page: fine below the hub's 1000-entry page size.
        entries.sort(key=lambda e: (e["type"] != "directory", e["path"]))
        self._json(200, entries, {"X-Repo-Commit": repo.commit})

    def _paths_info(self, org: str, name: str, revision: str, body: bytes) -> None:
        self._check_auth()
        repo = self._repo_and_revision(org, name, revision)
        self._check_gate(repo, content=False)
        if self.headers.get("Content-Type", "").startswith("application/json"):
            form = json.loads(body or b"{}")
            paths, expand = form.get("paths", []), bool(form.get("expand"))
        else:
            form = parse_qs(body.decode(), keep_blank_values=True)
            paths = form.get("paths", []) + form.get("paths[]", [])
            expand = form.get("expand", ["false"])[-1].lower() in ("1", "true")
        wanted = [p.strip("/") for p in paths]
        xet = self.hub.faults["xet"]
        self._json(200, [repo.tree_entry(p, expand, xet=xet) for p in wanted if p in repo.files or p in repo.dirs],
                   {"X-Repo-Commit": repo.commit})

    # -- file content -------------------------------------------------------------------
    def _resolve(self, org: str, name: str, revision: str, path: str) -> None:
        self._check_auth()
        repo = self._repo_and_revision(org, name, revision)
        self._check_gate(repo, content=True)
        f = repo.files.get(path)
        if f is None:
            raise HubError(404, f"Entry not found: {path}", "EntryNotFound", {"X-Repo-Commit": repo.commit})
        headers = {"X-Repo-Commit": repo.commit, "ETag": f'"{f.etag}"', "Accept-Ranges": "bytes"}
        if f.lfs:
            headers["X-Linked-Etag"] = f'"{f.sha256}"'
            headers["X-Linked-Size"] = str(f.size)
            if self.hub.faults["xet"]:
                headers["X-Xet-Hash"] = f.xet_hash
                headers["Link"] = f'<{self._base()}/api/models/{repo.repo_id}/xet-read-token/{repo.commit}>; rel="xet-auth"'
        if f.lfs and self.hub.lfs_redirect and self.hub.cdn_base:
            # The hub answers LFS resolves with a 302 to a pre-signed CDN url on another
            # origin; the client must not carry the Authorization header there.
            sig = self.hub.cdn_signature(f.sha256)
            headers["Location"] = f"{self.hub.cdn_base}/_stub/lfs/{f.sha256}?sig={sig}&name={quote(path)}"
            if self.command == "HEAD":
                self.hub.count_file(f.stat_key, heads=1)
            return self._send(302, b"", headers)
        self._serve_content(f, headers)

    def _base(self) -> str:
        """This server's URL as the client addressed it."""
        return f"http://{self.headers.get('Host') or _base_url(*self.server.server_address[:2]).split('//', 1)[1]}"

    def _xet_token(self, org: str, name: str, revision: str) -> None:
        """The hub's Xet read-token route: a short-lived token and the CAS server's URL, in headers
        (what huggingface_hub reads) and in the body."""
        self._check_auth()
        repo = self._repo_and_revision(org, name, revision)
        self._check_gate(repo, content=True)
        if not self.hub.faults["xet"]:
            raise HubError(404, "This repository is not stored in Xet")
        expires = int(time.time()) + 3600
        cas = f"{self._base()}/xet-cas"
        token = "xet_stub_" + self.hub.cdn_signature(repo.commit)
        self._json(200, {"casUrl": cas, "accessToken": token, "exp": expires},
                   {"X-Xet-Cas-Url": cas, "X-Xet-Access-Token": token, "X-Xet-Token-Expiration": str(expires)})

    def _xet_cas(self) -> None:
        raise HubError(501, "The hub stand-in does not implement Xet's CAS protocol: disable Xet (HF_HUB_DISABLE_XET=1)")

    def _cdn_blob(self, sha256: str, query: dict) -> None:
        if self.headers.get("Authorization"):
            with self.hub.lock:
                self.hub.stats["cdn_requests_with_authorization"] += 1
        f = self.hub.by_sha256(sha256)
        if f is None or not hmac.compare_digest(query.get("sig", [""])[-1], self.hub.cdn_signature(sha256)):
            raise HubError(403, "Request has expired or signature is invalid")
        self._serve_content(f, {"ETag": f'"{f.sha256}"', "Accept-Ranges": "bytes"})

    def _serve_content(self, f: RepoFile, headers: dict) -> None:
        headers = dict(headers)
        base = f.path.rsplit("/", 1)[-1]
        headers["Content-Disposition"] = f"inline; filename*=UTF-8''{quote(base)}; filename=\"{base}\";"
        if self.command == "HEAD":
            self.hub.count_file(f.stat_key, heads=1)
            self.send_response(200)
            headers["Content-Length"] = str(f.size)
            headers["Content-Type"] = "application/octet-stream"
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()
            return

        range_header = self.headers.get("Range")
        start, end = 0, f.size - 1
        partial = False
        if range_header:
            parsed = parse_range(range_header, f.size)
            if parsed == "unsatisfiable":
                self.hub.count_file(f.stat_key, gets=1, range_gets=1)
                raise HubError(416, "Requested range not satisfiable", None, {"Content-Range": f"bytes */{f.size}"})
            if parsed is not None:  # None: malformed or multi-range => full content, as RFC 9110 allows
                start, end = parsed
                partial = True
        if partial and (start, end) == (0, 0):
            # One byte from the start: an access check (sparkctl's preflight reads one byte of a
            # weight file to prove downloads work), not a download; counted apart so a test can
            # still say "nothing was downloaded again".
            self.hub.count_file(f.stat_key, probes=1)
        else:
            self.hub.count_file(f.stat_key, gets=1, range_gets=int(partial), full_gets=int(not partial))

        if self.hub.claim("fail", f.path, bool(range_header)):
            self.hub.count_file(f.stat_key, failed=1)
            status = int(self.hub.faults["fail_status"])
            raise HubError(status, f"Injected failure ({status})")

        length = end - start + 1
        cut = self.hub.claim("cut", f.path, bool(range_header))
        budget = min(length, int(self.hub.faults["cut_after_bytes"])) if cut else length
        self.send_response(206 if partial else 200)
        headers["Content-Length"] = str(length)
        headers["Content-Type"] = "application/octet-stream"
        if partial:
            headers["Content-Range"] = f"bytes {start}-{end}/{f.size}"
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()

        try:
            self._send_bytes(f, start, budget)
        finally:
            self.hub.count_file(f.stat_key, bytes_served=self._nbytes)
        if cut:
            self.hub.count_file(f.stat_key, cuts=1)
            # Drop the connection mid-body: the client sees fewer bytes than Content-Length.
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _send_bytes(self, f: RepoFile, start: int, count: int) -> None:
        """Send count bytes of f from start; self._nbytes tracks progress even if the peer drops."""
        rate = self.hub.faults["throttle_bytes_per_s"]
        with open(f.disk, "rb") as fh:
            if not rate:
                # Zero-copy: loopback downloads are then limited by the client, not the stub.
                out = self.connection.fileno()
                while self._nbytes < count:
                    n = os.sendfile(out, fh.fileno(), start + self._nbytes, min(count - self._nbytes, 1 << 30))
                    if n == 0:
                        break
                    self._nbytes += n
                return
            bucket = self.hub.bucket if self.hub.faults["throttle_scope"] == "global" else TokenBucket()
            fh.seek(start)
            step = int(min(256 << 10, max(4096, rate / 50)))
            while self._nbytes < count:
                chunk = fh.read(min(step, count - self._nbytes))
                if not chunk:
                    break
                rate = self.hub.faults["throttle_bytes_per_s"] or rate  # adjustable mid-transfer
                bucket.take(len(chunk), float(rate))
                self.wfile.write(chunk)
                self._nbytes += len(chunk)


def parse_range(header: str, size: int):
    """(start, end) inclusive for a single `bytes=` range; "unsatisfiable"; or None to ignore it."""
    unit, _, spec = header.partition("=")
    if unit.strip().lower() != "bytes" or "," in spec:
        return None
    first, dash, last = spec.strip().partition("-")
    if not dash:
        return None
    try:
        if first == "":
            suffix = int(last)
            if suffix <= 0:
                return "unsatisfiable"
            return (max(0, size - suffix), size - 1)
        start = int(first)
        end = int(last) if last else size - 1
    except ValueError:
        return None
    if start >= size or end < start:
        return "unsatisfiable"
    return (start, min(end, size - 1))


class StubServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address, hub: Hub, role: str):
        self.hub, self.role = hub, role
        super().__init__(address, Handler)


class HubStub:
    """Programmatic use (tests): start in background threads, inspect, stop."""

    def __init__(
        self,
        root: str | os.PathLike,
        repo_id: str,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        revision_name: str = "main",
        lfs_redirect: bool = False,
        index_cache: str | None = None,
        verbose: bool = False,
        faults: dict | None = None,
        extra_repos: list[tuple[str | os.PathLike, str]] | None = None,
    ):
        self.repo = Repo(root, repo_id, revision_name, index_cache)
        self.hub = Hub(self.repo, token=token, lfs_redirect=lfs_redirect, verbose=verbose)
        # More repos beside the first, each (root, ORG/NAME) with its own hash cache (file names repeat
        # across repos) and its files counted under "ORG/NAME/path".
        for extra_root, extra_id in extra_repos or []:
            cache = f"{index_cache}.{extra_id.replace('/', '--')}" if index_cache else None
            self.hub.add_repo(Repo(extra_root, extra_id, revision_name, cache, stat_prefix=f"{extra_id}/"))
        if faults:
            self.hub.set_faults(faults)
        self.server = StubServer((host, port), self.hub, "hub")
        self.cdn = StubServer((host, 0), self.hub, "cdn") if lfs_redirect else None
        if self.cdn:
            self.hub.cdn_base = _base_url(host, self.cdn.server_address[1])
        self.threads: list[threading.Thread] = []

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    @property
    def url(self) -> str:
        return _base_url(self.server.server_address[0], self.port)

    @property
    def commit(self) -> str:
        return self.repo.commit

    def start(self) -> "HubStub":
        for srv in filter(None, (self.server, self.cdn)):
            thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, name=f"hubstub-{srv.role}", daemon=True)
            thread.start()
            self.threads.append(thread)
        return self

    def stop(self) -> None:
        for srv in filter(None, (self.server, self.cdn)):
            srv.shutdown()
            srv.server_close()

    def stats(self) -> dict:
        return self.hub.snapshot_stats()

    def settled_stats(self, ready, timeout: float = 5.0) -> dict:
        """The counters once ready(stats) holds, or when timeout runs out: a request is logged
        after its answer is sent, so a client can be done before its line is written."""
        deadline = time.monotonic() + timeout
        stats = self.stats()
        while not ready(stats) and time.monotonic() < deadline:
            time.sleep(0.02)
            stats = self.stats()
        return stats

    def set_faults(self, **changes) -> dict:
        return self.hub.set_faults(changes)

    def reset(self) -> None:
        self.hub.set_faults({"reset": True})
        self.hub.reset_stats()

    def __enter__(self) -> "HubStub":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _base_url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _terminate(*_) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Local stand-in for the Hugging Face hub (test double).")
    parser.add_argument("--root", required=True, help="directory served as the repo")
    parser.add_argument("--repo", required=True, help="repo id ORG/NAME")
    parser.add_argument("--also", action="append", default=[], metavar="ROOT=ORG/NAME",
                        help="serve one more repo, directory ROOT as ORG/NAME (repeatable)")
    parser.add_argument("--revision-name", default="main", help="branch name that resolves to the commit")
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default loopback)")
    parser.add_argument("--port", type=int, default=0, help="0 = pick a free port")
    parser.add_argument("--port-file", help="write the bound port here once listening")
    parser.add_argument(
        "--token", default=os.environ.get("HUBSTUB_TOKEN"), help="require 'Authorization: Bearer TOKEN' (default: $HUBSTUB_TOKEN)"
    )
    parser.add_argument("--lfs-redirect", action="store_true", help="302 LFS resolves to a second ('CDN') port, like the hub")
    parser.add_argument("--index-cache", help="JSON file caching file hashes across restarts (keyed by size + mtime)")
    parser.add_argument("--cut-after-bytes", type=int)
    parser.add_argument("--cut-path", default="*")
    parser.add_argument("--cut-times", type=int, default=1, help="0 = every time")
    parser.add_argument("--fail-status", type=int)
    parser.add_argument("--fail-path", default="*")
    parser.add_argument("--fail-times", type=int, default=1, help="0 = every time")
    parser.add_argument("--fail-only-ranges", action="store_true")
    parser.add_argument("--model-info-status", type=int, help="answer model info with this HTTP status (e.g. 503)")
    parser.add_argument("--throttle-bytes-per-s", type=float)
    parser.add_argument("--throttle-scope", choices=("global", "connection"), default="global")
    parser.add_argument("--gated", choices=GATED_KINDS, help="serve the repo as gated: content needs a granted token")
    parser.add_argument("--gated-token", dest="gated_tokens", action="append", default=[],
                        help="a token whose account was granted access to the gated repo (repeatable)")
    parser.add_argument("--gated-metadata", action="store_true", help="gate model info, tree and paths-info too")
    parser.add_argument("--xet", action="store_true",
                        help="advertise Xet storage for LFS files like the hub (the CAS itself is not implemented)")
    parser.add_argument("--verbose", action="store_true", help="log every request to stderr")
    args = parser.parse_args(argv)

    started = time.monotonic()
    extra = []
    for item in args.also:
        extra_root, sep, extra_id = item.rpartition("=")
        if not sep or not extra_root or extra_id.count("/") != 1:
            parser.error(f"--also takes ROOT=ORG/NAME, got {item!r}")
        extra.append((extra_root, extra_id))
    faults = {k: getattr(args, k) for k in FAULT_DEFAULTS}
    stub = HubStub(
        args.root,
        args.repo,
        host=args.host,
        port=args.port,
        token=args.token,
        revision_name=args.revision_name,
        lfs_redirect=args.lfs_redirect,
        index_cache=args.index_cache,
        verbose=args.verbose,
        faults=faults,
        extra_repos=extra,
    )
    if args.port_file:
        tmp = f"{args.port_file}.tmp"
        Path(tmp).write_text(f"{stub.port}\n")
        os.replace(tmp, args.port_file)
    total = sum(f.size for f in stub.repo.files.values())
    print(
        f"hubstub: {stub.repo.repo_id}@{stub.repo.commit} ({len(stub.repo.files)} files, {total} bytes, indexed in "
        f"{time.monotonic() - started:.1f} s) on {stub.url}" + (f", CDN {stub.hub.cdn_base}" if stub.cdn else "")
        + "".join(f", also {r.repo_id}@{r.commit}" for r in list(stub.hub.repos.values())[1:]),
        flush=True,
    )
    signal.signal(signal.SIGTERM, _terminate)
    stub.start()
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        stub.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

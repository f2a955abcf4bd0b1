# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Verify a model checkpoint directory: shard list, leftovers, sizes, sha256, safetensors headers.

Every tensor-parallel rank reads all shards, so every node needs the complete checkpoint at
the same path, and a partial tree only fails deep into an 11-minute load. The checks here run
on the head after the download and on each worker after the mirror.

Only the Python standard library is used (the nodes have nothing else for Ansible). What the
verification builds on has a module of its own: the ignore rules and the walk of the tree
(checkpoint_tree.py), the manifest (checkpoint_manifest.py), the safetensors header and index
checks (checkpoint_safetensors.py), hashing and the stamp (checkpoint_stamp.py).

Nothing here modifies the checkpoint; the only file ever written is the stamp.
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
import time

from ansible_collections.sparkctl.spark.plugins.module_utils.checkpoint_errors import CheckpointError
from ansible_collections.sparkctl.spark.plugins.module_utils.checkpoint_manifest import manifest_digest
from ansible_collections.sparkctl.spark.plugins.module_utils.checkpoint_safetensors import (
    INDEX_SUFFIX,
    SAFETENSORS_SUFFIX,
    index_shards,
    safetensors_file_problem,
)
from ansible_collections.sparkctl.spark.plugins.module_utils.checkpoint_stamp import (
    STAMP_MODE,
    STAMP_NAME,
    expected_digest,
    hash_many,
    is_racy,
    read_stamp,
    render_stamp,
    stamp_entry,
    stamp_vouches,
)
from ansible_collections.sparkctl.spark.plugins.module_utils.checkpoint_tree import (
    DEFAULT_IGNORE,
    compile_ignore,
    leftover_reason,
    manifest_dirs,
    owned_leftover,
    scan_tree,
)
from ansible_collections.sparkctl.spark.plugins.module_utils.files import read_bytes_and_mode, write_file_atomic

PROBLEM_KINDS = ("missing", "size", "sha256", "header", "incomplete", "symlink", "extra", "stray", "index")

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

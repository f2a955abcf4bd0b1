# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The hub as the transfer's source: which of a repo's files a transfer takes, the manifest the
hub's metadata gives, whether a manifest kept from an earlier run still stands for what the hub
holds (also when the hub is out of reach), and the partial downloads a killed run leaves.

huggingface_hub is imported only for a hub source (import_hub), with Xet off; `path` sources
and everything else here need the standard library only.
"""

from __future__ import annotations

import os
import sys
from fnmatch import fnmatchcase

from ansible_collections.sparkctl.spark.plugins.module_utils.checkpoint_errors import CheckpointError, SyncError
from ansible_collections.sparkctl.spark.plugins.module_utils.checkpoint_manifest import build_manifest, normalize_manifest
from ansible_collections.sparkctl.spark.plugins.module_utils.checkpoint_tree import DEFAULT_IGNORE, compile_ignore

# huggingface_hub's own partial downloads into a local_dir: a killed run leaves them behind, and
# nothing but a run of the checkpoint_sync module writes there (its lock keeps two runs apart).
HUB_DOWNLOAD_DIR = ".cache/huggingface/download"
HUB_INCOMPLETE_SUFFIX = ".incomplete"


def remove_hub_leftovers(dest):
    """huggingface_hub's unfinished downloads (<dest>/.cache/huggingface/download/**/*.incomplete),
    left by a killed run; returns the removed paths relative to dest."""
    removed = []
    top = os.path.join(dest, HUB_DOWNLOAD_DIR)
    for directory, _dirs, names in os.walk(top):
        for name in sorted(names):
            if name.endswith(HUB_INCOMPLETE_SUFFIX):
                path = os.path.join(directory, name)
                if os.path.isfile(path) and not os.path.islink(path):
                    os.unlink(path)
                    removed.append(os.path.relpath(path, dest).replace(os.sep, "/"))
    return sorted(removed)


def select_repo_files(names, allow_patterns=None):
    """The repo files a transfer takes, in the order given: huggingface_hub's allow_patterns
    filter (`filter_repo_objects`: case-sensitive fnmatch, a pattern ending in '/' takes the
    directory's files; none means all), less sparkctl's and huggingface_hub's own
    bookkeeping (DEFAULT_IGNORE). The transfer builds its manifest from these and the stage's
    no-op check compares a kept manifest's files with them, so both agree on what is wanted."""
    patterns = allow_patterns or None
    if isinstance(patterns, str):
        patterns = [patterns]
    if patterns is not None:
        patterns = [p.replace("\\", "/") for p in patterns]
        patterns = [p + "*" if p.endswith("/") else p for p in patterns]
    ignored = compile_ignore(DEFAULT_IGNORE)
    chosen = []
    for name in names:
        path = name.replace("\\", "/")
        if patterns is not None and not any(fnmatchcase(path, pattern) for pattern in patterns):
            continue
        if not ignored(name):  # would collide with sparkctl's or huggingface_hub's bookkeeping
            chosen.append(name)
    return chosen


def hub_manifest(repo_id, revision, allow_patterns=None, endpoint=None, token=None, hub=None):
    """The files of repo_id at revision (filtered like huggingface_hub's allow_patterns) with sizes,
    LFS sha256 (None for files stored in git) and git blob ids, and the resolved commit."""
    hub = hub or import_hub()
    info = hub.HfApi(endpoint=endpoint).model_info(repo_id, revision=revision, files_metadata=True, token=token)
    wanted = set(select_repo_files([sibling.rfilename for sibling in info.siblings], allow_patterns))
    files = {}
    for sibling in info.siblings:
        rel = sibling.rfilename
        if rel not in wanted:
            continue
        if sibling.size is None:
            raise SyncError("the hub gave no size for %s (model_info without files_metadata?)" % rel)
        lfs = sibling.lfs
        files[rel] = {
            "size": int(sibling.size),
            "sha256": lfs.sha256 if lfs is not None else None,
            "git_blob_sha1": None if lfs is not None else sibling.blob_id,
        }
    if not files:
        raise SyncError("%s@%s has no files matching allow_patterns %s" % (repo_id, revision, allow_patterns))
    return build_manifest(files, repo_id=repo_id, revision=revision, commit=info.sha, source="hub")


def kept_manifest_refusal(manifest, source):
    """Why the manifest an earlier run kept is not of this hub source (repo and revision as
    asked), or None when it is."""
    where = "%s@%s" % (source["repo_id"], source["revision"])
    kept = (manifest.get("source"), manifest.get("repo_id"), manifest.get("revision"))
    if kept != ("hub", source["repo_id"], source["revision"]):
        return "the earlier run's manifest is of %s@%s, not %s" % (kept[1] or manifest.get("path") or "?", kept[2] or "?", where)
    return None


def offline_notes(manifest, source, hub_unreachable):
    """What to say when the hub is out of reach and the kept manifest stands in for it: a branch
    or tag (anything but the commit the manifest names) may have moved on the hub since."""
    if manifest.get("commit") == source["revision"]:
        return []
    return ["the hub is out of reach (%s): %s@%s is checked against the commit %s of the earlier run; the branch or tag "
            "%r may have moved on the hub since (pin a commit in spark_checkpoint.revision to make this exact)"
            % (hub_unreachable, source["repo_id"], source["revision"], manifest.get("commit"), source["revision"])]


def kept_manifest_standing(manifest, source, hub_commit=None, hub_files=None, hub_unreachable=None):
    """Whether the manifest an earlier run kept is the one a transfer would build now, so a node
    whose copy verifies against it holds the checkpoint this run asks for.

    source is the transfer's (type hub or path); with the hub in reach, hub_commit and hub_files
    are the hub's answer for the revision (hub_access: the commit it resolves to and its file
    names), and the kept manifest stands only for that same commit and the same files after
    allow_patterns; with the hub out of reach (hub_unreachable, the reason) it stands for the same
    repo and revision, as the transfer's own offline run takes it (a branch may have moved: a
    note says so). A path source is never vouched for here: only reading the source tells.
    Returns {current: bool, reason: why not (empty when current), notes: [lines to show]}."""

    def no(reason):
        return {"current": False, "reason": reason, "notes": []}

    if not isinstance(source, dict) or source.get("type") != "hub":
        return no("a path source is read again by the transfer")
    if not manifest:
        return no("no manifest of an earlier run")
    try:
        files = normalize_manifest(dict(manifest))
    except (CheckpointError, TypeError, ValueError, AttributeError) as exc:
        return no("the earlier run's manifest cannot be used: %s" % exc)
    refusal = kept_manifest_refusal(manifest, source)
    if refusal:
        return no(refusal)
    if hub_unreachable:
        return {"current": True, "reason": "", "notes": offline_notes(manifest, source, hub_unreachable)}
    if not hub_commit or hub_files is None:
        return no("the hub named no commit or files for %s@%s" % (source["repo_id"], source["revision"]))
    if hub_commit != manifest.get("commit"):
        return no("%s@%s is commit %s on the hub, the earlier run's manifest is of %s"
                  % (source["repo_id"], source["revision"], hub_commit, manifest.get("commit")))
    wanted = set(select_repo_files(hub_files, source.get("allow_patterns")))
    if wanted != set(files):
        return no("the hub's files after allow_patterns differ from the earlier run's manifest (%d wanted, %d kept)"
                  % (len(wanted), len(files)))
    return {"current": True, "reason": "", "notes": []}


def import_hub():
    # Xet off (roles/checkpoint/README.md, "Xet"): every byte comes over the hub's HTTP resolve
    # route, the path preflight probes, straight into the checkpoint directory. hf_xet would
    # fetch from other hosts and keep a chunk cache under HF_HOME/xet, outside the directory
    # and its disk check. The variable is read at import; the constant covers an earlier import.
    os.environ["HF_HUB_DISABLE_XET"] = "1"
    try:
        import huggingface_hub
        # The package's lazy attributes do not include its submodules: import it by name.
        import huggingface_hub.constants
    except ImportError as exc:
        raise SyncError(
            "hub sources need huggingface_hub in the Python that runs this module (%s); point "
            "ansible_python_interpreter at the tools venv: %s" % (sys.executable, exc)
        ) from exc
    huggingface_hub.constants.HF_HUB_DISABLE_XET = True
    try:
        huggingface_hub.utils.disable_progress_bars()
    except AttributeError:
        pass
    return huggingface_hub

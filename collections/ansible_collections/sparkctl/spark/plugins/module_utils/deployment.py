# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The deployment record: what a cluster serves, as a successful verify saw it.

A record holds the deployment's identity (the profile and its content, the checkpoint's
commit, the runtime's identity, the engine's version and rendered configuration, the
sparkctl version) and, outside the identity, when it was first recorded and the verify
status of that first time. A re-verify of the same identity keeps the record as it is, so
a converged re-run writes nothing; a new identity is a new record. Every fact in it is
read from its owner (the verify stage's reads, the profile's digests); nothing here reads
a node or the hub.
"""

from __future__ import annotations

import hashlib
import json
import os

from ansible_collections.sparkctl.spark.plugins.module_utils import shapes
from ansible_collections.sparkctl.spark.plugins.module_utils.requirement import canonical_name, distribution_name

SCHEMA_VERSION = 1
# On every node: root-owned, readable by everyone (it holds no secret).
NODE_RECORD_PATH = "/etc/sparkctl/deployment.json"
NODE_RECORD_MODE = 0o644
# The fields that make a deployment: any change among them is a new deployment.
IDENTITY_FIELDS = ("profile", "checkpoint", "runtime", "engine", "sparkctl_version")
# Only a verify that passed records a deployment.
RECORDED_STATUSES = ("passed", "passed_with_warnings")


class RecordError(ValueError):
    """A record that cannot be built or read."""


def canonical_json(value):
    """The one text of a JSON value: sorted keys, no spaces, so equal values hash equally."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def content_digest(value):
    """sha256:<hex> of value's canonical JSON."""
    return "sha256:" + hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def deployment_id(record):
    """The digest of the record's identity fields (absent ones count as null)."""
    return content_digest(dict((field, record.get(field)) for field in IDENTITY_FIELDS))


def engine_package(package_names, engine_kind):
    """The distribution that is the engine among the ones verify reads: the one named like
    the engine (vllm, sglang), else the first (a profile lists its engine first, as the lab's
    stand-in does); None without any."""
    # Requirements as the profile pins them (vllm==0.25.1): their versions were read by name.
    names = [distribution_name(spec) for spec in package_names or [] if spec]
    names = [name for name in names if name]
    for name in names:
        if canonical_name(name) == canonical_name(engine_kind or ""):
            return name
    return names[0] if names else None


def build_record(profile_name, profile_digest, checkpoint, checkpoint_commit, runtime_kind, versions, image_ref,
                 engine_kind, engine_package_name, engine_config_digest, sparkctl_version, verify_status, now):
    """A new record from the facts their owners computed.

    versions is one node's runtime_versions read (verify parity proved every node's equal);
    checkpoint the spark_checkpoint mapping; checkpoint_commit the commit the checkpoint
    stage's manifest names (None for a path source); now the time to record when no record
    of this deployment exists yet (ISO 8601, UTC)."""
    versions = versions or {}
    if runtime_kind == "venv":
        runtime_id = versions.get("venv_lock_sha256")
        runtime = {"kind": "venv", "id": runtime_id, "venv_lock_sha256": runtime_id}
    elif runtime_kind == "image":
        runtime_id = versions.get("image_id")
        runtime = {"kind": "image", "id": runtime_id, "image": image_ref or None,
                   "image_context_hash": versions.get("image_context_hash")}
    else:
        raise RecordError("runtime kind must be venv or image, got %r" % (runtime_kind,))
    if not runtime_id:
        raise RecordError("verify read no %s identity (%s): nothing to record"
                          % (runtime_kind, "venv lock hash" if runtime_kind == "venv" else "image id"))
    checkpoint = checkpoint or {}
    source = checkpoint.get("source") or "hub"
    recorded_checkpoint = {"source": source}
    if source == "hub":
        recorded_checkpoint.update(repo_id=checkpoint.get("repo_id"), revision=checkpoint.get("revision"),
                                   commit=checkpoint_commit or None)
    else:
        recorded_checkpoint.update(path=checkpoint.get("path"))
    packages = versions.get("packages") or {}
    record = {
        "schema_version": SCHEMA_VERSION,
        "profile": {"name": profile_name, "sha256": profile_digest},
        "checkpoint": recorded_checkpoint,
        "runtime": runtime,
        "engine": {"kind": engine_kind, "package": engine_package_name,
                   "version": packages.get(engine_package_name) if engine_package_name else None,
                   "config_sha256": engine_config_digest},
        "sparkctl_version": sparkctl_version,
        "recorded_at": now,
        "verify_status": verify_status,
    }
    record["deployment_id"] = deployment_id(record)
    problems = record_problems(record)
    if problems:
        raise RecordError("the values read for the record are not of their shape: " + "; ".join(problems))
    return record


# --- Shapes ---------------------------------------------------------------------------------
# A record's values come from files and reads of the nodes (the checkpoint's manifest, the
# runtime's versions, an earlier record) and from the control node's history, which its user can
# edit: each is checked against its shape before it is recorded and before a rollback gives it
# to a run. (field, shape, None allowed); a runtime id's shape depends on its kind.
RECORD_SHAPES = (
    ("deployment_id", shapes.DIGEST, False),
    ("profile.name", shapes.PROFILE_NAME, False),
    ("profile.sha256", shapes.DIGEST, False),
    ("checkpoint.source", shapes.WORD, False),
    ("checkpoint.repo_id", shapes.REPO_ID, True),
    ("checkpoint.revision", shapes.REVISION, True),
    ("checkpoint.commit", shapes.COMMIT, True),
    ("checkpoint.path", shapes.ABSOLUTE_PATH, True),
    ("runtime.kind", shapes.WORD, False),
    ("runtime.venv_lock_sha256", shapes.HEX_SHA256, True),
    ("runtime.image", shapes.IMAGE_REF, True),
    ("runtime.image_context_hash", shapes.DIGEST, True),
    ("engine.kind", shapes.WORD, False),
    ("engine.package", shapes.DISTRIBUTION, True),
    ("engine.version", shapes.VERSION, True),
    ("engine.config_sha256", shapes.DIGEST, False),
    ("sparkctl_version", shapes.VERSION, False),
    ("recorded_at", shapes.TIMESTAMP, False),
)
RUNTIME_ID_SHAPES = {"venv": shapes.HEX_SHA256, "image": shapes.DIGEST}
# The fields of a checkpoint manifest (or a worker's verification stamp) a record takes.
MANIFEST_SHAPES = (
    ("source", shapes.WORD),
    ("repo_id", shapes.REPO_ID),
    ("revision", shapes.REVISION),
    ("commit", shapes.COMMIT),
)


def _field(record, dotted):
    value = record
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def record_problems(record):
    """Why record is not a deployment record of sparkctl's shape, one line per field (none: []):
    every identity field of its shape, no template delimiter in any string it holds (the
    variables that reproduce it included)."""
    if not isinstance(record, dict):
        return ["the record is not a mapping"]
    problems = []
    if record.get("schema_version") != SCHEMA_VERSION:
        problems.append("schema_version: %s is not %d" % (shapes.shown(record.get("schema_version")), SCHEMA_VERSION))
    for dotted, shape, optional in RECORD_SHAPES:
        problem = shapes.shape_problem(dotted, _field(record, dotted), shape, optional)
        if problem:
            problems.append(problem)
    kind = _field(record, "runtime.kind")
    if kind not in RUNTIME_ID_SHAPES:
        problems.append("runtime.kind: %s is not one of %s" % (shapes.shown(kind), ", ".join(sorted(RUNTIME_ID_SHAPES))))
    else:
        problem = shapes.shape_problem("runtime.id", _field(record, "runtime.id"), RUNTIME_ID_SHAPES[kind])
        if problem:
            problems.append(problem)
    if record.get("verify_status") not in RECORDED_STATUSES:
        shown = shapes.shown(record.get("verify_status"))
        problems.append("verify_status: %s is not one of %s" % (shown, ", ".join(RECORDED_STATUSES)))
    shaped = set(dotted for dotted, _shape, _optional in RECORD_SHAPES) | {"runtime.id"}
    problems.extend(p for p in shapes.template_problems(record) if p.split(":", 1)[0] not in shaped)
    return problems


def versions_problems(versions):
    """Why the runtime's identity and the distributions' versions a node's read found (what a
    record takes of them) are not of their shape, one line per value; absent ones are not."""
    versions = versions or {}
    problems = [shapes.shape_problem(name, versions.get(name), shape, optional=True)
                for name, shape in (("venv_lock_sha256", shapes.HEX_SHA256), ("image_id", shapes.DIGEST),
                                    ("image_context_hash", shapes.DIGEST))]
    packages = versions.get("packages") or {}
    problems += [shapes.shape_problem("packages.%s" % name, packages[name], shapes.VERSION, optional=True)
                 for name in sorted(packages, key=str)]
    return [p for p in problems if p]


def manifest_problems(manifest):
    """Why the origin fields of a checkpoint manifest (or a verification stamp) are not of their
    shape, one line per field; an absent field is not a problem (a path source has no commit)."""
    if not isinstance(manifest, dict):
        return ["the manifest is not a mapping"]
    return [p for p in (shapes.shape_problem(name, manifest.get(name), shape, optional=True)
                        for name, shape in MANIFEST_SHAPES) if p]


def settle(record, existing):
    """record as it is to be kept: when one of existing (the records found on the nodes) is of
    the same deployment, its first-recorded time and status stay (the earliest, when the nodes
    disagree); otherwise record itself."""
    same = [r for r in existing or [] if isinstance(r, dict) and r.get("deployment_id") == record["deployment_id"]
            and r.get("recorded_at")]
    if not same:
        return dict(record)
    first = min(same, key=lambda r: str(r["recorded_at"]))
    return dict(record, recorded_at=first["recorded_at"], verify_status=first.get("verify_status", record["verify_status"]))


def record_text(record):
    """The record as written to a file: indented, keys sorted, one newline at the end."""
    return json.dumps(record, indent=2, sort_keys=True) + "\n"


def parse_record(text):
    """A record from a file's text; RecordError when it is not one."""
    try:
        record = json.loads(text)
    except ValueError as exc:
        raise RecordError("not JSON: %s" % exc) from exc
    if not isinstance(record, dict) or not record.get("deployment_id"):
        raise RecordError("not a deployment record (no deployment_id)")
    return record


def read_record(path):
    """(record, problem) of the file at path: (None, None) when there is none, (None, why) when it
    cannot be read or is not a record (it is then replaced by the next write)."""
    try:
        with open(path, "rb") as handle:
            content = handle.read()
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, "%s: %s" % (path, exc.strerror or exc)
    return record_of(path, content)


def record_of(path, content):
    """(record, problem) of a record file's bytes already read (None: no file), as read_record."""
    if content is None:
        return None, None
    try:
        return parse_record(content.decode("utf-8")), None
    except UnicodeDecodeError as exc:
        return None, "%s: %s" % (path, exc)
    except RecordError as exc:
        return None, "%s: %s" % (path, exc)


def history_name(record):
    """The record's file name in the control node's history: <first recorded, compact UTC>-<first
    12 hex digits of its id>.json, so names sort by time and one deployment has one name."""
    stamp = str(record["recorded_at"]).replace("-", "").replace(":", "")
    digest = str(record["deployment_id"]).split(":", 1)[-1]
    return "%s-%s.json" % (stamp, digest[:12])


# --- Rollback -------------------------------------------------------------------------------
# The variables that decide what a deployment is, as a run resolved them: the control node's
# history keeps them beside the record (its "reproduce" mapping), and a rollback gives them back
# to the run as extra variables. The profile's file is still read (its directory holds its
# plugin and wheel sources); the run refuses when it resolves to another content than the
# record's digest.
REPRODUCE_VARS = ("spark_model_profile", "spark_profile_overrides", "spark_profile_paths", "spark_checkpoint",
                  "spark_checkpoint_dir", "spark_engine_venv_path", "spark_api_proxy")


def inventory_key(inventory_dir):
    """The name of an inventory's own history directory: the inventory directory's name and the
    first 8 hex digits of the sha256 of its real path, so two clusters run from one checkout
    never share a history. The one owner of the name: the deployment_inventory_key filter
    (spark_deployment_dir) and the wrapper (sparkctl/history.py, from -i) call this."""
    path = os.path.realpath(str(inventory_dir or "."))
    return "%s-%s" % (os.path.basename(path) or "inventory", hashlib.sha256(path.encode("utf-8")).hexdigest()[:8])


def rollback_node_problems(record, reads):
    """Why record's deployment cannot be served again on the nodes, one line per gap, from the
    verify_facts read of every node (reads: {host: result}, its checkpoint_manifest the head's
    manifest or a worker's verification stamp); [] when the checkpoint's list (of the recorded
    commit where it names one: the head's manifest, for a hub source) and the runtime (the venv whose installed
    distributions hash to the recorded lock, or the image with the recorded id) are on every node."""
    problems = []
    runtime = (record or {}).get("runtime") or {}
    checkpoint = (record or {}).get("checkpoint") or {}
    for host in sorted(reads or {}):
        read = reads[host] or {}
        versions = read.get("versions") or {}
        manifest = read.get("checkpoint_manifest")
        if runtime.get("kind") == "venv":
            found = versions.get("venv_lock_sha256")
            if found != runtime.get("id"):
                problems.append("%s: the venv of the recorded runtime is %s (recorded lock %s, found %s)"
                                % (host, "gone" if not found else "not the recorded one", runtime.get("id"),
                                   found or "no venv"))
        elif runtime.get("kind") == "image":
            found = versions.get("image_id")
            if found != runtime.get("id"):
                problems.append("%s: the recorded image %s (id %s) is %s" % (
                    host, runtime.get("image"), runtime.get("id"),
                    "gone" if not found else "now another image (id %s)" % found))
        else:
            problems.append("%s: the record names no runtime kind" % host)
        if manifest is None:
            problems.append("%s: the recorded checkpoint is gone (its directory holds no readable manifest or "
                            "verification stamp of sparkctl's)" % host)
        elif checkpoint.get("source", "hub") == "hub" and checkpoint.get("commit") and manifest.get("commit") \
                and manifest.get("commit") != checkpoint.get("commit"):
            problems.append("%s: the checkpoint directory holds commit %s, not the recorded %s"
                            % (host, manifest.get("commit"), checkpoint.get("commit")))
    return problems


def profile_problem(record, profile_digest):
    """Why the profile the run resolved is not the one record's deployment served, or None."""
    wanted = ((record or {}).get("profile") or {}).get("sha256")
    if profile_digest == wanted:
        return None
    return ("profile %s now resolves to %s, not the recorded %s: its file (or a file it extends) changed since; "
            "restore it, or deploy the change as a new deployment instead of a rollback"
            % (((record or {}).get("profile") or {}).get("name"), profile_digest, wanted))

# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The deployment record the verify stage keeps, built from what the stage read and from the
profile's digests, and its file name in the control node's history."""

from __future__ import annotations

import os

import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.sparkctl.spark.plugins.module_utils import deployment as records
from ansible_collections.sparkctl.spark.plugins.plugin_utils import profile as profiles
from ansible_collections.sparkctl.spark.plugins.plugin_utils import report_dirs

DOCUMENTATION = r"""
name: deployment
short_description: The deployment record of a verified cluster, from the facts their owners computed
version_added: 0.1.0
description:
  - Builds the record M(sparkctl.spark.deployment_record) keeps on every node and the verify role keeps in the control
    node's history. Its identity (C(deployment_id), the digest of these fields) is C(profile) (name and the digest of
    the resolved profile), C(checkpoint) (source, repo, revision and the commit the checkpoint stage's manifest names;
    the path of a path source), C(runtime) (the venv's lock hash or the image's id, as the verify stage read them
    on the head), C(engine) (kind, the engine's distribution and the version verify read of it, in the venv or, for an
    image, inside its running container;
    the digest of the rendered argv, environment and units) and C(sparkctl_version) (this collection's version).
  - Outside the identity, C(recorded_at) and C(verify_status) are those of the first time this deployment was
    recorded. When one of O(existing) is of the same deployment, its values stay (a re-verify changes nothing).
  - Returns V(null) when O(status) is not a passing one (V(passed), V(passed_with_warnings)), so a failed verify
    records nothing.
  - Companion filter C(deployment_history_name) gives a record's file name in the history
    (C(<recorded_at, compact>-<12 hex digits of the id>.json)); C(deployment_inventory_key) the name of an inventory's
    own history directory (C(<inventory directory name>-<8 hex digits of the sha256 of its real path>));
    C(deployment_intent) what a run deploys before verify's verdict (the profile's name and digest, the engine
    configuration's digest, and the variables that reproduce it, taken from a mapping of the run's variables);
    C(deployment_reproduce_vars) the names of those variables (its input is ignored), so the verify role asks the run
    for each of them without writing them out again;
    C(deployment_rollback_problems) why a recorded deployment cannot be served again (its runtime or checkpoint gone
    from a node, its profile resolving to other content), from the M(sparkctl.spark.verify_facts) read of every node
    and the digest of the profile the run resolved.
  - Companion filters C(report_dir) and C(deployment_base_dir) give the spark role's C(spark_report_dir) and the base of
    its C(spark_deployment_dir) by the rule the sparkctl wrapper follows too. C(report_dir) takes the project
    directory (the parent of C(playbook_dir)) and returns C($SPARKCTL_REPORT_DIR), or C(<project>/.sparkctl/reports)
    without it. C(deployment_base_dir) takes the report directory and returns C($SPARKCTL_DEPLOYMENT_DIR), or the
    C(deployments) directory beside the report directory without it. Both read the control node's environment, as
    the C(ansible.builtin.env) lookup does, and take a relative directory from the one the run was started in
    (C($PWD)); an optional C(environ) mapping stands in for the environment.
options:
  _input:
    description: The head's M(sparkctl.spark.verify_facts) result (C(versions), C(checkpoint_manifest)).
    type: dict
    required: true
  profile:
    description: The resolved profile (C(spark_profile)).
    type: dict
    required: true
  rendered:
    description: The profile rendered for the cluster (P(sparkctl.spark.profile_render#filter)).
    type: dict
    required: true
  checkpoint:
    description: The checkpoint's source (C(spark_checkpoint)).
    type: dict
    required: true
  packages:
    description: The distributions verify read (C(verify_version_packages)); the engine is the one named like it, else the first.
    type: list
    elements: str
    default: []
  image:
    description: The image reference of an image runtime.
    type: str
    default: ""
  status:
    description: The verify document's C(status).
    type: str
    required: true
  now:
    description: The time to record for a new deployment, C(YYYY-MM-DDTHH:MM:SSZ).
    type: str
    required: true
  existing:
    description: The records found on the nodes (V(null) for a node without one).
    type: list
    elements: dict
    default: []
"""

EXAMPLES = r"""
- name: Build the deployment record
  ansible.builtin.set_fact:
    verify_deployment: >-
      {{ hostvars[spark_cluster.head.name].verify_node
         | sparkctl.spark.deployment(profile=spark_profile, rendered=verify_engine_render, checkpoint=spark_checkpoint,
                                     packages=verify_version_packages, status=verify_result.status,
                                     now=now(utc=true, fmt='%Y-%m-%dT%H:%M:%SZ'),
                                     existing=ansible_play_hosts_all | map('extract', hostvars, ['verify_node', 'deployment']))
      }}
"""

RETURN = r"""
_value:
  description: The record, or V(null) when the status records nothing.
  type: dict
  contains:
    schema_version:
      description: Version of the record's shape.
      type: int
    deployment_id:
      description: C(sha256:<hex>) of the identity fields.
      type: str
    profile:
      description: C(name) and C(sha256) of the resolved profile.
      type: dict
    checkpoint:
      description: C(source) with C(repo_id), C(revision) and C(commit), or C(path).
      type: dict
    runtime:
      description: C(kind) and C(id) (the venv's lock hash or the image id), C(image) and C(image_context_hash) for an image.
      type: dict
    engine:
      description: C(kind), C(package), C(version) and C(config_sha256).
      type: dict
    sparkctl_version:
      description: This collection's version.
      type: str
    recorded_at:
      description: When the deployment was first recorded.
      type: str
    verify_status:
      description: The verify status of that first time.
      type: str
"""


def collection_version(directory=profiles.COLLECTION_DIR):
    """The version the collection declares (galaxy.yml, else an installed MANIFEST.json)."""
    galaxy = os.path.join(directory, "galaxy.yml")
    if os.path.isfile(galaxy):
        with open(galaxy, encoding="utf-8") as handle:
            return str((yaml.safe_load(handle) or {}).get("version"))
    manifest = os.path.join(directory, "MANIFEST.json")
    with open(manifest, encoding="utf-8") as handle:
        return str(yaml.safe_load(handle)["collection_info"]["version"])


def deployment(node, profile, rendered, checkpoint, status, now, packages=None, image="", existing=None):
    if status not in records.RECORDED_STATUSES:
        return None
    node = node or {}
    manifest = node.get("checkpoint_manifest") or {}
    try:
        record = records.build_record(
            profile_name=profile["name"],
            profile_digest=profiles.profile_digest(profile),
            checkpoint=checkpoint,
            checkpoint_commit=manifest.get("commit"),
            runtime_kind=profile["runtime"]["kind"],
            versions=node.get("versions"),
            image_ref=image,
            engine_kind=profile["engine"]["kind"],
            engine_package_name=records.engine_package(packages or [], profile["engine"]["kind"]),
            engine_config_digest=profiles.render_digest(rendered),
            sparkctl_version=collection_version(),
            verify_status=status,
            now=now,
        )
    except (records.RecordError, KeyError, TypeError) as exc:
        raise AnsibleFilterError("deployment: %s" % exc) from exc
    # A node's record lends its first-recorded time and status only when it is of the record's shape.
    return records.settle(record, [r for r in existing or [] if r and not records.record_problems(r)])


def deployment_history_name(record):
    return records.history_name(record)


def deployment_intent(profile, rendered, variables):
    """What this run deploys, known before verify's verdict: the profile's name and digest, the
    rendered engine configuration's digest, and the variables that reproduce it (variables: a
    mapping holding at least REPRODUCE_VARS, the run's values of deployment_reproduce_vars' names)."""
    try:
        reproduce = dict((name, variables[name]) for name in records.REPRODUCE_VARS)
    except KeyError as exc:
        raise AnsibleFilterError("deployment_intent: the run has no %s" % exc) from exc
    return {"profile": {"name": profile["name"], "sha256": profiles.profile_digest(profile)},
            "engine_config_sha256": profiles.render_digest(rendered), "reproduce": reproduce}


def deployment_inventory_key(inventory_dir):
    return records.inventory_key(inventory_dir)


def deployment_reproduce_vars(_ignored=None):
    """The names of the variables that reproduce a deployment, in their owner's order
    (module_utils/deployment.py, REPRODUCE_VARS): a name added there is recorded with no other change."""
    return list(records.REPRODUCE_VARS)


def _started_in(environ):
    """The directory the run was started in, as the shell that started it says ($PWD): a
    playbook's tasks run in another."""
    return environ.get("PWD", "")


def report_dir(project, environ=None):
    """spark_report_dir, for the project holding playbooks/ (environ: the control node's environment
    unless given)."""
    environ = os.environ if environ is None else environ
    return report_dirs.report_dir(project, _started_in(environ), environ)


def deployment_base_dir(reports, environ=None):
    """The base of spark_deployment_dir (each inventory's history is a directory under it), beside
    the report directory reports."""
    environ = os.environ if environ is None else environ
    return report_dirs.deployment_base(reports, _started_in(environ), environ)


def deployment_rollback_problems(record, reads, profile=None):
    """record: the deployment to return to; reads: {host: verify_facts result}; profile: the
    profile this run resolved from the record's variables."""
    if not isinstance(record, dict) or not record.get("deployment_id"):
        raise AnsibleFilterError("deployment_rollback_problems: the deployment to return to is not a record")
    problems = []
    if profile is not None:
        problem = records.profile_problem(record, profiles.profile_digest(profile))
        if problem:
            problems.append(problem)
    return problems + records.rollback_node_problems(record, reads)


class FilterModule:
    def filters(self):
        return {"deployment": deployment, "deployment_history_name": deployment_history_name,
                "deployment_inventory_key": deployment_inventory_key, "deployment_intent": deployment_intent,
                "deployment_reproduce_vars": deployment_reproduce_vars,
                "deployment_rollback_problems": deployment_rollback_problems,
                "report_dir": report_dir, "deployment_base_dir": deployment_base_dir}

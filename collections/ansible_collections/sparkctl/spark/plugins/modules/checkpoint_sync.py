#!/usr/bin/python
# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: checkpoint_sync
short_description: Download a checkpoint once on the head, verify it, and stream it to every worker
version_added: 0.1.0
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - sparkctl.spark.attributes.posix
description:
  - Runs on the head node as the service user. Every tensor-parallel rank reads all shards, so every node needs
    the complete checkpoint at the same path; this module puts it there.
  - "Manifest: for a hub source, the file list of O(source.repo_id) at the pinned O(source.revision) with sizes and
    LFS sha256 (files stored in git have only a size and a git blob id, which is checked too), filtered by
    O(source.allow_patterns) with huggingface_hub's own matching; for a path source, the files of the directory,
    hashed (a stamp of size, mtime, ctime and inode skips unchanged files). Written to O(manifest_file) as JSON in
    the format C(sparkctl.spark.checkpoint_verify) accepts as its C(manifest_file), plus C(repo_id), C(revision),
    C(commit) and C(total_bytes)."
  - "Head: a file of the manifest already in O(dest) is trusted when the verification stamp
    (C(.sparkctl-verified.json), shared with C(sparkctl.spark.checkpoint_verify)) vouches for its size, times and
    inode, and hashed otherwise. Missing or bad files are fetched with C(hf_hub_download) into O(dest) (real files,
    no symlinked cache) by O(download_workers) threads, or copied from a path source with C(rsync -L), and
    verified right away; a file is tried twice (the second time bypassing the user's hub cache, whose copy is not
    checked), then the task fails naming it."
  - "Ownership: the module deletes only what it owns: files the manifest of an earlier run of O(dest)
    (O(manifest_file), read before it is replaced) listed and the new one does not, and unfinished copies of the
    manifest's files (its name plus C(.incomplete), C(.part), C(.tmp), rsync's temporary name, huggingface_hub's
    C(.cache/huggingface/download/*.incomplete)). Anything else in O(dest) on any node is someone else's: never
    deleted, never mirrored, listed in RV(foreign) and named in a warning. A non-empty directory without a manifest
    is adopted: files of the manifest's names are verified and replaced when wrong, nothing else is touched."
  - "Lock: one transfer per directory. The module holds an flock on C(<dest>/.sparkctl-transfer.lock) for the whole
    run (the holder's PID written in it); a second run waits up to O(lock_timeout) seconds (a progress event says
    for whom), then fails naming the holder's PID. Under the lock, leftovers of a killed run are removed first."
  - "Streaming: each file is offered to every worker as soon as it is verified on the head, so mirroring
    overlaps the download. Each worker gets up to O(streams) concurrent C(rsync -a --whole-file
    --partial-dir=.rsync-partial) processes, one file each (never C(--inplace) on the live path); a dry run at the
    start tells which of the files already on the head the worker lacks. A failed copy is tried once more."
  - "Relay (O(relay), two workers or more): with the head alone sending, its link carries every byte once per
    worker. Relayed, each file goes from the head to one worker and on from worker to worker along a chain whose
    order turns by one worker per file, so the head sends each byte about once and every worker sends about as much
    as it receives. Before a worker sends a file on, it hashes its copy against the manifest's sha256 (over ssh from
    the head, O(workers[].relay_source)); a copy that does not match, or a relay that fails, is sent from the head
    instead. Files without a sha256 in the manifest (a hub's small git-stored files) come from the head."
  - "Final pass per worker, once every file is done and only if the head is complete: one itemized
    C(rsync -a --whole-file --files-from=-) naming the manifest's files, plus, with O(delete_extraneous), the
    files an earlier manifest owned that are gone from the head (C(--delete-missing-args) deletes exactly those);
    no C(--delete), so nothing else on the worker is ever removed. Any non-zero rsync exit (23, 24, 30 included)
    is a failure naming the worker, with the end of rsync's error output."
  - Progress is rewritten atomically to O(progress_file) at every file event and at least every second, for a
    role that runs this module with C(async) and polls the file.
  - The token is passed to huggingface_hub only; it never appears in the result, the progress file or a
    message.
attributes:
  check_mode:
    details:
      - Reads the hub's file list and hashes untrusted head files; asks each worker with C(rsync --dry-run
        --itemize-changes); writes nothing, not even the manifest or the progress file.
author:
  - sparkctl developers (!UNKNOWN)
requirements:
  - rsync >= 3.2.3 on the head and the workers (C(--mkpath)).
  - huggingface_hub in the Python that runs the module, for hub sources only.
options:
  source:
    description: Where the checkpoint comes from.
    type: dict
    required: true
    suboptions:
      type:
        description: V(hub) for a Hugging Face repo, V(path) for a directory already on the head.
        type: str
        required: true
        choices: [hub, path]
      repo_id:
        description: The repo, C(org/name). Required for V(hub).
        type: str
      revision:
        description:
          - The pinned revision (a commit sha, or a tag or branch, which is resolved to its commit once and the
            files are fetched at that commit). Required for V(hub).
        type: str
      allow_patterns:
        description: Only files matching one of these globs (huggingface_hub's semantics, C(*) spans C(/)).
        type: list
        elements: str
      endpoint:
        description: Hub URL, for a local stand-in. Defaults to huggingface_hub's (C(HF_ENDPOINT) or the hub).
        type: str
      path:
        description: The source directory on the head. Required for V(path). May equal O(dest).
        type: path
  token:
    description:
      - Hugging Face token. Without it, huggingface_hub uses C(HF_TOKEN) or its token file.
    type: str
  dest:
    description: The served directory on the head, the same path on every worker.
    type: path
    required: true
  workers:
    description: The workers to mirror to.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: Name used in the result and messages (the inventory hostname).
        type: str
        required: true
      target:
        description:
          - rsync destination of O(dest) on that worker, over the link. Either an rsync daemon module on the worker's
            link address, C(rsync://USER@192.168.100.11:8730/checkpoint/) (authenticated with
            O(rsync_password_file), no encryption on the private cable), or an ssh destination,
            C(spark@192.168.100.11:/srv/models/x/) (through O(rsync_rsh)).
        type: str
        required: true
      alternate_targets:
        description:
          - The same tree through the worker's other cable halves, of the same kind as O(workers[].target). The O(streams)
            copies are spread over O(workers[].target) and these (stream i on target i mod n), so both halves carry data.
        type: list
        elements: str
        default: []
      relay_source:
        description:
          - That worker's own copy of O(dest) as the head reaches it over ssh (O(rsync_rsh)),
            C(spark@192.168.100.11:/srv/models/x/). Required for every worker with O(relay).
        type: str
  rsync_rsh:
    description:
      - rsync's C(-e) argument for ssh targets. The node's C(~/.ssh/config) sets cipher, key and pinned host keys.
    type: str
    default: ssh -o BatchMode=yes
  rsync_password_file:
    description:
      - File on the head holding the rsync daemon's secret, for C(rsync://) targets. Read by the module and handed
        to rsync in its environment, so the secret is neither in the module's arguments nor on a command line.
    type: path
  relay:
    description:
      - Let a worker that holds a verified file send it on to the next worker, so the head's link carries each
        byte about once (see the description). Needs two workers or more; with one it changes nothing.
    type: bool
    default: false
  relay_password_file:
    description:
      - File on every worker holding the rsync daemon's secret (mode 0600, the service user's), for relaying to
        C(rsync://) targets. rsync reads it there (C(--password-file)); the secret is never on a command line.
    type: path
  streams:
    description: Parallel rsync processes per worker (two measured best on the two-core nodes).
    type: int
    default: 2
  download_workers:
    description: Parallel downloads (or head copies, or head hashes) on the head.
    type: int
    default: 4
  mirror:
    description: Whether to mirror to the workers at all.
    type: bool
    default: true
  progress_file:
    description: Progress JSON path. Defaults to C(<dest>/.sparkctl-progress.json).
    type: path
  manifest_file:
    description: Manifest JSON path. Defaults to C(<dest>/.sparkctl-manifest.json).
    type: path
  delete_extraneous:
    description:
      - Remove the files an earlier manifest of O(dest) listed and the new one does not, on the head and, in the
        final pass, on the workers. Files no manifest listed are never removed.
    type: bool
    default: true
  lock_timeout:
    description: Seconds a run waits for another transfer into O(dest) to end before it fails naming its PID.
    type: int
    default: 60
  verify_full:
    description: Hash every file on the head even when the verification stamp vouches for it (bit rot).
    type: bool
    default: false
  manifest_only:
    description:
      - Only read the file list (the hub's metadata, or the hashed source directory) and return RV(files) and
        RV(bytes); nothing is written or transferred. For a size check on every node before the transfer.
    type: bool
    default: false
  hub_unreachable:
    description:
      - Why the hub cannot be used (unreachable, or answering with a server error or a rate limit; the C(reason) or
        C(detail) of a C(sparkctl.spark.hub_access) warning); empty when it can.
      - With a reason, a hub source is not asked for its file list; the manifest an earlier run wrote to
        O(manifest_file) is used instead, provided it is of the same O(source.repo_id) and O(source.revision), so a
        complete checkpoint is still verified and mirrored to the workers offline. Files missing or damaged on the
        head fail the run (they can only come from the hub). Without such a manifest the run fails saying so.
      - A revision that is a branch or tag rather than the manifest's commit is reported in RV(notes).
    type: str
seealso:
  - module: sparkctl.spark.checkpoint_verify
notes:
  - The final pass sends the manifest's files only, so the manifest file is not copied to the workers; give
    C(sparkctl.spark.checkpoint_verify) on a worker the manifest another way.
  - huggingface_hub resumes an interrupted transfer only within one call; a file that failed is fetched again
    from byte 0 by the next run, and every complete file is kept.
"""

EXAMPLES = r"""
---
- name: Download the pinned checkpoint and stream it to the workers
  sparkctl.spark.checkpoint_sync:
    source:
      type: hub
      repo_id: upstage/solar-open2-250b-nvfp4
      revision: 3f1c2e4b5d6a7f8e9d0c1b2a3f4e5d6c7b8a9f0e
      allow_patterns: ["*.safetensors", "*.json"]
    token: "{{ spark_hf_token }}"
    dest: /srv/models/solar-open2-250b-nvfp4
    # The worker's sparkctl-rsyncd socket, on both cable halves.
    rsync_password_file: /etc/sparkctl/checkpoint-rsyncd.password
    workers:
      - name: spark2
        target: rsync://sparkctl-mirror@192.168.100.11:8730/checkpoint/
        alternate_targets:
          - rsync://sparkctl-mirror@192.168.101.11:8730/checkpoint/
  async: 7200
  poll: 0
  register: spark_checkpoint_job

- name: Three Sparks on a switch, the workers relaying each file on to each other
  sparkctl.spark.checkpoint_sync:
    source:
      type: path
      path: /srv/models/local-model
    dest: /srv/models/local-model
    rsync_password_file: /etc/sparkctl/checkpoint-rsyncd.password
    relay: true
    # The same secret on every worker, the service user's, 0600.
    relay_password_file: /etc/sparkctl/checkpoint-rsyncd.password
    workers:
      - name: spark2
        target: rsync://sparkctl-mirror@192.168.100.11:8730/checkpoint/
        relay_source: spark@192.168.100.11:/srv/models/local-model/
      - name: spark3
        target: rsync://sparkctl-mirror@192.168.100.12:8730/checkpoint/
        relay_source: spark@192.168.100.12:/srv/models/local-model/

- name: Mirror a directory already on the head
  sparkctl.spark.checkpoint_sync:
    source:
      type: path
      path: /srv/models/local-model
    dest: /srv/models/local-model
    # Over ssh (the SSH mesh's key and cipher) where no rsync daemon runs.
    workers:
      - name: spark2
        target: spark@192.168.100.11:/srv/models/local-model/
"""

RETURN = r"""
commit:
  description: The commit the files were fetched at (hub sources); V(null) for path sources.
  type: str
  returned: always
  sample: 3f1c2e4b5d6a7f8e9d0c1b2a3f4e5d6c7b8a9f0e
manifest_file:
  description: Where the manifest was written (or would be, in check mode).
  type: str
  returned: always
  sample: /srv/models/solar-open2-250b-nvfp4/.sparkctl-manifest.json
files:
  description: Number of files in the manifest.
  type: int
  returned: always
  sample: 33
bytes:
  description: Their total size.
  type: int
  returned: always
  sample: 153240365056
downloaded:
  description: Files fetched (or copied from a path source) on the head; in check mode, the ones that would be.
  type: list
  elements: str
  returned: always
  sample: [model-00002-of-00029.safetensors]
mirrored:
  description: Per worker, the files copied (or, in check mode, that would be).
  type: dict
  returned: always
  sample: {spark2: [model-00002-of-00029.safetensors]}
relayed:
  description: Per worker, the files it received from another worker (O(relay)), each with that worker's name.
  type: dict
  returned: always
  sample: {spark2: {}, spark3: {model-00002-of-00029.safetensors: spark2}}
deleted:
  description: Per worker, the paths the final pass deleted (or would delete).
  type: dict
  returned: always
  sample: {spark2: [old-shard.safetensors]}
foreign:
  description:
    - Paths in O(dest) on the head that are not the checkpoint's and that no earlier manifest listed; left in place
      (a warning names how many and where). The workers' own are reported by C(sparkctl.spark.checkpoint_verify).
  type: list
  elements: str
  returned: always
  sample: [other-model/config.json]
removed_on_head:
  description:
    - Paths in O(dest) on the head that were removed - files an earlier manifest listed that the new one does not,
      and leftovers of unfinished copies.
  type: list
  elements: str
  returned: always
  sample: []
offline:
  description: Whether the hub was out of reach and the earlier run's manifest was used (O(hub_unreachable)).
  type: bool
  returned: always
  sample: false
notes:
  description: What the caller should know, one line each (also shown as warnings).
  type: list
  elements: str
  returned: always
  sample: []
failures:
  description: What failed, one line each, naming the file and the worker (only on failure).
  type: list
  elements: str
  returned: failure
  sample: ["worker spark2: model-00002-of-00029.safetensors: rsync exit 23: ..."]
timings:
  description:
    - Seconds spent. C(download_s) and C(mirror_s) run from the first start to the last end of their kind;
      C(overlap_s) is the time during which a download and a mirror copy ran at once.
  type: dict
  returned: always
  sample: {manifest_s: 0.4, download_s: 610.2, mirror_s: 640.9, total_s: 652.0, overlap_s: 598.1}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkctl.spark.plugins.module_utils.checkpoint_errors import SyncError
from ansible_collections.sparkctl.spark.plugins.module_utils.checkpoint_rsync import DEFAULT_RSH, read_password_file
from ansible_collections.sparkctl.spark.plugins.module_utils.checkpoint_sync import CheckpointSync


def main():
    module = AnsibleModule(
        argument_spec=dict(
            source=dict(
                type="dict",
                required=True,
                options=dict(
                    type=dict(type="str", required=True, choices=["hub", "path"]),
                    repo_id=dict(type="str"),
                    revision=dict(type="str"),
                    allow_patterns=dict(type="list", elements="str"),
                    endpoint=dict(type="str"),
                    path=dict(type="path"),
                ),
                required_if=[("type", "hub", ("repo_id", "revision")), ("type", "path", ("path",))],
            ),
            token=dict(type="str", no_log=True),
            dest=dict(type="path", required=True),
            workers=dict(
                type="list",
                elements="dict",
                default=[],
                options=dict(
                    name=dict(type="str", required=True),
                    target=dict(type="str", required=True),
                    alternate_targets=dict(type="list", elements="str", default=[]),
                    relay_source=dict(type="str"),
                ),
            ),
            rsync_rsh=dict(type="str", default=DEFAULT_RSH),
            # A path, not the secret itself.
            rsync_password_file=dict(type="path", no_log=False),
            streams=dict(type="int", default=2),
            download_workers=dict(type="int", default=4),
            mirror=dict(type="bool", default=True),
            progress_file=dict(type="path"),
            manifest_file=dict(type="path"),
            delete_extraneous=dict(type="bool", default=True),
            manifest_only=dict(type="bool", default=False),
            hub_unreachable=dict(type="str"),
            lock_timeout=dict(type="int", default=60),
            verify_full=dict(type="bool", default=False),
            relay=dict(type="bool", default=False),
            # A path on the workers, not the secret itself.
            relay_password_file=dict(type="path", no_log=False),
        ),
        supports_check_mode=True,
    )
    params = module.params
    try:
        password = read_password_file(params["rsync_password_file"]) if params["rsync_password_file"] else None
        sync = CheckpointSync(
            source=params["source"],
            dest=params["dest"],
            workers=params["workers"],
            token=params["token"],
            rsync_rsh=params["rsync_rsh"],
            streams=params["streams"],
            download_workers=params["download_workers"],
            mirror=params["mirror"],
            progress_file=params["progress_file"],
            manifest_file=params["manifest_file"],
            delete_extraneous=params["delete_extraneous"],
            check_mode=module.check_mode,
            rsync_password=password,
            manifest_only=params["manifest_only"],
            hub_unreachable=params["hub_unreachable"],
            lock_timeout=params["lock_timeout"],
            verify_full=params["verify_full"],
            relay=params["relay"],
            relay_password_file=params["relay_password_file"],
        )
        result = sync.run()
    except (SyncError, OSError) as exc:
        module.fail_json(msg=str(exc), changed=False)

    for note in result.get("notes") or []:
        module.warn(note)
    failures = result.pop("failures")
    if failures:
        shown = "; ".join(failures[:10]) + (" (and %d more)" % (len(failures) - 10) if len(failures) > 10 else "")
        module.fail_json(msg="checkpoint sync to %s failed: %s" % (params["dest"], shown), failures=failures, **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()

#!/usr/bin/python
# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: checkpoint_verify
short_description: Verify that a model checkpoint directory is complete and intact
version_added: 0.1.0
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - sparkctl.spark.attributes.posix
description:
  - Every tensor-parallel rank reads all shards, so every node needs the complete checkpoint at the same path.
    A partial tree only fails deep into a long model load; this module finds it first, on the head after the
    download and on each worker after the mirror.
  - >-
    Checks, each reported as a problem that names the file:
    (1) the shards of every C(*.safetensors.index.json) (its C(weight_map) values, deduplicated) are present,
    and no other C(*.safetensors) file sits next to the index unless the manifest lists it;
    (2) no C(*.incomplete), C(*.part), C(*.tmp) file, rsync temporary file (C(.<name>.XXXXXX)),
    rsync staging or partial directory (C(.~tmp~), C(.rsync-partial)), and no symlink anywhere in the tree
    (a copied, symlinked hub cache can ship empty files);
    (3) each file of the manifest exists with the expected size and, with O(hash=true), the expected sha256
    (streamed in 8 MiB chunks, O(jobs) files at a time);
    (4) the header of each C(*.safetensors) file parses (8-byte little-endian length, a JSON object, known
    dtypes, C(data_offsets) inside the data section and consistent with dtype x shape, tensors tiling the
    data section exactly). Only headers are read for this check.
  - After a run that passes with O(hash=true) and a manifest, the module writes a stamp recording each file's
    size, mtime, ctime, inode and verified sha256 together with the digest of the manifest. A later run skips
    hashing a file whose size, mtime, ctime and inode still match the stamp under the same manifest, so a
    converged re-run of a 150 GB checkpoint costs a directory walk and the headers. Any other change
    re-hashes that file. The stamp is written atomically (temporary file and rename, mode C(0644)) and only
    when its content changes.
  - The module never modifies the checkpoint. It reports RV(ignore:changed=true) only when it wrote (or, in
    check mode, would write) the stamp.
  - The remote node needs nothing but Python 3.9 or later; the safetensors format is checked without the
    C(safetensors) or C(torch) packages.
attributes:
  check_mode:
    details:
      - All checks run, including hashing; the stamp is not written and RV(ignore:changed) says whether it would be.
author:
  - sparkctl developers (!UNKNOWN)
options:
  path:
    description:
      - The checkpoint directory.
      - A missing directory is a problem (every manifest file is reported missing), not a module error.
      - The directory itself may be a symlink; nothing beneath it may.
    type: path
    required: true
  manifest:
    description:
      - The files the checkpoint must hold, as a mapping of path relative to O(path) to C({size, sha256}).
      - For a hub source, C(sha256) is the LFS sha256 of each LFS file; a small file stored in git has
        C(sha256) V(null) and its git blob sha1 in C(git_blob_sha1) (sha1 of C(blob <size>\\0) and the content,
        as C(hf cache verify) checks it), else it is checked by size only.
      - With a manifest, only the files it lists and their own leftovers (the name plus C(.incomplete),
        C(.part), C(.tmp), rsync's temporary name, a partial directory beside them) are judged. Anything else
        in the directory belongs to someone else (kind C(extra), listed in RV(foreign)), never a problem a
        caller would repair by deleting.
      - Such a path that vLLM or SGLang would load as weights of the checkpoint is kind C(stray) instead, and
        always a problem, whose detail names the fix (move it out of O(path)); at the top of O(path), a
        C(*.safetensors) file (every one is loaded where no C(model.safetensors.index.json) names the shards; beside
        that index it is most likely a shard of another revision), and C(*.bin) and C(*.pt) files when the
        manifest lists no C(*.safetensors) there (the engines' glob falls through to them; C(training_args.bin),
        C(optimizer.bin), C(optimizer.pt), C(scheduler.pt) and C(scaler.pt) excepted); anywhere, a
        C(consolidated*.safetensors) file when the manifest has none (vLLM then takes the checkpoint for a
        Mistral-format one). Anything else, a subdirectory such as a LoRA adapter's, notes, C(*.pth) or
        C(*.gguf) files, is C(extra).
      - A mapping with a C(files) key holding such a mapping (for example a stamp written by this module on
        another node) is accepted too; other keys per file are ignored.
      - Without O(manifest) and O(manifest_file) only the index, leftover, symlink and header checks run, and
        nothing is hashed.
    type: dict
  manifest_file:
    description:
      - Path on the node of a JSON file holding the manifest, in the same format as O(manifest).
    type: path
  stamp_file:
    description:
      - Where the verification stamp is read and written.
      - Defaults to C(<path>/.sparkctl-verified.json). The stamp and its temporary files are never treated as
        part of the checkpoint.
    type: path
  hash:
    description:
      - Whether to compare sha256 digests.
      - V(false) checks sizes, structure and headers only, reads and writes no stamp.
    type: bool
    default: true
  write_stamp:
    description:
      - Whether to write the stamp after a passing hashed run. An existing stamp is still used to skip hashing.
    type: bool
    default: true
  full:
    description:
      - Hash every file even when the stamp vouches for it, for bit rot that leaves size and times alone.
        The stamp is written afresh after a passing run.
    type: bool
    default: false
  extra_files:
    description:
      - What a file present in the tree but not in the manifest means, unless an engine would load it (kind
        C(stray), always a problem).
      - V(report) lists it in RV(problems) with kind C(extra) and warns, without making RV(ok) false.
      - V(fail) makes RV(ok) false.
    type: str
    choices: [report, fail]
    default: report
  ignore:
    description:
      - Glob patterns of paths that no check looks at, neither in the tree nor in the manifest.
      - A pattern without C(/) matches a file or directory name at any depth; a pattern with C(/) matches the
        path relative to O(path); C(*) stays within one path component, C(**) spans components; everything
        under an ignored directory is ignored.
      - The default skips this module's own files and the C(.cache/huggingface) bookkeeping of
        C(hf download --local-dir).
    type: list
    elements: str
    default:
      - .sparkctl-*
      - .cache/**
  jobs:
    description:
      - Number of files hashed in parallel. Hashing and reading release the GIL, so two jobs use two cores.
    type: int
    default: 2
  fail_on_problems:
    description:
      - Whether the task fails when RV(ok) is false, with one line per problem in the message.
      - V(false) returns the report instead, for a caller that repairs what is named (re-copies files with kind
        C(missing), C(size), C(sha256), C(header); removes C(incomplete) ones; leaves C(extra) and C(stray) ones,
        which are someone else's, to their owner).
    type: bool
    default: true
seealso:
  - module: sparkctl.spark.host_facts
notes:
  - A file hashed less than 100 ms after its last change (ctime; 2 s on filesystems with whole-second
    timestamps) is not recorded in the stamp, because a second write within the same timestamp tick would
    keep its size and times; the next run hashes it once more and records it.
  - Copying the stamp to another node does not carry the verification over, because inode and ctime differ
    there; exclude C(.sparkctl-*) from the mirror.
"""

EXAMPLES = r"""
---
- name: Verify the downloaded checkpoint against the hub's metadata
  sparkctl.spark.checkpoint_verify:
    path: /srv/models/solar-open2-250b-nvfp4
    manifest:
      config.json:
        size: 2143
        sha256: null
      model.safetensors.index.json:
        size: 181253
        sha256: null
      model-00001-of-00029.safetensors:
        size: 5364850412
        sha256: 0d8e6f2a5b3c4d1e9f7a8b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e

- name: Check a worker against a manifest file, keep the report to decide what to re-copy
  sparkctl.spark.checkpoint_verify:
    path: /srv/models/solar-open2-250b-nvfp4
    manifest_file: /var/lib/sparkctl/checkpoints/solar-open2-250b-nvfp4.json
    extra_files: fail
    fail_on_problems: false
  register: spark_checkpoint_report

- name: Structure and headers only (no manifest, no hashing)
  sparkctl.spark.checkpoint_verify:
    path: /srv/models/solar-open2-250b-nvfp4
    hash: false
"""

RETURN = r"""
ok:
  description:
    - Whether the checkpoint passed every check.
    - Problems of kind C(extra) count only with O(extra_files=fail).
  type: bool
  returned: always
  sample: false
problems:
  description: Every problem found, sorted by file and kind; at most one per file and kind.
  type: list
  elements: dict
  returned: always
  contains:
    file:
      description: Path relative to O(path); C(.) for the directory itself.
      type: str
      sample: model-00002-of-00029.safetensors
    kind:
      description:
        - C(missing) (a manifest or index file is absent), C(size), C(sha256) (mismatch or unreadable),
          C(header) (the safetensors header is malformed or does not fit the file), C(incomplete) (a leftover
          of an unfinished transfer, or a file that changed while it was verified), C(symlink),
          C(extra) (not in the manifest), C(stray) (not in the manifest, and weights an engine would load, see
          O(manifest)), C(index) (unparsable index, or without a manifest a shard beside the index that it does
          not list).
      type: str
      choices: [missing, size, sha256, header, incomplete, symlink, extra, stray, index]
      sample: sha256
    detail:
      description: What is wrong, in one sentence.
      type: str
      sample: "content differs: sha256 5f2c...e1, expected 0d8e...6e"
summary:
  description: "One line per problem, C(<file>: <kind>: <detail>), in the order of RV(problems)."
  type: list
  elements: str
  returned: always
  sample:
    - "model-00002-of-00029.safetensors: size: is 1048576 bytes, expected 5364850412"
files:
  description: Number of regular files in the tree, not counting ignored paths and transfer leftovers.
  type: int
  returned: always
  sample: 33
bytes:
  description: Total size of those files.
  type: int
  returned: always
  sample: 153240365056
rehashed:
  description: Files whose sha256 was computed in this run.
  type: list
  elements: str
  returned: always
  sample: [model-00002-of-00029.safetensors]
skipped_hash:
  description: Files whose sha256 check was satisfied by the stamp (same size, mtime, ctime, inode and manifest).
  type: list
  elements: str
  returned: always
  sample: [model-00001-of-00029.safetensors]
stamp_written:
  description: Whether the stamp was written in this run (never in check mode).
  type: bool
  returned: always
  sample: false
stamp_file:
  description: The stamp path that was used.
  type: str
  returned: always
  sample: /srv/models/solar-open2-250b-nvfp4/.sparkctl-verified.json
foreign:
  description:
    - Paths in the directory that the manifest does not list and no engine would load (problems of kind C(extra));
      left in place. Those an engine would load are problems of kind C(stray), not listed here.
  type: list
  elements: str
  returned: always
  sample: [other-model/config.json]
manifest_digest:
  description: sha256 of the normalized manifest, V(null) without one.
  type: str
  returned: always
  sample: 9a3f1c2e4b5d6a7f8e9d0c1b2a3f4e5d6c7b8a9f0e1d2c3b4a5f6e7d8c9b0a1f
elapsed:
  description: Seconds the verification took.
  type: float
  returned: always
  sample: 1.372
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkctl.spark.plugins.module_utils.checkpoint import summarize, verify_checkpoint
from ansible_collections.sparkctl.spark.plugins.module_utils.checkpoint_errors import CheckpointError
from ansible_collections.sparkctl.spark.plugins.module_utils.checkpoint_manifest import load_manifest_file, normalize_manifest
from ansible_collections.sparkctl.spark.plugins.module_utils.checkpoint_tree import DEFAULT_IGNORE

# How many names a warning about extra files spells out.
_WARN_NAMES = 5


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            manifest=dict(type="dict"),
            manifest_file=dict(type="path"),
            stamp_file=dict(type="path"),
            hash=dict(type="bool", default=True),
            write_stamp=dict(type="bool", default=True),
            full=dict(type="bool", default=False),
            extra_files=dict(type="str", default="report", choices=["report", "fail"]),
            ignore=dict(type="list", elements="str", default=list(DEFAULT_IGNORE)),
            jobs=dict(type="int", default=2),
            fail_on_problems=dict(type="bool", default=True),
        ),
        mutually_exclusive=[("manifest", "manifest_file")],
        supports_check_mode=True,
    )
    params = module.params

    try:
        if params["manifest_file"]:
            raw_manifest = load_manifest_file(params["manifest_file"])
        else:
            raw_manifest = params["manifest"]
        manifest = normalize_manifest(raw_manifest) if raw_manifest is not None else None
        result = verify_checkpoint(
            params["path"],
            manifest=manifest,
            hash_files=params["hash"],
            stamp_file=params["stamp_file"],
            write_stamp=params["write_stamp"],
            extra_files=params["extra_files"],
            ignore=params["ignore"],
            jobs=params["jobs"],
            check_mode=module.check_mode,
            full=params["full"],
        )
    except CheckpointError as exc:
        module.fail_json(msg=str(exc), changed=False)

    changed = result.pop("stamp_would_change")
    result["foreign"] = [problem["file"] for problem in result["problems"] if problem["kind"] == "extra"]
    # Not returned as "path": AnsibleModule would decorate the result with that path's owner, mode and size.
    checkpoint_path = result.pop("path")
    if not result["ok"] and params["fail_on_problems"]:
        module.fail_json(msg=summarize(checkpoint_path, result["problems"]), changed=changed, **result)

    extras = result["foreign"]
    if extras and params["extra_files"] == "report":
        shown = ", ".join(extras[:_WARN_NAMES]) + (" and %d more" % (len(extras) - _WARN_NAMES) if len(extras) > _WARN_NAMES else "")
        plural = "" if len(extras) == 1 else "s"
        module.warn("%d file%s in %s not in the manifest, left in place: %s" % (len(extras), plural, checkpoint_path, shown))
    module.exit_json(changed=changed, **result)


if __name__ == "__main__":
    main()

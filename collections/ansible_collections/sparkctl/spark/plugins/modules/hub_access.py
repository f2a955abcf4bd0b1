#!/usr/bin/python
# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: hub_access
short_description: Check that the hub lets this node download a repo with the given token
version_added: 0.1.0
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - sparkctl.spark.attributes.info_posix
  - sparkctl.spark.hub
description:
  - Runs on the node that downloads the checkpoint (the head), before anything is written, so a gated or private
    repo without a usable token, an unknown repo or an unknown revision, or a hub that lists the repo but refuses
    its files, is refused with the variable to change (C(spark_hf_token), C(spark_checkpoint.repo_id),
    C(spark_checkpoint.revision), C(spark_hf_endpoint)) instead of failing mid-download.
  - "Two read-only requests with the Python standard library (huggingface_hub is not needed): C(GET
    /api/models/REPO/revision/REV?blobs=true) (the repo and revision exist; the metadata says whether the repo is
    gated and lists the files with their LFS data), then C(GET /REPO/resolve/REV/FILE) with C(Range: bytes=0-0) on
    one LFS file (a weight shard), following redirects to wherever the hub serves large files from (its CDN or
    storage bridge), as the download does. The hub answers 401 or 403 with C(X-Error-Code: GatedRepo) when the
    token may not download (the metadata of a gated repo is public); any other 401, 403 or 404 on the file is a hub
    that refuses downloads."
  - Only the redirects the download follows are followed (301, 302, 303, 307 and 308 with a C(Location) to http or
    https, at most 5 in a row). Any other 3xx answer to either request (a 300, 304 or 305, a redirect without a
    C(Location), to another scheme, past the limit or in a loop) is a failure naming the URL that answered it and
    its status (RV(unfollowed_redirect)), never a pass.
  - The token is sent in the C(Authorization) header to the endpoint's own origin only (a redirect to another host
    goes without it), never over plain C(http://) to a host other than loopback (then nothing is sent and the
    result is a failure naming C(spark_hf_endpoint)); it is never part of the result or a message.
  - The verdict (RV(status), RV(detail), RV(fix), RV(message)) comes from the collection's C(hub_access) module
    utility, shared with the preflight report (check C(hub.access)).
attributes:
  check_mode:
    details:
      - The module only reads; it asks the hub in check mode too.
author:
  - sparkctl developers (!UNKNOWN)
options:
  repo_id:
    description: The repo, C(org/name).
    type: str
    required: true
  revision:
    description: The pinned revision (commit sha, branch or tag).
    type: str
    required: true
  timeout:
    description: Seconds per request.
    type: int
    default: 15
notes:
  - An unreachable hub is a warning (RV(status=warn)) with RV(reachable=false), not a failure; the checkpoint stage
    then works from the manifest of the last complete run, or refuses a first download.
"""

EXAMPLES = r"""
---
- name: Ask the hub whether the head may download the checkpoint
  sparkctl.spark.hub_access:
    repo_id: nota-ai/Solar-Open2-250B-Nota-NVFP4
    revision: main
    token: "{{ spark_hf_token }}"
  register: hub

- name: Refuse before anything is written
  ansible.builtin.assert:
    that: hub.status != 'fail'
    fail_msg: "{{ hub.message }}"
"""

RETURN = r"""
status:
  description: V(pass), V(fail) (the hub refused, or answered a 3xx the download would not follow; fix the variable
    the message names) or V(warn) (unreachable).
  type: str
  returned: always
  sample: fail
detail:
  description: What the hub answered.
  type: str
  returned: always
  sample: spark_hf_token is empty but nota-ai/Solar-Open2-250B-Nota-NVFP4 is gated on the hub (401).
fix:
  description: How to fix a failure; empty when it passed.
  type: str
  returned: always
  sample: Set HF_TOKEN on the control node or vault spark_hf_token, a token of an account that accepted the model's terms.
message:
  description: RV(detail) and RV(fix) in one sentence.
  type: str
  returned: always
reachable:
  description: Whether the hub answered at all (an HTTP refusal is an answer; a connection error is not).
  type: bool
  returned: always
  sample: true
reason:
  description: Why the hub could not be reached (null when it answered).
  type: str
  returned: always
  sample: "[Errno 111] Connection refused"
endpoint:
  description: The hub asked.
  type: str
  returned: always
  sample: https://huggingface.co
gated:
  description: The repo's C(gated) setting from its metadata (V(false), V(auto) or V(manual)).
  type: raw
  returned: always
info_status:
  description: HTTP status of the metadata request (null when the hub was not reached).
  type: int
  returned: always
  sample: 200
content_status:
  description: HTTP status of the one-byte read of a file, after redirects (null when not asked).
  type: int
  returned: always
  sample: 206
commit:
  description: The commit the hub resolves the revision to (its metadata's C(sha); null when the hub did not answer with
    the repo's metadata).
  type: str
  returned: always
  sample: 9f3c2a7d0b1e4c5f8a6d2e1b0c9f8e7d6a5b4c3d
files:
  description: The repo's file names at RV(commit), sorted (null when the hub did not answer with the repo's metadata).
  type: list
  elements: str
  returned: always
  sample: [config.json, model-00001-of-00051.safetensors]
file:
  description: The file whose first byte was read.
  type: str
  returned: always
  sample: model-00001-of-00051.safetensors
download_host:
  description: The host (and port) that answered the read of the file, after redirects (null when not asked).
  type: str
  returned: always
  sample: cas-bridge.xethub.hf.co
redirects:
  description: How many redirects the read of the file followed.
  type: int
  returned: always
  sample: 1
endpoint_problem:
  description: Why the endpoint was not asked at all (a token over plain http to another machine), else null.
  type: str
  returned: always
unfollowed_redirect:
  description: The 3xx answer that ended a request unfollowed, else null.
  type: dict
  returned: always
  contains:
    request:
      description: V(info) (the metadata) or V(content) (the byte of a file).
      type: str
      sample: content
    url:
      description: The URL that answered it.
      type: str
      sample: https://hf-mirror.example.com/nota-ai/Solar-Open2-250B-Nota-NVFP4/resolve/main/model-00001-of-00051.safetensors
    status:
      description: Its HTTP status.
      type: int
      sample: 304
    why:
      description: Why it was not followed, in words.
      type: str
      sample: "(Not Modified), which is not a redirect the download follows (301, 302, 303, 307 or 308 with a Location
        header)"
"""


from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkctl.spark.plugins.module_utils.hub_access import HUB_ARGUMENT_SPEC, hub_options, probe, verdict


def main():
    module = AnsibleModule(
        argument_spec=dict(
            HUB_ARGUMENT_SPEC,
            repo_id=dict(type="str", required=True),
            revision=dict(type="str", required=True),
            timeout=dict(type="int", default=15),
        ),
        supports_check_mode=True,
    )
    params = module.params
    token, endpoint = hub_options(params)
    result = probe(params["repo_id"], params["revision"], token=token, endpoint=endpoint,
                   timeout=params["timeout"])
    result.update(verdict(result))
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()

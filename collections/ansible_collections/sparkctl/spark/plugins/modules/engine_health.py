#!/usr/bin/python
# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: engine_health
short_description: Wait one round for the engine to become healthy, or find out that its boot failed
version_added: 0.1.0
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - sparkctl.spark.attributes.info_posix
description:
  - Polls the engine's health URL, its systemd unit and its log for up to O(round_seconds), and returns as soon as
    the engine is healthy (HTTP 200 from O(url) while the unit runs) or its boot has failed.
  - "A boot has failed when the unit is dead (failed, or stopped after hitting its start limit) or when the log of this
    boot shows a fatal line: out of memory (CUDA, the kernel's OOM killer, the OOM guard's trip line), weights or an
    architecture the engine does not know, an NCCL error, a placement the Ray cluster cannot satisfy, or the engine core
    failing to start. The first line of each kind is returned with a few lines around it."
  - A unit whose process died and that systemd is about to restart (ending its processes, or waiting C(RestartSec)) is
    still booting; systemd decides next whether it restarts or gives up.
  - A caller loops over rounds, printing RV(last_log_line) and RV(waited_s) between them, until a total timeout (a first
    boot of a large NVFP4 model takes over ten minutes).
  - Log lines are returned without the API key (see O(api_key_file)).
  - Reads only; never starts, stops or restarts anything.
attributes:
  check_mode:
    details:
      - Polls exactly as in a normal run (it only reads).
author:
  - sparkctl developers (!UNKNOWN)
options:
  url:
    description: The health URL, e.g. C(http://127.0.0.1:8000/health). It needs no API key.
    type: str
    required: true
  unit:
    description: The engine's systemd unit.
    type: str
    required: true
  since:
    description:
      - Read the unit's log from this time on (seconds since the epoch), so a crash before a restart is still seen.
        Default, the log of the unit's current invocation only.
    type: float
  round_seconds:
    description: How long this call may wait before returning RV(outcome=booting).
    type: int
    default: 30
  log_lines:
    description: How many of the most recent log lines are searched.
    type: int
    default: 400
  api_key_file:
    description:
      - The engine's API key file (vLLM's C(VLLM_API_KEY=) file or SGLang's C(--config) YAML). The key read from it is
        removed from every returned log line, as are the key's known spellings and credentials inside URLs (SGLang logs
        its C(ServerArgs), key included). Without it only the known spellings are removed.
    type: path
"""

EXAMPLES = r"""
- name: Wait for the engine, one round
  sparkctl.spark.engine_health:
    url: http://127.0.0.1:8000/health
    unit: "{{ spark_units.api }}"
    round_seconds: 30
  register: engine_round
"""

RETURN = r"""
outcome:
  description: V(healthy), V(failed) or V(booting) (still starting when the round ended).
  type: str
  returned: always
  sample: booting
healthy:
  description: Whether the engine answered 200 while its unit runs.
  type: bool
  returned: always
http_status:
  description: The status of the last health request; V(null) when nothing answered.
  type: int
  returned: always
  sample: 503
http_error:
  description: Why the last health request got no answer.
  type: str
  returned: always
  sample: "[Errno 111] Connection refused"
unit_state:
  description: V(running), V(starting), V(dead) or V(stopped).
  type: str
  returned: always
unit_detail:
  description: The unit's state in words, with its restart count and result.
  type: str
  returned: always
  sample: active (running), 0 restarts
last_log_line:
  description: The engine's most recent log line, for a progress display.
  type: str
  returned: always
  sample: "Loading safetensors checkpoint shards: 45% Completed | 13/29"
fatal:
  description: The first log line of each fatal kind found.
  type: list
  elements: dict
  returned: always
  sample: [{kind: oom, line: "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"}]
fatal_context:
  description: Log lines around each fatal line.
  type: list
  elements: str
  returned: always
waited_s:
  description: Seconds this round waited.
  type: float
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkctl.spark.plugins.module_utils.api_key import api_key_from_text
from ansible_collections.sparkctl.spark.plugins.module_utils.engine_health import parse_systemctl_show, wait_round

SHOW_PROPERTIES = ("ActiveState", "SubState", "Result", "NRestarts", "InvocationID")


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", required=True),
            unit=dict(type="str", required=True),
            since=dict(type="float"),
            round_seconds=dict(type="int", default=30),
            log_lines=dict(type="int", default=400),
            api_key_file=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    systemctl = module.get_bin_path("systemctl", required=True)
    journalctl = module.get_bin_path("journalctl", required=True)
    state = {}

    def read_unit():
        argv = [systemctl, "show", "--no-pager"] + ["-p%s" % p for p in SHOW_PROPERTIES] + [params["unit"]]
        rc, out, err = module.run_command(argv, check_rc=False)
        state["props"] = parse_systemctl_show(out) if rc == 0 else {}
        return state["props"]

    def read_log():
        argv = [journalctl, "--no-pager", "-o", "cat", "-n", str(params["log_lines"])]
        if params["since"] is not None:
            argv += ["-u", params["unit"], "--since", "@%d" % int(params["since"])]
        elif state.get("props", {}).get("InvocationID"):
            argv += ["_SYSTEMD_INVOCATION_ID=%s" % state["props"]["InvocationID"]]
        else:
            argv += ["-u", params["unit"]]
        rc, out, err = module.run_command(argv, check_rc=False)
        return out.splitlines() if rc == 0 else []

    secrets = []
    if params["api_key_file"]:
        try:
            with open(params["api_key_file"], encoding="utf-8") as handle:
                key = api_key_from_text(handle.read())
        except OSError:
            key = None
        if key:
            secrets.append(key)
    result = wait_round(params["url"], read_unit, read_log, params["round_seconds"], secrets=secrets)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()

#!/usr/bin/python
# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: engine_leftovers
short_description: Find, and optionally end by PID, engine processes that outlived the engine service
version_added: 0.1.0
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - sparkctl.spark.attributes.linux
  - sparkctl.spark.procfs
description:
  - Reads C(/proc) and lists the processes that are the engine, by exact comparison only, never a pattern; a
    process matches when its name (C(comm)) or its title (the first word of C(argv[0]), set by C(setproctitle)) is one
    of O(names), or when its argv begins word for word with one of O(argv_prefixes).
  - After the engine service has stopped, such processes (vLLM's C(VLLM::EngineCore), an API server started by
    hand) hold GPU memory and keep a new engine from starting or from placing its Ray actors.
  - With O(state=absent) sends SIGTERM to each by PID, and SIGKILL to what is still there after O(term_timeout)
    seconds; a PID that another process has taken over in between (different start time) is left alone.
attributes:
  check_mode:
    details:
      - Lists the processes and reports a change when O(state=absent) would end some, without signalling.
author:
  - sparkctl developers (!UNKNOWN)
options:
  names:
    description: Exact process names or titles (C(comm) compares the first 15 bytes, as the kernel keeps it).
    type: list
    elements: str
    default: []
  argv_prefixes:
    description: Leading argv words of the engine's command, for example the rendered engine command.
    type: list
    elements: list
    default: []
  state:
    description: V(present) only lists; V(absent) ends every process found.
    type: str
    choices: [present, absent]
    default: present
  term_timeout:
    description: Seconds between SIGTERM and SIGKILL.
    type: int
    default: 10
"""

EXAMPLES = r"""
---
- name: End vLLM engine processes left after the engine unit stopped
  sparkctl.spark.engine_leftovers:
    names: [VLLM::EngineCore]
    argv_prefixes:
      - [/opt/sparkctl/venvs/solar/bin/vllm, serve, /srv/sparkctl/models/solar-open2-250b-nvfp4]
    state: absent
"""

RETURN = r"""
processes:
  description: The engine processes found before any signal (pid, title, comm, argv, start, matched).
  returned: always
  type: list
  elements: dict
signalled:
  description: Signals sent, in order (pid, signal TERM or KILL).
  returned: always
  type: list
  elements: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkctl.spark.plugins.module_utils.ray_cluster import end_processes, find_leftovers, read_processes


def main():
    module = AnsibleModule(
        argument_spec=dict(
            names=dict(type="list", elements="str", default=[]),
            argv_prefixes=dict(type="list", elements="list", default=[]),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            term_timeout=dict(type="int", default=10),
            proc_root=dict(type="path", default="/proc"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    prefixes = [[str(word) for word in prefix] for prefix in params["argv_prefixes"]]
    found = find_leftovers(read_processes(params["proc_root"]), params["names"], prefixes, own_pid=os.getpid())
    # The module's own ancestors (the SSH session running it) are never the engine; the
    # check keeps a prefix that happens to match the python running this module harmless.
    ancestors = {os.getpid(), os.getppid()}
    found = [p for p in found if p["pid"] not in ancestors]
    signalled = []
    if params["state"] == "absent" and found and not module.check_mode:
        signalled = end_processes(found, params["proc_root"], params["term_timeout"])
    changed = params["state"] == "absent" and bool(found)
    module.exit_json(changed=changed, processes=found, signalled=signalled)


if __name__ == "__main__":
    main()

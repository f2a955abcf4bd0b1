#!/usr/bin/python
# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: report_file
short_description: Write a stage's report file, creating its directory, in one module run
version_added: 0.1.0
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - sparkctl.spark.attributes.posix
description:
  - Writes O(content) to O(path) (through a temporary file in the same directory, renamed over it, so a reader
    never sees half a report) with O(mode), creating the missing directories above it with O(directory_mode).
  - M(ansible.builtin.copy) with O(ansible.builtin.copy#module:content) does not create a missing parent directory
    (only a recursive copy to a destination ending in C(/) does), and compares by a M(ansible.builtin.stat) run
    first; a file task and a copy task were three module runs for one report (docs/performance.md).
  - Reports a change when the directory was created or the content or mode differ.
author:
  - sparkctl developers (!UNKNOWN)
options:
  path:
    description: The file to write.
    type: path
    required: true
  content:
    description: The file's whole content.
    type: str
    required: true
  mode:
    description: The file's permission bits, an octal string such as C("0640").
    type: str
    default: "0640"
  directory_mode:
    description: The permission bits of each directory the module creates above O(path); existing ones are left as they are.
    type: str
    default: "0750"
seealso:
  - module: ansible.builtin.copy
"""

EXAMPLES = r"""
- name: Write the machine-readable report on the control node
  sparkctl.spark.report_file:
    path: "{{ spark_report_dir }}/preflight.json"
    content: "{{ preflight_report | to_nice_json }}\n"
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
dest:
  description:
    - The file written, under the name M(ansible.builtin.copy) gives it, which the C(sparkctl) wrapper reads to know the
      reports of its run.
  type: str
  returned: always
  sample: /home/me/sparkctl/.sparkctl/reports/preflight.json
created_directories:
  description: The directories the module created (or would create in check mode), outermost first.
  type: list
  elements: str
  returned: always
  sample: [/home/me/sparkctl/.sparkctl, /home/me/sparkctl/.sparkctl/reports]
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_bytes
from ansible_collections.sparkctl.spark.plugins.module_utils.files import read_bytes_and_mode, write_file_atomic


def octal_mode(text):
    """The permission bits of an octal string ("0640", "750"); ValueError otherwise."""
    mode = int(str(text), 8)
    if mode < 0 or mode > 0o7777:
        raise ValueError(text)
    return mode


def missing_directories(path, exists=os.path.exists):
    """The directories above path that do not exist, outermost first."""
    missing = []
    directory = os.path.dirname(os.path.abspath(path))
    while directory and not exists(directory):
        missing.insert(0, directory)
        parent = os.path.dirname(directory)
        if parent == directory:
            break
        directory = parent
    return missing


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            content=dict(type="str", required=True, no_log=False),
            mode=dict(type="str", default="0640"),
            directory_mode=dict(type="str", default="0750"),
        ),
        supports_check_mode=True,
    )
    path = module.params["path"]
    try:
        mode = octal_mode(module.params["mode"])
        directory_mode = octal_mode(module.params["directory_mode"])
    except ValueError as exc:
        module.fail_json(msg="mode and directory_mode are octal permission bits such as 0640, got %s." % exc)
    content = to_bytes(module.params["content"], errors="surrogate_or_strict")
    created = missing_directories(path)
    old_content, old_mode = (None, None) if created else read_bytes_and_mode(path)
    changed = bool(created) or old_content != content or old_mode != mode
    if changed and not module.check_mode:
        try:
            for directory in created:
                os.mkdir(directory, directory_mode)
                # mkdir's mode passes through the umask; the directory gets the bits asked for.
                os.chmod(directory, directory_mode)
            if old_content != content:
                write_file_atomic(path, content, mode)
            else:
                os.chmod(path, mode)
        except OSError as exc:
            module.fail_json(msg="Cannot write the report %s: %s" % (path, exc.strerror or exc), dest=path)
    module.exit_json(changed=changed, dest=path, created_directories=created)


if __name__ == "__main__":
    main()

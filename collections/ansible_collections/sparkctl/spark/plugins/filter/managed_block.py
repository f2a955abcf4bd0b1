# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The text ansible.builtin.blockinfile would leave in a file, computed from the file's
current text on the controller. A role that reads the file once (node_state's texts) can
then run blockinfile only where the result differs, instead of once per run to find out.
The placement is blockinfile's own: an existing block (its begin and end markers) is
replaced where it stands, a new one goes to the top (insertbefore BOF) or the end."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

DOCUMENTATION = r"""
name: managed_block
short_description: The text ansible.builtin.blockinfile would leave in a file
version_added: 0.1.0
description:
  - Applies a marked block to a file's text as C(ansible.builtin.blockinfile) does (same markers, same placement, same
    line ends) and returns the resulting text, so a role compares it with what is there and runs C(blockinfile) only
    when they differ.
  - Only the placements C(insertbefore=BOF) and C(insertafter=EOF) (blockinfile's default) are modelled.
options:
  _input:
    description: The file's current text; null or omitted when the file does not exist.
    type: str
    required: true
  block:
    description: The block, as given to blockinfile.
    type: str
    required: true
  marker:
    description: The marker line, with C({mark}) where C(BEGIN) or C(END) goes.
    type: str
    default: "# {mark} ANSIBLE MANAGED BLOCK"
  state:
    description: C(present) or C(absent).
    type: str
    default: present
  insertbefore:
    description: C(BOF) to put a new block at the top; anything else is refused.
    type: str
"""

EXAMPLES = r"""
- name: Write the block only where the file differs
  ansible.builtin.blockinfile:
    path: /home/spark/.ssh/config
    insertbefore: BOF
    block: "{{ ssh_block }}"
  when: (config_text | sparkctl.spark.managed_block(ssh_block, insertbefore='BOF')) != config_text
"""

RETURN = r"""
_value:
  description: The text blockinfile would write (an empty string when it would leave no line); null when the file
    does not exist and nothing would be written.
  type: str
"""

_SEP = "\n"


def managed_block(original, block, marker="# {mark} ANSIBLE MANAGED BLOCK", state="present", insertbefore=None):
    if insertbefore not in (None, "BOF"):
        raise AnsibleFilterError(f"managed_block: only insertbefore=BOF is modelled, not {insertbefore!r}")
    present = state == "present"
    if not present and original is None:
        return None
    lines = str(original).splitlines(True) if original is not None else []
    begin = marker.replace("{mark}", "BEGIN") + _SEP
    end = marker.replace("{mark}", "END") + _SEP
    block = str(block or "")
    if present and block:
        if not block.endswith(_SEP):
            block += _SEP
        blocklines = [begin] + block.splitlines(True) + [end]
    else:
        blocklines = []
    # blockinfile takes the LAST line equal to each marker.
    first = last = None
    for index, line in enumerate(lines):
        if line == begin:
            first = index
        if line == end:
            last = index
    if first is None or last is None:
        at = 0 if insertbefore == "BOF" else len(lines)
    elif first < last:
        lines[first:last + 1] = []
        at = first
    else:
        lines[last:first + 1] = []
        at = last
    if at > 0 and not lines[at - 1].endswith(_SEP):
        lines[at - 1] += _SEP
    lines[at:at] = blocklines
    return "".join(lines)


class FilterModule:
    def filters(self):
        return {"managed_block": managed_block}

# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""earlyoom's command line from the oom_guard role's variables, checked before it is
written: earlyoom has no configuration check of its own, and a bad regex or size only
shows as a unit that will not start."""

from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError

DOCUMENTATION = r"""
name: earlyoom_args
short_description: earlyoom's arguments for a MemAvailable line in bytes, with the preferred and avoided processes
version_added: 0.1.0
description:
  - Converts O(_input) (bytes of MemAvailable under which earlyoom sends SIGTERM) to earlyoom's C(-M) in KiB, rounded
    up; earlyoom sends SIGKILL below half of it (its default).
  - Only C(-M) is given, so earlyoom uses it alone instead of the lower of it and the default 10 percent of
    C(-m); C(-s 100) makes swap irrelevant, as in the recipes' own guard (a node without swap counts as empty swap anyway).
  - O(prefer) and O(avoid) are extended regular expressions earlyoom matches against the process name (the 15-byte
    C(comm)); each is checked to compile and to hold no whitespace or quote (C(earlyoom.service) splits C($EARLYOOM_ARGS) at
    whitespace and passes quotes through).
  - Returns the argument string for C(EARLYOOM_ARGS).
options:
  _input:
    description: MemAvailable line in bytes (e.g. 8589934592 for 8 GiB).
    type: int
    required: true
  prefer:
    description: Regular expression of the process names to kill first (the engine).
    type: str
    default: ""
  avoid:
    description: Regular expression of the process names to kill last.
    type: str
    default: ""
  report_interval:
    description: Seconds between earlyoom's memory report lines (C(-r)); V(0) turns them off.
    type: int
    default: 3600
  extra:
    description: More arguments, appended as they are.
    type: list
    elements: str
    default: []
"""

EXAMPLES = r"""
- name: An 8 GiB line
  ansible.builtin.set_fact:
    args: "{{ 8589934592 | sparkctl.spark.earlyoom_args('^(vllm|python3?)$', '^(sshd|systemd)$') }}"
"""

RETURN = r"""
_value:
  description: The value of EARLYOOM_ARGS, e.g. C(-M 8388608 -s 100 -r 3600 --prefer ^(vllm)$ --avoid ^(sshd)$).
  type: str
"""

KIB = 1024
# earlyoom.service runs `earlyoom $EARLYOOM_ARGS`: systemd splits the value at whitespace
# and passes quotes through literally, so an argument can hold neither.
_FORBIDDEN = re.compile(r"[\s\"'`\\]")


def _regex(name, value):
    if not value:
        return None
    if not isinstance(value, str) or _FORBIDDEN.search(value):
        raise AnsibleFilterError(f"earlyoom_args: {name} {value!r} must be a regex without whitespace, quotes or "
                                 "backslashes (earlyoom.service splits its arguments at whitespace and keeps quotes)")
    try:
        re.compile(value)
    except re.error as exc:
        raise AnsibleFilterError(f"earlyoom_args: {name} {value!r} is not a valid regular expression: {exc}") from exc
    return value


def earlyoom_args(min_available_bytes, prefer="", avoid="", report_interval=3600, extra=None):
    try:
        size = int(min_available_bytes)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"earlyoom_args: the MemAvailable line must be bytes, got {min_available_bytes!r}") from exc
    if size < KIB * KIB:
        raise AnsibleFilterError(f"earlyoom_args: a MemAvailable line of {size} bytes is below 1 MiB; give bytes (8 GiB = 8589934592)")
    kib = -(-size // KIB)
    args = ["-M", str(kib), "-s", "100", "-r", str(int(report_interval))]
    for flag, name, value in (("--prefer", "prefer", prefer), ("--avoid", "avoid", avoid)):
        if _regex(name, value):
            args += [flag, value]
    for word in extra or []:
        if _FORBIDDEN.search(str(word)):
            raise AnsibleFilterError(f"earlyoom_args: extra argument {word!r} holds whitespace or a quote; give one word per item")
        args.append(str(word))
    return " ".join(args)


class FilterModule:
    def filters(self):
        return {"earlyoom_args": earlyoom_args}

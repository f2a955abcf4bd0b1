# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Environment files as both of their readers take them: systemd's EnvironmentFile= and
docker's --env-file. The fabric environment file is written with these, and so is the
engine's, by the two roles that write it: one function for both keeps them from undoing
each other's file."""

from __future__ import annotations

DOCUMENTATION = r"""
name: env_file_text
short_description: The text of an environment file for systemd and docker alike
version_added: 0.1.0
description:
  - Turns a mapping of variable names to values into C(NAME=value) lines, in the mapping's order, newline-terminated;
    no variables give an empty text.
  - Values are written as they are, without quoting, which is the one form systemd's C(EnvironmentFile=) and
    C(docker --env-file) read alike; C(sparkctl.spark.fabric_env) refuses values they would read differently.
  - The companion filter C(env_file_lines) returns the same lines as a list, for a template that adds its own header.
options:
  _input:
    description: Variable names to values.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: The engine's environment file
  ansible.builtin.set_fact:
    engine_env_content: "{{ engine_rendered.env | sparkctl.spark.env_file_text }}"
"""

RETURN = r"""
_value:
  description: The file's text (C(env_file_text)) or its lines (C(env_file_lines)).
  type: raw
"""


def env_file_lines(env):
    return [f"{name}={value}" for name, value in env.items()]


def env_file_text(env):
    lines = env_file_lines(env or {})
    return "\n".join(lines) + "\n" if lines else ""


class FilterModule:
    def filters(self):
        return {"env_file_lines": env_file_lines, "env_file_text": env_file_text}

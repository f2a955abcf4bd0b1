# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A stage play's hosts, or none when the run's tags leave the whole stage out.

Ansible filters tasks by tag, not plays: a `site.yml --tags provision` run still enters
every other stage's play and runs the tasks tagged `always` there (the roles' argument
checks, the once-per-run settings check), a fixed cost on every tagged run. A stage play
that no selected tag can reach matches no hosts instead, and Ansible skips it whole."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

DOCUMENTATION = r"""
name: stage_hosts
short_description: A stage play's host pattern, or no hosts when the run's tags leave the stage out
version_added: 0.1.0
description:
  - Returns the host pattern unchanged when the run's tags can select a task of the stage, and an empty list (no
    hosts, so Ansible skips the play) when they cannot.
  - The stage is left out when its own tag (the first of O(stage_tags)) is skipped (C(--skip-tags)), as every task of
    the play carries it. It is also left out when tags are selected (C(--tags)) and none of them is one of the
    stage's, C(all), C(always), C(tagged) or C(untagged).
  - The stage's tags are every tag a task of the play can carry (the play's own, its roles' and their tasks'), and
    the repository's unit tests keep each stage playbook's list equal to what its roles hold.
options:
  _input:
    description: The play's host pattern.
    type: str
    required: true
  stage_tags:
    description: Every tag of the stage's play, its own first.
    type: list
    elements: str
    required: true
  run_tags:
    description: The run's selected tags (C(ansible_run_tags); C(['all']) when none were given).
    type: list
    elements: str
    required: true
  skip_tags:
    description: The run's skipped tags (C(ansible_skip_tags)).
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
- name: Provision every node
  hosts: >-
    {{ 'spark_head:spark_workers' | sparkctl.spark.stage_hosts(sparkctl_stage_tags, ansible_run_tags,
       ansible_skip_tags) }}
  vars:
    sparkctl_stage_tags: [provision, link, firewall, fabric, linger, ssh]
  tags: [provision]
  roles:
    - role: direct_link
      tags: [link]
"""

RETURN = r"""
_value:
  description: The host pattern, or an empty list when the stage is left out.
  type: raw
"""

# Selected tags that reach tasks whatever their own tags are.
SELECTING_EVERY_STAGE = frozenset({"all", "always", "tagged", "untagged"})


def _tag_set(value, name):
    if isinstance(value, str) or not isinstance(value, (list, tuple, set, frozenset)):
        raise AnsibleFilterError(f"stage_hosts: {name} must be a list of tags, not {value!r}")
    return {str(tag) for tag in value}


def stage_selected(stage_tags, run_tags, skip_tags):
    stage = _tag_set(stage_tags, "stage_tags")
    if not stage:
        raise AnsibleFilterError("stage_hosts: stage_tags is empty; list the play's own tag first")
    selected, skipped = _tag_set(run_tags, "run_tags"), _tag_set(skip_tags, "skip_tags")
    if stage_tags[0] in skipped:
        return False
    return not selected or bool(selected & (stage | SELECTING_EVERY_STAGE))


def stage_hosts(pattern, stage_tags, run_tags, skip_tags):
    return pattern if stage_selected(stage_tags, run_tags, skip_tags) else []


class FilterModule:
    def filters(self):
        return {"stage_hosts": stage_hosts}

# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The jit_cache role's mirror destinations: where the head's kernel caches go on each worker."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.sparkctl.spark.plugins.module_utils.link_address import link_addresses

DOCUMENTATION = r"""
name: jit_cache_mirror_targets
short_description: The workers the head's kernel caches are mirrored to, each with its cache as its read found it
version_added: 0.1.0
description:
  - Takes the play's hosts and returns the C(workers) option of C(sparkctl.spark.jit_cache_mirror), one entry per host
    in input order, for every host but the head that has a read of C(sparkctl.spark.jit_cache) (a host without one
    is left out).
  - Each entry's C(target) is the worker's first cable address as the service user
    (C(OWNER@ADDRESS:PATH/), the SSH mesh's key and pinned host key), C(PATH) the cache directory its read names.
  - Fails naming the host when a read lacks C(path), C(identity) or C(cache) with C(digest) and C(names), or when its
    C(spark_link) holds no valid address.
options:
  _input:
    description: The play's hosts.
    type: list
    elements: str
    required: true
  reads:
    description: Each host's registered result of C(sparkctl.spark.jit_cache), V(null) where it has none, in the order of
      the hosts.
    type: list
    elements: raw
    required: true
  links:
    description: Each host's C(spark_link), in the order of the hosts.
    type: list
    elements: list
    required: true
  head:
    description: The head, whose cache is the one mirrored.
    type: str
    required: true
  owner:
    description: The service user, who owns the caches and connects over the SSH mesh.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Mirror the head's kernel caches to the workers
  sparkctl.spark.jit_cache_mirror:
    source: "{{ jit_cache_node.path }}"
    identity: "{{ jit_cache_node.identity }}"
    digest: "{{ jit_cache_node.cache.digest }}"
    names: "{{ jit_cache_node.cache.names }}"
    workers: >-
      {{ ansible_play_hosts | sparkctl.spark.jit_cache_mirror_targets(
           ansible_play_hosts | map('extract', hostvars, 'jit_cache_node') | map('default', none) | list,
           ansible_play_hosts | map('extract', hostvars, 'spark_link') | list, 'spark1', 'sparkctl') }}
"""

RETURN = r"""
_value:
  description: One entry per worker with a read.
  type: list
  elements: dict
  contains:
    name: {description: The worker., type: str}
    target: {description: "C(OWNER@ADDRESS:PATH/): the worker's cache directory over its first cable half.", type: str}
    identity: {description: The runtime identity the worker's cache belongs to., type: str}
    digest: {description: The digest of what the worker's cache holds., type: str}
    names: {description: The files the worker's cache holds, under its directory., type: list, elements: str}
"""


def jit_cache_mirror_targets(hosts, reads, links, head, owner):
    hosts, reads, links = list(hosts or []), list(reads or []), list(links or [])
    if not len(hosts) == len(reads) == len(links):
        raise AnsibleFilterError("jit_cache_mirror_targets: %d hosts, %d reads and %d spark_link plans"
                                 % (len(hosts), len(reads), len(links)))
    specs = []
    for host, read, link in zip(hosts, reads, links, strict=True):
        if host == head or read is None:
            continue
        try:
            address = link_addresses(link)[0]
        except ValueError as exc:
            raise AnsibleFilterError("jit_cache_mirror_targets: %s: %s" % (host, exc)) from exc
        try:
            specs.append({"name": host, "target": "%s@%s:%s/" % (owner, address, read["path"]),
                          "identity": read["identity"], "digest": read["cache"]["digest"], "names": read["cache"]["names"]})
        except (KeyError, TypeError) as exc:
            raise AnsibleFilterError("jit_cache_mirror_targets: the kernel cache read of %s lacks %s" % (host, exc)) from exc
    return specs


class FilterModule:
    def filters(self):
        return {"jit_cache_mirror_targets": jit_cache_mirror_targets}

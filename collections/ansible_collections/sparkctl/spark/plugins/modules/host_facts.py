#!/usr/bin/python
# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: host_facts
short_description: Gather memory, free space, listening port and systemd facts for serving preflight checks
version_added: 0.1.0
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.facts
  - sparkctl.spark.attributes.facts_linux
description:
  - Reads C(MemTotal), C(MemFree), C(MemAvailable), C(SwapTotal) and C(SwapFree) from C(/proc/meminfo).
    On a DGX Spark CPU and GPU share the memory, so C(MemAvailable) is the budget a model has to fit into.
  - For each path in O(paths) reports total and free space of the file system that holds it, or would hold it,
    since a checkpoint or cache directory may not exist yet.
  - Lists listening TCP sockets from C(/proc/net/tcp) and C(/proc/net/tcp6) and, for each port in O(ports),
    which process and systemd unit holds it.
  - Reports the init process and the systemd version.
author:
  - sparkctl developers (!UNKNOWN)
options:
  paths:
    description:
      - Paths whose file system to report, for example the weights directory and the FlashInfer JIT cache.
      - A path that does not exist is measured at its nearest existing ancestor.
    type: list
    elements: path
    default: []
  ports:
    description:
      - TCP ports to check, for example C(8000) for the API, C(6379) and C(8265) for Ray.
      - The process table is only scanned when one of them is in use.
    type: list
    elements: int
    default: []
notes:
  - Only sockets in C(LISTEN) state count as holding a port. UDP is not inspected.
  - Without root, holders owned by other users are reported with RV(ansible_facts.spark_host_facts.ports.holders[].pid=null);
    use C(become) for complete answers.
"""

EXAMPLES = r"""
---
- name: Gather host facts for the serving preflight
  sparkctl.spark.host_facts:
    paths:
      - /data/models/Solar-Open2-250B-Nota-NVFP4
      - "~/.cache/flashinfer"
    ports:
      - 8000
      - 6379
      - 8265
  become: true

- name: Refuse to start when the API port is taken by someone else
  ansible.builtin.assert:
    that: not ansible_facts.spark_host_facts.ports['8000'].in_use
    fail_msg: >-
      Port 8000 is held by
      {{ ansible_facts.spark_host_facts.ports['8000'].holders | map(attribute='process') | join(', ') }}

- name: Require 160 GB free for the weights
  ansible.builtin.assert:
    that: ansible_facts.spark_host_facts.disks['/data/models/Solar-Open2-250B-Nota-NVFP4'].free_bytes > 160 * 1000 ** 3
"""

RETURN = r"""
ansible_facts:
  description: Facts to add to C(ansible_facts).
  returned: always
  type: dict
  contains:
    spark_host_facts:
      description: Host facts.
      returned: always
      type: dict
      contains:
        meminfo:
          description: Memory counters from C(/proc/meminfo) in bytes, V(null) when the kernel does not print the field.
          returned: always
          type: dict
          contains:
            mem_total_bytes:
              description: C(MemTotal).
              type: int
              sample: 128501256192
            mem_free_bytes:
              description: C(MemFree).
              type: int
              sample: 113166925824
            mem_available_bytes:
              description: C(MemAvailable), the memory budget of a unified-memory host.
              type: int
              sample: 121452777472
            swap_total_bytes:
              description: C(SwapTotal).
              type: int
              sample: 17179865088
            swap_free_bytes:
              description: C(SwapFree).
              type: int
              sample: 17179865088
        disks:
          description: One entry per path in O(paths), keyed by the path.
          returned: always
          type: dict
          contains:
            path:
              description: The requested path.
              type: str
              sample: /data/models/Solar-Open2-250B-Nota-NVFP4
            checked_path:
              description: The path that was measured, the path itself or its nearest existing ancestor.
              type: str
              sample: /data/models
            exists:
              description: Whether the requested path exists.
              type: bool
              sample: false
            total_bytes:
              description: Size of the file system, V(null) when it cannot be measured.
              type: int
              sample: 3936818753536
            free_bytes:
              description: Space a non-root user can still write (C(f_bavail * f_frsize)), V(null) when it cannot be measured.
              type: int
              sample: 3310723092480
            device:
              description: Mount source of the file system from C(/proc/self/mountinfo), V(null) when unknown.
              type: str
              sample: /dev/nvme0n1p2
            mount_point:
              description: Mount point of the file system, V(null) when unknown.
              type: str
              sample: /
            fstype:
              description: File system type, V(null) when unknown.
              type: str
              sample: ext4
            used_bytes:
              description:
                - Bytes the files under the path already occupy on disk (0 when it does not exist), so a checkpoint
                  already in place is not counted twice against the free space.
              type: int
              sample: 153000000000
        listening:
          description: Listening TCP sockets, sorted by port.
          returned: always
          type: list
          elements: dict
          contains:
            proto:
              description: C(tcp) or C(tcp6).
              type: str
              sample: tcp
            address:
              description: Local address; IPv4-mapped IPv6 addresses are written C(::ffff:a.b.c.d).
              type: str
              sample: 0.0.0.0
            port:
              description: Local port.
              type: int
              sample: 22
            inode:
              description: Socket inode.
              type: int
              sample: 23456
        ports:
          description: One entry per port in O(ports), keyed by the port number as a string.
          returned: always
          type: dict
          contains:
            in_use:
              description: Whether a socket listens on the port.
              type: bool
              sample: true
            holders:
              description:
                - One entry per listening socket on the port.
                - When several processes share the socket (forked workers), the lowest PID is reported.
              type: list
              elements: dict
              contains:
                address:
                  description: Local address of the socket.
                  type: str
                  sample: 0.0.0.0
                pid:
                  description: PID holding the socket, V(null) when it could not be found (not readable without root).
                  type: int
                  sample: 812
                process:
                  description: Command name (C(/proc/<pid>/comm)) of RV(ansible_facts.spark_host_facts.ports.holders[].pid).
                  type: str
                  sample: sshd
                unit:
                  description:
                    - Systemd unit of the process from C(/proc/<pid>/cgroup), V(null) outside a unit. For a socket
                      systemd holds itself (socket activation, PID 1), the C(.socket) unit from
                      C(systemctl list-sockets).
                  type: str
                  sample: ssh.service
                container:
                  description:
                    - Name of the Docker container the process runs in (from its cgroup and dockerd's
                      C(/var/lib/docker/containers/<id>/config.v2.json)), when it runs in one.
                  type: str
                  returned: when the process runs in a Docker container dockerd knows
                  sample: sparkctl-ray-head
        sshd_ports:
          description:
            - TCP ports sshd listens on (held by an C(sshd) process, or by systemd for C(ssh.socket)/C(sshd.socket)),
              sorted; V(null) when the owners of the listeners could not be read (not root).
            - Preflight compares them with the firewall's C(firewall_ssh_ports).
          returned: always
          type: list
          elements: int
          sample: [22]
        systemd:
          description: Init system facts.
          returned: always
          type: dict
          contains:
            pid1_comm:
              description: Command name of PID 1, C(systemd) on a normal host; something else in most containers.
              type: str
              sample: systemd
            version:
              description: Systemd version from C(systemctl --version), V(null) without systemctl.
              type: int
              sample: 255
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkctl.spark.plugins.module_utils.host import read_host_facts

PROC_ROOT = "/proc"


def main():
    module = AnsibleModule(
        argument_spec=dict(
            paths=dict(type="list", elements="path", default=[]),
            ports=dict(type="list", elements="int", default=[]),
        ),
        supports_check_mode=True,
    )
    facts = read_host_facts(module, module.params["paths"], module.params["ports"], proc_root=PROC_ROOT)
    module.exit_json(changed=False, ansible_facts=dict(spark_host_facts=facts))


if __name__ == "__main__":
    main()

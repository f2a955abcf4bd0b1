# -*- coding: utf-8 -*-
# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""NCCL's own bandwidth test over the cable: nccl-tests' `all_gather_perf`, one rank per node
(one GB10 GPU each), started from the head with Open MPI, every rank in the fabric
environment its own node was given (docs/fabric-test.md, "NCCL all_gather").

Rendered and unit-tested here; running it needs CUDA and nccl-tests built on the nodes, so it
is verified on hardware only (the lab has neither)."""

from __future__ import annotations

import re
import shlex

from ansible_collections.sparkctl.spark.plugins.module_utils.link_address import bare_address, link_subnet

# The fabric environment's names NCCL and Open MPI read (roles/fabric_env renders them all
# into /etc/sparkctl/fabric.env; the engines' own variables are not the test's business).
NCCL_ENV_PREFIXES = ("NCCL_", "UCX_", "OMPI_")
NCCL_ENV_NAMES = ("LD_PRELOAD",)
# The MTU the cable must carry end to end: with a standard MTU (or one half left out of
# NCCL_IB_HCA) all_gather ran at about 3 GB/s instead of about 23.7 GB/s (docs/field-notes.md).
CABLE_MTU = 9000
_AVG_BUSBW = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([0-9.]+)", re.MULTILINE)
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)", re.MULTILINE)


def nccl_env(fabric_env):
    """The part of a node's fabric environment the test's rank needs, in its order."""
    return {k: v for k, v in fabric_env.items() if k.startswith(NCCL_ENV_PREFIXES) or k in NCCL_ENV_NAMES}


def env_file_text(env):
    """A node's rank environment as a file `set -a; . FILE` reads (values are checked free of
    whitespace, quotes, '$' and backslashes by the fabric_env filter)."""
    return "".join(f"{k}={v}\n" for k, v in env.items())


def problems(nodes, fabric):
    """What would make the number meaningless, per node: fewer RDMA devices in NCCL_IB_HCA than
    the node has cable halves, a half below the cable MTU, no NCCL_SOCKET_IFNAME."""
    out = []
    for node in nodes:
        env = node["env"]
        hcas = [h for h in env.get("NCCL_IB_HCA", "").split(",") if h]
        halves = node["links"]
        if len(hcas) < len(halves):
            out.append(f"{node['host']}: NCCL_IB_HCA={env.get('NCCL_IB_HCA', '')!r} names {len(hcas)} RDMA device(s) for "
                       f"{len(halves)} cable halves: one half alone carries a fraction of the link; re-run the "
                       "provision stage (role fabric_env renders every half's device).")
        for link in halves:
            if int(link.get("mtu") or 0) != CABLE_MTU:
                out.append(f"{node['host']}: {link['interface']} has MTU {link.get('mtu')}, not {CABLE_MTU}: all_gather "
                           "runs at a fraction of the cable's rate; set spark_link_mtu: 9000 and re-run the provision stage.")
        if not env.get("NCCL_SOCKET_IFNAME"):
            out.append(f"{node['host']}: no NCCL_SOCKET_IFNAME in its fabric environment.")
    if fabric == "direct" and len(nodes) != 2:
        out.append(f"a direct cable joins exactly two nodes, not {len(nodes)}: set spark_fabric: switch.")
    return out


def render(nodes, *, fabric="direct", binary="/opt/nccl-tests/build/all_gather_perf", env_path="/etc/sparkctl/fabric.env",
           min_bytes="8", max_bytes="2G", iters=20, warmup=5, mpirun="mpirun"):
    """The test's plan: the head's mpirun argv, and per node the variables its rank takes from its
    own rendered fabric environment (env_path, which each rank sources: nothing is written).

    nodes: [{host, address (the node's first cable half with its prefix, as spark_link has it), links: [{interface,
    mtu}], env (the node's fabric environment)}], the head first. One rank per node (`-H addr:1`);
    Open MPI's own TCP traffic is pinned to the first half's subnet (a CIDR, so nodes whose
    netdevs are named differently agree); each rank sources its own node's fabric.env, so a GID index
    that differs between nodes reaches each rank as its node resolved it. max_bytes stays well
    below the 16 GB a user's test froze a node with (docs/field-notes.md): the unified memory
    holds the buffers beside everything else."""
    if not nodes:
        raise ValueError("nccl_test: no node to test")
    first = nodes[0]
    subnet = link_subnet(first["address"])
    hosts = ",".join(f"{bare_address(n['address'])}:1" for n in nodes)
    test = [binary, "-b", str(min_bytes), "-e", str(max_bytes), "-f", "2", "-g", "1", "-n", str(int(iters)),
            "-w", str(int(warmup)), "-c", "1"]
    argv = [mpirun, "-np", str(len(nodes)), "-H", hosts,
            "--mca", "btl_tcp_if_include", subnet, "--mca", "oob_tcp_if_include", subnet,
            "--bind-to", "none",
            "/bin/sh", "-c", f"set -a && . {shlex.quote(env_path)} && exec {shlex.join(test)}"]
    files = {n["host"]: env_file_text(nccl_env(n["env"])) for n in nodes}
    found = problems(nodes, fabric)
    lines = [f"on {first['host']}: {shlex.join(argv)}"]
    for host, text in files.items():
        lines.append(f"{host} rank, from {env_path}: " + " ".join(text.split()))
    lines += [f"problem: {p}" for p in found]
    return {"argv": argv, "command": shlex.join(argv), "env_path": env_path, "env_files": files,
            "problems": found, "lines": lines, "ranks": len(nodes), "fabric": fabric}


def parse_all_gather(stdout):
    """(average bus bandwidth in GB/s, out-of-bounds values) from all_gather_perf's summary lines
    (`# Out of bounds values : 0 OK`, `# Avg bus bandwidth    : 23.7`); None where absent."""
    busbw = _AVG_BUSBW.search(stdout or "")
    oob = _OOB.search(stdout or "")
    return (float(busbw.group(1)) if busbw else None, int(oob.group(1)) if oob else None)


def parse_env_file(text):
    """NAME=value lines of an environment file (the fabric_env role's), comments and blanks skipped."""
    env = {}
    for line in (text or "").splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        name, _sep, value = line.partition("=")
        env[name.strip()] = value.strip()
    return env

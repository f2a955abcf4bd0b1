# -*- coding: utf-8 -*-
# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fabric test: the bandwidth of every cable half between the head and each worker,
each half measured alone, against a minimum per half.

Two methods, both real tools: `rdma` runs perftest's ib_write_bw over the half's RDMA
device and RoCE v2 GID (what NCCL uses on a Spark), `tcp` runs iperf3 over the half's
addresses (any node whose cable halves carry IP, such as a lab without RDMA). The server
side runs on the worker, bounded by `timeout` so that nothing is left listening when its
client never comes (a half that is down); the client runs on the head, one half at a time.

Pure functions: argv rendering, output parsing, the verdict. The module fabric_bandwidth
runs the clients; the role starts the servers."""

from __future__ import annotations

import json
import re

METHODS = ("rdma", "tcp")
TOOLS = {"rdma": "ib_write_bw", "tcp": "iperf3"}
# Debian/Ubuntu packages of the tools.
PACKAGES = {"rdma": "perftest", "tcp": "iperf3"}


def half_port(port_base, half):
    """The TCP port of one half's server (the halves are measured one after the other, but a
    worker runs one server per half at once, each on its own port)."""
    return int(port_base) + int(half)


def server_argv(method, pair, seconds, port_base, lifetime):
    """argv of the server for one pair (run on the pair's peer, the worker), ended by
    `timeout` after `lifetime` seconds whatever happens."""
    port = str(half_port(port_base, pair["half"]))
    bound = ["timeout", str(int(lifetime))]
    if method == "tcp":
        # -1: one client, then exit.
        return bound + ["iperf3", "-s", "-1", "-B", pair["address"], "-p", port]
    rdma = pair["peer_rdma"]
    return bound + ["ib_write_bw", "-d", rdma["rdma_device"], "-i", str(rdma["port"]), "-x", str(rdma["gid_index"]),
                    "-p", port, "-D", str(int(seconds)), "--report_gbits", "-F"]


def client_argv(method, pair, seconds, port_base):
    """argv of the client for one pair (run on the head, the pair's own end)."""
    port = str(half_port(port_base, pair["half"]))
    if method == "tcp":
        return ["iperf3", "-c", pair["address"], "-B", pair["source"], "-p", port, "-t", str(int(seconds)), "-J",
                "--connect-timeout", "3000"]
    rdma = pair["rdma"]
    return ["ib_write_bw", "-d", rdma["rdma_device"], "-i", str(rdma["port"]), "-x", str(rdma["gid_index"]),
            "-p", port, "-D", str(int(seconds)), "--report_gbits", "-F", pair["address"]]


def parse_iperf3(stdout):
    """(Gbit/s the receiver counted, error text or None) of `iperf3 -J` output."""
    try:
        doc = json.loads(stdout)
    except (TypeError, ValueError):
        text = (stdout or "").strip().splitlines()
        return None, (text[-1] if text else "iperf3 printed nothing")
    if not isinstance(doc, dict):
        return None, "iperf3 printed JSON that is not an object"
    if doc.get("error"):
        return None, str(doc["error"])
    end = doc.get("end") or {}
    summary = end.get("sum_received") or end.get("sum_sent") or {}
    bits = summary.get("bits_per_second")
    if not isinstance(bits, (int, float)):
        return None, "iperf3's report holds no bits_per_second"
    return bits / 1e9, None


_IB_HEADER = re.compile(r"BW average\[(Gb|MB)/sec\]")


def parse_ib_write_bw(stdout):
    """(Gbit/s average, error text or None) of ib_write_bw's result table: the line after the
    header `#bytes #iterations BW peak[..] BW average[..] MsgRate[Mpps]` (Gb/sec with
    --report_gbits, MB/sec without)."""
    lines = (stdout or "").splitlines()
    for number, line in enumerate(lines):
        header = _IB_HEADER.search(line)
        if not header:
            continue
        columns = line.replace("BW peak", "BW_peak").replace("BW average", "BW_average").split()
        average = next(i for i, c in enumerate(columns) if c.startswith("BW_average"))
        for row in lines[number + 1:]:
            fields = row.split()
            if len(fields) > average and fields[0].isdigit():
                try:
                    value = float(fields[average])
                except ValueError:
                    return None, f"ib_write_bw's average is not a number: {row.strip()}"
                return (value if header.group(1) == "Gb" else value * 8 / 1000), None
        return None, "ib_write_bw printed its header but no result line"
    tail = [line.strip() for line in lines if line.strip()]
    return None, (tail[-1] if tail else "ib_write_bw printed nothing")


def parse(method, stdout):
    return parse_iperf3(stdout) if method == "tcp" else parse_ib_write_bw(stdout)


def describe(pair):
    """One half of one pair in words: where a failure is."""
    return (f"half {pair['half']} {pair['interface']} {pair['source']} -> "
            f"{pair['peer']} {pair['peer_interface']} {pair['address']}")


def result(pair, gbps, error, minimum_gbps):
    """The verdict of one measured half."""
    ok = error is None and gbps is not None and gbps >= float(minimum_gbps)
    if error is not None:
        problem = f"{describe(pair)}: no traffic ({error}); is the half down or its address gone? (ip -br addr on both ends)"
    elif not ok:
        problem = (f"{describe(pair)}: {gbps:.2f} Gbit/s, below the minimum {float(minimum_gbps):g} Gbit/s "
                   "(fabric_test_min_gbps); check the MTU (9000) and the link speed on both ends")
    else:
        problem = None
    return {
        "peer": pair["peer"],
        "half": pair["half"],
        "interface": pair["interface"],
        "source": pair["source"],
        "peer_interface": pair["peer_interface"],
        "address": pair["address"],
        "gbps": None if gbps is None else round(gbps, 3),
        "minimum_gbps": float(minimum_gbps),
        "ok": ok,
        "problem": problem,
    }


def report(method, head, results, seconds):
    """The JSON document the role writes, and what the wrapper prints."""
    return {
        "kind": "fabric_test",
        "method": method,
        "tool": TOOLS[method],
        "head": head,
        "seconds_per_half": int(seconds),
        "ok": bool(results) and all(r["ok"] for r in results),
        "results": list(results),
        "problems": [r["problem"] for r in results if r["problem"]],
    }


def table_lines(doc):
    """The report as aligned text lines, one per half."""
    rows = [("peer", "half", "head side", "peer side", "Gbit/s", "minimum", "verdict")]
    for r in doc.get("results", []):
        rows.append((r["peer"], str(r["half"]), f"{r['interface']} {r['source']}",
                     f"{r['peer_interface']} {r['address']}",
                     "-" if r["gbps"] is None else f"{r['gbps']:.2f}", f"{r['minimum_gbps']:g}",
                     "ok" if r["ok"] else "FAIL"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows]


def pairs(link_targets, roce_by_host, head):
    """The pairs to measure, from the head's link_ping_targets (one per worker and half) and,
    for the rdma method, each node's resolved RoCE links (roce_gid's `roce.links`, by
    host): the RDMA device, port and GID index of the half on both ends."""
    out = []
    for target in link_targets:
        pair = dict(target)
        if roce_by_host is not None:
            pair["rdma"] = _roce_link(roce_by_host, head, target["interface"])
            pair["peer_rdma"] = _roce_link(roce_by_host, target["peer"], target["peer_interface"])
        out.append(pair)
    return out


def _roce_link(roce_by_host, host, interface):
    for link in (roce_by_host.get(host) or {}).get("links", []):
        if link.get("interface") == interface:
            return {"rdma_device": link["rdma_device"], "port": link["port"], "gid_index": link["gid_index"]}
    raise ValueError(f"{host}: no resolved RoCE link for {interface} (the fabric_env role's GID resolution)")

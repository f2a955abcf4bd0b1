# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The verify stage's cross-node checks: are the runtimes identical on every node, and how
far is each node's free memory from the OOM guard's line while the engine serves."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.sparkctl.spark.plugins.module_utils.runtime_versions import VERSION_ITEMS

DOCUMENTATION = r"""
name: version_parity
short_description: Compare the runtime versions of all nodes and tabulate the differences
version_added: 0.1.0
description:
  - Takes a mapping of host to C(versions), each the RV(versions) of M(sparkctl.spark.runtime_versions) on that host,
    and compares C(driver), C(cuda), C(nccl), C(torch), C(python), C(venv_lock_sha256), C(image_id),
    C(image_context_hash) and each C(packages.<name>). Items V(null) on every host are left out; an item set on some
    hosts and V(null) on others is a mismatch.
  - Images built on each node from one context differ in id by design. When every host reports the same
    C(image_context_hash), the C(image_id) row is shown but not compared (its C(checked) is V(false)).
  - Companion filters in this file, documented in RETURN, are C(memory_headroom) (input a mapping of host to
    C(MemAvailable) and C(MemTotal) in bytes, or the C(mem_available_bytes) / C(mem_total_bytes) keys of
    C(spark_host_facts.meminfo); arguments C(guard_bytes), the OOM guard's C(MemAvailable) line, and
    C(warn_margin_bytes)).
  - C(memory_headroom) fails a host whose C(MemAvailable) is at or below the guard line (the guard is about to kill
    the engine) and warns when it is within C(warn_margin_bytes) above it. Its optional C(gates) argument (host to the
    engine memory gate's last verdict, RV(sparkctl.spark.verify_facts#module:engine_gate)) adds a failed row, with
    the gate's numbers, for each host where the gate held an engine unit back.
options:
  _input:
    description: Host name to the RV(versions) of M(sparkctl.spark.runtime_versions) on that host.
    type: dict
    required: true
  all:
    description: Tabulate every row, not only the mismatched ones.
    type: bool
    default: false
  ignore:
    description: Items not to compare (e.g. C(packages.vllm) for a deliberately mixed cluster); their rows are kept with C(checked=false).
    type: list
    elements: str
    default: []
"""

EXAMPLES = r"""
- name: Fail on a version mismatch, with a table
  ansible.builtin.assert:
    that: parity.ok
    fail_msg: "Versions differ between nodes ({{ parity.mismatches | join(', ') }}):\n{{ parity.table }}"
  vars:
    parity: "{{ verify_versions_by_host | sparkctl.spark.version_parity }}"

- name: Memory headroom on every node while the engine serves
  ansible.builtin.set_fact:
    verify_headroom: >-
      {{ verify_meminfo_by_host | sparkctl.spark.memory_headroom(8589934592, 4294967296) }}
  vars:
    verify_meminfo_by_host: "{{ {inventory_hostname: ansible_facts['spark_host_facts']['meminfo']} }}"
"""

RETURN = r"""
_value:
  description:
    - "C(version_parity): C(ok), C(rows) (one C({item, values: {host: value}, same, checked}) per item), C(mismatches)
      (item names) and C(table) (plain text, aligned: item | host | host ..., of the mismatched rows, or of all rows
      with O(all=true), where a mismatched item is marked with the word C(differs))."
    - "C(memory_headroom): C(ok) (no host failed), C(rows) (one C({host, available_bytes, total_bytes, guard_bytes,
      margin_bytes, status, message}) per host, C(status) V(ok), V(warn) or V(fail), C(margin_bytes) =
      available - guard; a row of a held-back engine also has C(baseline_bytes) and C(gate_margin_bytes)), C(failed)
      and C(warned) (host names)."
  type: dict
"""

GIB = 1024 ** 3
# Hashes and image ids are 64 hex digits; the table shows a prefix, enough to tell them apart.
_CELL_WIDTH = 24
_MISSING = "-"


def _item_value(versions, item):
    versions = versions or {}
    if item.startswith("packages."):
        return (versions.get("packages") or {}).get(item[len("packages."):])
    return versions.get(item)


def _package_items(per_host):
    names = []
    for versions in per_host.values():
        for name in ((versions or {}).get("packages") or {}):
            if name not in names:
                names.append(name)
    return ["packages.%s" % name for name in names]


def _cell(value):
    if value is None:
        return _MISSING
    text = str(value)
    return text if len(text) <= _CELL_WIDTH else text[:_CELL_WIDTH - 3] + "..."


def _table(rows, hosts, mark_differences=False):
    header = ["item"] + list(hosts)
    body = []
    for row in rows:
        label = row["item"]
        if not row["checked"]:
            label += " (not compared)"
        elif mark_differences and not row["same"]:
            label += " (differs)"
        body.append([label] + [_cell(row["values"].get(host)) for host in hosts])
    widths = [max(len(line[i]) for line in [header] + body) for i in range(len(header))]

    def render(cells):
        return " | ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True)).rstrip()

    separator = "-+-".join("-" * width for width in widths)
    return "\n".join([render(header), separator] + [render(line) for line in body])


def version_parity(per_host, all=False, ignore=None):  # noqa: A002 - the filter's documented argument name
    if not isinstance(per_host, dict):
        raise AnsibleFilterError("version_parity: expected {host: versions}, got %s" % type(per_host).__name__)
    hosts = list(per_host)
    ignored = set(ignore or [])
    context_hashes = [_item_value(per_host[host], "image_context_hash") for host in hosts]
    same_build = bool(hosts) and context_hashes[0] is not None and len(set(context_hashes)) == 1
    rows = []
    for item in list(VERSION_ITEMS) + _package_items(per_host):
        values = dict((host, _item_value(per_host[host], item)) for host in hosts)
        if _all_null(values):
            continue
        distinct = set(repr(value) for value in values.values())
        checked = item not in ignored and not (item == "image_id" and same_build)
        rows.append({"item": item, "values": values, "same": len(distinct) == 1, "checked": checked})
    mismatched = [row for row in rows if row["checked"] and not row["same"]]
    shown = rows if all else mismatched
    return {
        "ok": not mismatched,
        "rows": rows,
        "mismatches": [row["item"] for row in mismatched],
        "table": _table(shown, hosts, mark_differences=bool(all)) if shown else "",
    }


def _all_null(values):
    return not [value for value in values.values() if value is not None]


def _gib(n_bytes):
    return "%.2f GiB" % (n_bytes / GIB)


def _bytes_or_none(value):
    if value is None or isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _meminfo_value(meminfo, field, key):
    meminfo = meminfo or {}
    return _bytes_or_none(meminfo[field] if field in meminfo else meminfo.get(key))


def memory_headroom(per_host, guard_bytes, warn_margin_bytes, gates=None):
    if not isinstance(per_host, dict):
        raise AnsibleFilterError("memory_headroom: expected {host: {MemAvailable, MemTotal}}, got %s" % type(per_host).__name__)
    guard, margin_limit = _bytes_or_none(guard_bytes), _bytes_or_none(warn_margin_bytes)
    if guard is None or guard < 0 or margin_limit is None or margin_limit < 0:
        raise AnsibleFilterError("memory_headroom: guard_bytes and warn_margin_bytes must be byte counts, got %r and %r"
                                 % (guard_bytes, warn_margin_bytes))
    rows = []
    for host, meminfo in per_host.items():
        available = _meminfo_value(meminfo, "MemAvailable", "mem_available_bytes")
        total = _meminfo_value(meminfo, "MemTotal", "mem_total_bytes")
        row = {"host": host, "available_bytes": available, "total_bytes": total, "guard_bytes": guard,
               "margin_bytes": None if available is None else available - guard}
        if available is None:
            row["status"] = "fail"
            row["message"] = "%s: MemAvailable could not be read from /proc/meminfo." % host
            rows.append(row)
            continue
        of_total = " of %s" % _gib(total) if total is not None else ""
        guard_text = "the OOM guard line of %s" % _gib(guard)
        if available <= guard:
            row["status"] = "fail"
            row["message"] = ("%s: MemAvailable %s%s is at or below %s: the guard is about to kill the engine. Lower the "
                              "KV cache or context length, or stop what else runs on the node."
                              % (host, _gib(available), of_total, guard_text))
        elif available - guard <= margin_limit:
            row["status"] = "warn"
            row["message"] = ("%s: MemAvailable %s%s is only %s above %s (warning within %s): a longer context or "
                              "another process may trip it."
                              % (host, _gib(available), of_total, _gib(available - guard), guard_text, _gib(margin_limit)))
        else:
            row["status"] = "ok"
            row["message"] = "%s: MemAvailable %s%s, %s above %s." % (
                host, _gib(available), of_total, _gib(available - guard), guard_text)
        rows.append(row)
    for host, gate in sorted((gates or {}).items()):
        # The engine memory gate refused the last start of an engine unit on this node.
        if isinstance(gate, dict) and gate.get("held"):
            rows.append({"host": host, "available_bytes": _bytes_or_none(gate.get("available_bytes")),
                         "total_bytes": None, "guard_bytes": guard, "margin_bytes": None,
                         "baseline_bytes": _bytes_or_none(gate.get("baseline_bytes")),
                         "gate_margin_bytes": _bytes_or_none(gate.get("margin_bytes")), "status": "fail",
                         "message": "%s: %s (checked %s)" % (host, gate.get("message"), gate.get("checked_at", "?"))})
    failed = [row["host"] for row in rows if row["status"] == "fail"]
    return {"ok": not failed, "rows": rows, "failed": failed,
            "warned": [row["host"] for row in rows if row["status"] == "warn"]}


class FilterModule:
    def filters(self):
        return {"version_parity": version_parity, "memory_headroom": memory_headroom}

# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The checkpoint stage's filters: one readable line from the progress file
sparkctl.spark.checkpoint_sync keeps while it runs in the background, whether a node
has room for the checkpoint once its real size is known, whether the manifest an
earlier run kept is the checkpoint this run asks for (the stage's no-op path), and where
the transfer sends the checkpoint on each worker."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.sparkctl.spark.plugins.module_utils.checkpoint_hub import kept_manifest_standing
from ansible_collections.sparkctl.spark.plugins.module_utils.fit import estimate_due
from ansible_collections.sparkctl.spark.plugins.module_utils.link_address import link_addresses
from ansible_collections.sparkctl.spark.plugins.plugin_utils.preflight_checks import check_disk

DOCUMENTATION = r"""
name: checkpoint_progress_line
short_description: Summarise a checkpoint transfer's progress file in one line
version_added: 0.1.0
description:
  - Turns the JSON progress file of C(sparkctl.spark.checkpoint_sync) into one line with the phase, elapsed time,
    files and bytes verified on the head, per worker files and bytes mirrored and what is in flight, and the last event.
  - The companion filter C(checkpoint_room) (input one node's C(spark_host_facts) with the checkpoint directory among
    its C(disks); arguments the directory, the checkpoint's real size and the reserve, in bytes) returns preflight's
    C(disk.checkpoint) result (C(id), C(title), C(status), C(detail), C(fix)) for that size, counting what is already
    in the directory as in place.
  - The companion filter C(checkpoint_manifest_standing) (input the manifest an earlier run kept, parsed, or an empty
    mapping; arguments the transfer's source, C(sparkctl.spark.hub_access)'s result and why the hub is out of reach,
    empty when it is not) returns C(current), C(reason) and C(notes). C(current) says whether that manifest is the one
    a transfer would build now, of the same repo and revision and, with the hub in reach, of the commit the hub names
    with the same files after C(allow_patterns); with the hub out of reach the same repo and revision suffice.
    C(reason) says why not; C(notes) are lines to show, such as a branch checked offline that may have moved.
  - The companion filter C(checkpoint_fit_due) (input the fit estimate kept beside the checkpoint, as the file's text or
    parsed, or empty when there is none; arguments the loaded profile and the checkpoint's commit, empty for a path
    source) returns C(due) and C(reason). C(due) says whether the estimate must be made again (none kept, unreadable,
    kept by an earlier sparkctl without a record of what it was made for, or made for another profile, parallel size,
    KV pool, KV dtype, C(max_num_seqs) or commit). C(reason) names what differs (the fit module utility's
    C(estimate_due); docs/fit.md).
  - The companion filter C(checkpoint_worker_targets) (input the workers that receive the checkpoint, the head left
    out; arguments each one's C(spark_link) in the same order, the transport (C(rsyncd) or C(ssh)), the service user,
    the checkpoint directory and the rsync daemon's user, port and module) returns the C(workers) option of
    C(sparkctl.spark.checkpoint_sync), one entry per worker in input order. C(target) and C(alternate_targets) are the
    worker's cable halves in order, the first its primary (the streams are spread over all of them), each as its rsync
    daemon's URL (C(rsync://USER@ADDRESS:PORT/MODULE/)) or, with ssh, as C(OWNER@ADDRESS:DIR/). C(relay_source) is
    the worker's first cable half over ssh (C(OWNER@ADDRESS:DIR/)), where another worker relays from.
options:
  _input:
    description: The parsed progress file.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Show the transfer's progress
  ansible.builtin.debug:
    msg: "{{ progress_raw.content | b64decode | from_json | sparkctl.spark.checkpoint_progress_line }}"
"""

RETURN = r"""
_value:
  description:
    - The line (C(checkpoint_progress_line)), the disk check's result (C(checkpoint_room)), the kept manifest's standing
      (C(checkpoint_manifest_standing)), whether the fit estimate is due (C(checkpoint_fit_due)) or the workers'
      entries of the transfer (C(checkpoint_worker_targets), a list of C(name), C(target), C(alternate_targets),
      C(relay_source)).
  type: raw
"""


def _size(n_bytes):
    value = float(n_bytes or 0)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.1f} {unit}" if unit != "B" else f"{int(value)} B"
        value /= 1024
    return f"{value:.1f} TiB"  # pragma: no cover - loop always returns


def checkpoint_progress_line(progress):
    progress = progress or {}
    files_total = progress.get("files_total") or 0
    bytes_total = progress.get("bytes_total") or 0
    elapsed = float(progress.get("elapsed_s") or 0.0)
    parts = [
        f"[{progress.get('phase', '?')}] {elapsed:.0f} s",
        f"head {progress.get('files_verified_on_head', 0)}/{files_total} files verified, "
        f"{_size(progress.get('bytes_downloaded'))} downloaded of {_size(bytes_total)}",
    ]
    for name, worker in sorted((progress.get("workers") or {}).items()):
        line = f"{name} {worker.get('files_done', 0)}/{files_total} files, {_size(worker.get('bytes_done'))}"
        in_flight = worker.get("in_flight") or []
        if in_flight:
            line += f" (copying {', '.join(in_flight)})"
        parts.append(line)
    if progress.get("last_event"):
        parts.append(f"last: {progress['last_event']}")
    return " | ".join(parts)


def checkpoint_room(host_facts, path, size_bytes, reserve_bytes):
    """Preflight's disk check alone, with the checkpoint's real size (the hub's manifest), which
    replaces the estimate preflight judged by: host_facts is one node's spark_host_facts with
    path among its disks."""
    req = {"disk_path": path, "checkpoint_size_bytes": size_bytes, "disk_reserve_bytes": reserve_bytes}
    return check_disk({"host": host_facts or {}}, req)[0]


def checkpoint_manifest_standing(manifest, source, hub_answer=None, hub_unreachable=""):
    """kept_manifest_standing (module_utils/checkpoint_hub.py, the transfer's own rules) with the
    hub's answer as hub_access returned it; a skipped or failed access check names no commit."""
    hub_answer = hub_answer if isinstance(hub_answer, dict) else {}
    return kept_manifest_standing(manifest or {}, source, hub_commit=hub_answer.get("commit"),
                                  hub_files=hub_answer.get("files"), hub_unreachable=hub_unreachable or None)


def checkpoint_fit_due(kept, profile, commit=None):
    """estimate_due (module_utils/fit.py) for the role and verify: whether the kept fit estimate must
    be made again, and why."""
    return estimate_due(kept, profile if isinstance(profile, dict) else {}, commit or None)


def checkpoint_worker_targets(workers, links, transport, owner, checkpoint_dir, rsyncd_user, rsyncd_port,
                              rsyncd_module):
    """The workers' entries of checkpoint_sync's `workers` option. Each worker receives over the
    cable, never the management network: through every cable half (links: each worker's
    spark_link, in the order of workers), from its rsync daemon or, with the ssh transport, over
    ssh; a relaying worker reads another's copy over ssh at its first half."""
    workers, links = list(workers or []), list(links or [])
    if len(workers) != len(links):
        raise AnsibleFilterError("checkpoint_worker_targets: %d workers but %d spark_link plans" % (len(workers), len(links)))
    specs = []
    for worker, link in zip(workers, links, strict=True):
        try:
            addresses = link_addresses(link)
        except ValueError as exc:
            raise AnsibleFilterError("checkpoint_worker_targets: %s: %s" % (worker, exc)) from exc
        if transport == "rsyncd":
            urls = ["rsync://%s@%s:%s/%s/" % (rsyncd_user, address, rsyncd_port, rsyncd_module) for address in addresses]
        else:
            urls = ["%s@%s:%s/" % (owner, address, checkpoint_dir) for address in addresses]
        specs.append({"name": str(worker), "target": urls[0], "alternate_targets": urls[1:],
                      "relay_source": "%s@%s:%s/" % (owner, addresses[0], checkpoint_dir)})
    return specs


class FilterModule:
    def filters(self):
        return {"checkpoint_progress_line": checkpoint_progress_line, "checkpoint_room": checkpoint_room,
                "checkpoint_manifest_standing": checkpoint_manifest_standing, "checkpoint_fit_due": checkpoint_fit_due,
                "checkpoint_worker_targets": checkpoint_worker_targets}

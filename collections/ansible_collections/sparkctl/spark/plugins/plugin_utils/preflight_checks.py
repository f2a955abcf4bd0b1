# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The preflight checks (the judging, on the controller; module_utils/preflight.py gathers the
node's operating system facts): the facts one node reported turned into one verdict per check, each
with what was found, what is required and how to fix it. Controller-side and pure; the
preflight_checks filters (plugins/filter/preflight_checks.py) and the checkpoint filters (the
free-disk check) use them."""

from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError

from ansible_collections.sparkctl.spark.plugins.module_utils.host import MEMINFO_FIELDS
from ansible_collections.sparkctl.spark.plugins.plugin_utils import known_bad

GIB = 1024**3


def _result(check_id, title, status, detail, fix=""):
    return {"id": check_id, "title": title, "status": status, "detail": detail, "fix": fix if status != "pass" else ""}


def _version_tuple(text):
    return tuple(int(part) for part in re.findall(r"\d+", str(text))[:3])


def _gib(n_bytes):
    return f"{n_bytes / GIB:.1f} GiB"


def check_os(facts, req):
    dist = facts.get("distribution") or "unknown"
    version = str(facts.get("distribution_version") or "")
    supported = req.get("supported_distributions") or []
    names = ", ".join(f"{d['name']} >= {d['min_version']}" for d in supported)
    results = []
    match = next((d for d in supported if d["name"] == dist), None)
    if match is None:
        results.append(
            _result("os.distribution", "Supported operating system", "fail", f"{dist} {version} is not supported ({names}).",
                    "Install DGX OS 7 (Ubuntu 24.04) on the node,"
                    " or add the distribution to 'preflight_supported_distributions' at your own risk.")
        )
    elif _version_tuple(version) < _version_tuple(match["min_version"]):
        results.append(
            _result("os.distribution", "Supported operating system", "fail",
                    f"{dist} {version} is older than {match['min_version']}.",
                    f"Upgrade the node to {dist} {match['min_version']} or newer.")
        )
    else:
        results.append(_result("os.distribution", "Supported operating system", "pass", f"{dist} {version}"))

    arch = facts.get("architecture") or "unknown"
    arches = req.get("supported_architectures") or []
    if arches and arch not in arches:
        results.append(
            _result("os.architecture", "CPU architecture", "fail", f"{arch} is not one of {', '.join(arches)}.",
                    "DGX Spark is aarch64: point the inventory at the Sparks, or extend 'preflight_supported_architectures'.")
        )
    else:
        results.append(_result("os.architecture", "CPU architecture", "pass", arch))

    service_mgr = facts.get("service_mgr")
    systemd = (facts.get("host") or {}).get("systemd") or {}
    sd_version = systemd.get("version")
    sd_min = int(req.get("systemd_min_version") or 0)
    if service_mgr != "systemd":
        results.append(
            _result("os.systemd", "systemd is the service manager", "fail", f"PID 1 is {systemd.get('pid1_comm') or service_mgr}.",
                    "sparkctl runs Ray and the engine as systemd units: boot the node with systemd.")
        )
    elif sd_version is not None and sd_version < sd_min:
        results.append(
            _result("os.systemd", "systemd is the service manager", "fail", f"systemd {sd_version} is older than {sd_min}.",
                    f"Upgrade systemd to {sd_min} or newer (DGX OS 7 ships 255).")
        )
    else:
        results.append(_result("os.systemd", "systemd is the service manager", "pass", f"systemd {sd_version}"))
    return results


def check_access(facts, req):
    become = facts.get("become") or {}
    user = facts.get("user") or "unknown"
    if become.get("rc") == 0 and str(become.get("stdout", "")).strip() == "0":
        return [_result("access.sudo", "SSH user can become root", "pass", f"{user} -> root via sudo")]
    reason = (become.get("msg") or become.get("stderr") or "").strip().splitlines()
    reason = reason[0] if reason else f"exit code {become.get('rc')}"
    return [
        _result("access.sudo", "SSH user can become root", "fail", f"{user} cannot become root: {reason}",
                f"Give {user} sudo rights (e.g. /etc/sudoers.d/{user}: '{user} ALL=(ALL) NOPASSWD:ALL') "
                "or pass the sudo password with --ask-become-pass / a vaulted ansible_become_password.")
    ]


def check_gpu(facts, req):
    gpu = facts.get("gpu") or {}
    if not req.get("gpu_required", True):
        return [_result("gpu.present", "GPU present", "skip", "not required ('preflight_gpu_required' is false)")]
    if not gpu.get("present") or not gpu.get("gpus"):
        return [
            _result("gpu.present", "GPU present", "fail", f"no GPU answered: {gpu.get('error') or 'nvidia-smi reported none'}",
                    "Install the NVIDIA driver (DGX OS ships it; driver >= 580) and check `nvidia-smi` on the node.")
        ]
    first = gpu["gpus"][0]
    results = [_result("gpu.present", "GPU present", "pass", f"{gpu.get('count', len(gpu['gpus']))} x {first.get('name')}")]

    pattern = req.get("gpu_name_pattern") or ""
    if pattern and not re.search(pattern, first.get("name") or ""):
        results.append(
            _result("gpu.model", "GPU model", "fail", f"{first.get('name')} does not match '{pattern}'.",
                    "These profiles are tuned for the DGX Spark GB10; use matching hardware or set 'preflight_gpu_name_pattern'.")
        )
    else:
        results.append(_result("gpu.model", "GPU model", "pass", str(first.get("name"))))

    caps = [str(c) for c in req.get("gpu_compute_caps") or []]
    cap = str(first.get("compute_cap"))
    if caps and cap not in caps:
        results.append(
            _result("gpu.compute_cap", "GPU compute capability", "fail", f"{cap} is not one of {', '.join(caps)}.",
                    "The engines' kernels are built for sm_121 (GB10): use a GB10 or set 'preflight_gpu_compute_caps'.")
        )
    else:
        results.append(_result("gpu.compute_cap", "GPU compute capability", "pass", f"{cap} (sm_{cap.replace('.', '')})"))

    driver_min = int(req.get("driver_min_major") or 0)
    driver_major = gpu.get("driver_major")
    if driver_major is None or driver_major < driver_min:
        results.append(
            _result("gpu.driver", "NVIDIA driver version", "fail", f"driver {gpu.get('driver_version')} is older than {driver_min}.",
                    f"Update the NVIDIA driver to {driver_min} or newer (DGX OS: apt update && apt full-upgrade), then reboot.")
        )
    else:
        results.append(_result("gpu.driver", "NVIDIA driver version", "pass", str(gpu.get("driver_version"))))

    cuda_major = int(req.get("cuda_major") or 0)
    driver_cuda = gpu.get("cuda_driver_major")
    if driver_cuda is not None and driver_cuda < cuda_major:
        results.append(
            _result("gpu.cuda_driver", "CUDA version the driver supports", "fail",
                    f"the driver supports CUDA {gpu.get('cuda_driver_version')}, the engines need {cuda_major}.",
                    f"Update the driver to one that supports CUDA {cuda_major}.")
        )
    else:
        results.append(_result("gpu.cuda_driver", "CUDA version the driver supports", "pass", str(gpu.get("cuda_driver_version"))))

    toolkit = gpu.get("cuda_toolkit_major")
    if toolkit is None:
        results.append(_result("gpu.cuda_toolkit", "CUDA toolkit (nvcc)", "skip", "no nvcc on the node (only venv runtimes need it)"))
    elif toolkit != cuda_major:
        results.append(
            _result("gpu.cuda_toolkit", "CUDA toolkit (nvcc)", "fail",
                    f"{gpu.get('nvcc_path')} is CUDA {gpu.get('cuda_toolkit_version')}, the engines are built for CUDA {cuda_major}.",
                    f"Install CUDA {cuda_major} (cuda-toolkit-{cuda_major}-0) and put its bin/ first on PATH.")
        )
    else:
        results.append(_result("gpu.cuda_toolkit", "CUDA toolkit (nvcc)", "pass",
                               f"{gpu.get('cuda_toolkit_version')} at {gpu.get('nvcc_path')}"))
    return results


def check_memory(facts, req):
    meminfo = (facts.get("host") or {}).get("meminfo") or {}
    total = meminfo.get("mem_total_bytes")
    available = meminfo.get("mem_available_bytes")
    model = req.get("model_name") or "the selected model"
    need_total = int(req.get("mem_total_min_bytes") or 0)
    need_avail = int(req.get("mem_available_min_bytes") or 0)
    return [
        _meminfo_result("memory.total", "Memory size", "MemTotal", total, need_total,
                        f"that {model} needs per node (with the OOM guard margin).",
                        "Pick a smaller or more quantized model profile, or add nodes so each holds less."),
        _meminfo_result("memory.available", "Memory available now", "MemAvailable", available, need_avail,
                        f"that {model} needs per node.",
                        "Stop what holds memory on the node (other containers, old engines: `ps aux --sort=-rss | head`) and re-run."),
    ]


def _meminfo_result(check_id, title, field, have, need, short_of, fix):
    """One /proc/meminfo field against what the model needs: missing, short (`short_of` says of
    what), or enough."""
    if have is None:
        return _result(check_id, title, "fail", f"/proc/meminfo had no {field}.", "Check the node's kernel.")
    if have < need:
        return _result(check_id, title, "fail", f"{field} {_gib(have)} < {_gib(need)} {short_of}", fix)
    return _result(check_id, title, "pass", f"{field} {_gib(have)} >= {_gib(need)}")


def check_disk(facts, req):
    path = req.get("disk_path")
    if not path:
        return [_result("disk.checkpoint", "Free disk for the checkpoint", "skip", "no checkpoint directory set")]
    disk = ((facts.get("host") or {}).get("disks") or {}).get(path)
    if not disk or disk.get("free_bytes") is None:
        return [_result("disk.checkpoint", "Free disk for the checkpoint", "fail", f"could not read free space at {path}.",
                        "Check that the path's parent exists and is readable.")]
    # What is already there (a checkpoint downloaded by an earlier run) needs no new room.
    size = int(req.get("checkpoint_size_bytes") or 0)
    reserve = int(req.get("disk_reserve_bytes") or 0)
    present = int(disk.get("used_bytes") or 0)
    need = max(size - present, 0) + reserve
    free = disk["free_bytes"]
    where = disk.get("checked_path") or path
    in_place = f" ({_gib(present)} of it already in place)" if present else ""
    if free < need:
        return [
            _result("disk.checkpoint", "Free disk for the checkpoint", "fail",
                    f"{_gib(free)} free at {where} < {_gib(need)} needed for the checkpoint{in_place} and its reserve.",
                    "Free space on that filesystem, or point 'spark_checkpoint_dir' at a larger one.")
        ]
    return [_result("disk.checkpoint", "Free disk for the checkpoint", "pass", f"{_gib(free)} free at {where} >= {_gib(need)}{in_place}")]


def check_rdma_devices(link_facts):
    """NCCL's IB transport opens /dev/infiniband/uverbs<N>; an image profile's containers are
    given the directory, and Docker refuses to start one when it is missing."""
    if "rdma_char_devices" not in link_facts:
        return []
    found = link_facts.get("rdma_char_devices") or []
    title = "RDMA device nodes (/dev/infiniband)"
    if any(re.fullmatch(r"uverbs\d+", name) for name in found):
        return [_result("rdma.devices", title, "pass", ", ".join(found))]
    return [_result("rdma.devices", title, "fail",
                    "/dev/infiniband holds no uverbs device" + (f" (only {', '.join(found)})" if found else "")
                    + ": NCCL cannot open the RDMA devices, and an image profile's containers, given /dev/infiniband, "
                      "would not start.",
                    "Load the RDMA verbs drivers (`sudo modprobe ib_uverbs mlx5_ib`), then check `ls -l /dev/infiniband`.")]


def check_link(facts, req):
    link_facts = facts.get("link") or {}
    link = link_facts.get("interfaces") or {}
    results = []
    for name in req.get("link_interfaces") or []:
        info = link.get(name) or {}
        if not info.get("exists"):
            results.append(
                _result(f"link.{name}", f"Link interface {name}", "fail", f"{name} does not exist on this node.",
                        "Check the cable and the ConnectX-7 driver (`ip -br link`, `ibdev2netdev`) and fix 'spark_link' in the inventory.")
            )
            continue
        state = f"{info.get('operstate')}, mtu {info.get('mtu')}"
        results.append(_result(f"link.{name}", f"Link interface {name}", "pass", state))
        if req.get("rdma_required", True):
            if info.get("rdma_device"):
                results.append(_result(f"rdma.{name}", f"RDMA device of {name}", "pass", str(info["rdma_device"])))
            else:
                results.append(
                    _result(f"rdma.{name}", f"RDMA device of {name}", "fail",
                            f"{name} has no RDMA device: NCCL would fall back to TCP sockets.",
                            "Load the RoCE driver (`modprobe mlx5_ib`) and check `ibdev2netdev`.")
                )
    if req.get("rdma_required", True) and req.get("link_interfaces"):
        results.extend(check_rdma_devices(link_facts))
    return results


def _own_unit(holder):
    """The unit a port holder belongs to: its cgroup's, or for a process in a Docker container
    the unit that runs the container (sparkctl names each image unit's container after the unit)."""
    if holder.get("container"):
        return f"{holder['container']}.service (container {holder['container']})"
    return holder.get("unit")


def check_ports(facts, req):
    ports = (facts.get("host") or {}).get("ports") or {}
    allowed = req.get("port_owner_allowed_units") or ""
    allowed_re = re.compile(allowed) if allowed else None
    results = []
    for spec in req.get("ports") or []:
        port, name = int(spec["port"]), spec.get("name", "")
        info = ports.get(str(port)) or ports.get(port) or {}
        label = f"Port {port} ({name})" if name else f"Port {port}"
        if not info.get("in_use"):
            results.append(_result(f"port.{port}", label, "pass", "free"))
            continue
        holders = info.get("holders") or []
        foreign = [h for h in holders if not (allowed_re and (unit := _own_unit(h)) and allowed_re.search(unit))]
        if not foreign:
            units = ", ".join(sorted({_own_unit(h) for h in holders}))
            results.append(_result(f"port.{port}", label, "pass", f"held by sparkctl's own {units}"))
            continue
        who = ", ".join(
            f"{h.get('process') or '?'} (pid {h.get('pid') or '?'}{', ' + h['unit'] if h.get('unit') else ''}) on {h.get('address')}"
            for h in foreign
        )
        results.append(
            _result(f"port.{port}", label, "fail", f"in use by {who}.",
                    f"Stop that service (e.g. `sudo ss -ltnp 'sport = :{port}'` to see it) or change the port sparkctl uses.")
        )
    return results


def check_ssh_ports(facts, req):
    """The firewall opens firewall_ssh_ports to the management side and drops the rest:
    sshd must listen on one of them, and Ansible's own port must be among them."""
    # firewall_enabled comes with firewall_ssh_ports (roles/preflight/vars/main.yml, from the firewall role's default).
    if "firewall_ssh_ports" not in req or not _truthy(req["firewall_enabled"]) or not req.get("ssh_connection", True):
        return []
    title = "sshd port in firewall_ssh_ports"
    try:
        wanted = sorted({int(p) for p in req.get("firewall_ssh_ports") or []})
        ansible_port = int(req.get("ssh_port") or 22)
    except (TypeError, ValueError):
        return []  # the inventory validation names a bad value
    listening = (facts.get("host") or {}).get("sshd_ports")
    fix_ports = sorted(set(listening or []) | {ansible_port})
    fix = (f"Set firewall_ssh_ports to the port(s) sshd listens on for the management network, e.g. "
           f"firewall_ssh_ports: {fix_ports} in group_vars (or leave it unset: it defaults to ansible_port).")
    problems = []
    if ansible_port not in wanted:
        problems.append(f"Ansible connects to port {ansible_port} (ansible_port), which firewall_ssh_ports {wanted} does not open")
    if listening is not None and not set(listening) & set(wanted):
        problems.append(f"sshd listens on {', '.join(map(str, listening)) or 'no TCP port'}, none of firewall_ssh_ports {wanted}")
    if problems:
        return [_result("ssh.firewall_ports", title, "fail",
                        "; ".join(problems) + ": the firewall would drop the management SSH (the run would lock itself out).", fix)]
    if listening is None:
        return [_result("ssh.firewall_ports", title, "warn",
                        f"cannot read which ports sshd listens on (needs root); firewall_ssh_ports is {wanted}.", fix)]
    return [_result("ssh.firewall_ports", title, "pass", f"sshd listens on {', '.join(map(str, listening))}; firewall_ssh_ports {wanted}")]


def _truthy(value):
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def check_hub(facts, req):
    """The head's answer from the hub (module hub_access): may it download the checkpoint with
    the token it has? Nodes that did not ask (workers, path sources) get no result."""
    hub = facts.get("hub") or {}
    if hub.get("status") not in ("pass", "fail", "warn"):
        return []
    return [_result("hub.access", "The hub lets the head download the checkpoint", hub["status"],
                    hub.get("detail") or "", hub.get("fix") or "")]


# /proc/meminfo's names for the keys host facts store, so that entries name fields as the kernel prints them.
_MEMINFO_NAMES = dict((key, name) for name, key in MEMINFO_FIELDS)


def _platform_facts(facts):
    gpu = facts.get("gpu") or {}
    meminfo = (facts.get("host") or {}).get("meminfo") or {}
    interfaces = ((facts.get("link") or {}).get("interfaces") or {}).values()
    return {
        "kernel": facts.get("kernel"),
        "driver": gpu.get("driver_version"),
        "cuda": gpu.get("cuda_driver_version"),
        "nic_firmware": sorted(set(i["rdma_fw_version"] for i in interfaces if (i or {}).get("rdma_fw_version"))),
        "meminfo": dict((_MEMINFO_NAMES[key], value) for key, value in meminfo.items() if key in _MEMINFO_NAMES),
    }


def check_known_bad(facts, req):
    """The node's kernel, driver, CUDA, cable firmware and meminfo facts against the known-bad platform entries."""
    if "known_bad_platforms_file" not in req and "known_bad_platforms_extra" not in req:
        return []
    title = "Not a known-bad platform"
    try:
        entries = known_bad.all_entries(req.get("known_bad_platforms_file"), req.get("known_bad_platforms_extra") or [])
    except known_bad.KnownBadError as exc:
        raise AnsibleFilterError("known-bad platform entries: %s" % exc) from None
    platform = _platform_facts(facts)
    found = known_bad.matches(entries, platform, ignore=req.get("known_bad_platforms_ignore") or ())
    seen = ", ".join("%s %s" % (name, "/".join(value) if isinstance(value, list) else value)
                     for name, value in ((name, platform.get(name)) for name in known_bad.VERSION_FACTS) if value)
    if not found:
        detail = f"{seen or 'no version read'}: none of {len(entries)} known-bad entries match"
        return [_result("platform.known_bad", title, "pass", detail)]
    status = "fail" if any(entry["severity"] == "fail" for entry, _what in found) else "warn"
    details, fixes = [], []
    for entry, what in found:
        source = f" (seen: {entry['source']})" if entry["source"] else ""
        details.append(f"known-bad entry '{entry['id']}' matches {what}: {entry['reason'].strip()}{source}")
        fixes.append((f"{entry['id']}: " if len(found) > 1 else "") + entry["fix"].strip())
    fixes.append("A node already fixed another way: list the id in 'preflight_known_bad_platforms_ignore'.")
    return [_result("platform.known_bad", title, status, "; ".join(details), " ".join(fixes))]


def check_firmware_updates(facts, req):
    """Pending firmware updates are worth knowing before a long serve, never a reason to stop."""
    if "firmware" not in facts:
        return []
    firmware = facts.get("firmware") or {}
    title = "Pending firmware updates (fwupd)"
    if not firmware.get("fwupdmgr"):
        return [_result("platform.firmware_updates", title, "skip", "not checked: fwupdmgr is not installed on the node")]
    if not firmware.get("checked"):
        return [_result("platform.firmware_updates", title, "warn", f"not checked: {firmware.get('error') or 'fwupdmgr gave no answer'}",
                        "Run `fwupdmgr get-updates` on the node to see why.")]
    updates = firmware.get("updates") or []
    if not updates:
        return [_result("platform.firmware_updates", title, "pass", "fwupdmgr lists no pending update")]
    listed = ", ".join(f"{u.get('name') or u.get('device_id') or '?'} {u.get('version') or '?'} -> {u.get('update_version') or '?'}"
                       for u in updates)
    return [_result("platform.firmware_updates", title, "warn", f"{len(updates)} pending: {listed}",
                    "Apply them in a maintenance window (`sudo fwupdmgr update`, then reboot), and re-run preflight.")]


CHECKS = (check_os, check_access, check_gpu, check_memory, check_disk, check_link, check_ports, check_ssh_ports, check_hub,
          check_known_bad, check_firmware_updates)


def preflight_checks(facts, requirements):
    results = []
    for check in CHECKS:
        results.extend(check(facts or {}, requirements or {}))
    return results


def preflight_summary(results):
    """Counts per status, for reports and one-line messages."""
    counts = {"pass": 0, "fail": 0, "warn": 0, "skip": 0}
    for item in results or []:
        counts[item["status"]] = counts.get(item["status"], 0) + 1
    return counts


def preflight_lines(results, statuses=None, with_fix=False):
    """One readable line per check (optionally only some statuses), for logs and failure messages."""
    lines = []
    for item in results or []:
        if statuses and item["status"] not in statuses:
            continue
        line = f"[{item['status'].upper():4}] {item['id']}: {item['detail']}"
        if with_fix and item.get("fix"):
            line += f" -> Fix: {item['fix']}"
        lines.append(line)
    return lines


def preflight_report(hosts, hostvars, ignore_errors=False):
    """The machine-readable report of every host in the play, for the wrapper and for humans."""
    report = {"schema": 1, "stage": "preflight", "ignore_errors": bool(ignore_errors), "ok": True, "hosts": {}}
    for host in hosts:
        results = hostvars[host].get("preflight_results")
        if results is None:
            # The host failed before it was judged (unreachable, or a fact module failed).
            report["hosts"][host] = {"ok": False, "judged": False, "summary": {}, "checks": []}
            report["ok"] = False
            continue
        summary = preflight_summary(results)
        host_ok = summary.get("fail", 0) == 0
        report["hosts"][host] = {"ok": host_ok, "judged": True, "summary": summary, "checks": list(results)}
        report["ok"] = report["ok"] and host_ok
    return report

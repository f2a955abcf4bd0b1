# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Parse /proc into the spark_host_facts fact: memory, free space, listening TCP ports.

Every reader takes the /proc root as a parameter so that tests can feed recorded
files; the parsers take text.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import sys

from ansible_collections.sparkctl.spark.plugins.module_utils import safe_walk

MEMINFO_FIELDS = (
    ("MemTotal", "mem_total_bytes"),
    ("MemFree", "mem_free_bytes"),
    ("MemAvailable", "mem_available_bytes"),
    ("SwapTotal", "swap_total_bytes"),
    ("SwapFree", "swap_free_bytes"),
    # The contiguous memory allocator's pool: preflight's known-bad platform entries may name it
    # (roles/preflight/files/known_bad_platforms.yml); absent (None) on kernels built without CMA.
    ("CmaTotal", "cma_total_bytes"),
    ("CmaFree", "cma_free_bytes"),
)

TCP_LISTEN_STATE = "0A"

# Where dockerd keeps each container's configuration (its name among it), under its default data root.
DOCKER_CONTAINERS_DIR = "/var/lib/docker/containers"
# A container's ID in a cgroup path: <id> (cgroupfs driver) or docker-<id>.scope (systemd driver).
_CONTAINER_ID_RE = re.compile(r"^(?:docker-)?([0-9a-f]{64})(?:\.scope)?$")
# A cgroup path names the unit that owns the process in its deepest component with one
# of these suffixes; slices only group units and are never the owner.
_UNIT_SUFFIXES = (".service", ".scope", ".socket", ".mount", ".swap", ".timer", ".path", ".target", ".device")

_MOUNTINFO_ESCAPE_RE = re.compile(r"\\([0-7]{3})")
_SYSTEMD_VERSION_RE = re.compile(r"^systemd\s+(\d+)")


def read_text(path):
    """Return the file's text, or None when it cannot be read (gone, no permission)."""
    try:
        with open(path) as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError):
        return None


def parse_meminfo(text):
    """Return MEMINFO_FIELDS in bytes from /proc/meminfo text; absent fields are None."""
    values = {}
    for line in (text or "").splitlines():
        name, sep, rest = line.partition(":")
        if not sep:
            continue
        parts = rest.split()
        if not parts or not parts[0].isdigit():
            continue
        amount = int(parts[0])
        if len(parts) > 1 and parts[1] == "kB":
            amount *= 1024
        values[name.strip()] = amount
    return dict((key, values.get(field)) for field, key in MEMINFO_FIELDS)


def nearest_existing_path(path, exists=os.path.exists):
    """Return path, or its closest ancestor that exists (a checkpoint dir may not exist yet)."""
    current = os.path.abspath(path)
    while not exists(current):
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    return current


def _unescape_mountinfo(field):
    return _MOUNTINFO_ESCAPE_RE.sub(lambda match: chr(int(match.group(1), 8)), field)


def parse_mountinfo(text):
    """Return [{mount_point, device, fstype}] in file order from /proc/self/mountinfo text."""
    mounts = []
    for line in (text or "").splitlines():
        fields = line.split(" ")
        # Optional fields (shared:N, master:N) vary in number; ' - ' ends them.
        try:
            separator = fields.index("-", 6)
        except ValueError:
            continue
        if len(fields) < separator + 3:
            continue
        mounts.append(
            {
                "mount_point": _unescape_mountinfo(fields[4]),
                "device": _unescape_mountinfo(fields[separator + 2]),
                "fstype": fields[separator + 1],
            }
        )
    return mounts


def mount_of(path, mounts):
    """Return the entry of mounts whose mount point is the longest prefix of path.

    Among equal mount points the later entry wins, since it is mounted over the earlier.
    """
    best = None
    for mount in mounts:
        mount_point = mount["mount_point"]
        if mount_point == "/":
            matches = True
        else:
            matches = path == mount_point or path.startswith(mount_point.rstrip("/") + "/")
        if matches and (best is None or len(mount_point) >= len(best["mount_point"])):
            best = mount
    return best


def allocated_bytes(path):
    """Bytes the files under path occupy on disk (st_blocks), without following links or
    leaving the file system; 0 when path does not exist. A checkpoint already in place
    needs no new room, so the disk check subtracts this. Walked through opened directories
    (module_utils/safe_walk.py): run as root in the service user's checkpoint directory, a
    directory it swaps for a link is never entered."""
    try:
        fd = safe_walk.open_dir(path)
    except OSError:
        return 0
    total = 0
    try:
        root_dev = os.fstat(fd).st_dev
        for entry in safe_walk.walk(fd):
            if not entry.is_dir() and not entry.is_dir_link() and entry.st.st_dev == root_dev:
                total += entry.st.st_blocks * 512
    except OSError:
        return total
    finally:
        os.close(fd)
    return total


def disk_facts(path, mounts, statvfs=os.statvfs):
    checked_path = nearest_existing_path(path)
    facts = {
        "path": path,
        "checked_path": checked_path,
        "exists": os.path.exists(path),
        "total_bytes": None,
        "free_bytes": None,
        "device": None,
        "mount_point": None,
        "fstype": None,
        "used_bytes": allocated_bytes(path) if checked_path == path else 0,
    }
    try:
        usage = statvfs(checked_path)
    except OSError:
        usage = None
    if usage is not None:
        facts["total_bytes"] = usage.f_blocks * usage.f_frsize
        # f_bavail excludes the root reserve: what a non-root writer can still use.
        facts["free_bytes"] = usage.f_bavail * usage.f_frsize
    mount = mount_of(os.path.realpath(checked_path), mounts)
    if mount is not None:
        facts["device"] = mount["device"]
        facts["mount_point"] = mount["mount_point"]
        facts["fstype"] = mount["fstype"]
    return facts


def decode_proc_net_address(hex_address, byteorder=sys.byteorder):
    """Decode an address of /proc/net/tcp{,6}.

    The kernel prints the raw in_addr / in6_addr as 32-bit words in host byte order, so
    on little-endian hosts each 4-byte word is reversed ('0100007F' is 127.0.0.1).
    """
    raw = bytes.fromhex(hex_address)
    if len(raw) not in (4, 16):
        raise ValueError("unexpected address length in /proc/net/tcp: %s" % hex_address)
    if byteorder == "little":
        raw = b"".join(raw[offset:offset + 4][::-1] for offset in range(0, len(raw), 4))
    if len(raw) == 4:
        return str(ipaddress.IPv4Address(raw))
    return _address_text(ipaddress.IPv6Address(raw))


def canonical_address(text):
    """One spelling of an IP address on every Python: '::ffff:7f00:1' -> '::ffff:127.0.0.1'.

    Raises ValueError when text is not an address.
    """
    return _address_text(ipaddress.ip_address(text))


def _address_text(address):
    # str() of an IPv4-mapped IPv6 address depends on the interpreter: 3.13.0 gives
    # '::ffff:127.0.0.1', 3.12.1 '::ffff:7f00:1'. The facts (and the lookups that
    # match /proc against systemd's socket list) must not change with the target's Python.
    mapped = getattr(address, "ipv4_mapped", None)
    if mapped is not None:
        return "::ffff:%s" % mapped
    return str(address)


def parse_proc_net_tcp(text, proto, byteorder=sys.byteorder):
    """Return the LISTEN sockets of /proc/net/tcp or tcp6 text as [{proto, address, port, inode}]."""
    listening = []
    for line in (text or "").splitlines():
        fields = line.split()
        if len(fields) < 10 or not fields[0].endswith(":") or not fields[0][:-1].isdigit():
            continue
        if fields[3].upper() != TCP_LISTEN_STATE:
            continue
        hex_address, _sep, hex_port = fields[1].partition(":")
        listening.append(
            {
                "proto": proto,
                "address": decode_proc_net_address(hex_address, byteorder),
                "port": int(hex_port, 16),
                "inode": int(fields[9]),
            }
        )
    return listening


def parse_cgroup_unit(text):
    """Return the systemd unit of a /proc/<pid>/cgroup text, or None.

    Reads the v1 'name=systemd' hierarchy when present (hybrid hosts), else the v2
    unified line '0::'.
    """
    systemd_path = None
    unified_path = None
    for line in (text or "").splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if controllers == "name=systemd":
            systemd_path = path
        elif hierarchy == "0" and controllers == "":
            unified_path = path
    return unit_from_cgroup_path(systemd_path if systemd_path is not None else unified_path)


def unit_from_cgroup_path(path):
    for component in reversed((path or "").split("/")):
        if component.endswith(_UNIT_SUFFIXES):
            return component
    return None


def container_id_from_cgroup(text):
    """The ID of the innermost Docker container in a /proc/<pid>/cgroup text, or None."""
    found = None
    for line in (text or "").splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        for component in parts[2].split("/"):
            match = _CONTAINER_ID_RE.match(component)
            if match:
                found = match.group(1)
        if found:
            return found
    return None


def container_name(containers_dir, container_id):
    """The name dockerd gave a container (without its leading /), from its config.v2.json, or None."""
    if not container_id:
        return None
    text = read_text(os.path.join(containers_dir, container_id, "config.v2.json"))
    try:
        name = json.loads(text).get("Name") if text else None
    except ValueError:
        return None
    return name.lstrip("/") if isinstance(name, str) and name.strip("/") else None


def parse_systemd_version(text):
    """'systemd 255 (255.4-1ubuntu8)' -> 255."""
    first_line = (text or "").strip().splitlines()[:1]
    match = _SYSTEMD_VERSION_RE.match(first_line[0]) if first_line else None
    return int(match.group(1)) if match else None


def scan_socket_owners(proc_root, inodes):
    """Map socket inodes to the sorted PIDs holding them, from /proc/<pid>/fd links.

    Processes that vanish or whose fd directory is not readable (other users' processes
    when not root) are skipped.
    """
    wanted = dict(("socket:[%d]" % inode, inode) for inode in inodes)
    owners = dict((inode, []) for inode in inodes)
    if not wanted:
        return owners
    try:
        entries = os.listdir(proc_root)
    except OSError:
        return owners
    for entry in entries:
        if not entry.isdigit():
            continue
        fd_dir = os.path.join(proc_root, entry, "fd")
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            inode = wanted.get(target)
            if inode is not None and int(entry) not in owners[inode]:
                owners[inode].append(int(entry))
    for pids in owners.values():
        pids.sort()
    return owners


def _strip_or_none(text):
    text = (text or "").strip()
    return text or None


def parse_socket_units(json_text):
    """`systemctl list-sockets --all --output=json` -> {(address, port): socket unit} for the
    TCP/UDP listeners (paths and netlink entries are skipped). None when the text is unusable."""
    import json

    try:
        entries = json.loads(json_text) if json_text else None
    except ValueError:
        return None
    if not isinstance(entries, list):
        return None
    units = {}
    for entry in entries:
        listen, unit = (entry or {}).get("listen") or "", (entry or {}).get("unit")
        host, sep, port = listen.rpartition(":")
        if not sep or not port.isdigit() or not unit or listen.startswith("/"):
            continue
        host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
        try:
            address = canonical_address(host.split("%", 1)[0])
        except ValueError:
            continue
        units[(address, int(port))] = unit
    return units


def port_facts(ports, listening, proc_root, socket_units=None, containers_dir=DOCKER_CONTAINERS_DIR):
    """Return {str(port): {in_use, holders}} for the requested ports.

    When several processes share a listening socket (forked workers), the lowest PID,
    usually the parent, is reported. A socket systemd itself holds for socket activation
    (PID 1) is attributed to its .socket unit when socket_units (parse_socket_units) knows it.
    A process in a Docker container (an image runtime's engine and Ray: their cgroup is the
    container's, not the unit's that started it) also gets the container's name.
    """
    requested = []
    for port in ports:
        if port not in requested:
            requested.append(port)
    busy = [entry for entry in listening if entry["port"] in requested]
    owners = scan_socket_owners(proc_root, sorted(set(entry["inode"] for entry in busy if entry["inode"])))

    result = {}
    for port in requested:
        holders = []
        for entry in busy:
            if entry["port"] != port:
                continue
            pids = owners.get(entry["inode"]) or []
            pid = pids[0] if pids else None
            cgroup = read_text(os.path.join(proc_root, str(pid), "cgroup")) if pid else None
            unit = parse_cgroup_unit(cgroup) if pid else None
            if pid == 1 and socket_units:
                unit = socket_units.get((_plain_address(entry["address"]), port), unit)
            holder = {
                "address": entry["address"],
                "pid": pid,
                "process": _strip_or_none(read_text(os.path.join(proc_root, str(pid), "comm"))) if pid else None,
                "unit": unit,
            }
            container = container_name(containers_dir, container_id_from_cgroup(cgroup)) if pid else None
            if container:
                holder["container"] = container
            holders.append(holder)
        result[str(port)] = {"in_use": bool(holders), "holders": holders}
    return result


# sshd itself (OpenSSH 9.8+ names its per-connection children sshd-session), or the
# socket unit systemd holds the listener for (Ubuntu 24.04 activates ssh by socket).
_SSHD_UNIT_RE = re.compile(r"^sshd?(@.*)?\.(service|socket)$")


def sshd_ports(listening, proc_root, socket_units=None):
    """Sorted TCP ports sshd listens on, or None when no listener's owner could be read
    (not root: other users' /proc/<pid>/fd stay closed)."""
    owners = scan_socket_owners(proc_root, sorted(set(entry["inode"] for entry in listening if entry["inode"])))
    if not any(owners.values()):
        return None
    ports = set()
    for entry in listening:
        pids = owners.get(entry["inode"]) or []
        if not pids:
            continue
        pid = pids[0]
        comm = _strip_or_none(read_text(os.path.join(proc_root, str(pid), "comm")))
        unit = parse_cgroup_unit(read_text(os.path.join(proc_root, str(pid), "cgroup")))
        if pid == 1 and socket_units:
            unit = socket_units.get((_plain_address(entry["address"]), entry["port"]), unit)
        if comm == "sshd" or (unit and _SSHD_UNIT_RE.match(unit) and (comm == "sshd" or pid == 1)):
            ports.add(entry["port"])
    return sorted(ports)


def _plain_address(address):
    try:
        return canonical_address(address)
    except ValueError:
        return address


def read_listening(proc_root, byteorder=sys.byteorder):
    listening = []
    for proto in ("tcp", "tcp6"):
        # tcp6 is absent when IPv6 is disabled on the kernel command line.
        text = read_text(os.path.join(proc_root, "net", proto))
        if text is not None:
            listening.extend(parse_proc_net_tcp(text, proto, byteorder))
    listening.sort(key=lambda entry: (entry["port"], entry["proto"], entry["address"]))
    return listening


def gather_host_facts(paths, ports, proc_root="/proc", systemctl_version_output=None, statvfs=os.statvfs, socket_units_output=None):
    """Build the spark_host_facts fact.

    systemctl_version_output is the stdout of `systemctl --version`, or None when
    systemctl is not available; socket_units_output that of `systemctl list-sockets --all
    --output=json`, or None.
    """
    mounts = parse_mountinfo(read_text(os.path.join(proc_root, "self", "mountinfo")))
    listening = read_listening(proc_root)
    socket_units = parse_socket_units(socket_units_output)
    return {
        "meminfo": parse_meminfo(read_text(os.path.join(proc_root, "meminfo"))),
        "disks": dict((path, disk_facts(path, mounts, statvfs)) for path in paths),
        "listening": listening,
        "ports": port_facts(ports, listening, proc_root, socket_units),
        "sshd_ports": sshd_ports(listening, proc_root, socket_units),
        "systemd": {
            "pid1_comm": _strip_or_none(read_text(os.path.join(proc_root, "1", "comm"))),
            "version": parse_systemd_version(systemctl_version_output),
        },
    }


def read_host_facts(module, paths, ports, proc_root="/proc"):
    """The spark_host_facts fact as an AnsibleModule reads it (systemctl for its version and the
    socket units): host_facts' and preflight_facts' one reader."""
    systemctl_version_output = socket_units_output = None
    systemctl_path = module.get_bin_path("systemctl")
    if systemctl_path:
        rc, stdout, stderr = module.run_command([systemctl_path, "--version"], check_rc=False)
        if rc == 0:
            systemctl_version_output = stdout
        # Listeners systemd holds for socket activation belong to PID 1; this names their unit.
        rc, stdout, stderr = module.run_command([systemctl_path, "list-sockets", "--all", "--output=json"], check_rc=False)
        if rc == 0:
            socket_units_output = stdout
    return gather_host_facts(
        paths,
        ports,
        proc_root=proc_root,
        systemctl_version_output=systemctl_version_output,
        socket_units_output=socket_units_output,
    )

# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Read netdev and RDMA (RoCE GID table) state from sysfs.

The roots are parameters so that the same code reads /sys on a Spark and a fixture
tree in a container, which has no RDMA devices.
"""

from __future__ import annotations

import ipaddress
import json
import os
import stat
import time

from ansible_collections.sparkctl.spark.plugins.module_utils.link_address import bare_address
from ansible_collections.sparkctl.spark.plugins.module_utils.values import int_or_none

ROCE_V2 = "RoCE v2"
ROCE_V1 = "IB/RoCE v1"
# Where the kernel's RDMA stack puts its character devices: uverbs<N> per RDMA device (what
# NCCL's IB transport opens), rdma_cm. An image profile's containers are given this directory.
RDMA_DEVICE_DIR = "/dev/infiniband"


def read_sysfs_value(path):
    """Return the stripped content of a sysfs attribute, or None when it cannot be read.

    Some attributes exist but refuse reads: `carrier` of a down link and
    `gid_attrs/types/<n>` of an unused GID slot raise EINVAL.
    """
    try:
        with open(path) as handle:
            return handle.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _carrier(value):
    if value == "1":
        return True
    if value == "0":
        return False
    return None


def _sorted_numeric_entries(directory):
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return sorted(int(name) for name in names if name.isdigit())


def gid_to_ipv4(gid):
    """'0000:0000:0000:0000:0000:ffff:c0a8:640a' -> '192.168.100.10'; other GIDs -> None."""
    try:
        mapped = ipaddress.IPv6Address(gid).ipv4_mapped
    except (ipaddress.AddressValueError, ValueError):
        return None
    return str(mapped) if mapped is not None else None


def is_zero_gid(gid):
    try:
        return int(ipaddress.IPv6Address(gid)) == 0
    except (ipaddress.AddressValueError, ValueError):
        return False


def parse_ip_addr_json(text, interface=None):
    """Parse `ip -j addr show dev IF` into (['a.b.c.d/nn', ...], ['x::y/nn', ...]).

    Raises ValueError when the text is not the JSON list iproute2 prints.
    """
    try:
        links = json.loads(text or "[]")
    except ValueError as exc:
        raise ValueError("cannot parse ip -j output: %s" % exc) from exc
    if not isinstance(links, list):
        raise ValueError("cannot parse ip -j output: expected a list")
    ipv4 = []
    ipv6 = []
    for link in links:
        # Some iproute2 releases pad the list with empty objects for filtered links.
        if not isinstance(link, dict):
            continue
        if interface is not None and link.get("ifname", interface) != interface:
            continue
        for addr in link.get("addr_info") or []:
            local = addr.get("local")
            prefixlen = addr.get("prefixlen")
            if not local or prefixlen is None:
                continue
            if addr.get("family") == "inet":
                ipv4.append("%s/%s" % (local, prefixlen))
            elif addr.get("family") == "inet6":
                ipv6.append("%s/%s" % (local, prefixlen))
    return ipv4, ipv6


def ip_addr_command(ip_path, interface):
    return [ip_path, "-j", "addr", "show", "dev", interface]


def ip_addr_outcome(rc, stdout, stderr):
    """Turn a finished `ip -j addr show` run into (json text, None) or (None, error message)."""
    if rc == 0:
        return stdout, None
    for text in (stderr, stdout):
        lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
        if lines:
            return None, lines[0]
    return None, "ip exited with return code %d" % rc


def rdma_device_of(rdma_sysfs_root, interface):
    """Name of the RDMA device behind a netdev, or None.

    A PCI function's netdev links to it (class/net/<if>/device/infiniband/<dev>). A netdev
    without a device of its own has no such link: the bond of a RoCE LAG (its RDMA device,
    mlx5_bond_0 for instance, hangs off the first slave's function) or a VLAN on a port.
    Its RoCE GIDs still name it in gid_attrs/ndevs, so the device is found through those.
    """
    directory = os.path.join(rdma_sysfs_root, "class", "net", interface, "device", "infiniband")
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        names = []
    if names:
        return names[0]
    return rdma_device_by_ndev(rdma_sysfs_root, interface)


def rdma_device_by_ndev(rdma_sysfs_root, interface):
    """The first RDMA device (by name) with a GID table entry whose ndev is interface, or None."""
    try:
        devices = sorted(os.listdir(os.path.join(rdma_sysfs_root, "class", "infiniband")))
    except OSError:
        return None
    for ibdev in devices:
        if _port_naming(rdma_sysfs_root, ibdev, interface) is not None:
            return ibdev
    return None


def _port_naming(rdma_sysfs_root, ibdev, interface):
    """The first port of ibdev whose GID table has an entry with ndev interface, or None."""
    for port in _sorted_numeric_entries(os.path.join(rdma_sysfs_root, "class", "infiniband", ibdev, "ports")):
        ndevs_dir = os.path.join(_port_directory(rdma_sysfs_root, ibdev, port), "gid_attrs", "ndevs")
        for index in _sorted_numeric_entries(ndevs_dir):
            if read_sysfs_value(os.path.join(ndevs_dir, str(index))) == interface:
                return port
    return None


def _port_directory(rdma_sysfs_root, ibdev, port):
    return os.path.join(rdma_sysfs_root, "class", "infiniband", ibdev, "ports", str(port))


def read_gid_table(rdma_sysfs_root, ibdev, port):
    """Read ports/<port>/gids/<n> with gid_attrs/types/<n> and gid_attrs/ndevs/<n>.

    All-zero (unused) GIDs are left out. `type` and `ndev` are None when their file is
    missing or unreadable.
    """
    port_dir = _port_directory(rdma_sysfs_root, ibdev, port)
    gids = []
    for index in _sorted_numeric_entries(os.path.join(port_dir, "gids")):
        gid = read_sysfs_value(os.path.join(port_dir, "gids", str(index)))
        if not gid or is_zero_gid(gid):
            continue
        gid_type = read_sysfs_value(os.path.join(port_dir, "gid_attrs", "types", str(index)))
        ndev = read_sysfs_value(os.path.join(port_dir, "gid_attrs", "ndevs", str(index)))
        gids.append(
            {
                "index": index,
                "gid": gid,
                "type": gid_type or None,
                "ndev": ndev or None,
                "ipv4": gid_to_ipv4(gid),
            }
        )
    return gids


def rdma_port_of(rdma_sysfs_root, ibdev, interface):
    """Pick the port of ibdev that carries interface.

    A RoCE function has a single port 1; the ndev check only matters for devices that
    expose more than one port.
    """
    ports = _sorted_numeric_entries(os.path.join(rdma_sysfs_root, "class", "infiniband", ibdev, "ports"))
    if not ports:
        return None
    if len(ports) > 1:
        port = _port_naming(rdma_sysfs_root, ibdev, interface)
        if port is not None:
            return port
    return ports[0]


def roce_v2_ipv4_entries(gids, netdev):
    return [
        {"index": entry["index"], "ipv4": _entry_ipv4(entry)}
        for entry in gids
        if entry.get("type") == ROCE_V2 and entry.get("ndev") == netdev and _entry_ipv4(entry)
    ]


def _entry_ipv4(entry):
    if "ipv4" in entry:
        return entry["ipv4"]
    return gid_to_ipv4(entry.get("gid"))


def resolve_roce_v2_gid_index(gids, netdev, ipv4):
    """Return the GID index NCCL must use for `ipv4` on `netdev` (NCCL_IB_GID_INDEX).

    gids is a GID table as returned by read_gid_table (entries need index, gid, type and
    ndev). ipv4 may carry a prefix length ('192.168.100.10/24'). Raises ValueError with
    the reason when no entry qualifies; the lowest index wins if several do.
    """
    address = split_address(ipv4)

    if not gids:
        raise ValueError("the GID table is empty: no RDMA device or no address on any of its netdevs")

    roce_v2 = [entry for entry in gids if entry.get("type") == ROCE_V2]
    if not roce_v2:
        types = sorted(set(str(entry.get("type")) for entry in gids))
        raise ValueError("no RoCE v2 entry in the GID table (types present: %s)" % ", ".join(types))

    on_netdev = [entry for entry in roce_v2 if entry.get("ndev") == netdev]
    if not on_netdev:
        ndevs = sorted(set(str(entry.get("ndev")) for entry in roce_v2))
        raise ValueError(
            "RoCE v2 entries exist but none is bound to netdev %s (bound to: %s)" % (netdev, ", ".join(ndevs))
        )

    mapped = [entry for entry in on_netdev if _entry_ipv4(entry)]
    if not mapped:
        raise ValueError(
            "RoCE v2 entries on %s carry no IPv4-mapped GID: is an IPv4 address configured on %s?" % (netdev, netdev)
        )

    matching = sorted(entry["index"] for entry in mapped if _entry_ipv4(entry) == address)
    if not matching:
        found = ", ".join(sorted(set(_entry_ipv4(entry) for entry in mapped)))
        raise ValueError("RoCE v2 entries on %s exist but none for %s (IPv4 GIDs present: %s)" % (netdev, address, found))
    return matching[0]


def interface_facts(interface, sysfs_root, rdma_sysfs_root):
    """Sysfs facts for one netdev; ipv4/ipv6 are left empty for the caller to fill."""
    net_dir = os.path.join(sysfs_root, "class", "net", interface)
    facts = {
        "exists": os.path.isdir(net_dir),
        "operstate": None,
        "carrier": None,
        "mtu": None,
        "mac": None,
        "ipv4": [],
        "ipv6": [],
        "address_error": None,
        "rdma_device": None,
        "rdma_fw_version": None,
        "rdma_port": None,
        "gids": [],
        "roce_v2_ipv4": [],
    }
    if not facts["exists"]:
        return facts

    facts["operstate"] = read_sysfs_value(os.path.join(net_dir, "operstate"))
    facts["carrier"] = _carrier(read_sysfs_value(os.path.join(net_dir, "carrier")))
    facts["mtu"] = int_or_none(read_sysfs_value(os.path.join(net_dir, "mtu")))
    facts["mac"] = read_sysfs_value(os.path.join(net_dir, "address"))

    ibdev = rdma_device_of(rdma_sysfs_root, interface)
    if ibdev is None:
        return facts
    facts["rdma_device"] = ibdev
    # The adapter's firmware (a ConnectX-7's, e.g. 28.43.1014), which preflight's known-bad entries may name.
    facts["rdma_fw_version"] = read_sysfs_value(os.path.join(rdma_sysfs_root, "class", "infiniband", ibdev, "fw_ver"))
    facts["rdma_port"] = rdma_port_of(rdma_sysfs_root, ibdev, interface)
    if facts["rdma_port"] is None:
        return facts
    facts["gids"] = read_gid_table(rdma_sysfs_root, ibdev, facts["rdma_port"])
    facts["roce_v2_ipv4"] = roce_v2_ipv4_entries(facts["gids"], interface)
    return facts


def rdma_char_devices(directory=RDMA_DEVICE_DIR):
    """The names of the character devices in directory (links followed), sorted; [] when it is
    missing or unreadable."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    found = []
    for name in names:
        try:
            if stat.S_ISCHR(os.stat(os.path.join(directory, name)).st_mode):
                found.append(name)
        except OSError:
            continue
    return sorted(found)


def gather_link_facts(interfaces, sysfs_root="/sys", rdma_sysfs_root=None, run_ip_addr=None,
                      rdma_device_dir=RDMA_DEVICE_DIR):
    """Build the spark_link_facts fact.

    run_ip_addr(interface) -> (text or None, error or None) runs `ip -j addr show dev IF`;
    None skips addresses. A missing interface is listed in `missing`, not raised.
    """
    if rdma_sysfs_root is None:
        rdma_sysfs_root = sysfs_root
    result = {"interfaces": {}, "missing": [], "rdma_char_devices": rdma_char_devices(rdma_device_dir)}
    for interface in interfaces:
        if interface in result["interfaces"]:
            continue
        facts = interface_facts(interface, sysfs_root, rdma_sysfs_root)
        if facts["exists"] and run_ip_addr is not None:
            text, error = run_ip_addr(interface)
            if error is None:
                try:
                    facts["ipv4"], facts["ipv6"] = parse_ip_addr_json(text, interface)
                except ValueError as exc:
                    error = str(exc)
            facts["address_error"] = error
        if not facts["exists"]:
            result["missing"].append(interface)
        result["interfaces"][interface] = facts
    return result


# --- Resolving the GID index of each link address (roce_gid) -------------------------

# Why a lookup failed, and what to do about it. `transient` marks failures a real kernel
# clears by itself shortly after `netplan apply` (the IPv4 GID follows the address).
ADDRESS_FIX = (
    "address not applied yet? run the direct_link role (or `sudo netplan apply`) "
    "and check `ip addr show dev {interface}`"
)


class GidLookupError(ValueError):
    """A link whose RoCE v2 GID index cannot be resolved, with the fix to suggest."""

    def __init__(self, interface, reason, fix, transient=False):
        super().__init__("%s: %s; %s" % (interface, reason, fix))
        self.interface = interface
        self.reason = reason
        self.fix = fix
        self.transient = transient

    def as_dict(self):
        return {"interface": self.interface, "reason": self.reason, "fix": self.fix, "transient": self.transient}


def split_address(address):
    """'192.168.100.10/24' or '192.168.100.10' -> '192.168.100.10' (validated as IPv4)."""
    try:
        return str(ipaddress.IPv4Address(bare_address(address)))
    except (ipaddress.AddressValueError, ValueError):
        raise ValueError("%r is not an IPv4 address" % (address,)) from None


def resolve_link_gid(interface, address, sysfs_root="/sys", rdma_sysfs_root=None):
    """Resolve the RoCE v2 GID of one link address.

    Returns {interface, rdma_device, port, gid_index, gid, ipv4}; raises GidLookupError.
    """
    if rdma_sysfs_root is None:
        rdma_sysfs_root = sysfs_root
    try:
        ipv4 = split_address(address)
    except ValueError as exc:
        raise GidLookupError(interface, str(exc), "give the link address as a.b.c.d/nn (spark_link[].address)") from None
    if not os.path.isdir(os.path.join(sysfs_root, "class", "net", interface)):
        raise GidLookupError(
            interface,
            "the interface does not exist under %s/class/net" % sysfs_root.rstrip("/"),
            "fix spark_link[].interface to a name `ip -br link` (or `ibdev2netdev`) prints on this node",
        )
    ibdev = rdma_device_of(rdma_sysfs_root, interface)
    if ibdev is None:
        root = rdma_sysfs_root.rstrip("/")
        raise GidLookupError(
            interface,
            "no RDMA device behind the netdev (%s/class/net/%s/device/infiniband is missing and no GID table entry "
            "names it under %s/class/infiniband)" % (root, interface, root),
            "load mlx5_ib (`sudo modprobe mlx5_ib`) and check that `rdma link` lists the netdev "
            "(for a bond: RoCE LAG active, with both ports enslaved)",
        )
    port = rdma_port_of(rdma_sysfs_root, ibdev, interface)
    if port is None:
        raise GidLookupError(
            interface,
            "RDMA device %s has no ports under class/infiniband/%s/ports" % (ibdev, ibdev),
            "reload the RDMA driver (`sudo modprobe -r mlx5_ib && sudo modprobe mlx5_ib`) and check `rdma link`",
        )
    gids = read_gid_table(rdma_sysfs_root, ibdev, port)
    try:
        index = resolve_roce_v2_gid_index(gids, interface, ipv4)
    except ValueError as exc:
        roce_v2_on_netdev = [e for e in gids if e.get("type") == ROCE_V2 and e.get("ndev") == interface]
        if not gids or roce_v2_on_netdev:
            # The device serves this netdev with RoCE v2; only the address's entry is
            # missing, which is what the table looks like until the address is applied.
            fix = ADDRESS_FIX.format(interface=interface)
            transient = True
        elif not [e for e in gids if e.get("type") == ROCE_V2]:
            fix = "the device offers RoCE v1 only: enable RoCE v2 in the ConnectX firmware/driver (mlx5_core) and check `rdma link`"
            transient = False
        else:
            fix = "the RoCE v2 GIDs belong to another netdev (a bond or VLAN on top?): point spark_link[].interface at that netdev"
            transient = False
        raise GidLookupError(interface, "%s (device %s port %d)" % (exc, ibdev, port), fix, transient) from None
    gid = next(entry["gid"] for entry in gids if entry["index"] == index)
    return {"interface": interface, "rdma_device": ibdev, "port": port, "gid_index": index, "gid": gid, "ipv4": ipv4}


def summarize_roce(resolved):
    """The roce_gid result from the resolved links, in link order."""
    indexes = {link["interface"]: link["gid_index"] for link in resolved}
    distinct = set(indexes.values())
    devices = []
    for link in resolved:
        if link["rdma_device"] not in devices:
            devices.append(link["rdma_device"])
    return {
        "links": resolved,
        "rdma_devices": devices,
        "gid_index": distinct.pop() if len(distinct) == 1 else None,
        "gid_indexes": indexes,
    }


READ_ONCE_NOTE = "read once: wait_timeout is 0; raise it to wait for the address"


def gid_failure_message(errors, waited, wait_timeout):
    """The module's failure message: every error, and whether the address was waited for.

    Polling only happens when every problem is transient and wait_timeout is above 0 (a
    permanent one ends it at once); otherwise the time in `waited` is just the reading.
    """
    transient = [exc.transient for exc in errors]
    if transient and all(transient) and wait_timeout > 0:
        note = " (after waiting %.1f s)" % waited
    elif any(transient) and wait_timeout <= 0:
        note = " (%s)" % READ_ONCE_NOTE
    else:
        note = ""
    return "Cannot resolve the RoCE v2 GID index%s: %s" % (note, " | ".join(str(exc) for exc in errors))


def resolve_links_gids(links, sysfs_root="/sys", rdma_sysfs_root=None, wait_timeout=0,
                       poll_interval=0.5, sleep=None, clock=None):
    """Resolve every link, polling up to wait_timeout seconds while only transient errors remain.

    links: [{interface, address}]. Returns (roce, errors, waited_seconds): roce as in
    summarize_roce over the links that resolved, errors a list of GidLookupError (empty on
    success). sleep/clock default to time.sleep/time.monotonic; tests replace them.
    """
    sleep = sleep or time.sleep
    clock = clock or time.monotonic
    start = clock()
    while True:
        resolved, errors = [], []
        for link in links:
            try:
                resolved.append(resolve_link_gid(link["interface"], link["address"], sysfs_root, rdma_sysfs_root))
            except GidLookupError as exc:
                errors.append(exc)
        waited = clock() - start
        remaining = wait_timeout - waited
        if not errors or remaining <= 0 or not all(exc.transient for exc in errors):
            return summarize_roce(resolved), errors, round(waited, 3)
        sleep(min(poll_interval, remaining))


def read_link_facts(module, interfaces, sysfs_root="/sys", rdma_sysfs_root=None):
    """The spark_link_facts fact as an AnsibleModule reads it (ip for the addresses): link_facts'
    and preflight_facts' one reader."""
    ip_path = module.get_bin_path("ip")

    def run_ip_addr(interface):
        if ip_path is None:
            return None, "ip not found"
        rc, stdout, stderr = module.run_command(ip_addr_command(ip_path, interface), check_rc=False)
        return ip_addr_outcome(rc, stdout, stderr)

    return gather_link_facts(interfaces, sysfs_root=sysfs_root, rdma_sysfs_root=rdma_sysfs_root, run_ip_addr=run_ip_addr)

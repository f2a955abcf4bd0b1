#!/usr/bin/env python3
"""LAB-ONLY: a fake RoCE sysfs tree, standing in for the ConnectX-7 RDMA devices of a
DGX Spark (the lab's kernel has no InfiniBand/RDMA at all, so /sys/class/infiniband
does not exist there).

Stdlib only.  Importable (unit tests use ``write_roce_tree`` / ``remove_roce_tree``)
and runnable as a script inside a lab node, where the image carries a copy at
/usr/local/lib/sparklab/roce_fixture.py::

    roce_fixture.py --root /opt/sparklab/sysfs --netdev enp1s0f1np1 \\
        --ibdev rocep1s0f1 --ipv4 192.168.100.10 --index 3
    roce_fixture.py --root ... --netdev ... --ibdev ... --ipv4 none --index 3
    roce_fixture.py --root ... --netdev ... --ibdev ... --remove

What it writes under ROOT (ROOT stands for /sys), like a real ConnectX-7 port with
RoCE v1 and v2 enabled::

    class/infiniband/<ibdev>/ports/<port>/gids/<n>              every n < gid_table_len
    class/infiniband/<ibdev>/ports/<port>/gid_attrs/types/<n>   only for valid entries
    class/infiniband/<ibdev>/ports/<port>/gid_attrs/ndevs/<n>   only for valid entries
    class/infiniband/<ibdev>/ports/<port>/link_layer            "Ethernet"
    class/net/<netdev>/device/infiniband/<ibdev>/               empty directory

GID table (``I`` = roce_v2_ipv4_index, must be >= 3):

    0, 1          fe80 link-local GID (EUI-64 of a MAC)       IB/RoCE v1, RoCE v2
    2 .. I-2      IPv6 global-like GIDs, one v1/v2 pair each   IB/RoCE v1, RoCE v2
                  (an odd gap leaves one zero "hole" at I-2, as a deleted address does)
    I-1, I        IPv4-mapped GID of ``ipv4``                  IB/RoCE v1, RoCE v2
    all others    0000:...:0000, and no types/ndevs file (the kernel answers EINVAL)

With ``ipv4=None`` (before an address is applied) slots I-1 and I are zero as well.
Files end in a newline, as sysfs attributes do; ndevs files hold the netdev name.
"""
from __future__ import annotations

import argparse
import hashlib
import ipaddress
import os
import shutil
import sys
import tempfile

ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"
ROCE_V1 = "IB/RoCE v1"
ROCE_V2 = "RoCE v2"


def _gid(raw: bytes) -> str:
    h = raw.hex()
    return ":".join(h[i:i + 4] for i in range(0, 32, 4))


def ipv4_gid(ipv4: str) -> str:
    """'192.168.100.10' -> '0000:0000:0000:0000:0000:ffff:c0a8:640a'."""
    return _gid(ipaddress.IPv6Address("::ffff:" + str(ipaddress.IPv4Address(ipv4))).packed)


def default_mac(netdev: str, ibdev: str) -> str:
    """A stable, locally administered MAC-ish address for a netdev without one."""
    d = bytearray(hashlib.sha256(f"{netdev}/{ibdev}".encode()).digest()[:6])
    d[0] = (d[0] & 0xFC) | 0x02
    return ":".join(f"{b:02x}" for b in d)


def link_local_gid(mac: str) -> str:
    """fe80::/64 + modified EUI-64 of the MAC, as the kernel's default GID."""
    b = bytes(int(x, 16) for x in mac.split(":"))
    if len(b) != 6:
        raise ValueError(f"not a MAC address: {mac!r}")
    eui = bytes([b[0] ^ 0x02, b[1], b[2], 0xFF, 0xFE, b[3], b[4], b[5]])
    return _gid(bytes.fromhex("fe80000000000000") + eui)


def _global_gid(mac: str, n: int) -> str:
    # 2001:db8::/32 (documentation prefix), one /64 per filler pair, EUI-64 host part.
    ll = link_local_gid(mac).split(":")
    return ":".join(["2001", "0db8", f"{n:04x}", "0000"] + ll[4:])


def roce_tree_files(netdev: str, ibdev: str, ipv4: str | None, roce_v2_ipv4_index: int,
                    port: int = 1, gid_table_len: int = 16,
                    mac: str | None = None) -> dict[str, str]:
    """The files of the tree, relative to ROOT, mapped to their contents."""
    idx = int(roce_v2_ipv4_index)
    if idx < 3:
        raise ValueError(f"roce_v2_ipv4_index must be >= 3, got {idx}")
    if idx >= gid_table_len:
        raise ValueError(f"roce_v2_ipv4_index {idx} does not fit a GID table of {gid_table_len}")
    mac = mac or default_mac(netdev, ibdev)
    entries: dict[int, tuple[str, str]] = {}
    ll = link_local_gid(mac)
    entries[0] = (ll, ROCE_V1)
    entries[1] = (ll, ROCE_V2)
    n = 2
    while n + 1 <= idx - 2:
        g = _global_gid(mac, n // 2)
        entries[n] = (g, ROCE_V1)
        entries[n + 1] = (g, ROCE_V2)
        n += 2
    if ipv4 is not None:
        g = ipv4_gid(ipv4)
        entries[idx - 1] = (g, ROCE_V1)
        entries[idx] = (g, ROCE_V2)

    pdir = f"class/infiniband/{ibdev}/ports/{port}"
    files = {f"{pdir}/link_layer": "Ethernet\n"}
    for i in range(gid_table_len):
        gid, typ = entries.get(i, (ZERO_GID, None))
        files[f"{pdir}/gids/{i}"] = gid + "\n"
        if typ is not None:
            files[f"{pdir}/gid_attrs/types/{i}"] = typ + "\n"
            files[f"{pdir}/gid_attrs/ndevs/{i}"] = netdev + "\n"
    return files


def _dev_dir(root: str, ibdev: str) -> str:
    return os.path.join(root, "class", "infiniband", ibdev)


def _net_link_dir(root: str, netdev: str) -> str:
    return os.path.join(root, "class", "net", netdev, "device", "infiniband")


def read_roce_tree(root: str, ibdev: str) -> dict[str, str]:
    """Files of an existing tree for ``ibdev`` (same keys as roce_tree_files)."""
    out: dict[str, str] = {}
    base = _dev_dir(root, ibdev)
    for dirpath, _dirs, names in os.walk(base):
        for name in names:
            p = os.path.join(dirpath, name)
            with open(p, encoding="utf-8") as fh:
                out[os.path.relpath(p, root)] = fh.read()
    return out


def _tree_is(root: str, netdev: str, ibdev: str, files: dict[str, str]) -> bool:
    link_dir = _net_link_dir(root, netdev)
    try:
        if sorted(os.listdir(link_dir)) != [ibdev]:
            return False
        return read_roce_tree(root, ibdev) == files
    except OSError:
        return False


def write_roce_tree(root: str, netdev: str, ibdev: str, ipv4: str | None,
                    roce_v2_ipv4_index: int, port: int = 1, gid_table_len: int = 16,
                    mac: str | None = None) -> bool:
    """Write (replace) the tree of ``ibdev``; returns False when it was already so."""
    files = roce_tree_files(netdev, ibdev, ipv4, roce_v2_ipv4_index, port, gid_table_len, mac)
    if _tree_is(root, netdev, ibdev, files):
        return False
    parent = os.path.join(root, "class", "infiniband")
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{ibdev}.new-", dir=parent)
    try:
        for rel, content in files.items():
            # rel starts with class/infiniband/<ibdev>/
            sub = os.path.relpath(os.path.join(root, rel), _dev_dir(root, ibdev))
            p = os.path.join(tmp, sub)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "w", encoding="utf-8") as fh:
                fh.write(content)
        os.chmod(tmp, 0o755)
        final = _dev_dir(root, ibdev)
        old = None
        if os.path.lexists(final):
            old = tempfile.mkdtemp(prefix=f".{ibdev}.old-", dir=parent)
            os.rename(final, os.path.join(old, "d"))
        os.rename(tmp, final)
        tmp = None
        if old:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    link_dir = _net_link_dir(root, netdev)
    os.makedirs(os.path.join(link_dir, ibdev), exist_ok=True)
    for other in os.listdir(link_dir):
        if other != ibdev:
            shutil.rmtree(os.path.join(link_dir, other), ignore_errors=True)
    return True


def remove_roce_tree(root: str, netdev: str, ibdev: str) -> bool:
    """Remove the tree of ``ibdev`` and the netdev's link to it; False if absent."""
    existed = False
    dev = _dev_dir(root, ibdev)
    if os.path.lexists(dev):
        shutil.rmtree(dev)
        existed = True
    link = os.path.join(_net_link_dir(root, netdev), ibdev)
    if os.path.lexists(link):
        shutil.rmtree(link)
        existed = True
    # Drop the now empty class/net/<netdev>/device/infiniband chain.
    d = _net_link_dir(root, netdev)
    stop = os.path.join(root, "class", "net")
    while d != stop and os.path.isdir(d) and not os.listdir(d):
        os.rmdir(d)
        d = os.path.dirname(d)
    return existed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="LAB-ONLY fake RoCE sysfs tree")
    ap.add_argument("--root", required=True, help="stands for /sys, e.g. /opt/sparklab/sysfs")
    ap.add_argument("--netdev", required=True)
    ap.add_argument("--ibdev", required=True)
    ap.add_argument("--ipv4", default="none", help="IPv4 address without prefix, or 'none'")
    ap.add_argument("--index", type=int, default=3, help="GID index of the RoCE v2 IPv4 entry")
    ap.add_argument("--port", type=int, default=1)
    ap.add_argument("--gid-table-len", type=int, default=16)
    ap.add_argument("--mac", default=None,
                    help="MAC for the link-local GID (default: the netdev's own MAC from "
                         "/sys/class/net/NETDEV/address if it exists, else derived)")
    ap.add_argument("--remove", action="store_true", help="remove the tree instead")
    a = ap.parse_args(argv)
    if a.remove:
        changed = remove_roce_tree(a.root, a.netdev, a.ibdev)
    else:
        ipv4 = None if a.ipv4.lower() in ("", "none") else a.ipv4.split("/")[0]
        if a.mac is None:
            try:
                with open(f"/sys/class/net/{a.netdev}/address", encoding="ascii") as fh:
                    a.mac = fh.read().strip() or None
            except OSError:
                pass
        changed = write_roce_tree(a.root, a.netdev, a.ibdev, ipv4, a.index, a.port,
                                  a.gid_table_len, a.mac)
    print(f"{a.ibdev}: {'changed' if changed else 'unchanged'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

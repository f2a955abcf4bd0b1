"""The lab cable's names as sysfs shows them, and a class/net directory writer, for the tests of
the modules that read the cable's netdevs and RDMA devices (link_facts, roce_gid). The RDMA trees
come from the lab's fixture generator (tests/lab/node/roce_fixture.py)."""

from __future__ import annotations

from pathlib import Path

NETDEV = "enp1s0f1np1"
IBDEV = "rocep1s0f1"
OTHER_HALF = "enP2p1s0f1np1"
OTHER_IBDEV = "roceP2p1s0f1"
MAC = "4c:bb:47:2e:11:a3"
# The RoCE v2 GID of 192.168.100.10 (IPv4-mapped), written out rather than computed by the fixture.
NODE1_GID = "0000:0000:0000:0000:0000:ffff:c0a8:640a"


def write_netdev(root, name, operstate="up", mtu="9000", mac=MAC, carrier="1"):
    """class/net/<name> under root with operstate, mtu, address and (unless None) carrier."""
    net_dir = Path(root) / "class" / "net" / name
    net_dir.mkdir(parents=True, exist_ok=True)
    (net_dir / "operstate").write_text(operstate + "\n")
    (net_dir / "mtu").write_text(mtu + "\n")
    (net_dir / "address").write_text(mac + "\n")
    if carrier is not None:
        (net_dir / "carrier").write_text(carrier + "\n")
    return net_dir

"""sparklab: the sparkctl two-node lab (systemd containers standing in for DGX Sparks).

CLI entry: ``tests/lab/sparklab`` (run it with the venv's python:
``.venv/bin/python tests/lab/sparklab up``).  Stdlib + PyYAML.  See tests/lab/README.md.

The node plan comes from the lab inventory (inventories/lab/hosts.yml and
group_vars/all.yml): node names, groups spark_head/spark_workers, ansible_host (the
management IP on the docker bridge ``sparklab-mgmt``), spark_link (the direct-cable
interfaces and their planned addresses), sparklab_roce_gid_index, ansible_user,
spark_management_network, spark_sysfs_rdma_root and sparklab_name.

sparklab_name names a second lab that lives beside the default one (e.g.
inventories/lab-twin: ``twin``): its containers, network and volumes carry the name, its
docker label value is the name, and its known_hosts/ssh_config sit in .lab/<name>/, so
each lab's commands touch only its own objects.  Without it the lab is the default one,
with the names it always had (containers spark1/spark2, network sparklab-mgmt).

spark_fabric picks the cable: direct (the default; a veth pair per cable half between the
head and its one worker) or switch (inventories/lab-switch: any number of nodes, a Linux
bridge per cable half at MTU 9000 in the lab's own network namespace <name>-switch, each
node's half a veth plugged into it; ``up --nodes N --topology switch``).
"""
from __future__ import annotations

import argparse
import base64
import concurrent.futures
import contextlib
import fcntl
import hashlib
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
NODE_DIR = HERE / "node"
LAB_DIR = REPO / ".lab"
DEFAULT_INVENTORY = REPO / "inventories" / "lab"
# The N-node lab on a switch stand-in (`up --topology switch` without -i).
SWITCH_INVENTORY = REPO / "inventories" / "lab-switch"
TOPOLOGIES = ("direct", "switch")
# The switch stand-in's MTU: jumbo frames end to end, as a real switch for the cable is set up.
SWITCH_MTU = 9000
# The inventory (its directory or hosts.yml) when -i is not given: test code that runs the
# tool as a subprocess picks a second lab up from its environment.
INVENTORY_ENV = "SPARKLAB_INVENTORY"

sys.path.insert(0, str(NODE_DIR))
import roce_fixture  # noqa: E402  (tests/lab/node/roce_fixture.py)

IMAGE_REPO = "sparkctl-lab-node"
NETWORK = "sparklab-mgmt"             # the default lab's; a named lab's is <name>-mgmt
# Value "1" on the default lab's containers, volumes and network (and on the image, which
# both labs share); a named lab's objects carry its name as the value instead.
LABEL = "org.sparkctl.lab"
HASH_LABEL = "org.sparkctl.lab.image-hash"
SUITE = "bookworm"
# A systemd node, plus netplan (+udev on bookworm), venv, firewall tools (docs/field-notes.md, "The lab"),
# and what the real vLLM's CPU build needs of the machine (tests/lab/vllm/README.md; DGX OS ships
# them): libnuma, which it links, and the C++ compiler and Python headers torch's Inductor builds
# its CPU kernels with at the first request.
PACKAGES = sorted("""
    dbus libpam-systemd systemd systemd-sysv openssh-server openssh-client python3
    python3-apt sudo rsync iproute2 iputils-ping procps ca-certificates
    netplan.io udev python3-venv iptables nftables kmod less libnuma1 g++ python3-dev
""".split())
USER_UID = 1000
# Every capability docker 20.10 knows, except SYS_RESOURCE (missing from the VM's
# bounding set: --privileged fails).  20.10 rejects BPF, PERFMON, CHECKPOINT_RESTORE.
CAPS = """CHOWN DAC_OVERRIDE DAC_READ_SEARCH FOWNER FSETID KILL SETGID SETUID SETPCAP
    LINUX_IMMUTABLE NET_BIND_SERVICE NET_BROADCAST NET_ADMIN NET_RAW IPC_LOCK IPC_OWNER
    SYS_MODULE SYS_RAWIO SYS_CHROOT SYS_PTRACE SYS_PACCT SYS_ADMIN SYS_BOOT SYS_NICE
    SYS_TIME SYS_TTY_CONFIG MKNOD LEASE AUDIT_WRITE AUDIT_CONTROL SETFCAP MAC_OVERRIDE
    MAC_ADMIN SYSLOG WAKE_ALARM BLOCK_SUSPEND AUDIT_READ""".split()
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
# The real vLLM's wheels (tests/lab/vllm/wheelhouse.py), read-only in every node where the lab
# profile lab-vllm's runtime.venv.find_links names them: the nodes install it with pip's
# --no-index, from no package index. Outside the node snapshot's roots (tests/lab/node_snapshot.py).
VLLM_WHEELHOUSE = HERE / "vllm" / "wheelhouse"
VLLM_WHEELHOUSE_IN_NODE = "/mnt/sparklab-wheelhouse"
# The real vLLM's model (tests/lab/vllm/setup.sh builds it), published by the hub stand-in as the
# lab-vllm profile's checkpoint.repo_id.
VLLM_MODEL = HERE / "vllm" / "model"
VLLM_REPO = "sparklab/tiny-llama"
NODE_CA = "/etc/sparklab/host-ca.crt"
IMAGE_FIXTURE = "/usr/local/lib/sparklab/roce_fixture.py"

# ---------------------------------------------------------------------------------
# Image recipe.  Everything here (and every file under tests/lab/node/) feeds the
# image hash, so editing it rebuilds the image at the next `up`/`image`.
# ---------------------------------------------------------------------------------
IMAGE_FILES = {
    # path in the image: (mode, content) -- {user} is replaced by ansible_user.
    "/etc/systemd/system/sparklab-ssh-hostkeys.service": (0o644, """\
# LAB-ONLY (sparkctl lab): host keys are generated at each node's first boot, never
# baked into the image, so two nodes never share a host key.
[Unit]
Description=Generate SSH host keys (sparkctl lab)
Before=ssh.service

[Service]
Type=oneshot
ExecStart=/usr/bin/ssh-keygen -A
RemainAfterExit=yes

[Install]
RequiredBy=ssh.service
WantedBy=multi-user.target
"""),
    # Docker refuses `--device /dev/infiniband` when the directory holds no device node.
    "/etc/systemd/system/sparklab-rdma-devices.service": (0o644, """\
# LAB-ONLY (sparkctl lab): the RDMA character devices of a DGX Spark's ConnectX-7 (one
# uverbs<N> per RDMA device, rdma_cm), so that the engine's containers are given them as
# on a Spark. The lab's kernel has no RDMA: the nodes exist, opening one fails (EPERM).
# /dev is a fresh tmpfs at each node start, so they are made at every boot.
[Unit]
Description=Make stand-in RDMA device nodes (sparkctl lab)
DefaultDependencies=no
Before=sysinit.target

[Service]
Type=oneshot
ExecStart=/bin/mkdir -p /dev/infiniband
ExecStart=/bin/sh -c 'for n in 0 1 2 3; do f=/dev/infiniband/uverbs$$n; [ -e $$f ] || mknod -m 666 $$f c 231 $$((192 + n)); done'
ExecStart=/bin/sh -c '[ -e /dev/infiniband/rdma_cm ] || mknod -m 666 /dev/infiniband/rdma_cm c 10 58'
RemainAfterExit=yes

[Install]
WantedBy=sysinit.target
"""),
    # Keep networkd (and so netplan) off docker's management interface.
    "/etc/systemd/network/10-sparklab-eth0-unmanaged.network": (0o644, """\
# LAB-ONLY (sparkctl lab): eth0 is docker's management network; not networkd's.
[Match]
Name=eth0

[Link]
Unmanaged=yes
"""),
    # netplan apply calls `udevadm trigger/settle`, which fail without a udev daemon
    # (read-only /sys in a container).  /usr/local/sbin comes first on PATH.
    "/usr/local/sbin/udevadm": (0o755, """\
#!/bin/sh
# LAB-ONLY (sparkctl lab): a container has no udev daemon and a read-only /sys, so
# `udevadm trigger|control|settle` fail and break `netplan apply`.  Skip exactly those
# while no udev daemon runs; everything else goes to the real udevadm.
case "${1:-}" in
  trigger|control|settle)
    [ -S /run/udev/control ] || exit 0 ;;
esac
exec /usr/bin/udevadm "$@"
"""),
    "/etc/sudoers.d/90-sparklab-user": (0o440, """\
# sparkctl lab: the ansible_user has passwordless sudo, as on a prepared Spark.
{user} ALL=(ALL:ALL) NOPASSWD: ALL
"""),
    # pam_env warns at every ssh login without it; C.UTF-8 ships with libc.
    "/etc/default/locale": (0o644, "LANG=C.UTF-8\n"),
    "/etc/sparklab/README": (0o644, """\
This is a sparkctl LAB node (a systemd container), not a DGX Spark.
Stand-ins: /usr/bin/nvidia-smi (no GPU), /usr/bin/nvidia-container-runtime-hook (Docker's
--gpus, mounting nothing), the RoCE sysfs tree under the inventory's
spark_sysfs_rdma_root and device nodes under /dev/infiniband that cannot be opened (no
RDMA), /usr/local/sbin/udevadm (no udev).
See tests/lab/README.md in the sparkctl repository.
"""),
}
NODE_FILES_IN_IMAGE = {
    "nvidia-smi": ("/usr/bin/nvidia-smi", 0o755),
    # dockerd looks it up at its start: in the image before the engine_image role installs Docker.
    "nvidia-container-runtime-hook": ("/usr/bin/nvidia-container-runtime-hook", 0o755),
    "roce_fixture.py": (IMAGE_FIXTURE, 0o755),
    # The bytecode of Ansible's zipped module payloads kept between module runs (the file says why).
    "sparklab_zipcache.py": ("/usr/lib/python3/dist-packages/sparklab_zipcache.py", 0o644),
    "sparklab_zipcache.pth": ("/usr/lib/python3/dist-packages/sparklab_zipcache.pth", 0o644),
}
# Units masked because they cannot work in a container (no ttys, no udev, no writable
# /sys or /proc/sys, no kernel audit in a netns) -- left alone they make boot degraded.
MASKED_UNITS = """
    getty.target console-getty.service getty@.service serial-getty@.service
    systemd-udevd.service systemd-udevd-control.socket systemd-udevd-kernel.socket
    systemd-udev-trigger.service systemd-udev-settle.service
    systemd-firstboot.service systemd-journald-audit.socket
    sys-kernel-config.mount sys-kernel-debug.mount sys-kernel-tracing.mount
    systemd-sysctl.service systemd-modules-load.service
""".split()
CUSTOMIZE = """\
set -eu
rm -f /etc/ssh/ssh_host_*
: > /etc/machine-id
rm -f /var/lib/dbus/machine-id
useradd --create-home --uid {uid} --user-group --shell /bin/bash {user}
visudo -cf /etc/sudoers.d/90-sparklab-user >/dev/null
systemctl enable sparklab-ssh-hostkeys.service sparklab-rdma-devices.service systemd-networkd.service
systemctl disable systemd-networkd-wait-online.service
systemctl mask {masked}
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/*.log /var/log/apt/*
touch -d @0 /var/lib/apt/lists
"""
DOCKERFILE = """\
FROM {base}
ENV container=docker
LABEL {label}=1 {hash_label}={hash}
STOPSIGNAL SIGRTMIN+3
CMD ["/sbin/init"]
"""

T0 = time.monotonic()


def say(msg: str) -> None:
    print(f"[{time.monotonic() - T0:6.1f}s] {msg}", flush=True)


class LabError(Exception):
    pass


# ---------------------------------------------------------------------------------
# Node plan from the inventory
# ---------------------------------------------------------------------------------
@dataclass
class Link:
    interface: str
    address: str            # with prefix, e.g. 192.168.100.10/24

    @property
    def ip(self) -> str:
        return self.address.split("/")[0]


@dataclass
class Node:
    name: str               # the inventory host name, also the hostname inside the node
    role: str               # head | worker
    mgmt_ip: str
    links: list[Link]
    gid_index: int
    container: str = ""     # the docker container: the name itself in the default lab
    pid: int = 0
    host_keys: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Plan:
    nodes: list[Node]
    network: str            # e.g. 172.30.77.0/24
    sysfs_root: str
    user: str
    inventory: Path
    name: str = ""          # sparklab_name; "" is the default lab
    topology: str = "direct"  # spark_fabric: direct (a veth pair per cable half) or switch (a bridge per half)

    @property
    def head(self) -> Node:
        return self.nodes[0]

    @property
    def label(self) -> str:
        """The value of LABEL on this lab's docker objects (what `down` selects by)."""
        return self.name or "1"

    @property
    def docker_network(self) -> str:
        return f"{self.name}-mgmt" if self.name else NETWORK

    @property
    def switch_netns(self) -> str:
        """The network namespace holding the switch stand-in's bridges (spark_fabric: switch):
        its own namespace, so the docker host's firewall and bridges never see its frames."""
        return f"{self.name or 'sparklab'}-switch"

    @property
    def state_dir(self) -> Path:
        """Where known_hosts and ssh_config go: two labs may use the same host names (the
        twin's are spark1/spark2 too), so a named lab keeps its own files.  The key, the
        lock and the image build log stay shared in .lab/."""
        return LAB_DIR / self.name if self.name else LAB_DIR

    def volume(self, node: Node) -> str:
        base = f"sparklab-{node.name}-docker"
        return f"{self.name}-{base}" if self.name else base

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise LabError(f"no node {name!r} in {self.inventory} (nodes: "
                       f"{', '.join(n.name for n in self.nodes)})")


def rdma_device_for(netdev: str) -> str:
    """The RDMA device name of a ConnectX netdev, by the kernel/rdma-core naming rule.

    Both are named from the same PCI path: netdev ``en`` + path + ``npN`` (the
    physical port name suffix), RDMA device ``roce`` + path.  So strip the leading
    ``en``, drop a trailing ``npN`` and prefix ``roce``:
    enp1s0f1np1 -> rocep1s0f1, enP2p1s0f1np1 -> roceP2p1s0f1.
    """
    m = re.fullmatch(r"en(\w+?)(np\d+)?", netdev)
    if not m:
        raise LabError(f"cannot derive an RDMA device name from {netdev!r} "
                       "(expected a predictable name like enp1s0f1np1)")
    return "roce" + m.group(1)


def _read_yaml(p: Path) -> dict:
    with open(p, encoding="utf-8") as fh:
        return yaml.safe_load(fh) or {}


VARS_EXTENSIONS = (".yml", ".yaml", ".json")


def vars_files(base: Path, name: str) -> list[Path]:
    """The files Ansible reads for group (or host) `name` under group_vars/ (host_vars/), in
    load order, as its host_group_vars plugin finds them: the first that exists of the
    directory `name/` (its files sorted, recursively; hidden and backup files skipped),
    name.yml, name.yaml, name.json -- a directory hides a file of the same name.  A second
    lab's inventory uses the directory form to add its own file to symlinked shared ones."""
    def walk(d: Path) -> list[Path]:
        found = []
        for f in sorted(d.iterdir(), key=lambda f: f.name):
            if f.name.startswith(".") or f.name.endswith("~"):
                continue
            if f.is_dir() and not f.suffix:
                found += walk(f)
            elif f.is_file() and (not f.suffix or f.suffix in VARS_EXTENSIONS):
                found.append(f)
        return found

    for cand in (base / name, *(base / f"{name}{ext}" for ext in VARS_EXTENSIONS)):
        if cand.is_dir():
            return walk(cand)
        if cand.is_file():
            return [cand]
    return []


def vars_names(base: Path) -> list[str]:
    """Group (or host) names that have vars under base, sorted."""
    if not base.is_dir():
        return []
    return sorted({f.name if f.is_dir() else f.stem for f in base.iterdir()
                   if not f.name.startswith(".") and (f.is_dir() or f.suffix in VARS_EXTENSIONS)})


def _vars_files(base: Path, name: str) -> dict:
    out: dict = {}
    for f in vars_files(base, name):
        out.update(_read_yaml(f))
    return out


def inventory_path(given: Path | str | None = None) -> Path:
    """The inventory to use: `given` (-i), else $SPARKLAB_INVENTORY, else the default lab.
    Either may name the inventory directory or its hosts file."""
    if given is None or str(given) == "":
        given = os.environ.get(INVENTORY_ENV) or DEFAULT_INVENTORY
    return Path(given).expanduser().resolve()


# A lab's name goes into docker object names (<name>-spark1, <name>-mgmt); "sparklab"
# would give the default lab's network name.
LAB_NAME_RE = re.compile(r"[a-z][a-z0-9-]{0,30}")


def load_plan(inventory: Path) -> Plan:
    """The plan of the lab an inventory describes; `inventory` is its directory or hosts file."""
    hosts_file = inventory if inventory.is_file() else inventory / "hosts.yml"
    inventory = hosts_file.parent
    if not hosts_file.is_file():
        raise LabError(f"inventory not found: {hosts_file}")
    data = _read_yaml(hosts_file)
    hosts: dict[str, dict] = {}
    groups: dict[str, list[str]] = {}
    group_vars_inline: dict[str, dict] = {}

    def walk(gname: str, g: dict | None, parents: list[str]) -> None:
        g = g or {}
        group_vars_inline[gname] = g.get("vars") or {}
        chain = parents + [gname]
        for h, hv in (g.get("hosts") or {}).items():
            hosts.setdefault(h, {})
            hosts[h].update(hv or {})
            for grp in chain:
                groups.setdefault(grp, [])
                if h not in groups[grp]:
                    groups[grp].append(h)
        for cname, c in (g.get("children") or {}).items():
            walk(cname, c, chain)

    for top, g in data.items():
        walk(top, g, [])

    heads = groups.get("spark_head", [])
    workers = groups.get("spark_workers", [])
    if len(heads) != 1:
        raise LabError(f"{hosts_file}: the lab needs exactly one host in spark_head, found {heads}")
    gv_dir, hv_dir = inventory / "group_vars", inventory / "host_vars"
    gvars_all = _vars_files(gv_dir, "all")

    def host_vars(h: str) -> dict:
        v = dict(gvars_all)
        member = [g for g in groups if h in groups[g] and g != "all"]
        for g in member:
            v.update(_vars_files(gv_dir, g))
        v.update(group_vars_inline.get("all", {}))
        for g in member:
            v.update(group_vars_inline.get(g, {}))
        v.update(_vars_files(hv_dir, h))
        v.update(hosts[h])
        return v

    def need(h: str, v: dict, key: str):
        if key not in v:
            raise LabError(f"{inventory}: host {h} has no {key}")
        val = v[key]
        if isinstance(val, str) and "{{" in val:
            raise LabError(f"{inventory}: {h}.{key} is templated ({val!r}); the lab reads "
                           "plain values only")
        return val

    nodes = []
    for role, h in [("head", heads[0])] + [("worker", w) for w in workers]:
        v = host_vars(h)
        links = [Link(str(need(h, entry, "interface")), str(need(h, entry, "address")))
                 for entry in (need(h, v, "spark_link") or [])]
        for link in links:
            if len(link.interface) > 15:
                raise LabError(f"{h}: interface name {link.interface!r} is longer than 15 chars")
            ipaddress.ip_interface(link.address)
        ipaddress.ip_address(need(h, v, "ansible_host"))
        nodes.append(Node(h, role, str(v["ansible_host"]), links,
                          int(need(h, v, "sparklab_roce_gid_index"))))
    any_vars = host_vars(heads[0])
    topology = any_vars.get("spark_fabric", "direct")
    if topology not in TOPOLOGIES:
        raise LabError(f"{inventory}: spark_fabric {topology!r} must be one of {', '.join(TOPOLOGIES)} "
                       "(the lab reads plain values only)")
    if topology == "direct" and len(workers) > 1:
        raise LabError(
            f"{hosts_file}: {len(workers)} workers ({', '.join(workers)}), but the lab's "
            "direct cable is a point-to-point veth pair between the head and ONE worker, "
            "as the real ConnectX-7 cable is.  More workers need the switch stand-in: set "
            "spark_fabric: switch (a bridge per cable half), as inventories/lab-switch does.")
    name = any_vars.get("sparklab_name") or ""
    if name and (not isinstance(name, str) or not LAB_NAME_RE.fullmatch(name) or name == "sparklab"):
        raise LabError(f"{inventory}: sparklab_name {name!r} must be lower-case letters, digits and "
                       "dashes, start with a letter, at most 31 characters, and not 'sparklab' "
                       "(it prefixes the lab's docker names)")
    for n in nodes:
        n.container = f"{name}-{n.name}" if name else n.name
    plan = Plan(nodes, str(need("all", any_vars, "spark_management_network")),
                str(need("all", any_vars, "spark_sysfs_rdma_root")),
                str(need("all", any_vars, "ansible_user")), inventory, name, topology)
    net = ipaddress.ip_network(plan.network)
    for n in nodes:
        if ipaddress.ip_address(n.mgmt_ip) not in net:
            raise LabError(f"{n.name}: ansible_host {n.mgmt_ip} is outside {plan.network}")
    if len({len(n.links) for n in nodes}) > 1:
        raise LabError("the nodes have different numbers of spark_link entries ("
                       + ", ".join(f"{n.name}={len(n.links)}" for n in nodes) + ")")
    if topology == "switch":
        ports = [switch_port(n, half) for n in nodes for half in range(len(n.links))]
        if len(set(ports)) != len(ports):
            raise LabError(f"{inventory}: node names give clashing switch port names {ports}; shorten them")
    return plan


# ---------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------
DOCKER = os.environ.get("SPARKLAB_DOCKER", "docker")


def run(cmd: list[str], check: bool = True, input: str | bytes | None = None,
        timeout: float | None = 120, quiet: bool = False) -> subprocess.CompletedProcess:
    text = not isinstance(input, bytes)
    p = subprocess.run(cmd, input=input, capture_output=True, text=text, timeout=timeout,
                       stdin=subprocess.DEVNULL if input is None else None)
    if check and p.returncode != 0:
        err = p.stderr if text else p.stderr.decode(errors="replace")
        raise LabError(f"command failed ({p.returncode}): {' '.join(cmd)}\n{err.strip()}")
    return p


def docker(*args: str, **kw) -> subprocess.CompletedProcess:
    return run([DOCKER, *args], **kw)


def docker_json(*args: str) -> list | None:
    p = docker(*args, check=False)
    if p.returncode != 0:
        return None
    return json.loads(p.stdout)


def parallel(fn, items):
    items = list(items)
    if len(items) <= 1:
        return [fn(i) for i in items]
    with concurrent.futures.ThreadPoolExecutor(len(items)) as ex:
        return list(ex.map(fn, items))


@contextlib.contextmanager
def lab_lock():
    """One lock for every lab: `up`/`down`/`image` of two labs queue (they share the image,
    its build and the key); playbooks and the other commands run beside them."""
    LAB_DIR.mkdir(mode=0o700, exist_ok=True)
    with open(LAB_DIR / ".lock", "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say("another sparklab up/down/image holds .lab/.lock; waiting")
            fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def check_docker() -> None:
    if shutil.which(DOCKER) is None:
        raise LabError("docker CLI not found: run `bash tests/bootstrap.sh` first")
    p = docker("version", "--format", "{{.Server.Version}}", check=False, timeout=15)
    if p.returncode != 0:
        raise LabError("docker engine not reachable: run `bash tests/bootstrap.sh` "
                       f"(it starts dockerd)\n{p.stderr.strip()}")


def mac_for(node: str, interface: str) -> str:
    """A stable, locally administered MAC per node and interface (the real CX-7 has a
    burnt-in one; a veth would get a random one at every re-creation)."""
    return roce_fixture.default_mac(node, interface)


# ---------------------------------------------------------------------------------
# Image
# ---------------------------------------------------------------------------------
def debian_mirror() -> str:
    """The host's Debian mirror URI, from its apt sources (never hard-coded)."""
    if os.environ.get("SPARKLAB_DEBIAN_MIRROR"):
        return os.environ["SPARKLAB_DEBIAN_MIRROR"]
    entries: list[tuple[str, list[str]]] = []   # (uri, suites)
    src_dir = Path("/etc/apt/sources.list.d")
    for f in sorted(src_dir.glob("*.sources")) if src_dir.is_dir() else []:
        for stanza in re.split(r"\n\s*\n", f.read_text(encoding="utf-8", errors="replace")):
            fields: dict[str, str] = {}
            key = None
            for line in stanza.splitlines():
                if line.startswith("#") or not line.strip():
                    continue
                if line[0] in " \t" and key:
                    fields[key] += " " + line.strip()
                    continue
                key, _, val = line.partition(":")
                key = key.strip().lower()
                fields[key] = val.strip()
            if "deb" not in fields.get("types", "").split():
                continue
            if fields.get("enabled", "yes").lower() == "no":
                continue
            for uri in fields.get("uris", "").split():
                entries.append((uri, fields.get("suites", "").split()))
    lists = [Path("/etc/apt/sources.list")] + (sorted(src_dir.glob("*.list")) if src_dir.is_dir() else [])
    for f in lists:
        if not f.is_file():
            continue
        for line in f.read_text(encoding="utf-8", errors="replace").splitlines():
            line = re.sub(r"\[[^\]]*\]", " ", line.split("#", 1)[0]).split()
            if len(line) >= 3 and line[0] == "deb":
                entries.append((line[1], [line[2]]))
    entries = [(u, s) for u, s in entries if re.match(r"(https?|file)://", u)]
    for uri, suites in entries:
        if SUITE in suites:
            return uri
    for uri, suites in entries:
        if suites and not any("security" in s or "/updates" in s for s in suites) \
                and "debian" in uri:
            return uri
    raise LabError("no Debian mirror found in /etc/apt/sources.list(.d); set "
                   "SPARKLAB_DEBIAN_MIRROR=URI")


# The root file system's builder: mmdebstrap (apt's resolver and parallel downloads) in about
# 35 s where debootstrap took about 60 (docs/performance.md, "The set-up beside the node image").
# Its merged-usr hook lays out /usr as debootstrap does, instead of installing usrmerge and Perl.
BOOTSTRAP_COMMAND = ["mmdebstrap", "--variant=minbase", "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr"]


def image_hash(plan: Plan) -> str:
    h = hashlib.sha256()
    node_files = {}
    for p in sorted(NODE_DIR.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts:
            node_files[str(p.relative_to(NODE_DIR))] = [
                hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mode & 0o777]
    h.update(json.dumps({
        "suite": SUITE, "bootstrap": BOOTSTRAP_COMMAND, "packages": PACKAGES, "user": plan.user, "uid": USER_UID,
        "image_files": {k: [m, c] for k, (m, c) in IMAGE_FILES.items()},
        "node_files_in_image": NODE_FILES_IN_IMAGE, "masked": MASKED_UNITS,
        "customize": CUSTOMIZE, "dockerfile": DOCKERFILE, "node_files": node_files,
    }, sort_keys=True).encode())
    return h.hexdigest()


def image_tag(h: str) -> str:
    return f"{IMAGE_REPO}:{h[:16]}"


def image_label(ref: str, label: str) -> str | None:
    """An image's label value; None when the image or the label is missing."""
    p = docker("image", "inspect", "--format", "{{json .Config.Labels}}", ref, check=False)
    return (json.loads(p.stdout) or {}).get(label) if p.returncode == 0 else None


def image_exists(h: str) -> bool:
    return image_label(image_tag(h), HASH_LABEL) == h


def _umount_under(path: str) -> None:
    with open("/proc/self/mounts") as fh:
        mnts = [line.split()[1].encode().decode("unicode_escape") for line in fh]
    for m in sorted((m for m in mnts if m == path or m.startswith(path + "/")),
                    key=len, reverse=True):
        subprocess.run(["umount", "-l", m], check=False)


def build_image(plan: Plan, force: bool = False) -> str:
    h = image_hash(plan)
    tag = image_tag(h)
    if not force and image_exists(h):
        docker("tag", tag, f"{IMAGE_REPO}:latest")
        say(f"image {tag} up to date")
        return tag
    if shutil.which("mmdebstrap") is None:
        raise LabError("mmdebstrap not found: run `bash tests/bootstrap.sh` first")
    t = time.monotonic()
    mirror = debian_mirror()
    LAB_DIR.mkdir(mode=0o700, exist_ok=True)
    log = LAB_DIR / "image-build.log"
    work = tempfile.mkdtemp(prefix="sparklab-build-", dir="/var/tmp")
    rootfs = os.path.join(work, "rootfs")
    try:
        say(f"image {tag}: mmdebstrap {SUITE} from {mirror} (about half a minute; log {log})")
        with open(log, "w") as lf:
            p = subprocess.run(BOOTSTRAP_COMMAND + ["--include=" + ",".join(PACKAGES), SUITE, rootfs, mirror],
                               stdout=lf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        if p.returncode != 0:
            tail = "".join(open(log).readlines()[-15:])
            raise LabError(f"mmdebstrap failed ({p.returncode}); tail of {log}:\n{tail}")
        say(f"image {tag}: mmdebstrap done in {time.monotonic() - t:.0f}s; customising")
        for path, (mode, content) in IMAGE_FILES.items():
            dst = Path(rootfs + path)
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_text(content.replace("{user}", plan.user))
            dst.chmod(mode)
        for name, (path, mode) in NODE_FILES_IN_IMAGE.items():
            dst = Path(rootfs + path)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(NODE_DIR / name, dst)
            dst.chmod(mode)
        script = CUSTOMIZE.format(uid=USER_UID, user=plan.user, masked=" ".join(MASKED_UNITS))
        p = subprocess.run(["chroot", rootfs, "/bin/sh", "-c", script], capture_output=True,
                           text=True, stdin=subprocess.DEVNULL,
                           env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"})
        with open(log, "a") as lf:
            lf.write(p.stdout + p.stderr)
        if p.returncode != 0:
            raise LabError(f"customising the rootfs failed:\n{p.stderr.strip()}")
        _umount_under(rootfs)
        say(f"image {tag}: docker import")
        base = f"{IMAGE_REPO}:rootfs-{h[:16]}"
        tar = subprocess.Popen(["tar", "--numeric-owner", "--xattrs", "--xattrs-include=*",
                                "-C", rootfs, "-c", "."], stdout=subprocess.PIPE)
        imp = subprocess.run([DOCKER, "import", "-", base], stdin=tar.stdout,
                             capture_output=True, text=True)
        tar.stdout.close()
        if tar.wait() != 0 or imp.returncode != 0:
            raise LabError(f"docker import failed: {imp.stderr.strip()}")
        dockerfile = DOCKERFILE.format(base=base, label=LABEL, hash_label=HASH_LABEL, hash=h)
        p = subprocess.run([DOCKER, "build", "-q", "-t", tag, "-t", f"{IMAGE_REPO}:latest", "-"],
                           input=dockerfile, capture_output=True, text=True,
                           env={**os.environ, "DOCKER_BUILDKIT": "0"})
        if p.returncode != 0:
            raise LabError(f"docker build failed: {p.stderr.strip()}")
        docker("rmi", base, check=False)
    finally:
        _umount_under(rootfs)
        subprocess.run(["rm", "-rf", "--one-file-system", work], check=False)
    size = docker("image", "inspect", "--format", "{{.Size}}", tag).stdout.strip()
    say(f"image {tag} built in {time.monotonic() - t:.0f}s ({int(size) / 1e6:.0f} MB)")
    prune_old_images(tag)
    return tag


def prune_old_images(current_tag: str) -> None:
    """Drop older lab images no container runs on (an image in use refuses removal), and the
    engine bases (build_engine_base) built on them: those inherit the node image's hash label."""
    current_hash = image_label(current_tag, HASH_LABEL)
    for ref in docker("image", "ls", "--format", "{{.Repository}}:{{.Tag}}",
                      "--filter", f"label={HASH_LABEL}").stdout.split():
        if ref in (current_tag, f"{IMAGE_REPO}:latest") or ref.endswith(":<none>"):
            continue
        if ref.startswith(f"{ENGINE_BASE_REPO}:") and current_hash and image_label(ref, HASH_LABEL) == current_hash:
            continue
        if docker("rmi", ref, check=False).returncode == 0:
            say(f"removed old image {ref}")


# ---------------------------------------------------------------------------------
# Network and containers
# ---------------------------------------------------------------------------------
def ensure_network(plan: Plan) -> None:
    net = plan.docker_network
    info = docker_json("network", "inspect", net)
    if info:
        subnets = [c.get("Subnet") for c in (info[0].get("IPAM") or {}).get("Config") or []]
        if plan.network not in subnets:
            raise LabError(f"docker network {net} exists with subnet {subnets}, the "
                           f"inventory says {plan.network}: run `sparklab down` first")
        return
    docker("network", "create", "--driver", "bridge", "--subnet", plan.network,
           "--label", f"{LABEL}={plan.label}", net)
    say(f"network {net} {plan.network} created")


def container_args(plan: Plan, node: Node, tag: str, h: str) -> list[str]:
    # LABEL overrides the image's own LABEL=1 (both labs share the image).
    args = ["run", "-d", "--name", node.container, "--hostname", node.name,
            "--network", plan.docker_network, "--ip", node.mgmt_ip,
            "--label", f"{LABEL}={plan.label}", "--label", f"{LABEL}.node={node.name}",
            "--label", f"{HASH_LABEL}={h}",
            "--cgroupns", "host", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw",
            "--tmpfs", "/run:rw,nosuid,nodev,exec,mode=755",
            "--tmpfs", "/run/lock:rw,nosuid,nodev,noexec,mode=1777",
            "--security-opt", "seccomp=unconfined",
            "-v", f"{plan.volume(node)}:/var/lib/docker",
            "-v", f"{VLLM_WHEELHOUSE}:{VLLM_WHEELHOUSE_IN_NODE}:ro",
            # Docker's 64 MB /dev/shm is too small for the real vLLM's shared-memory queues; a Spark's
            # is half its memory. A tmpfs: only what is written takes memory.
            "--shm-size", "2g",
            "--sysctl", "net.ipv6.conf.all.disable_ipv6=0",
            "--sysctl", "net.ipv6.conf.default.disable_ipv6=0",
            "--stop-signal", "SIGRTMIN+3"]
    for c in CAPS:
        args += ["--cap-add", c]
    return args + [tag]


def inspect_nodes(plan: Plan) -> dict[str, dict]:
    """node name -> `docker inspect` of its container (absent ones left out)."""
    out = {}
    node_of = {n.container: n.name for n in plan.nodes}
    p = docker("container", "inspect", *node_of, check=False)
    try:
        for c in json.loads(p.stdout or "[]"):
            name = c["Name"].lstrip("/")
            out[node_of.get(name, name)] = c
    except json.JSONDecodeError:
        pass
    return out


def ensure_containers(plan: Plan, tag: str, h: str) -> bool:
    """Create/start the nodes; returns True if any node (re)started."""
    started = False
    info = inspect_nodes(plan)
    for n in plan.nodes:
        c = info.get(n.name)
        if c is None:
            docker("volume", "create", "--label", f"{LABEL}={plan.label}", plan.volume(n))
            # The mount's source must exist (docker would make it root's); the builder fills it in place.
            VLLM_WHEELHOUSE.mkdir(parents=True, exist_ok=True)
            docker(*container_args(plan, n, tag, h))
            say(f"{n.container}: container created ({n.mgmt_ip})")
            started = True
        else:
            labels = c["Config"].get("Labels") or {}
            if labels.get(LABEL) != plan.label:
                raise LabError(f"a container named {n.container} exists that this lab did not "
                               f"create ({LABEL}={labels.get(LABEL)!r}, this lab's is "
                               f"{plan.label!r}); remove it or rename the node")
            ip = ((c["NetworkSettings"].get("Networks") or {}).get(plan.docker_network) or {}) \
                .get("IPAMConfig") or {}
            if ip.get("IPv4Address") != n.mgmt_ip:
                raise LabError(f"{n.name} exists with management IP {ip.get('IPv4Address')}, "
                               f"the inventory says {n.mgmt_ip}: run `sparklab down` first")
            if labels.get(HASH_LABEL) != h:
                say(f"WARNING: {n.name} runs an older node image; `sparklab down && "
                    "sparklab up` to move to the current one")
            st = c["State"]
            if st.get("Paused"):
                docker("unpause", n.container)
                say(f"{n.container}: unpaused")
            elif not st.get("Running"):
                docker("start", n.container)
                say(f"{n.container}: container started again")
                started = True
    info = inspect_nodes(plan)
    for n in plan.nodes:
        n.pid = int(info[n.name]["State"]["Pid"])
        if n.pid <= 0:
            raise LabError(f"{n.name} is not running")
    return started


def node_links(pid: int) -> dict[str, dict]:
    p = run(["nsenter", "-t", str(pid), "-n", "ip", "-j", "-d", "link", "show"])
    return {link["ifname"]: link for link in json.loads(p.stdout)}


def node_addrs(pid: int) -> dict[str, list[str]]:
    p = run(["nsenter", "-t", str(pid), "-n", "ip", "-j", "addr", "show"])
    return {link["ifname"]: [f"{a['local']}/{a['prefixlen']}" for a in link.get("addr_info", [])
                             if a.get("family") == "inet"] for link in json.loads(p.stdout)}


def _is_veth(link: dict | None) -> bool:
    return bool(link) and (link.get("linkinfo") or {}).get("info_kind") == "veth"


def cable_state(plan: Plan) -> list[tuple[Link, Link, bool]]:
    """[(head link, worker link, pair intact)] -- intact: both ends exist, are veths,
    and point at each other."""
    if len(plan.nodes) < 2:
        return []
    a, b = plan.nodes[0], plan.nodes[1]
    la, lb = node_links(a.pid), node_links(b.pid)
    out = []
    for x, y in zip(a.links, b.links, strict=True):
        ea, eb = la.get(x.interface), lb.get(y.interface)
        ok = (_is_veth(ea) and _is_veth(eb) and ea.get("link_index") == eb["ifindex"]
              and eb.get("link_index") == ea["ifindex"])
        out.append((x, y, ok))
    return out


def node_ip_link(node: Node, link: Link, verb: str, *args: str, check: bool = True) -> None:
    """`ip link VERB <interface> ARGS...` on node's cable interface link, in the node's network namespace."""
    run(["nsenter", "-t", str(node.pid), "-n", "ip", "link", verb, link.interface, *args], check=check)


def node_end(node: Node, link: Link) -> list[str]:
    """The `ip link add` words of a node's end of a veth: MTU 1500 like a fresh port (netplan sets
    the MTU), the node's stable MAC for it, in the node's namespace."""
    return ["mtu", "1500", "address", mac_for(node.name, link.interface), "netns", str(node.pid)]


def make_veth(node: Node, link: Link, peer: str, peer_end: list[str]) -> None:
    """A veth whose one end is node's cable interface link and whose other end is peer (peer_end
    its `ip link add` words); both ends down until the caller brings them up. MTU and MAC at
    creation only: a networkd already running in a node may configure the new link (netplan MTU
    9000) at once, and must not be undone."""
    run(["ip", "link", "add", link.interface, *node_end(node, link), "type", "veth", "peer", "name", peer, *peer_end])


def ensure_cable(plan: Plan) -> int:
    """Create missing/broken halves of the direct cable (or, on a switch, the node's ports);
    returns how many it made."""
    if plan.topology == "switch":
        return ensure_switch(plan)
    if len(plan.nodes) < 2:
        return 0
    a, b = plan.nodes[0], plan.nodes[1]

    def make(x: Link, y: Link) -> str:
        for node, link in ((a, x), (b, y)):   # leftovers of a broken pair
            node_ip_link(node, link, "del", check=False)
        make_veth(a, x, y.interface, node_end(b, y))
        for node, link in ((a, x), (b, y)):
            node_ip_link(node, link, "set", "up")
        return f"cable {a.name}:{x.interface} <-> {b.name}:{y.interface} created"

    return remake_broken(cable_state(plan), make)


def remake_broken(states: list[tuple], make) -> int:
    """make(*state) for every state (its last item False) of a cable or switch check that is
    not intact, saying the sentence make returns with the time it took; how many it remade."""
    made = 0
    for *state, ok in states:
        if ok:
            continue
        t = time.monotonic()
        said = make(*state)
        made += 1
        say(f"{said} ({(time.monotonic() - t) * 1000:.0f} ms)")
    return made


# --- The switch stand-in (spark_fabric: switch) ---------------------------------------
# One Linux bridge per cable half (half0, half1, ...) in the lab's own network namespace
# (Plan.switch_netns); each node's cable interface of a half is a veth whose other end is
# a port of that half's bridge.  Every node keeps the real port names (enp1s0f1np1, ...).
def switch_bridge(half: int) -> str:
    return f"half{half}"


def switch_port(node: Node, half: int) -> str:
    """The switch-side end of a node's half: <node>-h<half>, or a digest of it when that is
    longer than a netdev name may be (15 bytes)."""
    name = f"{node.name}-h{half}"
    if len(name) <= 15:
        return name
    return "p" + hashlib.sha256(node.name.encode()).hexdigest()[:10] + f"h{half}"


def switch_links(plan: Plan) -> dict[str, dict]:
    p = run(["ip", "-n", plan.switch_netns, "-j", "-d", "link", "show"], check=False)
    return {link["ifname"]: link for link in json.loads(p.stdout or "[]")} if p.returncode == 0 else {}


def switch_netns_exists(plan: Plan) -> bool:
    return Path("/run/netns", plan.switch_netns).exists()


def port_intact(node_end: dict | None, port: dict | None, bridge: str) -> bool:
    """A node's half is plugged in: both ends are veths pointing at each other, and the
    switch end is a port of its half's bridge."""
    return (_is_veth(node_end) and _is_veth(port) and port.get("master") == bridge
            and node_end.get("link_index") == port["ifindex"] and port.get("link_index") == node_end["ifindex"])


def switch_state(plan: Plan) -> list[tuple[Node, Link, bool]]:
    """[(node, link, plugged in)] for every node's every half."""
    ports = switch_links(plan)
    out = []
    for node in plan.nodes:
        own = node_links(node.pid)
        for half, link in enumerate(node.links):
            out.append((node, link, port_intact(own.get(link.interface), ports.get(switch_port(node, half)),
                                                switch_bridge(half))))
    return out


def ensure_switch(plan: Plan) -> int:
    """The switch stand-in: its namespace and bridges (MTU SWITCH_MTU), and every node's half
    plugged into its bridge; returns how many node halves it (re)made."""
    ns = plan.switch_netns
    if not switch_netns_exists(plan):
        run(["ip", "netns", "add", ns])
        run(["ip", "-n", ns, "link", "set", "lo", "up"])
        say(f"switch namespace {ns} created")
    ports = switch_links(plan)
    for half in range(len(plan.head.links)):
        bridge = switch_bridge(half)
        if bridge not in ports:
            # No STP (the kernel's default): one bridge per half, no loop to break, no listening delay.
            run(["ip", "-n", ns, "link", "add", bridge, "mtu", str(SWITCH_MTU), "type", "bridge"])
            say(f"switch {ns}: bridge {bridge} created (mtu {SWITCH_MTU})")
        run(["ip", "-n", ns, "link", "set", bridge, "mtu", str(SWITCH_MTU), "up"])

    def make(node: Node, link: Link) -> str:
        half = node.links.index(link)
        port, bridge = switch_port(node, half), switch_bridge(half)
        node_ip_link(node, link, "del", check=False)
        run(["ip", "-n", ns, "link", "del", port], check=False)
        # The switch's end at SWITCH_MTU, a port of its half's bridge before the node's end comes up.
        make_veth(node, link, port, ["mtu", str(SWITCH_MTU), "netns", ns])
        run(["ip", "-n", ns, "link", "set", port, "master", bridge, "up"])
        node_ip_link(node, link, "set", "up")
        return f"switch {ns}: {node.name}:{link.interface} plugged into {bridge} as {port}"

    return remake_broken(switch_state(plan), make)


def remove_switch(plan: Plan) -> bool:
    """Delete the switch namespace (its bridges and ports go with it); False when absent."""
    if plan.topology != "switch" or not switch_netns_exists(plan):
        return False
    run(["ip", "netns", "del", plan.switch_netns])
    return True


def wait_systemd(node: Node, timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    state = "?"
    while time.monotonic() < deadline:
        p = docker("exec", node.container, "systemctl", "is-system-running", check=False, timeout=30)
        state = p.stdout.strip() or p.stderr.strip()
        if state in ("running", "degraded"):
            if state == "degraded":
                failed = docker("exec", node.container, "systemctl", "--failed", "--plain",
                                "--no-legend", check=False).stdout.strip()
                say(f"WARNING: {node.name} is degraded; failed units:\n{failed}")
            return state
        if state in ("maintenance", "stopping"):
            break
        time.sleep(0.25)
    raise LabError(f"{node.name}: systemd did not reach running/degraded (last: {state})")


# The per-node sync runs inside the node as root: python3 with the repo's current
# roce_fixture.py as a prelude (so a stale image copy cannot matter).
SYNC = r'''
import base64 as _b64, glob as _glob, json as _json, os as _os, pwd as _pwd

def _write_if(path, content, mode, uid=0, gid=0):
    try:
        with open(path) as fh:
            same = fh.read() == content
    except OSError:
        same = False
    if not same:
        tmp = path + ".sparklab-tmp"
        with open(tmp, "w") as fh:
            fh.write(content)
        _os.rename(tmp, path)
    st = _os.stat(path)
    if st.st_mode & 0o7777 != mode:
        _os.chmod(path, mode)
    if (st.st_uid, st.st_gid) != (uid, gid):
        _os.chown(path, uid, gid)
    return not same

def _sync(d):
    changed = []
    for t in d["trees"]:
        if write_roce_tree(d["root"], t["netdev"], t["ibdev"], t["ipv4"], t["index"], mac=t["mac"]):
            changed.append("roce fixture " + t["ibdev"])
    _os.makedirs("/etc/sparklab", exist_ok=True)
    if _write_if(d["ca_path"], d["ca"], 0o644):
        changed.append("host CA")
    pw = _pwd.getpwnam(d["user"])
    ssh = _os.path.join(pw.pw_dir, ".ssh")
    if not _os.path.isdir(ssh):
        _os.makedirs(ssh, mode=0o700)
        _os.chown(ssh, pw.pw_uid, pw.pw_gid)
    ak = _os.path.join(ssh, "authorized_keys")
    try:
        with open(ak) as fh:
            lines = fh.read().splitlines()
    except FileNotFoundError:
        lines = []
    # Append, never replace: the product adds its own head->worker keys here.
    if d["pubkey"] not in lines:
        lines.append(d["pubkey"])
        changed.append("authorized_keys")
    _write_if(ak, "\n".join(lines) + "\n", 0o600, pw.pw_uid, pw.pw_gid)
    keys = []
    for p in sorted(_glob.glob("/etc/ssh/ssh_host_*_key.pub")):
        with open(p) as fh:
            keys.append(fh.read().split()[:2])
    print(_json.dumps({"changed": changed, "host_keys": keys}))

_sync(_json.loads(_b64.b64decode(DATA)))
'''


def ensure_lab_key() -> str:
    LAB_DIR.mkdir(mode=0o700, exist_ok=True)
    key = LAB_DIR / "id_ed25519"
    if not key.exists():
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C",
             f"sparklab@{socket.gethostname()}", "-f", str(key)])
        say(f"ssh key {key} generated")
    if key.stat().st_mode & 0o777 != 0o600:
        key.chmod(0o600)
    pub = Path(str(key) + ".pub")
    if not pub.exists():
        pub.write_text(run(["ssh-keygen", "-y", "-f", str(key)]).stdout)
    return pub.read_text().strip()


def sync_node(plan: Plan, node: Node, pubkey: str, ca: str) -> list[str]:
    data = {
        "root": plan.sysfs_root, "user": plan.user, "pubkey": pubkey,
        "ca": ca, "ca_path": NODE_CA,
        "trees": [{"netdev": link.interface, "ibdev": rdma_device_for(link.interface),
                   "ipv4": link.ip, "index": node.gid_index, "mac": mac_for(node.name, link.interface)}
                  for link in node.links],
    }
    script = ((NODE_DIR / "roce_fixture.py").read_text().replace(
        'if __name__ == "__main__":', "if False:")
        + f"\nDATA = {base64.b64encode(json.dumps(data).encode()).decode()!r}\n" + SYNC)
    p = docker("exec", "-i", node.container, "python3", "-", input=script, timeout=60)
    res = json.loads(p.stdout.strip().splitlines()[-1])
    node.host_keys = [tuple(k) for k in res["host_keys"]]
    return res["changed"]


def write_known_hosts(plan: Plan, timeout: float = 60) -> bool:
    """known_hosts from ssh-keyscan of every node, each scanned key cross-checked
    against the node's own /etc/ssh/*.pub (read via docker, a trusted channel).
    Host keys are made at a node's first boot, so this is redone at every `up`."""
    ips = [n.mgmt_ip for n in plan.nodes]
    deadline = time.monotonic() + timeout
    while True:
        p = run(["ssh-keyscan", "-T", "5", *ips], check=False, timeout=30)
        scanned: dict[str, set] = {ip: set() for ip in ips}
        lines = []
        for line in p.stdout.splitlines():
            parts = line.split()
            if len(parts) >= 3 and not line.startswith("#") and parts[0] in scanned:
                scanned[parts[0]].add((parts[1], parts[2]))
                lines.append(" ".join(parts[:3]))
        missing = [n for n in plan.nodes if not scanned[n.mgmt_ip]]
        if not missing:
            break
        if time.monotonic() > deadline:   # sshd normally answers once systemd is up
            raise LabError("ssh-keyscan got no host key from " + ", ".join(
                f"{n.name} ({n.mgmt_ip})" for n in missing))
        time.sleep(0.5)
    for n in plan.nodes:
        if not scanned[n.mgmt_ip] <= set(n.host_keys):
            raise LabError(f"{n.name}: scanned host keys differ from /etc/ssh/*.pub in the "
                           "node; something else answers on its address")
    content = "\n".join(sorted(lines)) + "\n"
    plan.state_dir.mkdir(mode=0o700, exist_ok=True)
    kh = plan.state_dir / "known_hosts"
    if kh.exists() and kh.read_text() == content:
        return False
    tmp = kh.with_suffix(".tmp")
    tmp.write_text(content)
    tmp.chmod(0o644)
    tmp.rename(kh)
    return True


def write_ssh_config(plan: Plan) -> None:
    text = "".join(
        f"Host {n.name}\n  HostName {n.mgmt_ip}\n  User {plan.user}\n"
        f"  IdentityFile {LAB_DIR / 'id_ed25519'}\n  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {plan.state_dir / 'known_hosts'}\n  StrictHostKeyChecking yes\n"
        for n in plan.nodes)
    plan.state_dir.mkdir(mode=0o700, exist_ok=True)
    p = plan.state_dir / "ssh_config"
    if not p.exists() or p.read_text() != text:
        p.write_text(text)


def ssh_cmd(plan: Plan, node: Node, *cmd: str) -> list[str]:
    return ["ssh", "-F", "/dev/null", "-i", str(LAB_DIR / "id_ed25519"),
            "-o", f"UserKnownHostsFile={plan.state_dir / 'known_hosts'}",
            "-o", "StrictHostKeyChecking=yes", "-o", "IdentitiesOnly=yes",
            "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
            f"{plan.user}@{node.mgmt_ip}", *cmd]


# ---------------------------------------------------------------------------------
# Commands
# ---------------------------------------------------------------------------------
def cmd_image(plan: Plan, args) -> int:
    check_docker()
    with lab_lock():
        build_image(plan, force=args.force)
    return 0


def cmd_up(plan: Plan, args) -> int:
    check_docker()
    with lab_lock():
        h = image_hash(plan)
        tag = build_image(plan)
        ensure_network(plan)
        ensure_containers(plan, tag, h)
        ensure_cable(plan)
        states = parallel(wait_systemd, plan.nodes)
        say("systemd: " + ", ".join(f"{n.name} {s}" for n, s in zip(plan.nodes, states, strict=True)))
        pubkey = ensure_lab_key()
        ca = HOST_CA.read_text() if HOST_CA.is_file() else ""
        changes = parallel(lambda n: sync_node(plan, n, pubkey, ca), plan.nodes)
        for n, ch in zip(plan.nodes, changes, strict=True):
            if ch:
                say(f"{n.name}: wrote {', '.join(ch)}")
        if write_known_hosts(plan):
            say(f"known_hosts {plan.state_dir / 'known_hosts'} written")
        write_ssh_config(plan)
        procs = [(n, subprocess.Popen(ssh_cmd(plan, n, "sudo", "-n", "true"),
                                      stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True)) for n in plan.nodes]
        for n, p in procs:
            out, err = p.communicate(timeout=60)
            if p.returncode != 0:
                raise LabError(f"{n.name}: ssh {plan.user}@{n.mgmt_ip} sudo -n true failed "
                               f"({p.returncode}): {err.strip()}")
        # A cable half can only vanish with a node restart; re-check after the waits.
        ensure_cable(plan)
    say(f"lab{' ' + plan.name if plan.name else ''} up: {', '.join(f'{n.name} ({n.role}, {n.mgmt_ip})' for n in plan.nodes)}; "
        f"ssh as {plan.user} + sudo OK")
    return 0


def cmd_down(plan: Plan, args) -> int:
    check_docker()
    with lab_lock():
        for kind, names in down_selection(plan).items():
            if not names:
                continue
            if kind == "containers":
                docker("rm", "-f", *names, timeout=120)
                say(f"removed {len(names)} container(s)")
            elif kind == "network":
                docker("network", "rm", *names)
                say(f"removed network {names[0]}")
            elif not args.keep_volumes:
                docker("volume", "rm", *names)
                say(f"removed volume(s) {', '.join(names)}")
        if remove_switch(plan):
            say(f"removed switch namespace {plan.switch_netns}")
        (plan.state_dir / "known_hosts").unlink(missing_ok=True)
        prune_old_images(image_tag(image_hash(plan)))
    say(f"lab{' ' + plan.name if plan.name else ''} down (node image kept)")
    return 0


def down_selection(plan: Plan) -> dict[str, list[str]]:
    """What `down` removes: this lab's containers and volumes, selected by this lab's own
    label value (another lab's carry another), and this lab's network.  For the default lab
    that is what `down` always removed: label 1 and sparklab-mgmt."""
    sel = f"label={LABEL}={plan.label}"
    return {
        "containers": docker("ps", "-aq", "--filter", sel).stdout.split(),
        "network": [plan.docker_network] if docker_json("network", "inspect", plan.docker_network) else [],
        "volumes": docker("volume", "ls", "-q", "--filter", sel).stdout.split(),
    }


def cmd_status(plan: Plan, args) -> int:
    check_docker()
    h = image_hash(plan)
    if plan.name:
        print(f"lab      {plan.name}  ({plan.inventory})")
    print(f"image    {image_tag(h)}  {'present' if image_exists(h) else 'not built'}")
    net = docker_json("network", "inspect", plan.docker_network)
    print(f"network  {plan.docker_network} {plan.network}  {'present' if net else 'absent'}")
    info = inspect_nodes(plan)
    rows = [("NODE", "ROLE", "CONTAINER", "MGMT IP", "SYSTEMD", "DIRECT LINK")]
    for n in plan.nodes:
        c = info.get(n.name)
        state = c["State"]["Status"] if c else "absent"
        sysd, links = "-", "-"
        if c and c["State"].get("Running"):
            n.pid = int(c["State"]["Pid"])
            sysd = docker("exec", n.container, "systemctl", "is-system-running",
                          check=False).stdout.strip() or "?"
            ll, addrs = node_links(n.pid), node_addrs(n.pid)
            parts = []
            for link in n.links:
                e = ll.get(link.interface)
                if not e:
                    parts.append(f"{link.interface}:missing")
                else:
                    st = "UP" if "UP" in e.get("flags", []) else "down"
                    ip4 = ",".join(addrs.get(link.interface, [])) or "no-ip"
                    parts.append(f"{link.interface}:{st}/mtu{e.get('mtu')}/{ip4}")
            links = " ".join(parts)
        if c and labels_hash(c) != h:
            state += "(old image)"
        if plan.name:
            state = f"{n.container} {state}"
        rows.append((n.name, n.role, state, n.mgmt_ip, sysd, links))
    if all(n.pid for n in plan.nodes) and plan.topology == "switch":
        broken = [f"{n.name}:{link.interface}" for n, link, ok in switch_state(plan) if not ok]
        cable = ((f"switch {plan.switch_netns}: every node plugged in" if not broken
                  else f"switch {plan.switch_netns}: UNPLUGGED ({', '.join(broken)}): run `sparklab up`")
                 if switch_netns_exists(plan) else "switch absent: run `sparklab up`")
    elif all(n.pid for n in plan.nodes) and len(plan.nodes) == 2:
        broken = [x.interface for x, _y, ok in cable_state(plan) if not ok]
        cable = "intact" if not broken else f"BROKEN ({', '.join(broken)}): run `sparklab up`"
    else:
        cable = "-"
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
    print(f"cable    {cable}")
    return 0


def labels_hash(c: dict) -> str | None:
    return (c["Config"].get("Labels") or {}).get(HASH_LABEL)


def cmd_shell(plan: Plan, args) -> int:
    node = plan.node(args.node)
    tty = ["-it"] if sys.stdin.isatty() else ["-i"]
    os.execvp(DOCKER, [DOCKER, "exec", *tty, "-e", f"TERM={os.environ.get('TERM', 'xterm')}",
                       *(["-u", args.user] if args.user else []), node.container, "bash", "-l"])
    return 127


def cmd_exec(plan: Plan, args) -> int:
    node = plan.node(args.node)
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise LabError("usage: sparklab exec NODE [-u USER] -- CMD [ARG...]")
    flags = ["-i"]
    if sys.stdin.isatty() and sys.stdout.isatty():
        flags = ["-it"]
    p = subprocess.run([DOCKER, "exec", *flags, *(["-u", args.user] if args.user else []),
                        node.container, *cmd])
    return p.returncode


# The hub stand-in runs inside the head node, on the node's loopback: the head's
# download then talks to 127.0.0.1 exactly as it would talk to the hub, and no
# lab traffic ever leaves the lab.
HUB_DIR_IN_NODE = "/opt/sparklab/hub"
HUB_ROOT_IN_NODE = "/srv/sparklab-hub"
HUB_UNIT = "sparklab-hub"
# The second lab profile's repo (tests/lab/profiles/lab-standin-b.yml: checkpoint.shards, size_bytes).
SECOND_REPO = "sparklab/lab-standin-b-nvfp4"
SECOND_REPO_SHARDS = 2
SECOND_REPO_GIB = 0.25


def cmd_hub(plan: Plan, args) -> int:
    head = plan.head
    if args.action == "stop":
        docker("exec", head.container, "systemctl", "stop", HUB_UNIT, check=False)
        say(f"hub stand-in stopped on {head.name}")
        return 0
    repo_dir = f"{HUB_ROOT_IN_NODE}/{args.repo}"
    docker("exec", head.container, "mkdir", "-p", HUB_DIR_IN_NODE, repo_dir)
    for name in ("hubstub.py", "make_checkpoint.py"):
        docker("cp", str(HERE / "hub" / name), f"{head.container}:{HUB_DIR_IN_NODE}/{name}")
    t0 = time.monotonic()
    docker("exec", head.container, "python3", f"{HUB_DIR_IN_NODE}/make_checkpoint.py", repo_dir,
           "--shards", str(args.shards), "--total-gib", str(args.total_gib), timeout=900)
    say(f"checkpoint {args.repo} ({args.shards} shards, {args.total_gib} GiB) ready in {time.monotonic() - t0:.1f}s")
    # The second lab profile's checkpoint (tests/lab/profiles/lab-standin-b.yml), other bytes
    # (another seed), served beside the first: switching the served model downloads it.
    also = []
    if args.second_repo and args.second_repo != args.repo:
        second_dir = f"{HUB_ROOT_IN_NODE}/{args.second_repo}"
        t0 = time.monotonic()
        docker("exec", head.container, "python3", f"{HUB_DIR_IN_NODE}/make_checkpoint.py", second_dir,
               "--shards", str(SECOND_REPO_SHARDS), "--total-gib", str(SECOND_REPO_GIB), "--seed", "1", timeout=900)
        say(f"checkpoint {args.second_repo} ({SECOND_REPO_SHARDS} shards, {SECOND_REPO_GIB} GiB) ready in "
            f"{time.monotonic() - t0:.1f}s")
        also = ["--also", f"{second_dir}={args.second_repo}"]
    # The real vLLM's tiny Llama (tests/lab/vllm/setup.sh), when built: its own repo for lab-vllm.
    if (VLLM_MODEL / "config.json").is_file():
        vllm_dir = f"{HUB_ROOT_IN_NODE}/{VLLM_REPO}"
        docker("exec", head.container, "rm", "-rf", vllm_dir)
        docker("exec", head.container, "mkdir", "-p", vllm_dir)
        docker("cp", f"{VLLM_MODEL}/.", f"{head.container}:{vllm_dir}")
        also += ["--also", f"{vllm_dir}={VLLM_REPO}"]
        say(f"checkpoint {VLLM_REPO} (the real vLLM's tiny Llama, {VLLM_MODEL}) published")
    docker("exec", head.container, "systemctl", "stop", HUB_UNIT, check=False)
    docker("exec", head.container, "systemctl", "reset-failed", HUB_UNIT, check=False)
    stub = ["python3", f"{HUB_DIR_IN_NODE}/hubstub.py", "--root", repo_dir, "--repo", args.repo,
            "--host", "127.0.0.1", "--port", str(args.port), "--index-cache", f"{HUB_ROOT_IN_NODE}/.index-cache.json", *also]
    if args.throttle_bytes_per_s:
        stub += ["--throttle-bytes-per-s", str(args.throttle_bytes_per_s)]
    props = [f"--property=Environment=HUBSTUB_TOKEN={args.token}"] if args.token else []
    docker("exec", head.container, "systemd-run", f"--unit={HUB_UNIT}", "--quiet", *props, *stub)
    probe = ("import sys,time,urllib.request\n"
             "for _ in range(120):\n"
             "    try:\n"
             f"        urllib.request.urlopen('http://127.0.0.1:{args.port}/_stub/info', timeout=2); sys.exit(0)\n"
             "    except Exception:\n"
             "        time.sleep(0.5)\n"
             "sys.exit(1)\n")
    if docker("exec", head.container, "python3", "-c", probe, check=False, timeout=120).returncode != 0:
        logs = docker("exec", head.container, "journalctl", "-u", HUB_UNIT, "-n", "30", "--no-pager", check=False).stdout
        raise LabError(f"hub stand-in did not answer on {head.name}:127.0.0.1:{args.port}:\n{logs}")
    say(f"hub stand-in created on {head.name}: endpoint http://127.0.0.1:{args.port} (inside the node), repo {args.repo}"
        + "".join(f" and {item.split('=', 1)[1]}" for item in also[1::2]))
    return 0


# The lab has no registry and no internet images: the image runtime's base is the
# host's own node image (a Debian with python3), streamed into the head's docker.
BASE_IMAGE_TAG = "sparklab/base:1"
# The image runtime's base WITH an engine, for the lab tests that serve an image profile (an
# override of the lab-image profile's runtime.image.build.base): the node image plus a venv of
# the stand-in engine and the Ray sparkctl pins, as a vendor's engine image holds its engine and
# Ray. Built on this machine's docker (layers cached), loaded into a node like the plain base.
ENGINE_BASE_TAG = "sparklab/base:engine"
ENGINE_BASE_REPO = "sparkctl-lab-engine-base"
# Its own inputs' digest (it inherits the node image's HASH_LABEL, which prune_old_images reads).
ENGINE_BASE_LABEL = "org.sparkctl.lab.engine-base-hash"
ENGINE_BASE_VENV = "/opt/sparklab-engine-venv"
ENGINE_WHEELS = REPO / "tests" / "lab" / "engine" / "dist"
ENGINE_BASE_DOCKERFILE = """\
FROM {source}
COPY wheels/ /tmp/sparklab-wheels/
# pip reaches the package index through this machine's TLS proxy: its CA, for the build only.
RUN python3 -m venv {venv} \\
 && PIP_CERT=/tmp/sparklab-wheels/host-ca.crt {venv}/bin/pip install --no-cache-dir --disable-pip-version-check \\
      --find-links /tmp/sparklab-wheels "{ray}" "sparklab-engine=={engine}" \\
 && rm -rf /tmp/sparklab-wheels
ENV PATH={venv}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
LABEL {label}={digest}
"""


def ray_requirement() -> str:
    """The Ray sparkctl installs for a Ray topology (the collection's one definition of it)."""
    text = (REPO / "collections" / "ansible_collections" / "sparkctl" / "spark" / "plugins" / "plugin_utils"
            / "profile_engine.py").read_text()
    match = re.search(r'^RAY_REQUIREMENT = "([^"]+)"', text, re.M)
    if not match:
        raise LabError("RAY_REQUIREMENT not found in plugins/plugin_utils/profile_engine.py")
    return match.group(1)


def build_engine_base(source: str, engine_version: str) -> str:
    """The engine base image on this machine's docker, built when its inputs changed; its tag."""
    wheels = sorted(ENGINE_WHEELS.glob("sparklab_engine-*.whl"))
    if not any(w.name.startswith(f"sparklab_engine-{engine_version}-") for w in wheels):
        raise LabError(f"no sparklab_engine {engine_version} wheel in {ENGINE_WHEELS}: run `bash tests/bootstrap.sh`")
    ray = ray_requirement()
    source_id = docker("image", "inspect", "--format", "{{.Id}}", source).stdout.strip()
    h = hashlib.sha256(json.dumps({
        "source": source_id, "ray": ray, "engine": engine_version, "venv": ENGINE_BASE_VENV,
        "wheels": {w.name: hashlib.sha256(w.read_bytes()).hexdigest() for w in wheels},
        "dockerfile": ENGINE_BASE_DOCKERFILE}, sort_keys=True).encode()).hexdigest()
    tag = f"{ENGINE_BASE_REPO}:{h[:16]}"
    if image_label(tag, ENGINE_BASE_LABEL) == h:
        say(f"engine base {tag} up to date")
        return tag
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sparklab-engine-base-") as ctx:
        (Path(ctx) / "wheels").mkdir()
        for wheel in wheels:
            shutil.copy2(wheel, Path(ctx) / "wheels" / wheel.name)
        shutil.copy2(HOST_CA, Path(ctx) / "wheels" / "host-ca.crt")
        (Path(ctx) / "Dockerfile").write_text(ENGINE_BASE_DOCKERFILE.format(
            source=source, venv=ENGINE_BASE_VENV, ray=ray, engine=engine_version,
            label=ENGINE_BASE_LABEL, digest=h))
        build = subprocess.run([DOCKER, "build", "-q", "-t", tag, ctx], capture_output=True, text=True)
    if build.returncode != 0:
        raise LabError(f"engine base build failed: {build.stderr.strip()[-2000:]}")
    say(f"engine base {tag} built ({ray}, sparklab-engine {engine_version}) "
        f"in {time.monotonic() - t0:.1f}s")
    return tag


def cmd_base_image(plan: Plan, args) -> int:
    check_docker()
    node = plan.node(args.node) if args.node else plan.head
    # This checkout's image, not :latest, which a build for the other lab may move.
    source = image_tag(image_hash(plan))
    if not image_exists(image_hash(plan)):
        source = f"{IMAGE_REPO}:latest"
    tag = args.tag or (ENGINE_BASE_TAG if args.engine else BASE_IMAGE_TAG)
    if docker("exec", node.container, "docker", "version", check=False).returncode != 0:
        raise LabError(f"{node.name}: no running docker to load {tag} into; install it first: ansible-playbook "
                       "playbooks/runtime.yml -e spark_model_profile=lab-image --tags engine_image_docker")
    if args.engine:
        source = build_engine_base(source, args.engine)
    want = docker("image", "inspect", "--format", "{{.Id}}", source).stdout.strip()
    have = docker("exec", node.container, "docker", "image", "inspect", "--format", "{{.Id}}", tag,
                  check=False).stdout.strip()
    if have == want:
        say(f"{node.name}: {tag} up to date ({want[:19]})")
        return 0
    t0 = time.monotonic()
    save = subprocess.Popen([DOCKER, "save", source], stdout=subprocess.PIPE)
    load = subprocess.run([DOCKER, "exec", "-i", node.container, "docker", "load"], stdin=save.stdout,
                          capture_output=True, text=True)
    save.stdout.close()
    if save.wait() != 0 or load.returncode != 0:
        raise LabError(f"{node.name}: docker save {source} | docker load failed: {load.stderr.strip()}")
    docker("exec", node.container, "docker", "tag", source, tag)
    docker("exec", node.container, "docker", "rmi", source, check=False)
    say(f"{node.name}: {tag} loaded from {source} ({want[:19]}) in {time.monotonic() - t0:.1f}s")
    return 0


def up_inventory(args) -> Path | None:
    """-i, else for `up --topology switch` without $SPARKLAB_INVENTORY the switch lab's inventory."""
    if args.inventory is None and getattr(args, "topology", None) == "switch" and not os.environ.get(INVENTORY_ENV):
        return SWITCH_INVENTORY
    return args.inventory


def check_up_request(plan: Plan, topology: str | None, nodes: int | None) -> None:
    """`up --topology T --nodes N` builds the lab the inventory describes: refuse, naming the
    inventory and the fix, when it describes another."""
    if topology is not None and topology != plan.topology:
        raise LabError(f"--topology {topology}, but {plan.inventory} says spark_fabric: {plan.topology}; "
                       "set spark_fabric in its group_vars/all, or pick the inventory with -i")
    if nodes is not None and nodes != len(plan.nodes):
        raise LabError(f"--nodes {nodes}, but {plan.inventory} has {len(plan.nodes)} "
                       f"({', '.join(n.name for n in plan.nodes)}); add or remove hosts in its hosts.yml "
                       "(spark_workers, each with ansible_host, spark_link and sparklab_roce_gid_index)")


def exit_through_cleanups_on_sigterm() -> None:
    """SIGTERM ends the tool the way Ctrl-C does, through its `finally` blocks: an image build
    that tests/suite.sh stops half-way (it builds in the background beside the venv's set-up)
    unmounts and removes its root file system instead of leaving it under /var/tmp."""
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))


def main(argv: list[str] | None = None) -> int:
    exit_through_cleanups_on_sigterm()
    ap = argparse.ArgumentParser(
        prog="sparklab", description="The sparkctl two-node lab (systemd containers "
        "standing in for two DGX Sparks joined by a direct ConnectX-7 cable).")
    ap.add_argument("-i", "--inventory", type=Path, default=None,
                    help=f"inventory directory with hosts.yml, or its hosts file (default: ${INVENTORY_ENV}, "
                    "else inventories/lab)")
    sub = ap.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="build/start everything (idempotent)")
    up.add_argument("--topology", choices=TOPOLOGIES, default=None,
                    help="check the inventory's spark_fabric is this; switch without -i takes inventories/lab-switch")
    up.add_argument("--nodes", type=int, default=None, help="check the inventory has this many nodes")
    up.set_defaults(fn=cmd_up)
    d = sub.add_parser("down", help="remove containers, network, volumes (keeps the image)")
    d.add_argument("--keep-volumes", action="store_true",
                   help="keep the nodes' /var/lib/docker volumes")
    d.set_defaults(fn=cmd_down)
    sub.add_parser("status", help="short table of the lab").set_defaults(fn=cmd_status)
    im = sub.add_parser("image", help="build the node image only")
    im.add_argument("--force", action="store_true", help="rebuild even if up to date")
    im.set_defaults(fn=cmd_image)
    sh = sub.add_parser("shell", help="interactive bash in a node")
    sh.add_argument("node")
    sh.add_argument("-u", "--user", help="user inside the node (default root)")
    sh.set_defaults(fn=cmd_shell)
    ex = sub.add_parser("exec", help="run a command in a node: exec NODE -- CMD...")
    ex.add_argument("-u", "--user", help="user inside the node (default root)")
    ex.add_argument("node")
    ex.add_argument("cmd", nargs=argparse.REMAINDER)
    ex.set_defaults(fn=cmd_exec)
    hub = sub.add_parser("hub", help="start/stop the hub stand-in inside the head node (loopback only)")
    hub.add_argument("action", choices=["start", "stop"])
    hub.add_argument("--repo", default="sparklab/lab-standin-nvfp4", help="repo id served")
    hub.add_argument("--second-repo", default=SECOND_REPO,
                     help="a second repo served beside --repo (the second lab profile's); '' for none")
    hub.add_argument("--shards", type=int, default=8)
    hub.add_argument("--total-gib", type=float, default=1.0)
    hub.add_argument("--port", type=int, default=8765)
    hub.add_argument("--throttle-bytes-per-s", type=int, default=0, help="WAN-like rate; 0 = unthrottled")
    hub.add_argument("--token", default="", help="require this bearer token (a lab token, not a real one)")
    hub.set_defaults(fn=cmd_hub)
    bi = sub.add_parser("base-image", help="load the node image into a node's docker as the image "
                        "runtime's base (needs docker in the node, e.g. after playbooks/runtime.yml)")
    bi.add_argument("--node", help="node (default the head)")
    bi.add_argument("--tag", help=f"tag inside the node (default {BASE_IMAGE_TAG}, with --engine {ENGINE_BASE_TAG})")
    bi.add_argument("--engine", metavar="VERSION",
                    help="with the stand-in engine VERSION (e.g. 0.3.0) and sparkctl's Ray in a venv on PATH, "
                         "built on this machine first: a base an image profile can serve from")
    bi.set_defaults(fn=cmd_base_image)
    args = ap.parse_args(argv)
    try:
        if os.geteuid() != 0 and args.command in ("up", "down", "image", "status"):
            raise LabError("sparklab needs root (mmdebstrap, nsenter, ip link)")
        plan = load_plan(inventory_path(up_inventory(args)))
        if args.command == "up":
            check_up_request(plan, args.topology, args.nodes)
        return args.fn(plan, args)
    except LabError as e:
        print(f"sparklab: error: {e}", file=sys.stderr)
        return 1
    except subprocess.TimeoutExpired as e:
        print(f"sparklab: error: timed out: {' '.join(map(str, e.cmd))}", file=sys.stderr)
        return 1

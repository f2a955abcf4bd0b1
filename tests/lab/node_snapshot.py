"""What a lab node holds, in one JSON document, to compare the node before sparkctl with the
node after `sparkctl teardown` (tests/integration/test_lab_teardown.py).

Per node: every file, directory and link under /etc, /opt, /srv, /var/lib/sparkctl* and the
home directories (type, mode, owner, size and sha256 of regular files, link targets); unit
files with their enablement; installed packages with versions; users and groups with their
members; nftables tables; each interface's MTU and addresses; lingering users.

    python tests/lab/node_snapshot.py -i inventories/lab-twin snap.json      # take one
    python tests/lab/node_snapshot.py -i inventories/lab-twin --diff snap.json # compare now with it
    python tests/lab/node_snapshot.py -i inventories/lab --diff --teardown     # with the lab's fresh one,
                                                                               # allowing TEARDOWN_ALLOWED

Without FILE, the lab's fresh snapshot: .lab/<sparklab_name or "sparklab">-fresh-snapshot.json,
which molecule's create (molecule/resources/create.yml) takes when it creates the lab.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SPARKLAB = REPO / "tests" / "lab" / "sparklab"

# A file the node's administrator puts in a directory sparkctl created (Docker's, which sparkctl installs
# for the image runtime), before the teardown: tests/integration/test_lab_teardown.py.
KEPT_USER_FILE = "/etc/docker/certs.d/registry.lab:5000/ca.crt"

# What may differ between a fresh node and the same node after converge, tests and `sparkctl
# teardown`, each with why it is not sparkctl's to take off (fnmatch patterns on "section key").
TEARDOWN_ALLOWED = {
    # Ansible's own working directories in the login user's home: every Ansible run over SSH
    # makes them (the teardown's own run too), whatever its playbook.
    "files /home/*/.ansible": "Ansible's remote temporary directory",
    "files /home/*/.ansible/*": "Ansible's remote temporary directory",
    "files /home/*/.ansible_async": "Ansible's async job results (its async tasks)",
    "files /home/*/.ansible_async/*": "Ansible's async job results (its async tasks)",
    # Bookkeeping that package installs and purges, and user and group changes, rewrite in
    # place: the linker's cache, and the backup copies of /etc/group, /etc/gshadow, /etc/passwd
    # and /etc/shadow (a package such as iperf3 adds its system user on install and its purge
    # removes it again; the files themselves are compared).
    "files /etc/ld.so.cache": "rebuilt by ldconfig on each package install and purge",
    "files /etc/group-": "the previous /etc/group, rewritten by each group change",
    "files /etc/gshadow-": "the previous /etc/gshadow, rewritten by each group change",
    "files /etc/passwd-": "the previous /etc/passwd, rewritten by each user change",
    "files /etc/shadow-": "the previous /etc/shadow, rewritten by each user change",
    # Docker's state in the kernel, which dockerd makes when it starts and leaves when its
    # package is purged (a reboot clears it): its bridge and the iptables table it fills. The
    # image runtime's tests have sparkctl install Docker on the lab; DGX OS ships it, so
    # there sparkctl never installs or purges it.
    "links docker0": "Docker's bridge, left in the kernel after docker.io is purged",
    "nft_tables table ip filter": "the iptables table Docker fills, left in the kernel after docker.io is purged",
    # The administrator's file and the directories holding it: the teardown keeps what it did not put there.
    **{"files " + path: "the node administrator's own file, which the teardown keeps"
       for path in ("/etc/docker", "/etc/docker/certs.d", "/etc/docker/certs.d/registry.lab:5000", KEPT_USER_FILE)},
}

# The probe runs in the node's own python3 (the lab image has it; a snapshot must not install anything).
PROBE = r"""
import grp, hashlib, json, os, pwd, stat, subprocess
ROOTS = ["/etc", "/opt", "/srv", "/var/lib/sparkctl", "/var/lib/sparkctl-api-proxy"] + sorted(
    {p.pw_dir for p in pwd.getpwall() if p.pw_dir.startswith("/home/")})
SKIP = {"/opt/sparklab"}  # the lab's own fixtures (fake sysfs, engine stand-in)
files = {}
for root in ROOTS:
    if not os.path.lexists(root):
        continue
    for top, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if os.path.join(top, d) not in SKIP)
        for name in [""] + sorted(names) + [d for d in dirs if os.path.islink(os.path.join(top, d))]:
            path = os.path.join(top, name) if name else top
            info = os.lstat(path)
            entry = {"mode": "%04o" % stat.S_IMODE(info.st_mode), "uid": info.st_uid, "gid": info.st_gid}
            if stat.S_ISLNK(info.st_mode):
                entry.update(type="link", target=os.readlink(path))
            elif stat.S_ISDIR(info.st_mode):
                entry.update(type="dir")
            elif stat.S_ISSOCK(info.st_mode):
                entry.update(type="socket")
            elif stat.S_ISREG(info.st_mode):
                digest = hashlib.sha256()
                try:
                    with open(path, "rb") as handle:
                        for block in iter(lambda: handle.read(1 << 20), b""):
                            digest.update(block)
                    entry.update(type="file", size=info.st_size, sha256=digest.hexdigest())
                except OSError as exc:
                    entry.update(type="file", size=info.st_size, error=str(exc))
            else:
                entry.update(type="other")
            files[path] = entry
def run(*argv):
    proc = subprocess.run(argv, capture_output=True, text=True)
    return proc.stdout if proc.returncode == 0 else ""
units = {}
for line in run("systemctl", "list-unit-files", "--no-legend", "--no-pager").splitlines():
    fields = line.split()
    if len(fields) >= 2 and fields[1] not in ("transient", "generated"):
        units[fields[0]] = fields[1]
packages = {}
for line in run("dpkg-query", "-W", "-f", "${Package}\t${Version}\t${db:Status-Abbrev}\n").splitlines():
    name, version, status = (line.split("\t") + ["", ""])[:3]
    if status[1:2] == "i" or status[:1] == "r":
        packages[name] = version + ("" if status[1:2] == "i" else " (" + status.strip() + ")")
links = {}
for entry in json.loads(run("ip", "-j", "addr", "show") or "[]"):
    links[entry["ifname"]] = {"mtu": entry.get("mtu"), "addresses": sorted(
        "%s/%s" % (a["local"], a["prefixlen"]) for a in entry.get("addr_info", []) if "local" in a)}
linger = sorted(os.listdir("/var/lib/systemd/linger")) if os.path.isdir("/var/lib/systemd/linger") else []
print(json.dumps({
    "files": files,
    "units": units,
    "packages": packages,
    "users": {p.pw_name: {"uid": p.pw_uid, "home": p.pw_dir, "shell": p.pw_shell} for p in pwd.getpwall()},
    "groups": {g.gr_name: {"gid": g.gr_gid, "members": sorted(g.gr_mem)} for g in grp.getgrall()},
    "nft_tables": sorted(line.strip() for line in run("nft", "list", "tables").splitlines() if line.strip()),
    "links": links,
    "linger": linger,
}, sort_keys=True))
"""


def _plan(inventory: Path):
    """The lab's plan, as the lab tool reads it from the inventory (directory or hosts.yml)."""
    sys.path.insert(0, str(SPARKLAB.parent))
    import sparklab  # noqa: PLC0415  (tests/lab/sparklab.py, the lab's one reading of an inventory)

    path = sparklab.inventory_path(inventory)
    return sparklab.load_plan(path if path.is_file() else path / "hosts.yml")


def lab_nodes(inventory: Path) -> list[str]:
    """The lab's node names."""
    return [node.name for node in _plan(inventory).nodes]


def lab_name(inventory: Path) -> str:
    """The lab's sparklab_name ("" for the default lab)."""
    return _plan(inventory).name


def fresh_path(inventory: Path) -> Path:
    """Where the snapshot of the lab's nodes as the lab tool created them is kept."""
    return REPO / ".lab" / f"{lab_name(inventory) or 'sparklab'}-fresh-snapshot.json"


def snapshot_node(node: str, inventory: Path | None = None) -> dict:
    argv = [sys.executable, str(SPARKLAB)] + (["-i", str(inventory)] if inventory else []) + [
        "exec", node, "--", "python3", "-c", PROBE]
    proc = subprocess.run(argv, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout)


def snapshot(nodes, inventory: Path | None = None) -> dict[str, dict]:
    return {node: snapshot_node(node, inventory) for node in nodes}


def _flatten(section: str, value) -> dict[str, str]:
    """section's items as 'section KEY' -> a comparable text. Sockets are left out: one lives as
    long as the process that listens on it (an SSH ControlMaster's ends on its own after
    ControlPersist), so it comes and goes on an unchanged node; the units are compared."""
    if isinstance(value, dict):
        return {f"{section} {key}": json.dumps(item, sort_keys=True) for key, item in value.items()
                if not (isinstance(item, dict) and item.get("type") == "socket")}
    return {f"{section} {item}": "present" for item in value}


def differences(before: dict[str, dict], after: dict[str, dict], allow: dict[str, str] | None = None) -> list[str]:
    """Each item of after that differs from before (added, removed or changed), as
    'node: section key: what', minus those an allow-list pattern (fnmatch on 'section key',
    node-independent) matches."""
    allow = allow or {}
    lines = []
    for node in sorted(set(before) | set(after)):
        was, now = {}, {}
        for section in sorted(set(before.get(node, {})) | set(after.get(node, {}))):
            was.update(_flatten(section, before.get(node, {}).get(section, {})))
            now.update(_flatten(section, after.get(node, {}).get(section, {})))
        for key in sorted(set(was) | set(now)):
            if was.get(key) == now.get(key) or any(fnmatch.fnmatchcase(key, pattern) for pattern in allow):
                continue
            what = "added" if key not in was else "removed" if key not in now else f"changed: {was[key]} -> {now[key]}"
            lines.append(f"{node}: {key}: {what}")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-i", "--inventory", type=Path, required=True, help="the lab's inventory (directory or hosts.yml)")
    parser.add_argument("--diff", action="store_true", help="compare the nodes now with FILE instead of writing it")
    parser.add_argument("--teardown", action="store_true",
                        help="with --diff: leave out what TEARDOWN_ALLOWED says a teardown may leave")
    parser.add_argument("file", type=Path, nargs="?", help="default: the lab's fresh snapshot")
    args = parser.parse_args(argv)
    path = args.file or fresh_path(args.inventory)
    if args.diff and not path.is_file():
        print(f"no snapshot at {path}: take one of the fresh nodes right after `sparklab up` created them, "
              f"before any run (python tests/lab/node_snapshot.py -i {args.inventory} {path})", file=sys.stderr)
        return 2
    nodes = lab_nodes(args.inventory)
    now = snapshot(nodes, args.inventory)
    if args.diff:
        lines = differences(json.loads(path.read_text()), now, TEARDOWN_ALLOWED if args.teardown else None)
        print("\n".join(lines) or f"no difference from {path} on {', '.join(nodes)}")
        return 1 if lines else 0
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(now, sort_keys=True) + "\n")
    print(f"{path}: {', '.join(nodes)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

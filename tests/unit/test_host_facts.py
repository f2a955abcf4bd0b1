"""sparkctl.spark.host_facts: /proc text in, spark_host_facts fact out.

The /proc samples are hand-written to the kernel's formats; see fixtures/proc/README.md.
"""

from __future__ import annotations

import collections
import json
import os
import socket
from pathlib import Path

import module_runner
import pytest
from ansible_collections.sparkctl.spark.plugins.module_utils import host
from ansible_collections.sparkctl.spark.plugins.modules import host_facts

FIXTURES = Path(__file__).parent / "fixtures" / "proc"
KIB = 1024

StatVfs = collections.namedtuple("StatVfs", "f_blocks f_bavail f_frsize")

LISTENING = [
    {"proto": "tcp", "address": "0.0.0.0", "port": 22, "inode": 24153},
    {"proto": "tcp6", "address": "::", "port": 22, "inode": 24155},
    {"proto": "tcp", "address": "127.0.0.53", "port": 53, "inode": 18231},
    {"proto": "tcp", "address": "127.0.0.1", "port": 631, "inode": 31377},
    {"proto": "tcp6", "address": "::1", "port": 631, "inode": 31378},
    {"proto": "tcp", "address": "192.168.100.10", "port": 6379, "inode": 51234},
    {"proto": "tcp6", "address": "::ffff:127.0.0.1", "port": 8000, "inode": 77001},
    {"proto": "tcp6", "address": "fe80::4ebb:47ff:fe2e:11a3", "port": 8265, "inode": 77002},
]


def fixture(name):
    return (FIXTURES / name).read_text()


# --- meminfo -------------------------------------------------------------------------


def test_meminfo_of_a_gb10_host_in_bytes():
    assert host.parse_meminfo(fixture("meminfo_gb10.txt")) == {
        "mem_total_bytes": 125489508 * KIB,
        "mem_free_bytes": 110514576 * KIB,
        "mem_available_bytes": 118606228 * KIB,
        "swap_total_bytes": 16777212 * KIB,
        "swap_free_bytes": 16777212 * KIB,
        "cma_total_bytes": 0,
        "cma_free_bytes": 0,
    }


def test_meminfo_of_a_small_host_without_swap():
    assert host.parse_meminfo(fixture("meminfo_small.txt")) == {
        "mem_total_bytes": 2014812 * KIB,
        "mem_free_bytes": 153484 * KIB,
        "mem_available_bytes": 1102356 * KIB,
        "swap_total_bytes": 0,
        "swap_free_bytes": 0,
        "cma_total_bytes": None,
        "cma_free_bytes": None,
    }


def test_meminfo_fields_the_kernel_does_not_print_are_null():
    facts = host.parse_meminfo("MemTotal:        2014812 kB\nMemFree:          153484 kB\n")

    assert (facts["mem_available_bytes"], facts["swap_total_bytes"]) == (None, None)
    assert host.parse_meminfo(None)["mem_total_bytes"] is None


# --- disks ---------------------------------------------------------------------------


def test_nearest_existing_ancestor(tmp_path):
    (tmp_path / "models").mkdir()

    assert host.nearest_existing_path(str(tmp_path / "models" / "solar" / "shards")) == str(tmp_path / "models")
    assert host.nearest_existing_path(str(tmp_path / "models")) == str(tmp_path / "models")
    assert host.nearest_existing_path("/") == "/"


def test_mountinfo_parsing_unescapes_and_keeps_order():
    mounts = host.parse_mountinfo(fixture("mountinfo.txt"))

    assert mounts[2] == {"mount_point": "/", "device": "/dev/nvme0n1p2", "fstype": "ext4"}
    assert mounts[5] == {"mount_point": "/data/models cache", "device": "tmpfs", "fstype": "tmpfs"}
    assert len(mounts) == 8


@pytest.mark.parametrize(
    "path, mount_point, device",
    [
        ("/data/models/solar", "/data", "/dev/nvme1n1p1"),
        ("/data", "/data", "/dev/nvme1n1p1"),
        ("/database", "/", "/dev/nvme0n1p2"),
        ("/data/models cache/x", "/data/models cache", "tmpfs"),
        ("/boot/efi", "/boot/efi", "/dev/nvme0n1p1"),
        ("/srv/weights", "/srv", "/dev/mapper/vg0-srv"),
        ("/home/spark", "/", "/dev/nvme0n1p2"),
    ],
)
def test_longest_mount_prefix_wins_and_later_mounts_hide_earlier(path, mount_point, device):
    mount = host.mount_of(path, host.parse_mountinfo(fixture("mountinfo.txt")))

    assert (mount["mount_point"], mount["device"]) == (mount_point, device)


def test_disk_of_a_checkpoint_dir_that_does_not_exist_yet(tmp_path):
    target = tmp_path / "models" / "Solar-Open2-250B-Nota-NVFP4"
    seen = []

    def statvfs(path):
        seen.append(path)
        return StatVfs(f_blocks=1000, f_bavail=250, f_frsize=4096)

    mounts = [{"mount_point": "/", "device": "/dev/nvme0n1p2", "fstype": "ext4"}]
    facts = host.disk_facts(str(target), mounts, statvfs)

    assert facts == {
        "path": str(target),
        "checked_path": str(tmp_path),
        "exists": False,
        "total_bytes": 4096000,
        "free_bytes": 1024000,
        "device": "/dev/nvme0n1p2",
        "mount_point": "/",
        "fstype": "ext4",
        "used_bytes": 0,
    }
    assert seen == [str(tmp_path)]


def test_disk_statvfs_on_a_real_directory(tmp_path):
    (tmp_path / "cache").mkdir()
    expected = os.statvfs(str(tmp_path / "cache"))

    facts = host.disk_facts(str(tmp_path / "cache" / "flashinfer"), [])

    assert facts["checked_path"] == str(tmp_path / "cache")
    assert facts["exists"] is False
    assert facts["total_bytes"] == expected.f_blocks * expected.f_frsize
    assert 0 <= facts["free_bytes"] <= facts["total_bytes"]
    assert (facts["device"], facts["mount_point"]) == (None, None)


def test_disk_of_an_existing_path(tmp_path):
    facts = host.disk_facts(str(tmp_path), [], lambda path: StatVfs(10, 3, 512))

    assert (facts["exists"], facts["checked_path"], facts["total_bytes"], facts["free_bytes"]) == (True, str(tmp_path), 5120, 1536)


def test_used_bytes_counts_what_is_already_in_place(tmp_path):
    ckpt = tmp_path / "ckpt"
    (ckpt / "sub").mkdir(parents=True)
    (ckpt / "a.safetensors").write_bytes(b"x" * 300_000)
    (ckpt / "sub" / "b.json").write_bytes(b"y" * 5_000)
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"z" * 1_000_000)
    (ckpt / "link.bin").symlink_to(outside)  # a link's target is not part of the tree
    (ckpt / "linkdir").symlink_to(tmp_path)

    expected = sum(os.lstat(p).st_blocks * 512 for p in (ckpt / "a.safetensors", ckpt / "sub" / "b.json", ckpt / "link.bin"))
    assert host.allocated_bytes(str(ckpt)) == expected
    assert 300_000 <= expected < 1_000_000
    assert host.disk_facts(str(ckpt), [])["used_bytes"] == expected
    assert host.allocated_bytes(str(tmp_path / "missing")) == 0


def test_disk_statvfs_failure_gives_nulls(tmp_path):
    def statvfs(path):
        raise PermissionError(13, "Permission denied", path)

    facts = host.disk_facts(str(tmp_path), [], statvfs)

    assert (facts["total_bytes"], facts["free_bytes"]) == (None, None)


# --- /proc/net/tcp -------------------------------------------------------------------


@pytest.mark.parametrize(
    "hex_address, expected",
    [
        ("0100007F", "127.0.0.1"),
        ("00000000", "0.0.0.0"),
        ("0A64A8C0", "192.168.100.10"),
        ("00000000000000000000000000000000", "::"),
        ("00000000000000000000000001000000", "::1"),
        ("0000000000000000FFFF00000100007F", "::ffff:127.0.0.1"),
        ("000080FE00000000FF47BB4EA3112EFE", "fe80::4ebb:47ff:fe2e:11a3"),
    ],
)
def test_little_endian_addresses(hex_address, expected):
    assert host.decode_proc_net_address(hex_address, "little") == expected


def test_big_endian_addresses_are_not_swapped():
    assert host.decode_proc_net_address("7F000001", "big") == "127.0.0.1"
    assert host.decode_proc_net_address("00000000000000000000FFFF7F000001", "big") == "::ffff:127.0.0.1"


def test_odd_address_length_is_rejected():
    with pytest.raises(ValueError, match="unexpected address length"):
        host.decode_proc_net_address("0100007F00", "little")


def test_only_listen_rows_are_kept():
    v4 = host.parse_proc_net_tcp(fixture("net_tcp.txt"), "tcp", "little")
    v6 = host.parse_proc_net_tcp(fixture("net_tcp6.txt"), "tcp6", "little")

    # The ESTABLISHED (01) ssh session and the TIME_WAIT (06) row are not listeners.
    assert v4 == [
        {"proto": "tcp", "address": "127.0.0.53", "port": 53, "inode": 18231},
        {"proto": "tcp", "address": "0.0.0.0", "port": 22, "inode": 24153},
        {"proto": "tcp", "address": "127.0.0.1", "port": 631, "inode": 31377},
        {"proto": "tcp", "address": "192.168.100.10", "port": 6379, "inode": 51234},
    ]
    assert [entry["inode"] for entry in v6] == [24155, 31378, 77001, 77002]


def test_listening_sockets_of_both_files_sorted_by_port(tmp_path):
    (tmp_path / "net").mkdir()
    (tmp_path / "net" / "tcp").write_text(fixture("net_tcp.txt"))
    (tmp_path / "net" / "tcp6").write_text(fixture("net_tcp6.txt"))

    assert host.read_listening(str(tmp_path), "little") == LISTENING


def test_missing_tcp6_file_when_ipv6_is_disabled(tmp_path):
    (tmp_path / "net").mkdir()
    (tmp_path / "net" / "tcp").write_text(fixture("net_tcp.txt"))

    assert [entry["proto"] for entry in host.read_listening(str(tmp_path), "little")] == ["tcp"] * 4


# --- cgroup and systemd ----------------------------------------------------------------


@pytest.mark.parametrize(
    "name, unit",
    [
        ("cgroup_v2_sshd.txt", "sshd.service"),
        ("cgroup_v1_ray_head.txt", "ray-head.service"),
        ("cgroup_v2_session.txt", "session-4.scope"),
        ("cgroup_v2_container_root.txt", None),
    ],
)
def test_unit_from_cgroup_file(name, unit):
    assert host.parse_cgroup_unit(fixture(name)) == unit


def test_v1_systemd_hierarchy_wins_over_other_controllers():
    text = "3:cpu,cpuacct:/system.slice/docker-0123.scope\n1:name=systemd:/system.slice/ray-head.service\n"

    assert host.parse_cgroup_unit(text) == "ray-head.service"


def test_unit_of_a_service_sub_cgroup():
    assert host.parse_cgroup_unit("0::/system.slice/vllm.service/payload\n") == "vllm.service"
    assert host.parse_cgroup_unit("0::/system.slice\n") is None
    assert host.parse_cgroup_unit(None) is None


@pytest.mark.parametrize(
    "text, version",
    [
        ("systemd 255 (255.4-1ubuntu8)\n+PAM +AUDIT +SELINUX +APPARMOR\n", 255),
        ("systemd 252 (252.33-1~deb12u1)\n", 252),
        ("", None),
        (None, None),
        ("not systemd\n", None),
    ],
)
def test_systemd_version(text, version):
    assert host.parse_systemd_version(text) == version


CONTAINER_ID = "3f" * 32
NODE_ID = "2e" * 32


@pytest.mark.parametrize("text, found", [
    # systemd cgroup driver (DGX OS), v2 and v1 hybrid.
    ("0::/system.slice/docker-%s.scope\n" % CONTAINER_ID, CONTAINER_ID),
    ("12:pids:/system.slice/docker-%s.scope\n1:name=systemd:/system.slice/docker-%s.scope\n"
     % (CONTAINER_ID, CONTAINER_ID), CONTAINER_ID),
    # cgroupfs driver, and a container inside a container (the lab's nodes): the innermost.
    ("0::/docker/%s\n" % CONTAINER_ID, CONTAINER_ID),
    ("9:name=systemd:/docker/%s/docker/%s\n" % (NODE_ID, CONTAINER_ID), CONTAINER_ID),
    ("0::/system.slice/sparkctl-engine.service\n", None),
    ("", None),
    (None, None),
])
def test_container_id_from_cgroup(text, found):
    assert host.container_id_from_cgroup(text) == found


def test_container_name_from_dockerd_config(tmp_path):
    (tmp_path / CONTAINER_ID).mkdir()
    (tmp_path / CONTAINER_ID / "config.v2.json").write_text(json.dumps({"ID": CONTAINER_ID, "Name": "/sparkctl-ray-head"}))
    assert host.container_name(str(tmp_path), CONTAINER_ID) == "sparkctl-ray-head"
    assert host.container_name(str(tmp_path), NODE_ID) is None
    assert host.container_name(str(tmp_path), None) is None
    (tmp_path / NODE_ID).mkdir()
    (tmp_path / NODE_ID / "config.v2.json").write_text("{not json")
    assert host.container_name(str(tmp_path), NODE_ID) is None


# --- ports and the fake /proc --------------------------------------------------------


def make_proc(root, processes):
    """Write a /proc tree: net/tcp{,6}, meminfo, 1/comm, self/mountinfo and processes.

    processes maps pid -> (comm, cgroup fixture name or None, [socket inodes]).
    """
    root = Path(root)
    (root / "net").mkdir(parents=True)
    (root / "net" / "tcp").write_text(fixture("net_tcp.txt"))
    (root / "net" / "tcp6").write_text(fixture("net_tcp6.txt"))
    (root / "meminfo").write_text(fixture("meminfo_gb10.txt"))
    (root / "self").mkdir()
    (root / "self" / "mountinfo").write_text(fixture("mountinfo.txt"))
    (root / "1").mkdir()
    (root / "1" / "comm").write_text("systemd\n")
    for pid, (comm, cgroup, inodes) in processes.items():
        pid_dir = root / str(pid)
        (pid_dir / "fd").mkdir(parents=True, exist_ok=True)
        (pid_dir / "comm").write_text(comm + "\n")
        if cgroup:
            (pid_dir / "cgroup").write_text(fixture(cgroup))
        os.symlink("/dev/null", str(pid_dir / "fd" / "0"))
        for number, inode in enumerate(inodes, start=3):
            os.symlink("socket:[%d]" % inode, str(pid_dir / "fd" / str(number)))
    return root


SPARK_PROCESSES = {
    812: ("sshd", "cgroup_v2_sshd.txt", [24153, 24155]),
    # A forked sshd child shares the listening sockets; the parent is reported.
    4410: ("sshd", "cgroup_v2_sshd.txt", [24155, 61820]),
    2301: ("gcs_server", "cgroup_v1_ray_head.txt", [51234]),
    5120: ("python3", "cgroup_v2_session.txt", [77001]),
}


def test_port_holders_with_pid_process_and_unit(tmp_path):
    proc = make_proc(tmp_path / "proc", SPARK_PROCESSES)
    listening = host.read_listening(str(proc), "little")

    ports = host.port_facts([22, 6379, 8000, 8265, 8888, 22], listening, str(proc))

    assert ports == {
        "22": {
            "in_use": True,
            "holders": [
                {"address": "0.0.0.0", "pid": 812, "process": "sshd", "unit": "sshd.service"},
                {"address": "::", "pid": 812, "process": "sshd", "unit": "sshd.service"},
            ],
        },
        "6379": {
            "in_use": True,
            "holders": [{"address": "192.168.100.10", "pid": 2301, "process": "gcs_server", "unit": "ray-head.service"}],
        },
        "8000": {
            "in_use": True,
            "holders": [{"address": "::ffff:127.0.0.1", "pid": 5120, "process": "python3", "unit": "session-4.scope"}],
        },
        # Nobody in this /proc holds inode 77002 (another user's process, not readable).
        "8265": {"in_use": True, "holders": [{"address": "fe80::4ebb:47ff:fe2e:11a3", "pid": None, "process": None, "unit": None}]},
        "8888": {"in_use": False, "holders": []},
    }


SOCKET_UNITS_JSON = json.dumps(
    [
        {"listen": "/run/dbus/system_bus_socket", "unit": "dbus.socket", "activates": "dbus.service"},
        {"listen": "[::ffff:127.0.0.1]:8000", "unit": "sparkctl-api.socket", "activates": "-"},
        {"listen": "[::ffff:7f00:1]:8001", "unit": "sparkctl-hex.socket", "activates": "-"},
        {"listen": "192.168.100.11:8730", "unit": "sparkctl-rsyncd.socket", "activates": "-"},
        {"listen": "[fe80::1%enp1s0f1np1]:8731", "unit": "scoped.socket", "activates": "-"},
        {"listen": "route 1361", "unit": "systemd-networkd.socket", "activates": "systemd-networkd.service"},
        {"listen": "nonsense:80", "unit": "bad.socket"},
    ]
)


@pytest.fixture(params=["this_python", "hex_groups"])
def ipv6_spelling(request):
    """Run a test as this interpreter spells IPv4-mapped addresses and as older ones do."""
    if request.param == "hex_groups":
        request.getfixturevalue("hex_group_ipv6")


def test_socket_units_parsed_from_systemctl_json(ipv6_spelling):
    # Both spellings in, one out, whichever way this Python prints the address.
    assert host.parse_socket_units(SOCKET_UNITS_JSON) == {
        ("::ffff:127.0.0.1", 8000): "sparkctl-api.socket",
        ("::ffff:127.0.0.1", 8001): "sparkctl-hex.socket",
        ("192.168.100.11", 8730): "sparkctl-rsyncd.socket",
        ("fe80::1", 8731): "scoped.socket",
    }
    assert host.parse_socket_units("") is None
    assert host.parse_socket_units("not json") is None
    assert host.parse_socket_units('{"a": 1}') is None


def _hex_group_ipv6_str(self):
    """IPv6Address.__str__ as Python 3.12.1 has it: an IPv4-mapped address comes out in
    hex groups, '::ffff:7f00:1' (3.13.0 writes '::ffff:127.0.0.1')."""
    text = self._string_from_ip_int(self._ip)
    return text + "%" + self._scope_id if self._scope_id else text


@pytest.fixture
def hex_group_ipv6(monkeypatch):
    """Make this interpreter spell IPv4-mapped addresses the way older ones do, so the
    facts are shown not to depend on which Python runs the module."""
    if not hasattr(host.ipaddress.IPv6Address, "_string_from_ip_int"):
        pytest.skip("this Python's ipaddress has no _string_from_ip_int to emulate the old spelling with")
    monkeypatch.setattr(host.ipaddress.IPv6Address, "__str__", _hex_group_ipv6_str)
    assert str(host.ipaddress.IPv6Address("::ffff:127.0.0.1")) == "::ffff:7f00:1"


@pytest.mark.parametrize(
    "text, expected",
    [
        ("::ffff:127.0.0.1", "::ffff:127.0.0.1"),
        ("::ffff:7f00:1", "::ffff:127.0.0.1"),
        ("0:0:0:0:0:ffff:c0a8:640a", "::ffff:192.168.100.10"),
        ("::FFFF:192.168.100.10", "::ffff:192.168.100.10"),
        ("fe80::1", "fe80::1"),
        ("::1", "::1"),
        ("192.168.100.11", "192.168.100.11"),
    ],
)
def test_addresses_have_one_spelling_on_every_python(hex_group_ipv6, text, expected):
    assert host.canonical_address(text) == expected


def test_an_unparsable_address_is_rejected():
    with pytest.raises(ValueError):
        host.canonical_address("nonsense")


def test_socket_units_and_proc_addresses_agree_on_every_python(hex_group_ipv6, tmp_path):
    assert host.parse_socket_units(SOCKET_UNITS_JSON)[("::ffff:127.0.0.1", 8000)] == "sparkctl-api.socket"
    assert host.decode_proc_net_address("0000000000000000FFFF00000100007F", "little") == "::ffff:127.0.0.1"
    proc = make_proc(tmp_path / "proc", {1: ("systemd", "cgroup_v2_container_root.txt", [77001])})
    listening = host.read_listening(str(proc), "little")
    facts = host.port_facts([8000], listening, str(proc), host.parse_socket_units(SOCKET_UNITS_JSON))
    assert facts["8000"]["holders"][0]["address"] == "::ffff:127.0.0.1"
    assert facts["8000"]["holders"][0]["unit"] == "sparkctl-api.socket"


def test_a_socket_systemd_holds_is_attributed_to_its_socket_unit(tmp_path):
    # PID 1 holds the listener of a socket-activated service (inode 77001, port 8000).
    proc = make_proc(tmp_path / "proc", {1: ("systemd", "cgroup_v2_container_root.txt", [77001])})
    listening = host.read_listening(str(proc), "little")

    attributed = host.port_facts([8000], listening, str(proc), host.parse_socket_units(SOCKET_UNITS_JSON))
    unknown = host.port_facts([8000], listening, str(proc), {})

    assert attributed["8000"]["holders"][0]["unit"] == "sparkctl-api.socket"
    assert unknown["8000"]["holders"][0]["unit"] != "sparkctl-api.socket"
    assert unknown["8000"]["holders"][0]["pid"] == 1


def test_socket_owner_scan(tmp_path):
    proc = make_proc(tmp_path / "proc", SPARK_PROCESSES)

    assert host.scan_socket_owners(str(proc), [24155, 51234, 99999]) == {24155: [812, 4410], 51234: [2301], 99999: []}


def test_socket_owner_scan_tolerates_unreadable_and_vanished_processes(tmp_path, monkeypatch):
    proc = make_proc(tmp_path / "proc", SPARK_PROCESSES)
    (proc / "777").mkdir()  # exited between listdir and reading its fd directory
    (proc / "2301" / "fd" / "9").write_text("")  # not a link: readlink raises EINVAL
    real_listdir = os.listdir

    def listdir(path):
        if str(path) == str(proc / "812" / "fd"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_listdir(path)

    monkeypatch.setattr(host.os, "listdir", listdir)

    assert host.scan_socket_owners(str(proc), [24153, 24155, 51234]) == {24153: [], 24155: [4410], 51234: [2301]}


def test_a_port_held_in_a_docker_container_names_the_container(tmp_path):
    # Ray's GCS in an image runtime's container: its cgroup is the container's scope.
    proc = make_proc(tmp_path / "proc", {2301: ("gcs_server", "cgroup_v2_docker_container.txt", [51234])})
    containers = tmp_path / "containers"
    (containers / CONTAINER_ID).mkdir(parents=True)
    (containers / CONTAINER_ID / "config.v2.json").write_text(json.dumps({"Name": "/sparkctl-ray-head"}))
    listening = host.read_listening(str(proc), "little")

    ports = host.port_facts([6379], listening, str(proc), containers_dir=str(containers))

    assert ports["6379"]["holders"] == [{"address": "192.168.100.10", "pid": 2301, "process": "gcs_server",
                                         "unit": "docker-%s.scope" % CONTAINER_ID, "container": "sparkctl-ray-head"}]


def test_process_table_is_not_scanned_when_no_requested_port_is_in_use(tmp_path, monkeypatch):
    proc = make_proc(tmp_path / "proc", SPARK_PROCESSES)
    listening = host.read_listening(str(proc), "little")
    scanned = []
    real_listdir = os.listdir

    def listdir(path):
        scanned.append(str(path))
        return real_listdir(path)

    monkeypatch.setattr(host.os, "listdir", listdir)

    assert host.port_facts([8888, 10001], listening, str(proc)) == {
        "8888": {"in_use": False, "holders": []},
        "10001": {"in_use": False, "holders": []},
    }
    assert scanned == []


def test_gather_host_facts_from_a_recorded_proc(tmp_path):
    proc = make_proc(tmp_path / "proc", SPARK_PROCESSES)
    weights = tmp_path / "data" / "models" / "Solar-Open2-250B-Nota-NVFP4"

    facts = host.gather_host_facts(
        [str(weights)],
        [6379],
        proc_root=str(proc),
        systemctl_version_output="systemd 255 (255.4-1ubuntu8)\n",
        statvfs=lambda path: StatVfs(f_blocks=961137392, f_bavail=808282005, f_frsize=4096),
    )

    assert facts["meminfo"]["mem_available_bytes"] == 118606228 * KIB
    assert facts["disks"] == {
        str(weights): {
            "path": str(weights),
            "checked_path": str(tmp_path),
            "exists": False,
            "total_bytes": 961137392 * 4096,
            "free_bytes": 808282005 * 4096,
            # The recorded mountinfo has only / above tmp_path.
            "device": "/dev/nvme0n1p2",
            "mount_point": "/",
            "fstype": "ext4",
            "used_bytes": 0,
        }
    }
    if host.sys.byteorder == "little":
        assert facts["listening"] == LISTENING
    assert facts["ports"] == {
        "6379": {
            "in_use": True,
            "holders": [{"address": "192.168.100.10", "pid": 2301, "process": "gcs_server", "unit": "ray-head.service"}],
        }
    }
    assert facts["systemd"] == {"pid1_comm": "systemd", "version": 255}


# --- the module ----------------------------------------------------------------------


def run_module(args, capsys):
    return module_runner.run_module(host_facts.main, args, capsys)


@pytest.fixture
def fake_systemctl(monkeypatch):
    state = {
        "path": "/usr/bin/systemctl",
        "answer": (0, "systemd 255 (255.4-1ubuntu8)\n+PAM +AUDIT\n", ""),
        "sockets": (0, "[]\n", ""),
        "calls": [],
    }

    module_runner.fake_tool(monkeypatch, "systemctl", state,
                            lambda args: state["sockets"] if "list-sockets" in args else state["answer"])
    return state


def test_module_on_a_recorded_proc(tmp_path, monkeypatch, fake_systemctl, capsys):
    proc = make_proc(tmp_path / "proc", SPARK_PROCESSES)
    monkeypatch.setattr(host_facts, "PROC_ROOT", str(proc))

    rc, result = run_module({"paths": [str(tmp_path / "ckpt")], "ports": [22, 8265]}, capsys)

    assert rc == 0
    assert result["changed"] is False
    facts = result["ansible_facts"]["spark_host_facts"]
    assert set(facts) == {"meminfo", "disks", "listening", "ports", "sshd_ports", "systemd"}
    assert facts["meminfo"]["mem_total_bytes"] == 125489508 * KIB
    assert facts["disks"][str(tmp_path / "ckpt")]["checked_path"] == str(tmp_path)
    assert facts["ports"]["22"]["holders"][0] == {"address": "0.0.0.0", "pid": 812, "process": "sshd", "unit": "sshd.service"}
    assert facts["ports"]["8265"]["holders"][0]["pid"] is None
    assert facts["systemd"] == {"pid1_comm": "systemd", "version": 255}
    # What the firewall must keep open for the management SSH.
    assert facts["sshd_ports"] == [22]
    assert fake_systemctl["calls"] == [
        ["/usr/bin/systemctl", "--version"],
        ["/usr/bin/systemctl", "list-sockets", "--all", "--output=json"],
    ]


def test_module_in_check_mode_reads_the_same(tmp_path, monkeypatch, fake_systemctl, capsys):
    proc = make_proc(tmp_path / "proc", SPARK_PROCESSES)
    monkeypatch.setattr(host_facts, "PROC_ROOT", str(proc))

    rc, result = run_module({"ports": [6379], "_ansible_check_mode": True}, capsys)

    assert rc == 0
    assert result["changed"] is False
    facts = result["ansible_facts"]["spark_host_facts"]
    assert facts["disks"] == {}
    assert facts["ports"]["6379"]["holders"][0]["unit"] == "ray-head.service"


def test_module_without_systemctl(tmp_path, monkeypatch, fake_systemctl, capsys):
    proc = make_proc(tmp_path / "proc", {})
    (proc / "1" / "comm").write_text("tini\n")
    monkeypatch.setattr(host_facts, "PROC_ROOT", str(proc))
    fake_systemctl["path"] = None

    rc, result = run_module({}, capsys)

    assert rc == 0
    assert result["ansible_facts"]["spark_host_facts"]["systemd"] == {"pid1_comm": "tini", "version": None}
    assert result["ansible_facts"]["spark_host_facts"]["ports"] == {}
    assert fake_systemctl["calls"] == []


def test_module_on_this_machine_finds_a_socket_the_test_holds(fake_systemctl, capsys, tmp_path):
    """Reads the real /proc and /proc/self/mounts: the listener opened here must be found with
    this process as holder, and the bytes of a directory the test fills counted. (A directory
    of the test's own: the disk facts walk the whole tree under a path, and "/" on a
    developer's machine is millions of files.)"""
    if not os.path.exists("/proc/net/tcp"):
        pytest.skip("no /proc/net/tcp")
    fake_systemctl["path"] = None
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    (checkpoint / "model.safetensors").write_bytes(os.urandom(256 * 1024))
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]

        rc, result = run_module({"ports": [port], "paths": [str(checkpoint)]}, capsys)

    facts = result["ansible_facts"]["spark_host_facts"]
    assert rc == 0
    assert facts["meminfo"]["mem_total_bytes"] > 0
    disk = facts["disks"][str(checkpoint)]
    assert disk["checked_path"] == str(checkpoint)
    assert disk["used_bytes"] >= 256 * 1024
    mount_point = disk["mount_point"]
    assert mount_point == "/" or f"{os.path.realpath(checkpoint)}/".startswith(mount_point.rstrip("/") + "/")
    assert disk["free_bytes"] > 0
    holders = facts["ports"][str(port)]["holders"]
    assert facts["ports"][str(port)]["in_use"] is True
    assert holders[0]["address"] == "127.0.0.1"
    assert holders[0]["pid"] == os.getpid()
    with open("/proc/self/comm") as handle:
        assert holders[0]["process"] == handle.read().strip()


def test_sshd_ports_from_its_process_or_its_socket_unit(tmp_path):
    proc = make_proc(tmp_path / "proc", SPARK_PROCESSES)
    listening = host.read_listening(str(proc), "little")
    assert host.sshd_ports(listening, str(proc)) == [22]

    # Socket activation (Ubuntu 24.04's ssh.socket): PID 1 holds the listener on 8000 here.
    activated = make_proc(tmp_path / "proc2", {1: ("systemd", "cgroup_v2_container_root.txt", [77001])})
    units = {key: "ssh.socket" for key in host.parse_socket_units(SOCKET_UNITS_JSON) if key[1] == 8000}
    assert host.sshd_ports(host.read_listening(str(activated), "little"), str(activated), units) == [8000]
    # Another socket unit systemd holds is not sshd.
    assert host.sshd_ports(host.read_listening(str(activated), "little"), str(activated),
                           host.parse_socket_units(SOCKET_UNITS_JSON)) == []


def test_sshd_ports_unknown_without_any_readable_owner(tmp_path):
    proc = make_proc(tmp_path / "proc", {})
    assert host.sshd_ports(host.read_listening(str(proc), "little"), str(proc)) is None

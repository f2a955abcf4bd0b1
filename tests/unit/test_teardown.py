"""The teardown's record and its undoing (modules node_baseline and node_teardown,
module_utils/teardown.py), and roles/teardown's lists kept in step with the roles that create
what they name."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from ansible.module_utils import basic
from ansible_collections.sparkctl.spark.plugins.module_utils import fabric_test
from ansible_collections.sparkctl.spark.plugins.module_utils import shared_dirs as node_teardown_shared
from ansible_collections.sparkctl.spark.plugins.module_utils import teardown as td
from ansible_collections.sparkctl.spark.plugins.modules import node_baseline, node_teardown
from module_runner import run_module

REPO = Path(__file__).resolve().parents[2]
ROLES = REPO / "roles"


# --- decisions ------------------------------------------------------------------------


def test_installed_packages_are_the_ones_dpkg_says_are_installed():
    out = "bash\tii \nnginx\trc \nlibfoo:arm64\tii \nhalf\tiF \n"
    assert td.installed_packages(out) == {"bash", "libfoo", "half"}


def test_only_requested_packages_absent_before_and_installed_now_are_purged():
    assert td.packages_to_purge(["nftables", "earlyoom", "nginx", "nginx"], ["nftables"], {"nftables", "nginx"}) == ["nginx"]


def test_dependencies_are_the_automatically_installed_packages_absent_before():
    assert td.simulated_purges("NOTE: simulation\nPurg libnginx-mod [1.0]\nRemv oldorphan [2]\nInst x\n") == ["libnginx-mod", "oldorphan"]
    installed = {"libnginx-mod", "oldorphan", "bash", "mytool"}
    assert td.dependencies_to_purge(installed, {"libnginx-mod", "oldorphan"}, ["oldorphan", "bash"]) == ["libnginx-mod"]
    assert td.purge_is_contained(["nginx", "libnginx-mod"], {"nginx", "libnginx-mod"})
    assert not td.purge_is_contained(["nginx", "mytool"], {"nginx", "libnginx-mod"})


def test_only_the_packages_the_record_says_sparkctl_installed_are_purged():
    assert td.split_by_record(["nginx", "iperf3"], ["nginx", "earlyoom"]) == (["nginx"], ["iperf3"])
    # An older record (no list): today's rule, all of them.
    assert td.split_by_record(["nginx", "iperf3"], None) == (["nginx", "iperf3"], [])
    assert td.recorded_installs({"packages": []}) is None
    assert td.recorded_installs({"packages": [], td.INSTALLED_KEY: []}) == []


def test_what_came_with_the_purged_packages_is_what_they_reach_and_nothing_that_stays_needs():
    out = ("nginx\tii \t\tlibc6 (>= 2.34), nginx-common (= 1.24), libshared | libalt\thttpd-extras\thttpd\n"
           "nginx-common\tii \t\tlsb-base\t\t\n"
           "httpd-extras\tii \t\t\t\t\n"
           "lsb-base\tii \t\t\t\t\n"
           "libshared:arm64\tii \t\t\t\t\n"
           "iperf3\tii \t\tlibiperf0, libshared\tlibsctp1\t\n"
           "libiperf0\tii \t\t\t\t\n"
           "libsctp1\tii \t\t\t\t\n"
           "webtool\tii \t\thttpd\t\t\n"
           "libc6\tii \t\t\t\t\n"
           "gone\trc \t\tlibc6\t\t\n")
    relations, provides = td.package_relations(out)
    assert "gone" not in relations and provides == {"httpd": {"nginx"}}
    assert relations["nginx"]["hard"] == [["libc6"], ["nginx-common"], ["libshared", "libalt"]]
    candidates = {"nginx-common", "lsb-base", "httpd-extras", "libshared", "libiperf0", "libsctp1"}
    baseline = ["libc6", "webtool"]
    # nginx reaches nginx-common (and through it lsb-base) and its recommendation; libshared is iperf3's too
    # (installed by hand since): it stays, as do iperf3's own dependency and recommendation.
    assert td.dependencies_of(["nginx"], relations, provides, candidates, baseline) == ["httpd-extras", "lsb-base", "nginx-common"]
    # A package of the baseline that recommends one of them did without it then; one it depends on stays.
    relations["webtool"]["soft"] = [["httpd-extras"]]
    assert "httpd-extras" in td.dependencies_of(["nginx"], relations, provides, candidates, baseline)
    relations["webtool"]["hard"] = [["lsb-base"]]
    assert td.dependencies_of(["nginx"], relations, provides, candidates, baseline) == ["httpd-extras", "nginx-common"]
    # With iperf3 purged too, what it reached goes with it.
    assert td.dependencies_of(["nginx", "iperf3"], relations, provides, candidates, baseline) == [
        "httpd-extras", "libiperf0", "libsctp1", "libshared", "nginx-common"]


def test_a_package_installed_by_hand_since_keeps_what_it_depends_on(tmp_path, node, capsys):
    run_module(node_baseline.main, _args(tmp_path, backup_dir=str(tmp_path / "b")), capsys)
    node.packages |= {"nginx", "libnginx-mod", "nginx-addon"}
    node.auto = {"libnginx-mod"}
    run_module(node_baseline.main, _args(tmp_path, backup_dir=str(tmp_path / "b"), installed_packages=["nginx"]), capsys)
    # nginx-addon, installed by hand since, depends on nginx, which depends on libnginx-mod.
    node.rdepends = {"nginx": ["nginx-addon"], "libnginx-mod": ["nginx", "nginx-addon"]}
    rc, result = run_module(node_teardown.main, _args(tmp_path, packages=["nginx"]), capsys)
    assert rc == 0 and {"nginx", "nginx-addon", "libnginx-mod"} <= node.packages
    assert not any(a.startswith("purge nginx") for a in result["actions"]), result["actions"]


def test_strip_takes_out_only_sparkctl_lines_added_since_the_record():
    original = "ssh-ed25519 AAAA user@laptop\n"
    current = original + 'restrict,from="192.168.100.10" ssh-ed25519 BBBB sparkctl-mesh@spark1\nssh-rsa CCCC later@desk\n'
    assert td.strip_text(current, original, markers=["sparkctl-mesh@"]) == original + "ssh-rsa CCCC later@desk\n"
    # A line that was there before sparkctl stays even if it carries the marker.
    assert td.strip_text(original, original, markers=["user@laptop"]) == original


def test_strip_known_hosts_by_host_field_not_substring():
    current = "192.168.100.11 ssh-ed25519 K1\n192.168.100.1 ssh-ed25519 K2\ngithub.com,1.2.3.4 ssh-ed25519 K3\n"
    assert td.strip_text(current, "", hosts=["192.168.100.11", "1.2.3.4"]) == "192.168.100.1 ssh-ed25519 K2\n"


def test_strip_removes_a_blockinfile_block():
    marker = "sparkctl ssh_mesh: peers"
    current = f"# BEGIN {marker}\nHost 192.168.100.11\n  IdentityFile x\n# END {marker}\nHost mine\n"
    assert td.strip_text(current, "Host mine\n", block_marker=marker) == "Host mine\n"


def test_paths_removed_are_those_recorded_absent_outermost_first_and_keep_wins():
    recorded = {"/srv/sparkctl": False, "/srv/sparkctl/models/x": False, "/etc/sparkctl": False,
                "/etc/sparkctl/fabric.env": False, "/home/spark/.ssh": True, "/unrecorded": None}
    remove, kept = td.paths_to_remove(list(recorded) + ["/not/in/record"], recorded, keep=["/srv/sparkctl/models/x"])
    assert remove == ["/etc/sparkctl"]
    assert kept == ["/srv/sparkctl", "/srv/sparkctl/models/x"]
    remove, kept = td.paths_to_remove(list(recorded), recorded)
    assert (remove, kept) == (["/etc/sparkctl", "/srv/sparkctl"], [])


def test_link_restore_removes_only_the_inventory_address_it_added_and_puts_the_mtu_back():
    before = {"eth1": {"mtu": 1500, "addresses": ["fe80::1/64"]}, "eth2": {"mtu": 9000, "addresses": ["10.0.0.1/24"]}}
    live = {"eth1": {"mtu": 9000, "addresses": ["192.168.100.10/24", "10.9.9.9/8"]},
            "eth2": {"mtu": 9000, "addresses": ["10.0.0.1/24"]}}
    actions = td.link_restore(before, live, {"eth1": "192.168.100.10/24", "eth2": "10.0.0.1/24", "mgmt0": "1.1.1.1/24"})
    assert actions == [{"interface": "eth1", "del_addresses": ["192.168.100.10/24"], "mtu": 1500}]


# --- the modules on a scratch file tree ---------------------------------------------------------


class FakeNode:
    """dpkg, ip, apt and the commands the modules run, as a node in a dict; the file tree is real (tmp_path).
    depends/recommends/provides: package -> its Depends, Recommends, Provides (dpkg's field entries);
    rdepends: package -> what else `apt-get -s purge` of it removes, besides the packages whose Depends
    it breaks."""

    def __init__(self):
        self.packages = {"bash"}
        self.auto = set()
        self.depends, self.recommends, self.provides = {}, {}, {}
        self.rdepends = {}
        self.links = {"eth1": {"mtu": 1500, "addresses": []}}
        self.commands = []

    def install(self, *names, depends=(), auto=()):
        """apt-get install names (manual), their dependencies automatic, as a role or a user does."""
        self.packages |= set(names) | set(depends) | set(auto)
        self.auto |= set(depends) | set(auto)
        for name in names:
            self.depends.setdefault(name, []).extend(depends)

    def _broken_by(self, removed):
        """What apt removes with removed: every installed package with a Depends left without an installed alternative."""
        removed = set(removed)
        while True:
            more = set()
            for package in self.packages - removed:
                for entry in self.depends.get(package, []):
                    alternatives = {name.strip() for name in entry.split("|")}
                    providers = {p for p in self.packages if alternatives & set(self.provides.get(p, []))}
                    met = (alternatives & self.packages) | providers
                    if met and met <= removed:
                        more.add(package)
            if not more - removed:
                return removed
            removed |= more

    def run_command(self, module, argv, **_kwargs):
        argv = [str(a) for a in argv]
        name = os.path.basename(argv[0])
        if name == "dpkg-query" and "${Depends}" in argv[-1]:
            return 0, "".join(f"{p}\tii \t\t{', '.join(self.depends.get(p, []))}\t{', '.join(self.recommends.get(p, []))}"
                              f"\t{', '.join(self.provides.get(p, []))}\n" for p in sorted(self.packages)), ""
        if name == "dpkg-query":
            return 0, "".join(f"{p}\tii \n" for p in sorted(self.packages)), ""
        if argv[:3] == ["ip", "-j", "addr"]:
            link = self.links.get(argv[-1])
            if link is None:
                return 1, "", "no such device"
            info = [{"local": a.split("/")[0], "prefixlen": int(a.split("/")[1])} for a in link["addresses"]]
            return 0, json.dumps([{"ifname": argv[-1], "mtu": link["mtu"], "addr_info": info}]), ""
        if argv[:2] == ["apt-mark", "showauto"]:
            return 0, "".join(f"{p}\n" for p in sorted(self.auto)), ""
        if argv[:3] == ["apt-get", "-s", "purge"]:
            removed = self._broken_by(set(argv[3:]).union(*(self.rdepends.get(p, []) for p in argv[3:])))
            return 0, "".join(f"Purg {p} [1]\n" for p in argv[3:] + sorted(removed - set(argv[3:]))), ""
        self.commands.append(argv)
        if argv[:2] == ["apt-get", "purge"]:
            self.packages -= set(argv[4:])
        elif argv[:3] == ["ip", "addr", "del"]:
            self.links[argv[-1]]["addresses"].remove(argv[3])
        elif argv[:4] == ["ip", "link", "set", "dev"] and argv[5] == "mtu":
            self.links[argv[4]]["mtu"] = int(argv[6])
        return 0, "", ""


@pytest.fixture
def node(monkeypatch):
    fake = FakeNode()
    monkeypatch.setattr(basic.AnsibleModule, "run_command", lambda self, argv, **kw: fake.run_command(self, argv, **kw))
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda self, name, *a, **kw: None)
    return fake


def _args(tmp_path, **extra):
    return dict(path=str(tmp_path / "var/lib/sparkctl/baseline.json"), **extra)


def fake_owner(info):
    """A stat result owned by uid 4242, gid 4243: a file of the service user, not of whoever runs the test."""
    values = list(info)
    values[4:6] = [4242, 4243]
    return os.stat_result(values)


def test_record_then_teardown_gives_the_node_back(tmp_path, node, capsys, monkeypatch):
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "earlyoom").write_text("EARLYOOM_ARGS=-m 5\n")
    home_ssh = tmp_path / "home/spark/.ssh"
    home_ssh.mkdir(parents=True)
    (home_ssh / "authorized_keys").write_text("ssh-ed25519 AAAA me@laptop\n")
    owned, checkpoint = tmp_path / "etc/sparkctl", tmp_path / "srv/sparkctl/models/x"
    record = _args(tmp_path, backup_dir=str(tmp_path / "var/lib/sparkctl/baseline"),
                   paths=[str(owned), str(checkpoint), str(tmp_path / "etc/netplan/40-cx7.yaml")],
                   files=[str(etc / "earlyoom"), str(home_ssh / "authorized_keys"), str(tmp_path / "etc/netplan/40-cx7.yaml")],
                   interfaces=["eth1"])
    rc, result = run_module(node_baseline.main, record, capsys)
    assert rc == 0 and result["changed"] and result["baseline"]["parents"][str(tmp_path / "srv/sparkctl")] is False
    # A second record keeps the first: it is the node before sparkctl.
    (etc / "earlyoom").write_text("EARLYOOM_ARGS=-m 1 --prefer engine\n")
    rc, result = run_module(node_baseline.main, record, capsys)
    assert (rc, result["changed"]) == (0, False)

    # What a converge does.
    owned.mkdir()
    (owned / "fabric.env").write_text("NCCL_IB_GID_INDEX=3\n")
    checkpoint.mkdir(parents=True)
    (checkpoint / "model.safetensors").write_text("weights")
    (home_ssh / "authorized_keys").write_text("ssh-ed25519 AAAA me@laptop\nssh-ed25519 BBBB sparkctl-mesh@spark1\n")
    (tmp_path / "etc/netplan").mkdir()
    (tmp_path / "etc/netplan/40-cx7.yaml").write_text("network: {}\n")
    node.install("nftables")
    node.install("earlyoom", depends=["libearly"])
    # Each role's install is noted right after it (roles/teardown, tasks/installed.yml).
    rc, result = run_module(node_baseline.main, dict(record, installed_packages=["nftables", "earlyoom"]), capsys)
    assert rc == 0 and result["changed"] and result["baseline"]["installed_by_sparkctl"] == ["earlyoom", "nftables"]
    node.links["eth1"] = {"mtu": 9000, "addresses": ["192.168.100.10/24"]}
    strip = [{"path": str(home_ssh / "authorized_keys"), "markers": ["sparkctl-mesh@"]}]
    teardown = _args(tmp_path, keep=[str(checkpoint)], strip=strip, packages=["nftables", "earlyoom", "bash"],
                     link_addresses={"eth1": "192.168.100.10/24"}, _ansible_check_mode=True, _ansible_diff=True)

    rc, result = run_module(node_teardown.main, teardown, capsys)
    assert rc == 0 and result["changed"] and "purge nftables earlyoom" in result["actions"]
    assert "purge libearly (installed with sparkctl's packages)" in result["actions"] and result["kept_packages"] == []
    assert f"remove {owned}" in result["actions"] and result["diff"]["before"]
    assert (owned / "fabric.env").exists() and node.commands == []  # check mode changed nothing

    teardown["_ansible_check_mode"] = False
    real_stat = os.stat
    monkeypatch.setattr(os, "fstat", lambda fd: fake_owner(real_stat(fd)))
    rc, result = run_module(node_teardown.main, teardown, capsys)
    monkeypatch.undo()
    assert rc == 0 and result["changed"], result
    assert not owned.exists() and not (tmp_path / "etc/netplan/40-cx7.yaml").exists()
    assert (etc / "earlyoom").read_text() == "EARLYOOM_ARGS=-m 5\n"
    assert (home_ssh / "authorized_keys").read_text() == "ssh-ed25519 AAAA me@laptop\n"
    keys = os.stat(home_ssh / "authorized_keys")
    assert (keys.st_uid, keys.st_gid) == (4242, 4243)  # the user's file stays the user's
    assert (checkpoint / "model.safetensors").exists()
    assert result["kept"] == [str(checkpoint)] and (tmp_path / "srv/sparkctl/models").is_dir()
    assert node.packages == {"bash"} and node.links["eth1"] == {"mtu": 1500, "addresses": []}
    assert not (tmp_path / "var/lib/sparkctl").exists()  # the record goes last

    rc, result = run_module(node_teardown.main, teardown, capsys)
    assert (rc, result["changed"], result["recorded"]) == (0, False, False)


def test_purge_takes_only_the_checkpoint_files_sparkctl_put_there_and_empty_parents(tmp_path, node, capsys):
    checkpoint, other = tmp_path / "srv/sparkctl/models/x", tmp_path / "srv/sparkctl/models/sibling"
    run_module(node_baseline.main, _args(tmp_path, backup_dir=str(tmp_path / "b"), paths=[str(checkpoint)]), capsys)
    (checkpoint / "sub").mkdir(parents=True)
    (checkpoint / ".cache/huggingface").mkdir(parents=True)
    for rel in ("model.safetensors", "sub/tokenizer.json", "model.safetensors.incomplete", ".sparkctl-created",
                ".cache/huggingface/x.lock"):
        (checkpoint / rel).write_text("x")
    (checkpoint / ".sparkctl-manifest.json").write_text(json.dumps({"model.safetensors": {"size": 1, "sha256": None},
                                                                     "sub/tokenizer.json": {"size": 1, "sha256": None}}))
    other.mkdir()
    (other / "weights.bin").write_text("not sparkctl's")
    purge = _args(tmp_path, keep=[str(checkpoint)], purge_dirs=[{"path": str(checkpoint)}], remove_record=False)
    rc, result = run_module(node_teardown.main, purge, capsys)
    assert rc == 0 and not checkpoint.exists(), result
    # The sibling someone else put beside it keeps its parents.
    assert (other / "weights.bin").exists() and f"remove {tmp_path / 'srv'} (empty, made for sparkctl's paths)" not in result["actions"]
    (checkpoint / "sub").mkdir(parents=True)
    (checkpoint / "mine.txt").write_text("a user's file")
    (checkpoint / "sub/tokenizer.json").write_text("x")
    (checkpoint / ".sparkctl-manifest.json").write_text(json.dumps({"sub/tokenizer.json": {"size": 1, "sha256": None}}))
    rc, result = run_module(node_teardown.main, purge, capsys)
    assert (checkpoint / "mine.txt").exists() and not (checkpoint / "sub").exists()
    assert any(a.startswith(f"keep {checkpoint}: 1 files sparkctl did not put there (mine.txt)") for a in result["actions"])
    (checkpoint / "mine.txt").unlink()
    other.joinpath("weights.bin").unlink()
    other.rmdir()
    rc, result = run_module(node_teardown.main, purge, capsys)
    assert not (tmp_path / "srv").exists() and tmp_path.exists()


def test_purge_on_a_worker_reads_the_verification_stamp(tmp_path, node, capsys):
    checkpoint = tmp_path / "srv/models/x"
    run_module(node_baseline.main, _args(tmp_path, backup_dir=str(tmp_path / "b"), paths=[str(checkpoint)]), capsys)
    checkpoint.mkdir(parents=True)
    (checkpoint / "model.safetensors").write_text("x")
    (checkpoint / ".sparkctl-verified.json").write_text(json.dumps({"version": 1, "files": {"model.safetensors": {"size": 1}}}))
    rc, result = run_module(node_teardown.main, _args(tmp_path, keep=[str(checkpoint)], purge_dirs=[{"path": str(checkpoint)}]), capsys)
    assert rc == 0 and not (tmp_path / "srv").exists(), result


def test_a_directory_a_package_leaves_goes_only_when_empty(tmp_path, node, capsys):
    cni = tmp_path / "etc/cni/net.d"
    args = _args(tmp_path, backup_dir=str(tmp_path / "b"), empty_dirs=[str(cni), str(cni.parent)])
    run_module(node_baseline.main, args, capsys)
    cni.mkdir(parents=True)
    (cni / "10-mine.conflist").write_text("{}")
    run_module(node_teardown.main, _args(tmp_path, remove_record=False), capsys)
    assert (cni / "10-mine.conflist").exists()
    (cni / "10-mine.conflist").unlink()
    run_module(node_teardown.main, _args(tmp_path), capsys)
    assert not (tmp_path / "etc/cni").exists() and (tmp_path / "etc").exists()


def test_a_path_that_existed_before_sparkctl_is_never_removed(tmp_path, node, capsys):
    mine = tmp_path / "opt/sparkctl"
    mine.mkdir(parents=True)
    run_module(node_baseline.main, _args(tmp_path, backup_dir=str(tmp_path / "b"), paths=[str(mine)]), capsys)
    rc, result = run_module(node_teardown.main, _args(tmp_path), capsys)
    assert rc == 0 and mine.exists() and all(str(mine) not in a for a in result["actions"])


def _shared_node(tmp_path, monkeypatch, existed=False):
    """A record taken with /etc/docker absent (or there, existed), then what a converge, the package's daemon
    and the node's administrator put in it; dpkg's file lists under tmp_path."""
    docker = tmp_path / "etc/docker"
    if existed:
        docker.mkdir(parents=True)
    info = tmp_path / "var/lib/dpkg/info"
    info.mkdir(parents=True)
    monkeypatch.setattr(node_teardown_shared, "DPKG_INFO", str(info))
    return docker, info


def _record(tmp_path, capsys, *paths):
    rc, _result = run_module(node_baseline.main, _args(tmp_path, backup_dir=str(tmp_path / "b"), paths=[str(p) for p in paths]),
                             capsys)
    assert rc == 0


SHARED = {"sparkctl": ["daemon.json"], "daemon": ["key.json"]}


def test_a_shared_directory_sparkctl_created_keeps_and_names_only_what_someone_else_put_there(tmp_path, node, capsys,
                                                                                           monkeypatch):
    docker, info = _shared_node(tmp_path, monkeypatch)
    _record(tmp_path, capsys, docker)
    docker.mkdir(parents=True)
    (docker / "daemon.json").write_text("{}")                   # sparkctl's (the image runtime)
    (docker / "key.json").write_text("{}")                      # dockerd's own
    registry = docker / "certs.d/registry.lab:5000"
    registry.mkdir(parents=True)
    (registry / "ca.crt").write_text("CA")                      # the administrator's, added since
    args = _args(tmp_path, shared_dirs=[{"path": str(docker), **SHARED}])

    rc, result = run_module(node_teardown.main, dict(args, _ansible_check_mode=True), capsys)
    assert rc == 0 and result["kept_files"] == [str(registry / "ca.crt")], result
    assert f"keep {docker}, which holds what sparkctl did not put there: certs.d/registry.lab:5000/ca.crt" in result["actions"]
    assert (docker / "daemon.json").exists() and (docker / "key.json").exists()  # check mode changed nothing

    rc, result = run_module(node_teardown.main, args, capsys)
    assert rc == 0 and result["changed"] and result["kept_files"] == [str(registry / "ca.crt")], result
    assert f"remove {docker}/daemon.json" in result["actions"] and f"remove {docker}/key.json" in result["actions"]
    assert sorted(p.relative_to(docker).as_posix() for p in docker.rglob("*")) == [
        "certs.d", "certs.d/registry.lab:5000", "certs.d/registry.lab:5000/ca.crt"]


def test_a_shared_directory_goes_once_only_sparkctls_its_daemons_and_its_packages_files_were_in_it(tmp_path, node,
                                                                                                  capsys, monkeypatch):
    docker, info = _shared_node(tmp_path, monkeypatch)
    _record(tmp_path, capsys, docker)
    (docker / "seccomp").mkdir(parents=True)
    (docker / "daemon.json").write_text("{}")
    (docker / "key.json").write_text("{}")
    # A file of a package that stays (dpkg lists it): not someone else's, but it keeps the directory.
    (docker / "seccomp/default.json").write_text("{}")
    (info / "docker.io.list").write_text(f"{docker}\n{docker}/seccomp\n{docker}/seccomp/default.json\n")
    args = _args(tmp_path, remove_record=False, shared_dirs=[{"path": str(docker), **SHARED}])
    rc, result = run_module(node_teardown.main, args, capsys)
    assert rc == 0 and result["kept_files"] == [] and f"keep {docker}: it holds files of packages that stay" in result["actions"]
    assert sorted(p.name for p in docker.iterdir()) == ["seccomp"]
    # Once the package's purge took its file, the directory goes.
    (docker / "seccomp/default.json").unlink()
    rc, result = run_module(node_teardown.main, args, capsys)
    assert rc == 0 and f"remove {docker} (nothing else was in it)" in result["actions"] and not docker.exists()


def test_a_shared_directory_that_was_there_before_sparkctl_is_left_to_the_rest_of_the_record(tmp_path, node, capsys,
                                                                                          monkeypatch):
    docker, _info = _shared_node(tmp_path, monkeypatch, existed=True)
    _record(tmp_path, capsys, docker)
    (docker / "key.json").write_text("{}")
    rc, result = run_module(node_teardown.main, _args(tmp_path, shared_dirs=[{"path": str(docker), **SHARED}]), capsys)
    assert rc == 0 and (docker / "key.json").exists() and all(str(docker) not in a for a in result["actions"]), result


def test_a_shared_directory_without_the_list_is_removed_whole_as_before(tmp_path, node, capsys, monkeypatch):
    docker, _info = _shared_node(tmp_path, monkeypatch)
    _record(tmp_path, capsys, docker)
    (docker / "certs.d").mkdir(parents=True)
    (docker / "certs.d/ca.crt").write_text("CA")
    rc, result = run_module(node_teardown.main, _args(tmp_path), capsys)
    assert rc == 0 and f"remove {docker}" in result["actions"] and not docker.exists()


@pytest.mark.parametrize("name", ["../passwd", "/etc/passwd", ".", "certs.d/../../x"])
def test_a_shared_directory_names_only_paths_inside_it(name):
    with pytest.raises(ValueError, match="is not a path inside /etc/docker"):
        node_teardown_shared.named_entries("/etc/docker", [name])


def _warnings(monkeypatch):
    """Where a warning goes depends on what else the test run imported (ansible's is_controller): kept here."""
    warnings = []
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda self, warning, **kwargs: warnings.append(warning))
    return warnings


def _purges(node):
    return [argv[4:] for argv in node.commands if argv[:2] == ["apt-get", "purge"]]


def test_a_package_sparkctl_installed_is_purged_and_the_same_installed_by_hand_since_is_kept(tmp_path, node, capsys):
    record = _args(tmp_path, backup_dir=str(tmp_path / "b"))
    run_module(node_baseline.main, record, capsys)
    # The fabric test installs iperf3 on one node (roles/teardown's tasks/installed.yml notes it)...
    node.install("iperf3", depends=["libiperf0"])
    rc, result = run_module(node_baseline.main, dict(record, installed_packages=["iperf3"]), capsys)
    assert rc == 0 and result["changed"]
    teardown = _args(tmp_path, packages=["nginx", "iperf3"], remove_record=False)
    rc, result = run_module(node_teardown.main, teardown, capsys)
    assert rc == 0 and result["kept_packages"] == [] and "iperf3" not in node.packages, result
    assert "libiperf0" not in node.packages and _purges(node) == [["iperf3"], ["libiperf0"]]

    # ...while on another the user installs it by hand after sparkctl's first run: it stays, with what it needs.
    other = tmp_path / "other"
    node.commands.clear()
    run_module(node_baseline.main, _args(other, backup_dir=str(other / "b")), capsys)
    node.install("iperf3", depends=["libiperf0"])
    check = _args(other, packages=["nginx", "iperf3"], remove_record=False, _ansible_check_mode=True)
    rc, result = run_module(node_teardown.main, check, capsys)
    assert rc == 0 and result["kept_packages"] == ["iperf3"] and not result["changed"], result
    rc, result = run_module(node_teardown.main, dict(check, _ansible_check_mode=False), capsys)
    assert rc == 0 and result["kept_packages"] == ["iperf3"] and not result["changed"], result
    assert {"iperf3", "libiperf0"} <= node.packages and _purges(node) == []


def test_what_a_package_installed_by_hand_since_needs_stays_when_sparkctl_purges_its_own(tmp_path, node, capsys, monkeypatch):
    warnings = _warnings(monkeypatch)
    record = _args(tmp_path, backup_dir=str(tmp_path / "b"))
    run_module(node_baseline.main, record, capsys)
    node.install("nginx", depends=["libnginx", "libshared"])
    run_module(node_baseline.main, dict(record, installed_packages=["nginx"]), capsys)
    # Installed by hand since: a tool sparkctl does not name, one it does (iperf3), each with its dependencies.
    node.install("mytool", depends=["libmytool", "libshared"])
    node.install("iperf3", depends=["libiperf0"])
    rc, result = run_module(node_teardown.main, _args(tmp_path, packages=["nginx", "iperf3"], remove_record=False), capsys)
    assert rc == 0 and result["kept_packages"] == ["iperf3"], result
    assert _purges(node) == [["nginx"], ["libnginx"]], node.commands
    assert {"mytool", "libmytool", "libshared", "iperf3", "libiperf0"} <= node.packages and not warnings


def test_the_purge_guard_keeps_a_dependency_someone_elses_package_needs_that_dpkg_did_not_show(tmp_path, node, capsys, monkeypatch):
    # Should the relations miss a need (libnginx is mytool's too, through something dpkg-query's fields do not
    # show), apt's simulation of the purge names mytool: nothing of that purge goes (purge_is_contained).
    warnings = _warnings(monkeypatch)
    record = _args(tmp_path, backup_dir=str(tmp_path / "b"))
    run_module(node_baseline.main, record, capsys)
    node.install("nginx", depends=["libnginx"])
    run_module(node_baseline.main, dict(record, installed_packages=["nginx"]), capsys)
    node.install("mytool")
    node.rdepends = {"libnginx": ["mytool"]}
    rc, result = run_module(node_teardown.main, _args(tmp_path, packages=["nginx"], remove_record=False), capsys)
    assert rc == 0 and _purges(node) == [["nginx"]] and {"libnginx", "mytool"} <= node.packages, node.commands
    assert any(w.startswith("not purging libnginx: mytool") for w in warnings), warnings


def test_an_older_record_without_the_list_purges_as_before_and_says_so(tmp_path, node, capsys, monkeypatch):
    warnings = _warnings(monkeypatch)
    record = _args(tmp_path, backup_dir=str(tmp_path / "b"))
    run_module(node_baseline.main, record, capsys)
    path = tmp_path / "var/lib/sparkctl/baseline.json"
    older = json.loads(path.read_text())
    del older["installed_by_sparkctl"]
    path.write_text(json.dumps(older))
    node.install("nginx", depends=["libnginx"])
    # This sparkctl's install does not begin a list in an older record: it would read as complete.
    rc, result = run_module(node_baseline.main, dict(record, installed_packages=["nginx"]), capsys)
    assert (rc, result["changed"]) == (0, False) and "installed_by_sparkctl" not in json.loads(path.read_text())
    node.install("iperf3", depends=["libiperf0"])  # by hand
    rc, result = run_module(node_teardown.main, _args(tmp_path, packages=["nginx", "iperf3"], remove_record=False), capsys)
    assert rc == 0 and result["kept_packages"] == [] and _purges(node) == [["nginx", "iperf3"], ["libiperf0", "libnginx"]]
    warning, = [w for w in warnings if "older sparkctl" in w]
    assert "nginx, iperf3" in warning and '"installed_by_sparkctl": [...]' in warning and "--check" in warning


def test_the_record_notes_each_package_sparkctl_installs_once(tmp_path, node, capsys):
    record = _args(tmp_path, backup_dir=str(tmp_path / "b"))
    path = tmp_path / "var/lib/sparkctl/baseline.json"
    rc, result = run_module(node_baseline.main, record, capsys)
    assert rc == 0 and result["baseline"]["installed_by_sparkctl"] == []
    node.install("nftables")
    rc, result = run_module(node_baseline.main, dict(record, installed_packages=["nftables"]), capsys)
    assert rc == 0 and result["changed"] and result["added"]["installed_by_sparkctl"] == ["nftables"]
    assert json.loads(path.read_text())["installed_by_sparkctl"] == ["nftables"]
    assert json.loads(path.read_text())["packages"] == ["bash"]  # the record of the node before sparkctl stays
    rc, result = run_module(node_baseline.main, dict(record, installed_packages=["nftables"]), capsys)
    assert (rc, result["changed"]) == (0, False)
    # --check reports the name it would add and writes nothing.
    before = path.read_text()
    rc, result = run_module(node_baseline.main, dict(record, installed_packages=["nftables", "earlyoom"],
                                                     _ansible_check_mode=True), capsys)
    assert rc == 0 and result["changed"] and result["added"]["installed_by_sparkctl"] == ["earlyoom"]
    assert path.read_text() == before
    rc, result = run_module(node_baseline.main, dict(record, installed_packages=["earlyoom", "nftables"]), capsys)
    assert result["changed"] and json.loads(path.read_text())["installed_by_sparkctl"] == ["earlyoom", "nftables"]


def test_a_first_record_written_right_after_an_install_notes_the_packages_as_absent_before(tmp_path, node, capsys):
    # A step that installs where no stage recorded the node first (the verify stage's fabric test).
    node.install("iperf3", depends=["libiperf0"])
    rc, result = run_module(node_baseline.main, _args(tmp_path, backup_dir=str(tmp_path / "b"), installed_packages=["iperf3"]), capsys)
    assert rc == 0 and result["recorded"]
    assert result["baseline"]["installed_by_sparkctl"] == ["iperf3"] and "iperf3" not in result["baseline"]["packages"]
    rc, result = run_module(node_teardown.main, _args(tmp_path, packages=["iperf3"], remove_record=False), capsys)
    assert rc == 0 and "iperf3" not in node.packages and result["kept_packages"] == []


# --- roles/teardown names what the roles create ----------------------------------------------


def _yaml(path):
    return yaml.safe_load((ROLES / path).read_text(encoding="utf-8"))


def test_teardown_lists_follow_the_roles():
    names = _yaml("teardown/vars/main.yml")
    wanted_packages = ([_yaml("firewall/defaults/main.yml")["firewall_package"], _yaml("oom_guard/defaults/main.yml")["oom_guard_package"],
                        _yaml("api_proxy/defaults/main.yml")["api_proxy_package"]]
                       + _yaml("engine_venv/defaults/main.yml")["engine_venv_apt_packages"]
                       + _yaml("engine_image/defaults/main.yml")["engine_image_docker_packages"]
                       + _yaml("engine_image/defaults/main.yml")["engine_image_python_packages"]
                       # The fabric test installs its method's tool (module_utils/fabric_test.PACKAGES).
                       + list(fabric_test.PACKAGES.values())
                       + [_yaml("observe/defaults/main.yml")[var] for var in ("observe_node_exporter_package", "observe_prometheus_package",
                                                                             "observe_grafana_package")])
    assert set(wanted_packages) <= set(names["teardown_packages"])
    files = names["teardown_files"]
    for role, var in (("direct_link", "direct_link_netplan_path"), ("oom_guard", "oom_guard_config_file"),
                      ("engine_image", "engine_image_daemon_json"), ("observe", "observe_prometheus_defaults_file"),
                      ("observe", "observe_node_exporter_defaults_file"), ("observe", "observe_prometheus_config_file")):
        assert _yaml(f"{role}/defaults/main.yml")[var] in files, var
    paths = names["teardown_fixed_paths"]
    for role, var in (("api_proxy", "api_proxy_state_dir"), ("fabric_env", "fabric_env_dir"), ("checkpoint", "checkpoint_tools_venv"),
                      ("engine_image", "engine_image_context_root")):
        value = _yaml(f"{role}/defaults/main.yml")[var]
        assert any(value == p or value.startswith(p + "/") for p in paths), var
    observe = _yaml("observe/defaults/main.yml")
    for var in ("observe_password_file", "observe_node_exporter_password_file", "observe_grafana_datasource_password_file",
                "observe_node_exporter_web_config", "observe_prometheus_web_config",
                "observe_prometheus_rules_file", "observe_engine_key_file", "observe_node_exporter_textfile_dir",
                "observe_grafana_password_file", "observe_grafana_dropin", "observe_grafana_datasource_file",
                "observe_grafana_dashboards_provider_file", "observe_grafana_dashboards_dir"):
        assert any(observe[var].startswith(p + "/") for p in paths), var
    assert observe["observe_grafana_keyring"] in paths
    assert f"/etc/apt/sources.list.d/{observe['observe_grafana_repo_name']}.sources" in paths
    # The hold the observe role puts on each daemon while its package installs (roles/observe/vars).
    hold = _yaml("observe/vars/main.yml")["observe_hold_paths"]
    for var in ("observe_prometheus_service", "observe_node_exporter_service", "observe_grafana_service"):
        assert f"/etc/systemd/system/{observe[var]}.d" in paths, var
    assert "'/etc/systemd/system/'" in hold and "'.d/sparkctl-hold.conf'" in hold
    # The programs the engine's units run (the memory gate, the rank guard), fixed in their module_utils.
    from ansible_collections.sparkctl.spark.plugins.module_utils import engine_gate, rank_guard
    for program in (engine_gate.GATE_SCRIPT, rank_guard.GUARD_SCRIPT):
        assert any(program.startswith(p + "/") for p in paths), program
    # The kernel caches' root is fixed in module_utils/jit_cache.py (engine.env names it).
    from ansible_collections.sparkctl.spark.plugins.module_utils import jit_cache
    assert any(jit_cache.BASE_DIR.startswith(p + "/") for p in paths), jit_cache.BASE_DIR
    from ansible_collections.sparkctl.spark.plugins.module_utils.checkpoint_store import SERVED_FILE
    assert names["teardown_served_file"] == SERVED_FILE
    firewall = _yaml("firewall/vars/main.yml")
    assert names["teardown_nft_tables"] == [f"{firewall['firewall_family']} {firewall['firewall_table']}"]
    assert firewall["firewall_wants_dir"] in paths
    assert names["teardown_docker_image_label"] == _yaml("engine_image/defaults/main.yml")["engine_image_hash_label"]
    mesh = _yaml("ssh_mesh/defaults/main.yml")
    assert any(p.endswith("/.ssh/" + mesh["ssh_mesh_key_name"]) for p in paths)
    strip = {Path(entry["path"]).name: entry for entry in names["teardown_strip"]}
    assert strip["authorized_keys"]["markers"] == [mesh["ssh_mesh_key_comment_marker"]]
    marker = _yaml("ssh_mesh/vars/main.yml")["ssh_mesh_client_marker"]
    assert marker == "# {mark} " + strip["config"]["block_marker"]
    assert set(names["teardown_group_members"]) == {_yaml("engine_image/defaults/main.yml")["engine_image_docker_group"]}


def test_the_shared_directories_name_what_the_roles_write_there():
    names = _yaml("teardown/vars/main.yml")
    shared = {entry["path"]: entry for entry in names["teardown_shared_dirs"]}
    # Each is one of the record's paths: the record says whether sparkctl created it.
    assert set(shared) <= set(names["teardown_fixed_paths"]), sorted(set(shared) - set(names["teardown_fixed_paths"]))
    written = {f"{path}/{name}" for path, entry in shared.items() for name in entry["sparkctl"]}
    observe = _yaml("observe/defaults/main.yml")
    wanted = {observe[var] for var in (
        "observe_prometheus_config_file", "observe_prometheus_web_config", "observe_node_exporter_web_config",
        "observe_password_file", "observe_node_exporter_password_file", "observe_prometheus_rules_file",
        "observe_engine_key_file", "observe_tls_dir", "observe_node_exporter_textfile_dir",
        "observe_grafana_password_file", "observe_grafana_datasource_password_file", "observe_grafana_tls_dir",
        "observe_grafana_datasource_file", "observe_grafana_dashboards_provider_file", "observe_grafana_dashboards_dir",
        "observe_grafana_dropin")}
    wanted.add(_yaml("observe/vars/main.yml")["observe_grafana_shared_password_file"])
    wanted |= {f"/etc/systemd/system/{observe[var]}.d/sparkctl-hold.conf"
               for var in ("observe_prometheus_service", "observe_node_exporter_service", "observe_grafana_service")}
    wanted.add(_yaml("engine_image/defaults/main.yml")["engine_image_daemon_json"])
    wanted.add(_yaml("firewall/vars/main.yml")["firewall_wants_dir"] + "/{{ spark_units.firewall }}")
    # What the roles write in a shared directory is named there; nothing named is not written by a role.
    assert {path for path in wanted if any(path.startswith(d + "/") for d in shared)} == written
    assert wanted <= written, sorted(wanted - written)


def _task_lists(tasks):
    """Each list of tasks in a task file: the file's, and each block's, rescue's and always'."""
    yield tasks
    for task in tasks:
        for key in ("block", "rescue", "always"):
            if isinstance(task, dict) and task.get(key):
                yield from _task_lists(task[key])


def test_every_apt_install_is_noted_in_the_record_right_after_it():
    """The teardown purges only packages the record lists as sparkctl's: every apt task of a role is followed
    by roles/teardown's tasks/installed.yml, run only when that task changed the node, outside --check."""
    found = set()
    for path in sorted(ROLES.glob("*/tasks/*.yml")):
        role = path.parts[-3]
        for tasks in _task_lists(yaml.safe_load(path.read_text(encoding="utf-8")) or []):
            for index, task in enumerate(tasks):
                if "ansible.builtin.apt" not in task:
                    continue
                found.add(role)
                where = f"{path.relative_to(REPO)}: {task['name']}"
                after = tasks[index + 1] if index + 1 < len(tasks) else {}
                include = after.get("ansible.builtin.include_role") or {}
                assert include.get("name") == "teardown" and include.get("tasks_from") == "installed", where
                assert include.get("apply") == {"tags": ["always"]}, where
                assert task.get("register"), where
                when = after.get("when")
                assert when == [f"{task['register']} is changed", "not ansible_check_mode"], (where, when)
                assert "teardown_installed" in after.get("vars", {}), where
    assert found >= {"firewall", "oom_guard", "api_proxy", "engine_venv", "engine_image", "fabric_test", "checkpoint", "linger",
                     "observe"}
    installed = yaml.safe_load((ROLES / "teardown/tasks/installed.yml").read_text(encoding="utf-8"))
    learn = yaml.safe_load((ROLES / "teardown/tasks/learn.yml").read_text(encoding="utf-8"))
    options, learned = installed[0]["sparkctl.spark.node_baseline"], learn[0]["sparkctl.spark.node_baseline"]
    assert options.pop("installed_packages") == "{{ teardown_installed }}"
    assert set(options) == set(learned), "installed.yml passes node_baseline the options learn.yml does"


def test_every_stage_that_changes_a_node_records_it_first():
    for stage in ("provision", "checkpoint", "runtime", "serve", "observe"):
        plays = yaml.safe_load((REPO / "playbooks" / f"{stage}.yml").read_text(encoding="utf-8"))
        assert any(play.get("vars", {}).get("sparkctl_record_baseline") is True for play in plays), stage
    for stage in ("preflight", "verify", "status", "stop", "teardown"):
        plays = yaml.safe_load((REPO / "playbooks" / f"{stage}.yml").read_text(encoding="utf-8"))
        assert not any(play.get("vars", {}).get("sparkctl_record_baseline") for play in plays), stage


def test_a_switch_of_the_served_model_leaves_nothing_of_the_other_profile(tmp_path, node, capsys):
    """After a model switch the node holds two profiles' checkpoints and venvs. The record was
    taken before the first profile's run; the second's paths are added to it by the steps that
    create them, right before they do (roles/teardown tasks/learn.yml), not by the stage's start
    (tasks/baseline.yml, which names them deferred), and the teardown takes both profiles' venvs
    off and keeps (or, purging, empties) both checkpoints the served list names."""
    opt = tmp_path / "opt/sparkctl"
    opt.mkdir(parents=True)  # there before sparkctl: only what sparkctl made inside it goes
    first, second = tmp_path / "srv/sparkctl/models/a", tmp_path / "srv/sparkctl/models/b"
    venv_a, venv_b = opt / "venvs/a", opt / "venvs/b"
    served = tmp_path / "var/lib/sparkctl/checkpoints-served.json"
    # The first record (a stage's start) takes the deferred paths with the others.
    record = _args(tmp_path, backup_dir=str(tmp_path / "b"), paths=[str(opt)], deferred_paths=[str(first), str(venv_a)])
    rc, result = run_module(node_baseline.main, record, capsys)
    assert rc == 0 and result["changed"]
    assert result["baseline"]["paths"][str(first)] is False and result["baseline"]["paths"][str(venv_a)] is False
    for checkpoint in (first,):
        checkpoint.mkdir(parents=True)
    venv_a.mkdir(parents=True)
    # The switch's run starts naming the other profile's paths deferred: the record stays as it
    # was (a run refused before it creates them changes nothing).
    switched = dict(record, deferred_paths=[str(second), str(venv_b)])
    rc, result = run_module(node_baseline.main, switched, capsys)
    assert (rc, result["changed"]) == (0, False)
    assert str(second) not in result["baseline"]["paths"]
    # Then each step right before it creates its directory.
    for path in (second, venv_b):
        learn = dict(record, paths=[str(opt), str(path)], deferred_paths=[])
        rc, result = run_module(node_baseline.main, learn, capsys)
        assert rc == 0 and result["changed"] and result["baseline"]["paths"][str(path)] is False, path
        assert result["baseline"]["paths"][str(first)] is False  # what it knew stays as it was
        rc, result = run_module(node_baseline.main, learn, capsys)
        assert (rc, result["changed"]) == (0, False)
    second.mkdir(parents=True)
    venv_b.mkdir(parents=True)
    for checkpoint in (first, second):
        (checkpoint / "model.safetensors").write_text("w")
        (checkpoint / ".sparkctl-created").write_text("")
        (checkpoint / ".sparkctl-manifest.json").write_text(json.dumps({"model.safetensors": {"size": 1, "sha256": None}}))
    served.write_text(json.dumps({"version": 1, "served": [str(second), str(first)]}))

    # The teardown of the current profile (b) without --purge-checkpoints: both checkpoints named as kept.
    keep = _args(tmp_path, keep=[str(second)], served_file=str(served), _ansible_check_mode=True)
    rc, result = run_module(node_teardown.main, keep, capsys)
    assert rc == 0 and sorted(result["kept"]) == sorted([str(first), str(second)]), result
    assert f"remove {venv_a}" in result["actions"] and f"remove {venv_b}" in result["actions"]

    purge = dict(keep, purge_dirs=[{"path": str(second)}], purge_served=True, _ansible_check_mode=False)
    rc, result = run_module(node_teardown.main, purge, capsys)
    assert rc == 0, result
    assert not first.exists() and not second.exists() and not venv_a.exists() and not venv_b.exists()
    assert opt.is_dir()


def test_a_record_without_its_package_list_purges_nothing(tmp_path, node, capsys, monkeypatch):
    # Without the list of what the node had before, every package apt marked automatic would
    # read as installed since: nothing is purged, and the teardown says so.
    record = tmp_path / "var/lib/sparkctl/baseline.json"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"paths": {}, "files": {}, "parents": {}}))
    node.packages |= {"libssl3", "nginx"}
    node.auto |= {"libssl3"}
    # Where a warning goes depends on what else the test run imported (ansible's is_controller): kept here.
    warnings = []
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda self, warning, **kwargs: warnings.append(warning))
    rc, result = run_module(node_teardown.main, _args(tmp_path, packages=["nginx"], remove_record=False), capsys)
    assert rc == 0, result
    assert not [argv for argv in node.commands if argv[:2] == ["apt-get", "purge"]], node.commands
    assert any("lists no packages" in warning and "nginx" in warning for warning in warnings), warnings


def test_a_recorded_file_an_administrator_linked_is_read_through_its_link_and_left_alone(tmp_path, node, capsys):
    # /etc/<file> -> /etc/<elsewhere> in a directory only root writes: the same content as recorded is no change.
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "real.conf").write_text("keep me\n")
    os.symlink(etc / "real.conf", etc / "linked.conf")
    record = _args(tmp_path, backup_dir=str(tmp_path / "b"), files=[str(etc / "linked.conf")])
    assert run_module(node_baseline.main, record, capsys)[0] == 0
    rc, result = run_module(node_teardown.main, _args(tmp_path, remove_record=False), capsys)
    assert rc == 0 and not result["changed"], result
    assert os.path.islink(etc / "linked.conf") and (etc / "real.conf").read_text() == "keep me\n"


def test_the_packages_an_apt_install_set_up_are_read_from_its_output():
    output = ["Reading package lists...", "Setting up runc (1.1.5+ds1-1) ...", "Setting up containerd (1.6.20~ds1-1+b1) ...",
              "Setting up docker.io (20.10.24+dfsg1-1+b3) ...", "Setting up python3-requests:all (2.28.1+dfsg-1) ...",
              "Processing triggers for man-db (2.11.2-2) ..."]
    assert td.packages_set_up(output, ["python3-requests", "docker.io", "docker.io", "containerd-only"]) == \
        ["python3-requests", "docker.io"]
    # A package already there is not set up again: an install that set up nothing of the list put none of it on.
    assert td.packages_set_up(["docker.io is already the newest version (20.10.24+dfsg1-1+b3)."], ["docker.io"]) == []
    assert td.packages_set_up([], ["docker.io"]) == []

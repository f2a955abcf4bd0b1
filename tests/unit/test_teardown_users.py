"""The account sparkctl creates for its services (spark_service_user): the record notes whether
each account existed (node_baseline's users), and the teardown removes only one it says did not
(node_teardown's users), with its home and private group as userdel --remove does, never one in
use, never a home that is not plainly its own. The accounts, groups, processes and the commands
are a node in a dict; homes are real directories under tmp_path."""

from __future__ import annotations

import grp
import json
import os
import pwd
import shutil
from pathlib import Path

import pytest
from ansible.module_utils import basic
from ansible_collections.sparkctl.spark.plugins.module_utils import teardown as td
from ansible_collections.sparkctl.spark.plugins.modules import node_baseline, node_teardown
from module_runner import run_module


class Accounts:
    """passwd, group, /proc and the account commands of a node; userdel as shadow's does it."""

    def __init__(self, tmp_path):
        self.tmp_path = tmp_path
        self.users = {"root": (0, 0, "/root"), "spark": (4000, 4000, str(tmp_path / "home/spark"))}
        self.groups = {"root": (0, []), "spark": (4000, []), "docker": (999, ["spark"])}
        self.commands = []
        self.warnings = []
        self.processes = {}  # pid -> uid
        self.terminable = True  # loginctl terminate-user ends the account's processes
        self.login_defs = tmp_path / "login.defs"
        self.login_defs.write_text("UMASK 022\nUSERGROUPS_ENAB yes\n")
        self.proc = tmp_path / "proc"
        self.proc.mkdir()

    def create(self, name, uid, home, gid=991):
        """What the provision stage does: useradd --system --create-home (a private group, gid)."""
        self.users[name] = (uid, gid, str(home))
        self.groups[name] = (gid, [])
        if self.mine(home):
            Path(home).mkdir(parents=True, exist_ok=True)

    def mine(self, path):
        """Whether path is in the test's scratch tree (the only place a home is made or removed)."""
        return str(path).startswith(str(self.tmp_path) + "/")

    def run(self, pid, uid):
        self.processes[pid] = uid
        (self.proc / str(pid)).mkdir()
        (self.proc / str(pid) / "status").write_text(f"Name:\tpython3\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t0\t0\t0\t0\n")

    def kill_all(self, uid):
        for pid, owner in list(self.processes.items()):
            if owner == uid:
                del self.processes[pid]
                shutil.rmtree(self.proc / str(pid))

    def passwd(self, name):
        uid, gid, home = self.users[name]
        return pwd.struct_passwd((name, "x", uid, gid, "", home, "/usr/sbin/nologin"))

    def getpwnam(self, name):
        if name not in self.users:
            raise KeyError(name)
        return self.passwd(name)

    def getpwall(self):
        return [self.passwd(name) for name in self.users]

    def getgrnam(self, name):
        if name not in self.groups:
            raise KeyError(name)
        gid, members = self.groups[name]
        return grp.struct_group((name, "x", gid, list(members)))

    def run_command(self, argv, **_kwargs):
        argv = [str(a) for a in argv]
        if argv[0] == "dpkg-query":
            return 0, "bash\tii \n", ""
        self.commands.append(argv)
        if argv[:2] == ["loginctl", "terminate-user"]:
            if self.terminable:
                self.kill_all(self.users[argv[2]][0])
            return 0, "", ""
        if argv[0] == "userdel":
            name = argv[-1]
            uid, gid, home = self.users[name]
            assert not [p for p, owner in self.processes.items() if owner == uid], "userdel: user is currently used by a process"
            del self.users[name]
            if "--remove" in argv:
                assert self.mine(home), f"the fake userdel would remove {home}"
                shutil.rmtree(home, ignore_errors=True)
            for _gid, members in self.groups.values():
                if name in members:
                    members.remove(name)
            private = self.groups.get(name)
            if ("USERGROUPS_ENAB yes" in self.login_defs.read_text() and private and private[0] == gid and not private[1]
                    and not any(g == gid for _u, g, _h in self.users.values())):
                del self.groups[name]
            return 0, "", ""
        if argv[0] == "groupdel":
            del self.groups[argv[1]]
            return 0, "", ""
        return 0, "", ""


@pytest.fixture
def node(tmp_path, monkeypatch):
    fake = Accounts(tmp_path)
    monkeypatch.setattr(pwd, "getpwnam", fake.getpwnam)
    monkeypatch.setattr(pwd, "getpwall", fake.getpwall)
    monkeypatch.setattr(grp, "getgrnam", fake.getgrnam)
    monkeypatch.setattr(basic.AnsibleModule, "run_command", lambda self, argv, **kw: fake.run_command(argv, **kw))
    # Where a warning goes depends on what else the test run imported (ansible's is_controller): kept here.
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda self, msg, *a, **kw: fake.warnings.append(msg))
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda self, name, *a, **kw: None)
    monkeypatch.setattr(node_teardown, "HOME_ROOTS", (str(tmp_path / "home"), str(tmp_path / "var/lib")), raising=False)
    monkeypatch.setattr(node_teardown, "PROC_ROOT", str(fake.proc), raising=False)
    monkeypatch.setattr(node_teardown, "LOGIN_DEFS", str(fake.login_defs), raising=False)
    monkeypatch.setattr(node_teardown, "TERMINATE_WAIT", 0.05, raising=False)
    return fake


def _record(tmp_path, **extra):
    return dict(path=str(tmp_path / "state/baseline.json"), backup_dir=str(tmp_path / "state/b"), **extra)


def _teardown(tmp_path, **extra):
    return dict(path=str(tmp_path / "state/baseline.json"), remove_record=False, **extra)


# --- the record -------------------------------------------------------------------------------


def test_a_first_record_notes_which_accounts_existed(tmp_path, node, capsys):
    rc, result = run_module(node_baseline.main, _record(tmp_path, users=["sparkctl", "spark"]), capsys)
    assert rc == 0 and result["recorded"], result
    assert result["baseline"]["users"] == {"sparkctl": False, "spark": True}
    assert result["baseline"]["user_groups"] == {"sparkctl": False, "spark": True}
    on_disk = json.loads((tmp_path / "state/baseline.json").read_text())
    assert on_disk["users"] == {"sparkctl": False, "spark": True}


def test_an_older_record_learns_the_account_before_provision_creates_it_and_keeps_that_answer(tmp_path, node, capsys):
    # A record written by a sparkctl that created no account: no users key.
    rc, result = run_module(node_baseline.main, _record(tmp_path), capsys)
    record_file = tmp_path / "state/baseline.json"
    older = json.loads(record_file.read_text())
    older.pop("users", None)
    older.pop("user_groups", None)
    record_file.write_text(json.dumps(older))

    # --check reports what it would learn and writes nothing.
    rc, result = run_module(node_baseline.main, _record(tmp_path, users=["sparkctl"], _ansible_check_mode=True), capsys)
    assert rc == 0 and result["changed"] and result["added"]["users"] == {"sparkctl": False}, result
    assert json.loads(record_file.read_text()) == older

    rc, result = run_module(node_baseline.main, _record(tmp_path, users=["sparkctl"]), capsys)
    assert rc == 0 and result["changed"] and not result["recorded"], result
    assert result["added"]["users"] == {"sparkctl": False} and result["added"]["user_groups"] == {"sparkctl": False}
    learned = json.loads(record_file.read_text())
    assert learned["users"] == {"sparkctl": False} and learned["paths"] == older["paths"]

    # Provision creates it; a later stage's record keeps the first answer.
    node.create("sparkctl", 990, tmp_path / "home/sparkctl")
    rc, result = run_module(node_baseline.main, _record(tmp_path, users=["sparkctl"]), capsys)
    assert (rc, result["changed"]) == (0, False), result
    assert json.loads(record_file.read_text())["users"] == {"sparkctl": False}
    # Another account it does not know is learned as it is now.
    rc, result = run_module(node_baseline.main, _record(tmp_path, users=["sparkctl", "spark"]), capsys)
    assert result["changed"] and result["added"]["users"] == {"spark": True}
    assert json.loads(record_file.read_text())["users"] == {"sparkctl": False, "spark": True}


# --- the teardown -----------------------------------------------------------------------------


def _provisioned(tmp_path, node, capsys, **created):
    """A record taken before sparkctl (sparkctl absent, spark there), then the account created."""
    rc, _result = run_module(node_baseline.main, _record(tmp_path, users=["sparkctl", "spark"]), capsys)
    assert rc == 0
    home = created.get("home", tmp_path / "home/sparkctl")
    node.create("sparkctl", created.get("uid", os.getuid()), home)
    if node.mine(home):
        (home / ".bashrc").write_text("# sparkctl's\n")
    node.groups["docker"][1].append("sparkctl")
    return home


def test_teardown_removes_only_the_account_the_record_says_sparkctl_created(tmp_path, node, capsys):
    home = _provisioned(tmp_path, node, capsys)
    node.create("someone", 5000, tmp_path / "home/someone", gid=5000)  # not in the record: not sparkctl's to judge
    rc, result = run_module(node_teardown.main, _teardown(tmp_path, users=["sparkctl", "spark", "someone"]), capsys)
    assert rc == 0 and result["changed"], result
    assert result["removed_users"] == ["sparkctl"]
    assert node.commands == [["userdel", "--remove", "sparkctl"]]
    assert f"remove the account sparkctl, its home {home}, its group sparkctl (created by sparkctl)" in result["actions"]
    assert "sparkctl" not in node.users and "sparkctl" not in node.groups and not home.exists()
    assert {"spark", "someone"} <= set(node.users) and (tmp_path / "home/spark").parent.is_dir()
    assert node.groups["docker"] == (999, ["spark"])
    # Gone is done: a second teardown has nothing left to remove.
    rc, result = run_module(node_teardown.main, _teardown(tmp_path, users=["sparkctl", "spark", "someone"]), capsys)
    assert (rc, result["changed"], result["removed_users"]) == (0, False, [])


def test_check_mode_says_what_would_go_and_changes_nothing(tmp_path, node, capsys):
    home = _provisioned(tmp_path, node, capsys)
    node.run(4321, os.getuid())  # in check mode the units were not stopped
    args = _teardown(tmp_path, users=["sparkctl"], _ansible_check_mode=True, _ansible_diff=True)
    rc, result = run_module(node_teardown.main, args, capsys)
    assert rc == 0 and result["changed"] and result["removed_users"] == ["sparkctl"], result
    assert "end the processes of sparkctl (PIDs 4321): loginctl terminate-user sparkctl" in result["actions"]
    assert "remove the account sparkctl" in result["diff"]["before"]
    assert node.commands == [] and "sparkctl" in node.users and (home / ".bashrc").exists() and node.processes


def test_the_account_processes_are_ended_first_and_one_in_use_is_not_removed(tmp_path, node, capsys):
    _provisioned(tmp_path, node, capsys)
    node.run(4321, os.getuid())
    node.run(4322, 4000)  # spark's: not looked at
    rc, result = run_module(node_teardown.main, _teardown(tmp_path, users=["sparkctl"]), capsys)
    assert rc == 0 and result["removed_users"] == ["sparkctl"], result
    assert node.commands == [["loginctl", "terminate-user", "sparkctl"], ["userdel", "--remove", "sparkctl"]]

    node.commands.clear()
    _provisioned(tmp_path, node, capsys)
    node.run(4323, os.getuid())
    node.terminable = False  # a process outside the account's sessions
    rc, result = run_module(node_teardown.main, _teardown(tmp_path, users=["sparkctl"]), capsys)
    assert rc == 1 and result["failed"], result
    assert "sparkctl" in result["msg"] and "4323" in result["msg"] and result["pids"] == [4323]
    assert node.commands == [["loginctl", "terminate-user", "sparkctl"]] and "sparkctl" in node.users


@pytest.mark.parametrize("home", ["/", "relative/home", "/etc/sparkctl"])
def test_a_dangerous_home_is_left_and_said_so(tmp_path, node, capsys, home):
    _provisioned(tmp_path, node, capsys, home=home)
    rc, result = run_module(node_teardown.main, _teardown(tmp_path, users=["sparkctl"]), capsys)
    assert rc == 0 and result["removed_users"] == ["sparkctl"], result
    assert node.commands == [["userdel", "sparkctl"]]  # the account goes, never with --remove
    assert "remove the account sparkctl, its group sparkctl (created by sparkctl)" in result["actions"]
    if os.path.lexists(home):
        assert any(a.startswith(f"keep {home}, the home of sparkctl: ") for a in result["actions"]), result["actions"]


def test_home_refusal_reasons(tmp_path):
    roots = (str(tmp_path / "home"), str(tmp_path / "var/lib"))
    mine = tmp_path / "home/sparkctl"
    mine.mkdir(parents=True)
    uid = os.stat(mine).st_uid
    assert td.home_refusal(str(mine), uid, roots=roots) is None
    assert td.home_refusal(str(mine) + "/", uid, [("spark", str(tmp_path / "home/spark"))], roots=roots) is None
    assert "absolute" in td.home_refusal("home/sparkctl", uid, roots=roots)
    assert "absolute" in td.home_refusal("", uid, roots=roots)
    assert td.home_refusal("/", uid, roots=("/",)) == "it is /"
    assert "not under" in td.home_refusal("/etc", uid, roots=roots)
    assert "not under" in td.home_refusal(str(tmp_path / "home"), uid, roots=roots)  # the root itself
    assert "not under" in td.home_refusal(str(tmp_path / "home/../etc"), uid, roots=roots)
    assert "not under" in td.home_refusal("/home", uid)
    assert "not under" in td.home_refusal("/var/lib", uid) and "not under" in td.home_refusal("/var/libx/a", uid)
    assert "owns it" in td.home_refusal(str(mine), uid + 1, roots=roots)
    assert "not a directory" in td.home_refusal(str(tmp_path / "home/missing"), uid, roots=roots)
    link = tmp_path / "home/link"
    link.symlink_to(mine)
    assert "symbolic link" in td.home_refusal(str(link), uid, roots=roots)
    assert "home of spark" in td.home_refusal(str(mine), uid, [("spark", str(mine))], roots=roots)
    assert "home of spark" in td.home_refusal(str(mine), uid, [("spark", str(mine / "sub"))], roots=roots)
    (mine / "models/x").mkdir(parents=True)
    assert "keeps" in td.home_refusal(str(mine), uid, keep=[str(mine / "models/x")], roots=roots)
    assert td.home_refusal(str(mine), uid, keep=[str(mine / "models/gone")], roots=roots) is None  # purged: gone
    assert "record" in td.home_refusal(str(mine), uid, record_path=str(mine / "baseline.json"), roots=roots)


def test_a_home_holding_a_kept_checkpoint_stays(tmp_path, node, capsys):
    home = _provisioned(tmp_path, node, capsys)
    (home / "models/x").mkdir(parents=True)
    rc, result = run_module(node_teardown.main, _teardown(tmp_path, users=["sparkctl"], keep=[str(home / "models/x")]), capsys)
    assert rc == 0 and node.commands == [["userdel", "sparkctl"]], result
    assert (home / "models/x").is_dir()
    assert f"keep {home}, the home of sparkctl: it holds {home / 'models/x'}, which the teardown keeps" in result["actions"]


def test_a_home_owned_by_someone_else_stays(tmp_path, node, capsys):
    home = _provisioned(tmp_path, node, capsys, uid=os.getuid() + 12345)
    rc, result = run_module(node_teardown.main, _teardown(tmp_path, users=["sparkctl"]), capsys)
    assert rc == 0 and node.commands == [["userdel", "sparkctl"]] and (home / ".bashrc").exists(), result


def test_a_private_group_there_before_sparkctl_keeps_the_account(tmp_path, node, capsys):
    node.groups["sparkctl"] = (990, [])  # there before sparkctl; provision then gave the account it
    run_module(node_baseline.main, _record(tmp_path, users=["sparkctl"]), capsys)
    node.users["sparkctl"] = (990, 990, str(tmp_path / "home/sparkctl"))
    rc, result = run_module(node_teardown.main, _teardown(tmp_path, users=["sparkctl"]), capsys)
    assert rc == 0 and result["removed_users"] == [] and node.commands == [], result
    assert any("userdel would delete its group sparkctl" in w for w in node.warnings), node.warnings


def test_without_usergroups_enab_the_private_group_goes_by_groupdel(tmp_path, node, capsys):
    node.login_defs.write_text("USERGROUPS_ENAB no\n")
    _provisioned(tmp_path, node, capsys)
    rc, result = run_module(node_teardown.main, _teardown(tmp_path, users=["sparkctl"]), capsys)
    assert rc == 0 and node.commands == [["userdel", "--remove", "sparkctl"], ["groupdel", "sparkctl"]], result
    assert "sparkctl" not in node.groups


def test_users_to_remove_are_only_those_recorded_absent():
    exists = {"a", "b", "c"}.__contains__
    assert td.users_to_remove(["a", "b", "c", "d", "a"], {"a": False, "b": True, "d": False}, exists) == ["a"]
    assert td.users_to_remove(["a"], {}, exists) == []

"""node_state: one read of what a role manages, compared as the writing modules compare it
(the module_utils logic on real files in a temporary directory, systemd through a stand-in
run(), and the module around it)."""

from __future__ import annotations

import grp
import hashlib
import os
import pwd

import pytest
from module_runner import captured_argument_spec, documentation, documented_like_spec, run_module

from ansible_collections.sparkctl.spark.plugins.module_utils import node_state as ns
from ansible_collections.sparkctl.spark.plugins.modules import node_state as module

ME = pwd.getpwuid(os.getuid()).pw_name
MY_GROUP = grp.getgrgid(os.getgid()).gr_name

SHOW = """Id=a.service
LoadState=loaded
ActiveState=active
SubState=running
UnitFileState=enabled
MainPID=42
NeedDaemonReload=no

Id=b.service
LoadState=not-found
ActiveState=inactive
SubState=dead
UnitFileState=
MainPID=0
NeedDaemonReload=no

Id=c.service
LoadState=loaded
ActiveState=activating
SubState=auto-restart
UnitFileState=disabled
MainPID=0
NeedDaemonReload=yes
"""


def sha1(text):
    return hashlib.sha1(text.encode()).hexdigest()


@pytest.fixture
def tree(tmp_path):
    (tmp_path / "conf").write_text("hello\n")
    os.chmod(tmp_path / "conf", 0o640)
    (tmp_path / "dir").mkdir()
    os.chmod(tmp_path / "dir", 0o755)
    os.symlink(str(tmp_path / "conf"), tmp_path / "link")
    return tmp_path


def test_a_file_as_wanted_has_no_differences(tree):
    wanted = {"path": str(tree / "conf"), "checksum": sha1("hello\n"), "owner": ME, "group": MY_GROUP, "mode": "0640"}
    assert ns.path_differences(wanted, ns.read_path(wanted["path"], want_checksum=True)) == []


@pytest.mark.parametrize("change, expected", [
    ({"checksum": sha1("other\n")}, "content differs"),
    ({"mode": "0600"}, "mode 0640, should be 0600"),
    ({"mode": 0o644}, "mode 0640, should be 0644"),
    ({"owner": "nobody-sparkctl-test"}, f"owner {ME}, should be nobody-sparkctl-test"),
    ({"group": "12345678"}, f"group {MY_GROUP}, should be 12345678"),
    ({"state": "directory"}, "is a file, should be a directory"),
    ({"state": "absent"}, "present as a file, should be absent"),
])
def test_each_property_that_differs_is_named(tree, change, expected):
    wanted = dict({"path": str(tree / "conf"), "checksum": sha1("hello\n"), "owner": ME, "mode": "0640"}, **change)
    found = ns.read_path(wanted["path"], want_checksum=True)
    assert ns.path_differences(wanted, found) == [expected]


def test_owner_and_group_may_be_given_as_ids(tree):
    wanted = {"path": str(tree / "conf"), "owner": str(os.getuid()), "group": str(os.getgid())}
    assert ns.path_differences(wanted, ns.read_path(wanted["path"])) == []


def test_a_symbolic_mode_is_not_judged(tree):
    assert ns.path_differences({"path": str(tree / "conf"), "mode": "u+rw"}, ns.read_path(str(tree / "conf"))) == []


def test_missing_paths_and_links(tree):
    assert ns.path_differences({"state": "file"}, ns.read_path(str(tree / "nothing"))) == ["missing"]
    assert ns.path_differences({"state": "absent"}, ns.read_path(str(tree / "nothing"))) == []
    link = ns.read_path(str(tree / "link"))
    assert link["type"] == "link" and link["target"] == str(tree / "conf")
    assert ns.path_differences({"state": "link", "src": str(tree / "conf")}, link) == []
    assert ns.path_differences({"state": "link", "src": "/elsewhere"}, link) == [
        f"points to {tree / 'conf'}, should point to /elsewhere"]
    # A link is not followed: the file it points to is not what is judged.
    assert ns.path_differences({"state": "file"}, link) == ["is a link, should be a file"]


def test_the_checksum_is_read_only_when_asked_for(tree):
    assert "checksum" not in ns.read_path(str(tree / "conf"))
    assert ns.read_path(str(tree / "conf"), want_checksum=True)["checksum"] == sha1("hello\n")


def test_a_checksum_asked_for_without_a_wanted_one_is_returned_not_judged(tree):
    read = ns.assess_paths([{"path": str(tree / "conf"), "get_checksum": True, "mode": "0640"}])
    assert read["paths"][str(tree / "conf")]["checksum"] == sha1("hello\n")
    assert read["drifted"] == [] and read["differences"] == {}


def test_a_directory_lists_its_entries_hidden_ones_included_when_asked(tree):
    (tree / "dir" / ".hidden").write_text("")
    (tree / "dir" / "sub").mkdir()
    assert "entries" not in ns.read_path(str(tree / "dir"))
    assert ns.read_path(str(tree / "dir"), want_entries=True)["entries"] == [".hidden", "sub"]
    # An absent directory wanted absent is in sync, a present one wanted absent drifts.
    read = ns.assess_paths([{"path": str(tree / "gone"), "state": "absent", "get_entries": True},
                            {"path": str(tree / "dir"), "state": "absent", "get_entries": True}])
    assert read["drifted"] == [str(tree / "dir")]
    assert read["paths"][str(tree / "gone")] == {"exists": False, "type": "absent"}


def test_a_checksum_can_be_read_and_compared_with_a_prefix_another_node_adds(tree):
    """A secret kept as 'secret' on one node and as 'user:secret' on another compares by checksum alone."""
    state = ns.assess(
        paths=[{"path": str(tree / "conf"), "checksum_prefix": "user:"},
               {"path": str(tree / "dir"), "state": "directory", "get_checksum": True}],
        units=[], users=[], run=lambda argv: (0, "", ""))
    assert state["paths"][str(tree / "conf")]["checksum"] == sha1("user:hello\n")
    assert state["drifted"] == []
    state = ns.assess(paths=[{"path": str(tree / "conf"), "get_checksum": True}], units=[], users=[],
                      run=lambda argv: (0, "", ""))
    assert state["paths"][str(tree / "conf")]["checksum"] == sha1("hello\n") and state["drifted"] == []
    state = ns.assess(paths=[{"path": str(tree / "conf"), "checksum_prefix": "user:", "checksum": sha1("hello\n")}],
                      units=[], users=[], run=lambda argv: (0, "", ""))
    assert state["drifted"] == [str(tree / "conf")]


def test_systemctl_show_blocks_become_one_summary_per_unit():
    units = ns.parse_units(SHOW)
    assert sorted(units) == ["a.service", "b.service", "c.service"]
    assert ns.unit_summary(units["a.service"]) == {
        "load_state": "loaded", "active_state": "active", "sub_state": "running", "unit_file_state": "enabled",
        "main_pid": 42, "need_daemon_reload": False, "restart_pending": False}
    assert ns.unit_summary(None)["load_state"] == "not-found"
    # Killed, waiting RestartSec for systemd's restart: started to systemd_service, a restart pending to the roles.
    waiting = ns.unit_summary({"Id": "e.service", "LoadState": "loaded", "ActiveState": "activating",
                               "SubState": "auto-restart"})
    assert waiting["restart_pending"] is True and ns.unit_differences({"started": True}, waiting) == []
    assert ns.unit_summary(units["c.service"])["need_daemon_reload"] is True


@pytest.mark.parametrize("unit, wanted, expected", [
    ("a.service", {"enabled": True, "started": True}, []),
    ("a.service", {"started": False}, ["active, should be stopped"]),
    ("b.service", {"enabled": True, "started": True}, ["not-found, should be enabled", "inactive, should be started"]),
    ("b.service", {"enabled": False, "started": False}, []),
    # systemd_service counts a unit on its way up as started.
    ("c.service", {"started": True}, []),
    ("c.service", {"enabled": True}, ["disabled, should be enabled"]),
    ("c.service", {}, []),
    ("b.service", {"masked": True}, ["not-found, should be masked"]),
    ("a.service", {"masked": False}, []),
])
def test_unit_differences(unit, wanted, expected):
    assert ns.unit_differences(wanted, ns.unit_summary(ns.parse_units(SHOW)[unit])) == expected


def test_a_masked_unit_is_told_from_an_unmasked_one():
    masked = ns.unit_summary({"Id": "nginx.service", "LoadState": "masked", "UnitFileState": "masked"})
    assert ns.unit_differences({"masked": True}, masked) == []
    assert ns.unit_differences({"masked": False}, masked) == ["masked, should be unmasked"]
    # A mask counts as not enabled, as systemctl is-enabled reports it.
    assert ns.unit_differences({"enabled": True}, masked) == ["masked, should be enabled"]


def test_dpkg_query_listing():
    assert ns.parse_dpkg_query("python3-venv\tinstalled\npython3.12-venv\tnot-installed\nx:arm64\tinstalled\n") == {
        "python3-venv", "x"}


def test_packages_are_read_with_one_dpkg_query_and_missing_ones_named_in_order():
    calls = []

    def run(argv):
        calls.append(argv)
        # dpkg-query exits 1 and names nothing for a package it does not know at all.
        return 1, "nginx\tinstalled\nearlyoom\tconfig-files\n", "dpkg-query: no packages found matching zzz\n"

    assert ns.missing_packages(["zzz", "nginx", "earlyoom"], run, "/usr/bin/dpkg-query") == ["zzz", "earlyoom"]
    assert len(calls) == 1 and calls[0][0] == "/usr/bin/dpkg-query" and calls[0][-3:] == ["zzz", "nginx", "earlyoom"]
    assert ns.missing_packages([], run, "/usr/bin/dpkg-query") == [] and len(calls) == 1
    # Without dpkg-query nothing can be installed: every package is missing.
    assert ns.missing_packages(["nginx"], run, None) == ["nginx"] and len(calls) == 1


def test_one_systemctl_call_reads_every_unit():
    calls = []

    def run(argv):
        calls.append(argv)
        return 0, SHOW, ""

    units = ns.read_units(["a.service", "b.service", "unknown.service"], run)
    assert len(calls) == 1 and calls[0][-3:] == ["a.service", "b.service", "unknown.service"]
    assert units["unknown.service"]["load_state"] == "not-found"
    assert ns.read_units([], run) == {} and len(calls) == 1


def test_a_failing_systemctl_is_an_error_not_an_empty_state():
    with pytest.raises(RuntimeError, match="systemctl show failed"):
        ns.read_units(["a.service"], lambda argv: (1, "", "Failed to connect to bus"))


def test_assess_lists_drift_in_the_order_given(tree):
    state = ns.assess(
        paths=[{"path": str(tree / "conf"), "checksum": sha1("other\n")},
               {"path": str(tree / "dir"), "state": "directory", "mode": "0755"},
               {"path": str(tree / "gone"), "state": "absent"},
               {"path": str(tree / "new")}],
        units=[{"name": "b.service", "started": True}, {"name": "a.service", "started": True}],
        users=[ME, "no-such-user-sparkctl"], run=lambda argv: (0, SHOW, ""))
    assert state["drifted"] == [str(tree / "conf"), str(tree / "new"), "b.service"]
    assert state["differences"][str(tree / "new")] == ["missing"]
    assert state["users"][ME]["uid"] == os.getuid() and state["users"]["no-such-user-sparkctl"] == {"exists": False}


def test_the_module_reads_and_changes_nothing(tree, capsys, monkeypatch):
    monkeypatch.setattr(module.AnsibleModule, "run_command", lambda self, argv: (0, SHOW, ""))
    before = (tree / "conf").read_text(), oct(os.stat(tree / "conf").st_mode)
    rc, result = run_module(module.main, {
        "paths": [{"path": str(tree / "conf"), "checksum": sha1("hello\n"), "mode": "0600"}],
        "units": [{"name": "a.service", "enabled": True}], "_ansible_check_mode": True}, capsys)
    assert rc == 0 and result["changed"] is False
    assert result["drifted"] == [str(tree / "conf")]
    assert result["differences"][str(tree / "conf")] == ["mode 0640, should be 0600"]
    assert ((tree / "conf").read_text(), oct(os.stat(tree / "conf").st_mode)) == before


def test_the_module_names_the_packages_missing(capsys, monkeypatch):
    def run_command(self, argv):
        return (0, "nginx\tinstalled\n", "") if "dpkg-query" in argv[0] else (0, SHOW, "")

    monkeypatch.setattr(module.AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(module.AnsibleModule, "get_bin_path", lambda self, name, *a, **k: "/usr/bin/" + name)
    rc, result = run_module(module.main, {"packages": ["nginx", "earlyoom"]}, capsys)
    assert rc == 0 and result["packages_missing"] == ["earlyoom"] and result["changed"] is False


def test_the_module_fails_when_systemd_cannot_be_read(capsys, monkeypatch):
    monkeypatch.setattr(module.AnsibleModule, "run_command", lambda self, argv: (1, "", "no bus"))
    rc, result = run_module(module.main, {"units": [{"name": "a.service"}]}, capsys)
    assert rc == 1 and "no bus" in result["msg"]


def test_documentation_matches_the_argument_spec(monkeypatch):
    spec = captured_argument_spec(module.main, monkeypatch)
    assert documented_like_spec(documentation(module)["options"], spec["argument_spec"]) == []


def test_a_user_comes_with_its_manager_read_in_the_same_systemctl_call():
    calls = []
    uid = os.getuid()
    show = SHOW + f"\nId=user@{uid}.service\nLoadState=loaded\nActiveState=active\nSubState=running\n"

    def run(argv):
        calls.append(argv)
        return 0, show, ""

    state = ns.assess([], [{"name": "a.service"}], [ME], run)
    assert len(calls) == 1 and calls[0][-2:] == ["a.service", f"user@{uid}.service"]
    assert state["users"][ME]["manager"]["active_state"] == "active"
    assert state["users"][ME]["manager"]["unit"] == f"user@{uid}.service"
    assert list(state["units"]) == ["a.service"]


def test_texts_are_read_once_each_through_links(tree):
    (tree / "d").mkdir()
    (tree / "d" / "b.conf").write_text("[Login]\nRemoveIPC=no\n")
    os.symlink("/dev/null", tree / "d" / "a.conf")
    texts = ns.read_texts([str(tree / "d" / "*.conf"), str(tree / "d" / "b.conf"), str(tree / "none" / "*.conf")])
    assert texts == [{"path": str(tree / "d" / "a.conf"), "content": "", "checksum": hashlib.sha1(b"").hexdigest()},
                     {"path": str(tree / "d" / "b.conf"), "content": "[Login]\nRemoveIPC=no\n",
                      "checksum": hashlib.sha1(b"[Login]\nRemoveIPC=no\n").hexdigest()}]


def test_a_text_says_whether_it_is_the_file_exactly(tree):
    (tree / "crlf").write_bytes(b"Host a\r\n")
    (tree / "bad").write_bytes(b"\xff\n")
    (tree / "plain").write_bytes(b"Host a\n")
    texts = {t["path"]: t for t in ns.read_texts([str(tree / "*")])}
    for name in ("crlf", "bad", "plain"):
        text = texts[str(tree / name)]
        exact = hashlib.sha1(text["content"].encode()).hexdigest() == text["checksum"]
        assert exact == (name == "plain"), name
    assert texts[str(tree / "crlf")]["content"] == "Host a\n"


def test_a_text_pattern_may_start_at_an_account_home(tree, monkeypatch):
    monkeypatch.setenv("HOME", str(tree))
    (tree / "note").write_text("x")
    assert [t["path"] for t in ns.read_texts(["~/note"])] == [str(tree / "note")]
    home = pwd.getpwuid(os.getuid()).pw_dir
    assert ns.read_texts([f"~{ME}/.sparkctl-no-such-file"]) == [] and os.path.isabs(home)


def _fake_proc(root, pid, comm, argv):
    d = root / str(pid)
    d.mkdir(parents=True)
    (d / "stat").write_text(f"{pid} ({comm}) S " + " ".join(["0"] * 18 + ["100"] + ["0"] * 10) + "\n")
    (d / "comm").write_text(comm + "\n")
    (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")


def test_one_process_table_read_gives_the_engine_and_the_raylet(tmp_path):
    _fake_proc(tmp_path, 10, "VLLM::EngineCor", ["VLLM::EngineCore"])
    _fake_proc(tmp_path, 11, "grep", ["grep", "VLLM::EngineCore"])
    _fake_proc(tmp_path, 12, "raylet", ["/v/raylet", "--node_id=abc123"])
    _fake_proc(tmp_path, 13, "VLLM::EngineCor", ["VLLM::EngineCore"])
    found = ns.processes(["VLLM::EngineCore"], [], raylets=True, proc_root=str(tmp_path), own_pids=(13,))
    assert [p["pid"] for p in found["processes"]] == [10]
    assert found["raylets"] == [{"pid": 12, "node_id": "abc123"}]
    assert ns.processes([], [], raylets=False, proc_root=str(tmp_path)) == {}


def test_staleness_is_judged_only_for_the_units_named(monkeypatch):
    judged = {}

    def assess(units, inputs, run=None, now=None):
        judged.update(units=units, inputs=inputs)
        return {"a.service": {"stale": True, "daemon_reload": False},
                "b.service": {"stale": False, "daemon_reload": True}}

    monkeypatch.setattr(ns.unit_staleness, "assess", assess)
    found = ns.staleness({"a.service": ["/etc/x.env"], "b.service": []}, run=None)
    assert judged == {"units": ["a.service", "b.service"], "inputs": {"a.service": ["/etc/x.env"], "b.service": []}}
    assert found["stale"] == ["a.service"] and found["daemon_reload"] is True
    assert ns.staleness({}, run=None) == {"staleness": {}, "stale": [], "daemon_reload": False}

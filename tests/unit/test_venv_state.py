"""venv_state: the venv's distributions read from their metadata as pip list names them, uploaded trees compared
file by file as copy compares them, dpkg's listing read, and the module's one read of all of it."""

from __future__ import annotations

import hashlib
import os

from module_runner import run_module

from ansible_collections.sparkctl.spark.plugins.filter.engine_venv import venv_upload_trees
from ansible_collections.sparkctl.spark.plugins.module_utils import venv_state as vs
from ansible_collections.sparkctl.spark.plugins.modules import venv_state as module


def sha1(text):
    return hashlib.sha1(text.encode()).hexdigest()


def dist(site, name, version, kind="dist-info"):
    folder = site / f"{name.replace('-', '_')}-{version}.{kind}"
    folder.mkdir(parents=True)
    (folder / ("METADATA" if kind == "dist-info" else "PKG-INFO")).write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def test_distributions_are_read_from_their_metadata(tmp_path):
    site = tmp_path / "site-packages"
    dist(site, "vllm", "0.11.0")
    dist(site, "ray", "2.49.1")
    dist(site, "legacy-thing", "1.0", kind="egg-info")
    assert vs.installed_distributions(str(site)) == [
        {"name": "legacy-thing", "version": "1.0"}, {"name": "ray", "version": "2.49.1"},
        {"name": "vllm", "version": "0.11.0"}]


def test_tree_checksums_name_every_file_by_relative_path(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.whl").write_text("a")
    (tmp_path / "sub" / "b.py").write_text("b")
    assert vs.tree_checksums(str(tmp_path)) == {"a.whl": sha1("a"), os.path.join("sub", "b.py"): sha1("b")}
    assert venv_upload_trees([{"controller": str(tmp_path), "node": "/n"}]) == [
        {"path": "/n", "checksums": vs.tree_checksums(str(tmp_path))}]


def test_tree_differences_are_those_an_upload_would_fix(tmp_path, monkeypatch):
    monkeypatch.setattr(vs, "_root_owned", lambda info: True)
    node = tmp_path / "node"
    (node / "sub").mkdir(parents=True)
    for path in (node, node / "sub"):
        os.chmod(path, 0o755)
    (node / "a.whl").write_text("a")
    (node / "sub" / "b.py").write_text("old")
    (node / "extra").write_text("left alone")
    for path in (node / "a.whl", node / "sub" / "b.py"):
        os.chmod(path, 0o644)
    wanted = {"a.whl": sha1("a"), "sub/b.py": sha1("b"), "c.whl": sha1("c")}
    assert vs.tree_differences(str(node), wanted) == [f"{node}/c.whl missing", f"{node}/sub/b.py content differs"]
    assert vs.tree_differences(str(node), {"a.whl": sha1("a")}) == []
    os.chmod(node / "a.whl", 0o600)
    assert vs.tree_differences(str(node), {"a.whl": sha1("a")}) == [f"{node}/a.whl not root-owned with mode 0644 or 0755"]
    assert vs.tree_differences(str(tmp_path / "none"), {"a.whl": sha1("a")})[0] == f"{tmp_path}/none missing"


def test_tree_differences_name_a_wrong_kind_and_a_directory_mode(tmp_path, monkeypatch):
    monkeypatch.setattr(vs, "_root_owned", lambda info: True)
    node = tmp_path / "node"
    (node / "sub").mkdir(parents=True)
    (node / "wheel.whl").mkdir()
    for path in (node, node / "wheel.whl"):
        os.chmod(path, 0o755)
    os.chmod(node / "sub", 0o700)
    (node / "sub" / "b.py").write_text("b")
    os.chmod(node / "sub" / "b.py", 0o644)
    (node / "file").write_text("x")
    os.chmod(node / "file", 0o644)
    wanted = {"wheel.whl": sha1("w"), "sub/b.py": sha1("b"), "file/c.py": sha1("c")}
    assert vs.tree_differences(str(node), wanted) == [
        f"{node}/file is not a directory",
        f"{node}/sub not root-owned with mode 0755",
        f"{node}/file/c.py missing",
        f"{node}/wheel.whl is not a file",
    ]


def test_the_module_reads_the_venv_once(tmp_path, capsys, monkeypatch):
    venv = tmp_path / "venv"
    site = venv / "lib" / "python3.12" / "site-packages"
    dist(site, "vllm", "0.11.0")
    (venv / "bin").mkdir()
    (venv / "bin" / "python").write_text("")
    probe = '{"system": [3, 12, 3], "requested": {"executable": "/usr/bin/python3.12", "version": [3, 12, 3]}, ' \
            '"venv": {"version": [3, 12, 3]}}'
    calls = []

    def run_command(self, argv, **kwargs):
        calls.append(argv[0])
        if argv[0] == "python3":
            return 0, probe, ""
        if argv[0].endswith("dpkg-query"):
            return 1, "python3-venv\tinstalled\n", "no packages found matching python3.12-venv"
        return 0, '{"ok": true, "architecture": "X", "count": 3}\n', ""

    monkeypatch.setattr(module.AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(module.AnsibleModule, "get_bin_path", lambda self, name, required=False: "/usr/bin/" + name)
    rc, result = run_module(module.main, {
        "venv": str(venv), "python": "3.12", "apt_packages": ["python3-venv"], "packages": ["vllm==0.11.0", "ray==2.49.1"],
        "plugin": {"state": "absent"},
        "registry_probe": {"registry": {"module": "m", "attribute": "a"}, "architecture": "X"}}, capsys)
    assert rc == 0 and result["changed"] is False
    assert result["apt_missing"] == ["python3.12-venv"]
    assert result["installed"] == [{"name": "vllm", "version": "0.11.0"}]
    assert result["missing"] == ["ray==2.49.1"]
    assert result["plugin"] == {"changed": False, "actions": []}
    assert result["registry_probe"]["rc"] == 0
    assert calls == ["python3", "/usr/bin/dpkg-query", str(venv / "bin" / "python")]


def test_without_a_venv_every_pin_is_missing_and_nothing_is_probed(tmp_path, capsys, monkeypatch):
    probe = '{"system": [3, 12, 3], "requested": {"executable": "/usr/bin/python3", "version": [3, 12, 3]}, "venv": null}'
    monkeypatch.setattr(module.AnsibleModule, "run_command", lambda self, argv, **kw: (0, probe, ""))
    rc, result = run_module(module.main, {
        "venv": str(tmp_path / "venv"), "python": "3", "packages": ["vllm==0.11.0"],
        "registry_probe": {"registry": {"module": "m", "attribute": "a"}, "architecture": "X"}}, capsys)
    assert rc == 0 and result["installed"] is None and result["missing"] == ["vllm==0.11.0"]
    assert result["registry_probe"] is None

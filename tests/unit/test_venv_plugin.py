"""sparkctl.spark.venv_plugin: an out-of-tree plugin installed into a venv's site-packages
with .orig backups and a manifest. Install, converged re-run, drift repaired (hand edit,
engine reinstalled), check mode, diff, absent restores, backups never overwritten,
missing source; the missing pins and the Python probe venv_state runs; and the role's
filters (Python, local sources, the registration probe, golden for vLLM)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import module_runner
import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.sparkctl.spark.plugins.filter import engine_venv as F
from ansible_collections.sparkctl.spark.plugins.plugin_utils import profile as P
from ansible_collections.sparkctl.spark.plugins.module_utils import venv_plugin as V
from ansible_collections.sparkctl.spark.plugins.modules import venv_plugin

REPO = Path(__file__).resolve().parents[2]
LAB = REPO / "tests" / "lab"
GOLDEN = Path(__file__).parent / "golden" / "engine_venv"

REGISTRY = "eng/models/registry.py"
ADDED = "eng/models/plugin_model.py"
ENGINE_REGISTRY = "MODELS = ['Tiny']\n"
PLUGIN_REGISTRY = "MODELS = ['Tiny', 'Plugged']\n"


@pytest.fixture
def venv(tmp_path):
    """A venv-shaped tree with an 'engine' installed, and a plugin source beside it."""
    root = tmp_path / "venv"
    site = root / "lib" / "python3.11" / "site-packages"
    (site / "eng" / "models").mkdir(parents=True)
    (site / REGISTRY).write_text(ENGINE_REGISTRY)
    src = tmp_path / "plugin"
    (src / "eng" / "models").mkdir(parents=True)
    (src / REGISTRY).write_text(PLUGIN_REGISTRY)
    (src / ADDED).write_text("class Plugged: pass\n")
    (src / "README.md").write_text("not installed\n")
    return root, site, src


def run(args, capsys, check=False, diff=False):
    args = dict(args)
    if check:
        args["_ansible_check_mode"] = True
    if diff:
        args["_ansible_diff"] = True
    return module_runner.run_module(venv_plugin.main, args, capsys)


def present(root, src):
    return {"venv": str(root), "src": str(src), "files": [REGISTRY, ADDED], "name": "lab"}


def actions(result):
    return {a["path"]: a["action"] for a in result["actions"]}


# ------------------------------------------------------------------------------ the module


def test_install_backs_up_replaced_files_and_adds_the_rest(venv, capsys):
    root, site, src = venv
    rc, out = run(present(root, src), capsys)
    assert rc == 0 and out["changed"] is True
    assert actions(out) == {REGISTRY: "replace", ADDED: "install"}
    assert (site / REGISTRY).read_text() == PLUGIN_REGISTRY
    assert (site / (REGISTRY + ".orig")).read_text() == ENGINE_REGISTRY
    assert (site / ADDED).exists() and not (site / (ADDED + ".orig")).exists()
    assert not (site / "README.md").exists()
    manifest = json.loads((root / V.MANIFEST_NAME).read_text())
    assert manifest["files"][REGISTRY] == {"sha256": V.sha256_file(src / REGISTRY), "backup": REGISTRY + ".orig"}
    assert manifest["files"][ADDED]["backup"] is None
    assert out["site_packages"] == str(site)
    assert oct((site / REGISTRY).stat().st_mode & 0o777) == "0o644"


def test_converged_rerun_changes_nothing(venv, capsys):
    root, _, src = venv
    run(present(root, src), capsys)
    rc, out = run(present(root, src), capsys)
    assert rc == 0 and out["changed"] is False
    assert set(actions(out).values()) == {"keep"}


@pytest.mark.parametrize("drift", ["hand_edit", "engine_reinstalled", "deleted"])
def test_drifted_file_is_put_back_and_the_backup_kept(venv, capsys, drift):
    root, site, src = venv
    run(present(root, src), capsys)
    if drift == "hand_edit":
        (site / REGISTRY).write_text(PLUGIN_REGISTRY + "# edited\n")
    elif drift == "engine_reinstalled":
        (site / REGISTRY).write_text("MODELS = ['Tiny', 'Newer']\n")
    else:
        (site / REGISTRY).unlink()
    rc, out = run(present(root, src), capsys)
    assert rc == 0 and out["changed"] is True
    assert actions(out) == {REGISTRY: "repair", ADDED: "keep"}
    assert (site / REGISTRY).read_text() == PLUGIN_REGISTRY
    # The backup is the engine's file as it was before the first install, whatever happened since.
    assert (site / (REGISTRY + ".orig")).read_text() == ENGINE_REGISTRY
    assert run(present(root, src), capsys)[1]["changed"] is False


def test_an_existing_orig_is_never_overwritten(venv, capsys):
    """A hand install (the plugin's own install.sh) left an .orig: it is the original, keep it."""
    root, site, src = venv
    (site / (REGISTRY + ".orig")).write_text("MODELS = ['Original']\n")
    rc, out = run(present(root, src), capsys)
    assert rc == 0 and actions(out)[REGISTRY] == "replace"
    assert (site / (REGISTRY + ".orig")).read_text() == "MODELS = ['Original']\n"
    run(present(root, src), capsys, check=False)
    run({"venv": str(root), "state": "absent"}, capsys)
    assert (site / REGISTRY).read_text() == "MODELS = ['Original']\n"


def test_check_mode_reports_without_writing(venv, capsys):
    root, site, src = venv
    rc, out = run(present(root, src), capsys, check=True)
    assert rc == 0 and out["changed"] is True
    assert actions(out) == {REGISTRY: "replace", ADDED: "install"}
    assert (site / REGISTRY).read_text() == ENGINE_REGISTRY
    assert not (site / ADDED).exists() and not (root / V.MANIFEST_NAME).exists()
    assert not (site / (REGISTRY + ".orig")).exists()
    run(present(root, src), capsys)
    (site / ADDED).write_text("drifted\n")
    rc, out = run(present(root, src), capsys, check=True)
    assert out["changed"] is True and actions(out)[ADDED] == "repair"
    assert (site / ADDED).read_text() == "drifted\n"
    run(present(root, src), capsys)
    assert run(present(root, src), capsys, check=True)[1]["changed"] is False


def test_diff_lists_each_file_before_and_after(venv, capsys):
    root, _, src = venv
    rc, out = run(present(root, src), capsys, diff=True)
    before, after = out["diff"]["before"], out["diff"]["after"]
    assert f"{ADDED}: absent" in before
    assert f"{REGISTRY}: sha256 {V.sha256_file(Path(out['site_packages']) / (REGISTRY + '.orig'))[:16]} (engine)" in before
    assert f"{REGISTRY}: sha256 {V.sha256_file(src / REGISTRY)[:16]} (plugin), backup {REGISTRY}.orig" in after
    rc, out = run(present(root, src), capsys, diff=True)
    assert "diff" not in out


def test_absent_restores_backups_and_removes_added_files(venv, capsys):
    root, site, src = venv
    run(present(root, src), capsys)
    pycache = site / "eng" / "models" / "__pycache__"
    pycache.mkdir()
    (pycache / "registry.cpython-311.pyc").write_bytes(b"stale")
    rc, out = run({"venv": str(root), "state": "absent"}, capsys, check=True)
    assert out["changed"] is True and actions(out) == {REGISTRY: "restore", ADDED: "remove"}
    assert (site / REGISTRY).read_text() == PLUGIN_REGISTRY
    rc, out = run({"venv": str(root), "state": "absent"}, capsys)
    assert rc == 0 and out["changed"] is True
    assert (site / REGISTRY).read_text() == ENGINE_REGISTRY
    assert not (site / (REGISTRY + ".orig")).exists()
    assert not (site / ADDED).exists()
    assert not (root / V.MANIFEST_NAME).exists()
    assert not (pycache / "registry.cpython-311.pyc").exists()
    assert run({"venv": str(root), "state": "absent"}, capsys)[1]["changed"] is False
    # Reinstalling after an uninstall takes a fresh backup of the restored original.
    run(present(root, src), capsys)
    assert (site / (REGISTRY + ".orig")).read_text() == ENGINE_REGISTRY


def test_absent_without_a_venv_is_already_done(tmp_path, capsys):
    rc, out = run({"venv": str(tmp_path / "none"), "state": "absent"}, capsys)
    assert rc == 0 and out["changed"] is False


def test_a_file_dropped_from_the_plugin_is_undone(venv, capsys):
    root, site, src = venv
    run(present(root, src), capsys)
    rc, out = run({**present(root, src), "files": [ADDED]}, capsys)
    assert out["changed"] is True and actions(out) == {ADDED: "keep", REGISTRY: "restore"}
    assert (site / REGISTRY).read_text() == ENGINE_REGISTRY
    assert list(json.loads((root / V.MANIFEST_NAME).read_text())["files"]) == [ADDED]


def test_missing_source_file_is_a_clear_error_and_changes_nothing(venv, capsys):
    root, site, src = venv
    (src / ADDED).unlink()
    rc, out = run(present(root, src), capsys)
    assert rc == 1 and out["failed"] is True
    assert f"lacks {ADDED}" in out["msg"] and "mirror site-packages" in out["msg"]
    assert (site / REGISTRY).read_text() == ENGINE_REGISTRY and not (root / V.MANIFEST_NAME).exists()


def test_missing_source_directory_and_missing_venv_are_clear_errors(venv, tmp_path, capsys):
    root, _, _ = venv
    rc, out = run(present(root, tmp_path / "nowhere"), capsys)
    assert rc == 1 and "is not a directory on this node" in out["msg"]
    rc, out = run(present(tmp_path / "novenv", tmp_path), capsys)
    assert rc == 1 and "does not exist" in out["msg"]


@pytest.mark.parametrize("bad", ["/etc/passwd", "../outside.py", "eng/models/registry.py.orig"])
def test_paths_outside_site_packages_are_refused(venv, capsys, bad):
    root, _, src = venv
    rc, out = run({**present(root, src), "files": [bad]}, capsys)
    assert rc == 1 and "plugin file" in out["msg"]


def test_unreadable_manifest_is_an_error_not_a_fresh_install(venv, capsys):
    root, site, src = venv
    run(present(root, src), capsys)
    (root / V.MANIFEST_NAME).write_text("{not json")
    rc, out = run(present(root, src), capsys)
    assert rc == 1 and "unreadable" in out["msg"]
    assert (site / (REGISTRY + ".orig")).read_text() == ENGINE_REGISTRY


def test_backup_missing_on_uninstall_is_reported(venv, capsys):
    root, site, src = venv
    run(present(root, src), capsys)
    (site / (REGISTRY + ".orig")).unlink()
    rc, out = run({"venv": str(root), "state": "absent"}, capsys)
    assert rc == 1 and "backup" in out["msg"] and "force-reinstall" in out["msg"]


def test_present_requires_src_and_files(venv, capsys):
    root, _, _ = venv
    rc, out = run({"venv": str(root)}, capsys)
    assert rc == 1 and "src" in out["msg"]


# ------------------------------------------------------------------------------ missing pins


@pytest.mark.parametrize("packages, installed, missing", [
    (["ray[default]==2.60.0", "sparklab-engine==0.2.0"],
     [{"name": "ray", "version": "2.60.0"}, {"name": "sparklab_engine", "version": "0.2.0"}], []),
    (["ray[default]==2.60.0"], [{"name": "ray", "version": "2.59.0"}], ["ray[default]==2.60.0"]),
    (["torch==2.11.0+cu130"], [{"name": "torch", "version": "2.11.0+cu130"}], []),
    (["torch==2.11.0+cu130"], [{"name": "torch", "version": "2.11.0"}], ["torch==2.11.0+cu130"]),
    (["Foo.Bar==1.0"], [{"name": "foo-bar", "version": "1.0.0"}], []),
    (["vllm==0.25.1"], [], ["vllm==0.25.1"]),
    (["pkg @ file:///opt/w/pkg.whl"], [{"name": "pkg", "version": "1"}], []),
    (["pkg==1.0; python_version > '3'"], [{"name": "pkg", "version": "1.0"}], []),
])
def test_missing_packages(packages, installed, missing):
    assert V.missing_packages(packages, installed) == missing


def test_the_ray_sparkctl_adds_counts_as_installed_so_pip_does_not_run_again():
    # A venv that already holds the Ray sparkctl pins (and the profile's own pins) is complete:
    # the role's re-run must not reinstall.
    profile = P.load_profile("lab-standin", [str(LAB / "profiles")], {})
    packages = P.venv_packages(profile)
    assert P.RAY_REQUIREMENT in packages
    version = P.RAY_REQUIREMENT.split("==", 1)[1]
    installed = [{"name": "ray", "version": version}, {"name": "sparklab_engine", "version": "0.3.0"}]
    assert V.missing_packages(packages, installed) == []
    assert V.missing_packages(packages, installed[1:]) == [P.RAY_REQUIREMENT]


# ------------------------------------------------------------------------------ Python


def test_python_probe_runs_and_reports_the_system_python(tmp_path):
    argv = V.python_probe_argv("3", str(tmp_path / "venv"))
    argv[0] = sys.executable
    out = json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)
    assert out["system"][:2] == list(sys.version_info[:2]) and out["venv"] is None
    assert out["requested"]["version"][0] == 3


def test_python_check_accepts_the_system_python3_and_names_the_venv_package():
    probe = {"system": [3, 11, 2], "requested": {"executable": "/usr/bin/python3", "version": [3, 11, 2]}, "venv": None}
    found = F.venv_python_check(probe, "3", "spark1")
    assert found["ok"] and found["executable"] == "/usr/bin/python3" and found["venv_package"] == "python3.11-venv"
    assert found["rebuild_venv"] is False


def test_python_check_refuses_a_missing_minor_naming_the_key_and_the_fix():
    found = F.venv_python_check({"system": [3, 11, 2], "requested": None, "venv": None}, "3.12", "spark1")
    assert not found["ok"]
    msg = found["message"]
    assert msg.startswith("spark1: runtime.venv.python is '3.12'") and "system python3 is 3.11" in msg
    assert "apt install python3.12 python3.12-venv" in msg and 'runtime.venv.python: "3"' in msg


def test_python_check_rebuilds_a_venv_of_another_python_and_skips_apt_for_pyenv():
    probe = {"system": [3, 11, 2], "requested": {"executable": "/opt/pyenv/bin/python3.12", "version": [3, 12, 1]},
             "venv": {"version": [3, 11, 2]}}
    found = F.venv_python_check(probe, "3.12")
    assert found["ok"] and found["rebuild_venv"] is True and found["venv_package"] is None
    probe["venv"] = {"version": [3, 12, 1]}
    assert F.venv_python_check(probe, "3.12")["rebuild_venv"] is False
    probe["venv"] = {"version": None}  # the venv's interpreter is gone
    assert F.venv_python_check(probe, "3.12")["rebuild_venv"] is True


# ------------------------------------------------------------------------------ local sources


def test_local_sources_of_the_lab_profile_resolve_beside_the_profile():
    profile = P.load_profile("lab-standin", [str(LAB / "profiles")])
    sources = F.venv_local_sources(profile["runtime"]["venv"], profile["_dir"], "/opt/sparkctl/venv-sources/lab-standin")
    assert sources == {
        "find_links": [{"controller": str(LAB / "engine" / "dist"), "node": "/opt/sparkctl/venv-sources/lab-standin/find-links/0"}],
        "plugin": {"controller": str(LAB / "plugins" / "sparklab_plugin"), "node": "/opt/sparkctl/venv-sources/lab-standin/plugin"},
    }
    assert F.venv_local_source_problems(sources, profile["runtime"]["venv"]["plugin"]["replaces"]) == []


def test_urls_and_absolute_find_links_stay_as_they_are():
    sources = F.venv_local_sources({"find_links": ["https://example.invalid/wheels/", "/srv/wheels"]}, "/p", "/s")
    assert sources == {"find_links": [{"controller": None, "node": "https://example.invalid/wheels/"},
                                      {"controller": None, "node": "/srv/wheels"}], "plugin": None}
    assert F.venv_pip_extra_args(["https://download.pytorch.org/whl/cu130"], ["/s/find-links/0", "/a b"]) == (
        "--extra-index-url https://download.pytorch.org/whl/cu130 --find-links /s/find-links/0 --find-links '/a b'")


def test_the_seed_profile_names_its_missing_plugin_before_any_change():
    profile = P.load_profile("solar-open2-nvfp4-vllm-venv")
    sources = F.venv_local_sources(profile["runtime"]["venv"], profile["_dir"], "/s")
    (msg,) = F.venv_local_source_problems(sources, profile["runtime"]["venv"]["plugin"]["replaces"])
    assert msg.startswith("runtime.venv.plugin.source: ") and "plugins/solar_open2 is not a directory" in msg


def test_missing_plugin_file_in_the_source_is_named(tmp_path):
    (tmp_path / "plug").mkdir()
    sources = F.venv_local_sources({"plugin": {"source": "plug", "replaces": ["a/b.py"]}, "find_links": ["wheels"]},
                                   str(tmp_path), "/s")
    problems = F.venv_local_source_problems(sources, ["a/b.py"])
    assert any("a/b.py is not in" in p for p in problems) and any("find_links" in p for p in problems)


# ------------------------------------------------------------------------------ registration probe


def test_vllm_registry_probe_is_golden():
    """The exact argv the role runs on a real Spark for the solar-open2-nvfp4-vllm-venv profile (verified in the lab
    only against the stand-in engine; vLLM cannot run here)."""
    profile = P.load_profile("solar-open2-nvfp4-vllm-venv")
    plugin = profile["runtime"]["venv"]["plugin"]
    registry = F.venv_registry(profile["engine"]["kind"], profile["runtime"]["venv"].get("registry"))
    argv = F.venv_registry_probe("/opt/sparkctl/venvs/solar-open2-nvfp4-vllm-venv/bin/python", registry,
                                 plugin["architecture"], [plugin["module"]])
    text = json.dumps(argv, indent=2) + "\n"
    golden = GOLDEN / "solar-open2-nvfp4-vllm-venv.probe.json"
    if os.environ.get("SPARKCTL_UPDATE_GOLDEN") == "1":
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert text == golden.read_text()
    assert json.loads(argv[3]) == {"architecture": "SolarOpen2ForCausalLM", "attribute": "ModelRegistry.get_supported_archs",
                                   "imports": ["vllm.model_executor.models.solar_open2"],
                                   "module": "vllm.model_executor.models"}


def _fake_vllm(root: Path, archs):
    """A package laid out like vLLM's registry: vllm.model_executor.models.ModelRegistry."""
    pkg = root / "vllm" / "model_executor" / "models"
    pkg.mkdir(parents=True)
    (root / "vllm" / "__init__.py").write_text("")
    (root / "vllm" / "model_executor" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("from .registry import ModelRegistry\n")
    (pkg / "registry.py").write_text(
        "class _ModelRegistry:\n"
        f"    models = dict.fromkeys({archs!r})\n"
        "    def get_supported_archs(self):\n"
        "        return self.models.keys()\n"
        "ModelRegistry = _ModelRegistry()\n")
    (pkg / "solar_open2.py").write_text("class SolarOpen2ForCausalLM: pass\n")


def _probe(argv, pythonpath):
    argv = [sys.executable] + argv[1:]
    env = dict(os.environ, PYTHONPATH=str(pythonpath), PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run(argv, capture_output=True, text=True, env=env)
    return F.venv_probe_verdict({"rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr})


def test_vllm_probe_finds_a_registered_architecture(tmp_path):
    _fake_vllm(tmp_path, ["LlamaForCausalLM", "SolarOpen2ForCausalLM"])
    argv = F.venv_registry_probe("python", F.venv_registry("vllm"), "SolarOpen2ForCausalLM",
                                 ["vllm.model_executor.models.solar_open2"])
    verdict = _probe(argv, tmp_path)
    assert verdict == {"ok": True, "message": "SolarOpen2ForCausalLM is registered (2 architectures)"}


def test_vllm_probe_names_a_missing_architecture_and_a_broken_module(tmp_path):
    _fake_vllm(tmp_path, ["LlamaForCausalLM"])
    argv = F.venv_registry_probe("python", F.venv_registry("vllm"), "SolarOpen2ForCausalLM", ["vllm.nope"])
    verdict = _probe(argv, tmp_path)
    assert not verdict["ok"]
    assert "SolarOpen2ForCausalLM is not among the 1 architectures vllm.model_executor.models" in verdict["message"]
    assert "import vllm.nope: ModuleNotFoundError" in verdict["message"]


def test_probe_without_the_engine_says_so(tmp_path):
    argv = F.venv_registry_probe("python", F.venv_registry("vllm"), "X", [])
    verdict = _probe(argv, tmp_path)
    assert not verdict["ok"] and "No module named 'vllm'" in verdict["message"]


def test_probe_verdict_on_a_crash():
    assert F.venv_probe_verdict({"rc": 127, "stdout": "", "stderr": "No such file"}) == {
        "ok": False, "message": "the probe did not run (rc=127): No such file"}


def test_unknown_engine_registry_asks_for_one():
    with pytest.raises(AnsibleFilterError, match="runtime.venv.registry"):
        F.venv_registry("tgi")
    assert F.venv_registry("vllm", {"module": "m", "attribute": "a.b"}) == {"module": "m", "attribute": "a.b"}


# ------------------------------------------------------------------------------ lab fixtures


def _sparklab_build():
    sys.path.insert(0, str(LAB / "engine" / "_build"))
    try:
        import sparklab_build
    finally:
        sys.path.pop(0)
    return sparklab_build


def test_engine_wheel_is_built_reproducibly_and_dist_matches_the_sources(tmp_path):
    """tests/lab/engine/dist holds the wheel the lab profile pins, built by tests/bootstrap.sh
    (`python3 tests/lab/engine/_build/sparklab_build.py`), not committed."""
    sparklab_build = _sparklab_build()
    built = tmp_path / sparklab_build.build_wheel(str(tmp_path))
    assert built.name == "sparklab_engine-0.3.0-py3-none-any.whl"
    assert built.read_bytes() == sparklab_build.wheel_bytes()
    dist = LAB / "engine" / "dist"
    if dist.is_dir():
        names = [sparklab_build.wheel_name(v) for v in sparklab_build.versions()]
        assert names[0] == built.name and len(set(names)) == len(names) > 1
        assert sorted(p.name for p in dist.iterdir()) == sorted(names)
        for version, name in zip(sparklab_build.versions(), names, strict=True):
            assert (dist / name).read_bytes() == sparklab_build.wheel_bytes(version), \
                "rebuild: python3 tests/lab/engine/_build/sparklab_build.py (tests/bootstrap.sh does)"
        assert (dist / built.name).read_bytes() == built.read_bytes()


def test_engine_wheel_is_not_committed():
    tracked = subprocess.run(["git", "ls-files", "tests/lab/engine/dist"], cwd=LAB.parents[1], capture_output=True,
                             text=True, check=True).stdout
    assert tracked == ""


def test_lab_plugin_installs_into_the_engine_and_registers_its_architecture(tmp_path, capsys):
    """The real lab fixtures, end to end without the lab: engine wheel unpacked into a fake
    venv, plugin installed by the module, the probe run with this Python, then uninstalled."""
    import zipfile

    root = tmp_path / "venv"
    site = root / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    wheel_dir = tmp_path / "dist"
    wheel_dir.mkdir()
    with zipfile.ZipFile(wheel_dir / _sparklab_build().build_wheel(str(wheel_dir))) as wheel:
        wheel.extractall(site)
    profile = P.load_profile("lab-standin", [str(LAB / "profiles")])
    spec = profile["runtime"]["venv"]
    sources = F.venv_local_sources(spec, profile["_dir"], "/unused")
    registry = F.venv_registry(profile["engine"]["kind"], spec.get("registry"))
    argv = F.venv_registry_probe("python", registry, spec["plugin"]["architecture"], [spec["plugin"]["module"]])

    before = _probe(argv, site)
    assert not before["ok"] and "SparklabStandinForCausalLM is not among the 1 architectures" in before["message"]
    rc, out = run({"venv": str(root), "src": sources["plugin"]["controller"], "files": spec["plugin"]["replaces"]}, capsys)
    assert rc == 0 and actions(out) == {"sparklab_engine/models/registry.py": "replace",
                                        "sparklab_engine/models/standin.py": "install"}
    assert _probe(argv, site) == {"ok": True, "message": "SparklabStandinForCausalLM is registered (2 architectures)"}
    run({"venv": str(root), "state": "absent"}, capsys)
    assert not _probe(argv, site)["ok"]


# ------------------------------------------------------------------------------ profile schema


def _problems(overrides):
    return P.resolve("lab-standin", [str(LAB / "profiles")], overrides)[1]


@pytest.mark.parametrize("overrides, expected", [
    ({"runtime": {"venv": {"python": "3.12.1"}}}, "runtime.venv.python: '3.12.1' is not valid: write \"3\""),
    ({"runtime": {"venv": {"python": "python3"}}}, "runtime.venv.python: 'python3' is not valid"),
    ({"runtime": {"venv": {"plugin": {"replaces": ["../x.py"]}}}}, "runtime.venv.plugin.replaces[0]: '../x.py' must be"),
    ({"runtime": {"venv": {"plugin": {"replaces": ["/abs.py"]}}}}, "runtime.venv.plugin.replaces[0]: '/abs.py' must be"),
    ({"runtime": {"venv": {"plugin": {"module": "not a module"}}}}, "runtime.venv.plugin.module: 'not a module' is not valid"),
    ({"runtime": {"venv": {"registry": {"module": "m", "attribute": None}}}}, "runtime.venv.registry.attribute: is missing."),
    ({"runtime": {"venv": {"registry": {"module": "m", "attribute": "a", "call": 1}}}}, "runtime.venv.registry: unknown key(s) call"),
    ({"runtime": {"venv": {"no_index": "yes"}}}, "runtime.venv.no_index: expected true or false, got 'yes'"),
    ({"runtime": {"venv": {"no_index": True, "find_links": []}}}, "runtime.venv.no_index: true installs from runtime.venv.find_links only"),
    ({"runtime": {"venv": {"no_index": True, "extra_index_urls": ["https://example.invalid/simple"]}}},
     "runtime.venv.no_index: true leaves every index out"),
])
def test_venv_schema_problems_name_the_key(overrides, expected):
    found = _problems(overrides)
    assert any(expected in p for p in found), found


def test_venv_schema_accepts_the_lab_and_a_minor_version():
    assert _problems({}) == []
    assert _problems({"runtime": {"venv": {"python": "3.12"}}}) == []
    assert _problems({"runtime": {"venv": {"no_index": True}}}) == []


def test_an_offline_wheelhouse_asks_no_index():
    assert F.venv_pip_extra_args([], ["/mnt/wheels"], True) == "--no-index --find-links /mnt/wheels"
    assert F.venv_pip_extra_args([], ["/mnt/wheels"], False) == "--find-links /mnt/wheels"

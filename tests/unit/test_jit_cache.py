"""The kernel and JIT caches: module_utils/jit_cache.py (one directory per runtime identity, the
marker, reset, digest, warm/cold), the jit_cache module and the jit_cache_mirror module."""

from __future__ import annotations

import os
import pwd
import shutil

import module_runner
import pytest
from ansible_collections.sparkctl.spark.plugins.module_utils import jit_cache
from ansible_collections.sparkctl.spark.plugins.modules import jit_cache as jit_cache_module
from ansible_collections.sparkctl.spark.plugins.modules import jit_cache_mirror

LOCK_A = "a" * 64
LOCK_B = "b" * 64
SUBDIRS = [sub for _name, sub in jit_cache.CACHE_VARIABLES]
ME = pwd.getpwuid(os.getuid()).pw_name


def write(path, text="x", mtime=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if mtime is not None:
        os.utime(path, (mtime, mtime))


def test_environment_names_every_cache_variable_under_current():
    env = jit_cache.cache_environment("/var/cache/sparkctl/jit")
    assert env["FLASHINFER_WORKSPACE_BASE"] == "/var/cache/sparkctl/jit/current/flashinfer"
    assert env["TRITON_CACHE_DIR"] == "/var/cache/sparkctl/jit/current/triton"
    assert {"TORCHINDUCTOR_CACHE_DIR", "VLLM_CACHE_ROOT", "SGLANG_CACHE_DIR", "XDG_CACHE_HOME"} <= set(env)
    # SGLang's JIT kernel builds default to ~/.cache/sglang/jit whatever SGLANG_CACHE_DIR says.
    assert env["SGLANG_JIT_CACHE_DIR"] == "/var/cache/sparkctl/jit/current/sglang-jit"
    assert len(set(env.values())) == len(env)


@pytest.mark.parametrize("kind, runtime_id, expected", [
    ("venv", LOCK_A, "venv-" + LOCK_A),
    ("image", "sha256:" + LOCK_B, "image-" + LOCK_B),
])
def test_identity_dir_name(kind, runtime_id, expected):
    assert jit_cache.identity_dir_name(kind, runtime_id) == expected


@pytest.mark.parametrize("kind, runtime_id", [("venv", ""), ("venv", "../etc"), ("venv", None), ("conda", LOCK_A)])
def test_identity_dir_name_refuses_what_is_not_an_identity(kind, runtime_id):
    with pytest.raises(jit_cache.JitCacheError):
        jit_cache.identity_dir_name(kind, runtime_id)


def test_prepare_makes_the_directory_and_link_then_has_nothing_to_do(tmp_path):
    base = tmp_path / "jit"
    todo = jit_cache.prepare(str(base), "venv", LOCK_A, SUBDIRS, owner=(os.getuid(), os.getgid()))
    made = todo["made"]
    path = base / ("venv-" + LOCK_A)
    assert todo["create"] and todo["link"] and todo["path"] == str(path)
    assert os.readlink(base / "current") == "venv-" + LOCK_A
    assert jit_cache.read_marker(str(path))["runtime_id"] == LOCK_A
    assert all((path / sub).is_dir() for sub in SUBDIRS) and str(path / "flashinfer") in made
    again = jit_cache.plan(str(base), "venv", LOCK_A)
    assert not (again["create"] or again["link"] or again["remove"] or again["reset"])


def test_a_runtime_change_moves_the_link_and_removes_only_sparkctls_old_directories(tmp_path):
    base = tmp_path / "jit"
    jit_cache.prepare(str(base), "venv", LOCK_A, SUBDIRS)
    write(base / ("venv-" + LOCK_A) / "triton" / "kernel.bin")
    write(base / "operator-notes" / "keep.txt")
    todo = jit_cache.prepare(str(base), "venv", LOCK_B, SUBDIRS)
    assert todo["remove"] == [str(base / ("venv-" + LOCK_A))]
    assert todo["foreign"] == [str(base / "operator-notes")]
    assert not (base / ("venv-" + LOCK_A)).exists() and (base / "operator-notes" / "keep.txt").exists()
    assert os.readlink(base / "current") == "venv-" + LOCK_B
    assert jit_cache.scan(str(base / "current")) == {}


def test_reset_empties_the_cache_but_keeps_the_marker_and_directories(tmp_path):
    base = tmp_path / "jit"
    jit_cache.prepare(str(base), "venv", LOCK_A, SUBDIRS)
    path = base / ("venv-" + LOCK_A)
    write(path / "flashinfer" / ".cache" / "k.so")
    assert jit_cache.plan(str(base), "venv", LOCK_A, reset=True)["reset"]
    todo = jit_cache.prepare(str(base), "venv", LOCK_A, SUBDIRS, reset=True)
    assert todo["reset"] and jit_cache.scan(str(path)) == {}
    assert jit_cache.read_marker(str(path)) and (path / "flashinfer").is_dir()
    # An empty cache has nothing to reset: a second run with the switch changes nothing.
    assert not jit_cache.plan(str(base), "venv", LOCK_A, reset=True)["reset"]


def test_a_file_where_the_identity_directory_goes_is_refused(tmp_path):
    base = tmp_path / "jit"
    write(base / ("venv-" + LOCK_A))
    with pytest.raises(jit_cache.JitCacheError, match="not a directory"):
        jit_cache.prepare(str(base), "venv", LOCK_A, SUBDIRS)


def test_digest_is_the_same_for_a_copy_that_kept_mtimes_and_written_since_counts_a_boots_files(tmp_path):
    head, worker = tmp_path / "head", tmp_path / "worker"
    write(head / "triton" / "a.bin", "aa", mtime=1000)
    write(head / "flashinfer" / "b.so", "b", mtime=2000)
    shutil.copytree(head, worker)
    write(worker / jit_cache.MARKER, "{}")
    assert jit_cache.manifest_digest(jit_cache.scan(str(head))) == jit_cache.manifest_digest(jit_cache.scan(str(worker)))
    os.utime(worker / "triton" / "a.bin", (1500, 1500))
    assert jit_cache.manifest_digest(jit_cache.scan(str(head))) != jit_cache.manifest_digest(jit_cache.scan(str(worker)))
    summary = jit_cache.summary(jit_cache.scan(str(head)), since=1500)
    assert summary["files"] == 2 and summary["bytes"] == 3 and summary["written_since"] == 1


@pytest.mark.parametrize("cache, started, state", [
    ({"files": 2, "written_since": 0}, 100.0, "warm"),
    ({"files": 2, "written_since": 1}, 100.0, "cold"),
    ({"files": 0, "written_since": 0}, 100.0, "empty"),
    ({"files": 2}, None, "unknown"),
    ({}, 100.0, "unknown"),
])
def test_boot_state(cache, started, state):
    assert jit_cache.boot_state(cache, started) == state


# ------------------------------------------------------------------------------ the jit_cache module

@pytest.fixture
def base(tmp_path, monkeypatch):
    monkeypatch.setattr(jit_cache, "BASE_DIR", str(tmp_path / "jit"))
    return tmp_path / "jit"


def run(capsys, **args):
    return module_runner.run_module(jit_cache_module.main, args, capsys)


def test_module_makes_the_cache_then_changes_nothing(base, capsys):
    code, result = run(capsys, runtime_kind="venv", runtime_id="sha256:" + LOCK_A, owner=ME, _ansible_diff=True)
    assert code == 0 and result["changed"] and result["identity"] == "venv-" + LOCK_A
    assert result["diff"] == {"before": {"current": None}, "after": {"current": "venv-" + LOCK_A}}
    code, result = run(capsys, runtime_kind="venv", runtime_id="sha256:" + LOCK_A, owner=ME)
    assert code == 0 and not result["changed"] and result["cache"]["files"] == 0 and not result["relinked"]
    code, result = run(capsys, runtime_kind="venv", runtime_id=LOCK_B, owner=ME)
    assert code == 0 and result["changed"] and result["relinked"] and result["removed"] == [str(base / ("venv-" + LOCK_A))]


def test_module_check_mode_changes_nothing(base, capsys):
    code, result = run(capsys, runtime_kind="venv", runtime_id=LOCK_A, owner=ME, _ansible_check_mode=True)
    assert code == 0 and result["changed"] and not base.exists()


def test_module_read_reports_files_written_since_the_engine_started(base, capsys):
    run(capsys, runtime_kind="venv", runtime_id=LOCK_A, owner=ME)
    write(base / "current" / "triton" / "old.bin", mtime=1000)
    write(base / "current" / "triton" / "new.bin", mtime=3000)
    code, result = run(capsys, state="read", runtime_kind="venv", runtime_id=LOCK_A, since=2000)
    assert code == 0 and not result["changed"]
    assert result["cache"]["files"] == 2 and result["cache"]["written_since"] == 1
    assert result["cache"]["names"] == ["triton/new.bin", "triton/old.bin"]


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_module_gives_what_a_container_wrote_as_another_user_to_the_owner(base, capsys):
    # An image's containers run as root and compile into the cache; the service user mirrors it.
    run(capsys, runtime_kind="image", runtime_id=LOCK_A, owner=ME)
    stranger = 54321
    compiled = base / "current" / "flashinfer" / "jit" / "kernel.so"
    write(compiled)
    for path in (compiled.parent, compiled):
        os.lchown(path, stranger, stranger)
    code, result = run(capsys, state="read", runtime_kind="image", runtime_id=LOCK_A, owner=ME, _ansible_check_mode=True)
    identity = base / ("image-" + LOCK_A)
    expected = [str(identity / "flashinfer" / "jit"), str(identity / "flashinfer" / "jit" / "kernel.so")]
    assert code == 0 and result["changed"] and result["given"] == expected
    assert os.lstat(compiled).st_uid == stranger   # check mode changes nothing
    code, result = run(capsys, state="read", runtime_kind="image", runtime_id=LOCK_A, owner=ME)
    assert code == 0 and result["changed"] and result["given"] == expected
    assert (os.lstat(compiled).st_uid, os.lstat(compiled.parent).st_uid) == (os.getuid(), os.getuid())
    code, result = run(capsys, state="read", runtime_kind="image", runtime_id=LOCK_A, owner=ME)
    assert code == 0 and not result["changed"] and result["given"] == []
    # Without an owner, a read only reads.
    os.lchown(compiled, stranger, stranger)
    code, result = run(capsys, state="read", runtime_kind="image", runtime_id=LOCK_A)
    assert code == 0 and not result["changed"] and os.lstat(compiled).st_uid == stranger


def test_module_reset_empties_and_says_so(base, capsys):
    run(capsys, runtime_kind="venv", runtime_id=LOCK_A, owner=ME)
    write(base / "current" / "vllm" / "graph.bin")
    code, result = run(capsys, runtime_kind="venv", runtime_id=LOCK_A, owner=ME, reset=True)
    assert code == 0 and result["changed"] and result["reset"] and result["cache"]["files"] == 0


def test_module_refuses_an_unknown_owner(base, capsys):
    code, result = run(capsys, runtime_kind="venv", runtime_id=LOCK_A, owner="no-such-user-sparkctl")
    assert code == 1 and "spark_service_user" in result["msg"]


def test_module_without_an_identity_or_runtime_fails(base, capsys):
    code, result = run(capsys, runtime_kind="venv", owner=ME)
    assert code == 1 and "venv_path" in result["msg"]


def test_module_reads_the_identity_from_the_runtime(base, capsys, monkeypatch):
    monkeypatch.setattr(jit_cache_module, "read_runtime_versions",
                        lambda module, kind, venv_path=None, image=None: {"versions": {"venv_lock_sha256": LOCK_B}, "problems": []})
    code, result = run(capsys, runtime_kind="venv", venv_path="/opt/venv", owner=ME)
    assert code == 0 and result["identity"] == "venv-" + LOCK_B
    monkeypatch.setattr(jit_cache_module, "read_runtime_versions",
                        lambda module, kind, venv_path=None, image=None: {"versions": {}, "problems": ["venv /x has no bin/python"]})
    code, result = run(capsys, runtime_kind="venv", venv_path="/x", owner=ME)
    assert code == 1 and "no bin/python" in result["msg"]
    code, result = run(capsys, runtime_kind="venv", venv_path="/x", owner=ME, _ansible_check_mode=True)
    assert code == 0 and result["identity"] is None


# ------------------------------------------------------------------------------ the mirror

def worker(name="spark2", identity="venv-" + LOCK_A, digest="sha256:w", names=(), target="/dev/null/"):
    return {"name": name, "target": target, "identity": identity, "digest": digest, "names": list(names)}


@pytest.mark.parametrize("spec, head_names, action", [
    (worker(identity="venv-" + LOCK_B), ["a"], "skipped"),
    (worker(digest="sha256:h"), ["a"], "in_step"),
    (worker(), [], "skipped"),
    (worker(names=["a", "stale"]), ["a"], "mirror"),
])
def test_plan_worker(spec, head_names, action):
    got, delete, _reason = jit_cache_mirror.plan_worker("venv-" + LOCK_A, "sha256:h", head_names, spec)
    assert got == action
    if action == "mirror":
        assert delete == ["stale"]


def test_mirror_copies_the_heads_cache_and_deletes_what_the_head_does_not_hold(tmp_path):
    head, target = tmp_path / "head", tmp_path / "worker"
    write(head / "flashinfer" / "k.so", "kernel", mtime=1000)
    write(head / "triton" / "t.bin", "t", mtime=1000)
    write(target / "triton" / "stale.bin", "old")
    write(target / jit_cache.MARKER, "{}")
    names = sorted(jit_cache.scan(str(head)))
    digest = jit_cache.manifest_digest(jit_cache.scan(str(head)))
    params = {"source": str(head), "identity": "venv-" + LOCK_A, "digest": digest, "names": names,
              "workers": [worker(names=sorted(jit_cache.scan(str(target))), target=str(target) + "/")]}
    results, changed, failed = jit_cache_mirror.mirror(params, False, jit_cache_mirror.Rsync())
    assert changed and not failed and results["spark2"]["action"] == "mirrored"
    assert results["spark2"]["copied"] == 2 and results["spark2"]["deleted"] == 1
    assert jit_cache.manifest_digest(jit_cache.scan(str(target))) == digest
    assert (target / jit_cache.MARKER).exists()
    # The worker now holds the head's digest: a second run changes nothing.
    params["workers"][0]["digest"] = digest
    results, changed, _failed = jit_cache_mirror.mirror(params, False, jit_cache_mirror.Rsync())
    assert not changed and results["spark2"]["action"] == "in_step"


def test_a_directory_the_head_does_not_hold_is_deleted_whole(tmp_path):
    """Torch's Inductor keeps each kernel in a directory of its own, and each rank compiles its own:
    a worker holds directories the head never had. rsync's --delete-missing-args fails on a file
    whose directory is missing on the sender (3.2.7: "invalid file mode 00", a protocol error; 3.5:
    "parent dir is absent in the file list", nothing deleted), so the directory itself is named."""
    head, target = tmp_path / "head", tmp_path / "worker"
    write(head / "torchinductor" / "24" / "k.py", "kernel", mtime=1000)
    write(target / "torchinductor" / "2w" / "a.py", "the worker's own")
    write(target / "torchinductor" / "2w" / "b.py", "the worker's own")
    write(target / "torchinductor" / "24" / "stale.py", "old")
    head_names = sorted(jit_cache.scan(str(head)))
    spec = worker(names=sorted(jit_cache.scan(str(target))), target=str(target) + "/")
    action, delete, _reason = jit_cache_mirror.plan_worker("venv-" + LOCK_A, "sha256:h", head_names, spec)
    assert action == "mirror" and delete == ["torchinductor/24/stale.py", "torchinductor/2w"]
    digest = jit_cache.manifest_digest(jit_cache.scan(str(head)))
    params = {"source": str(head), "identity": "venv-" + LOCK_A, "digest": digest, "names": head_names, "workers": [spec]}
    results, changed, failed = jit_cache_mirror.mirror(params, False, jit_cache_mirror.Rsync())
    assert changed and not failed, results
    assert not (target / "torchinductor" / "2w").exists()
    assert jit_cache.manifest_digest(jit_cache.scan(str(target))) == digest


def test_mirror_check_mode_runs_no_rsync_and_a_failure_names_the_worker():
    class Failing:
        def tree(self, *args, **kwargs):
            raise jit_cache_mirror.RsyncFailure(12, "connection refused")

    params = {"source": "/x", "identity": "venv-" + LOCK_A, "digest": "sha256:h", "names": ["a"], "workers": [worker()]}
    results, changed, failed = jit_cache_mirror.mirror(params, True, Failing())
    assert changed and not failed and results["spark2"]["action"] == "mirrored"
    results, changed, failed = jit_cache_mirror.mirror(params, False, Failing())
    assert failed == ["spark2: rsync exit 12: connection refused"] and results["spark2"]["action"] == "failed"


@pytest.mark.parametrize("text, started", [("@1764800000\n", 1764800000.0), ("", None), ("n/a", None), ("@0", None), ("@x", None)])
def test_parse_unit_start(text, started):
    assert jit_cache.parse_unit_start(text) == started


def test_module_reads_the_engine_start_from_a_unit_and_judges_the_boot(base, capsys, monkeypatch):
    run(capsys, runtime_kind="venv", runtime_id=LOCK_A, owner=ME)
    write(base / "current" / "flashinfer" / "k.so", mtime=1000)
    from ansible.module_utils import basic
    seen = {}

    def run_command(self, argv, **kwargs):
        seen["argv"] = argv
        return 0, "@2000\n", ""

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda self, name, **kw: "/bin/" + name)
    code, result = run(capsys, state="read", runtime_kind="venv", runtime_id=LOCK_A, since_unit="sparkctl-engine.service")
    assert code == 0 and result["since"] == 2000.0 and result["boot"] == "warm"
    assert seen["argv"][-1] == "sparkctl-engine.service" and "--timestamp=unix" in seen["argv"]
    write(base / "current" / "flashinfer" / "new.so", mtime=3000)
    code, result = run(capsys, state="read", runtime_kind="venv", runtime_id=LOCK_A, since=2000)
    assert result["boot"] == "cold" and result["cache"]["written_since"] == 1

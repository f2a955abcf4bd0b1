"""sparkctl.spark.plugin_preload: the filters and tests are loaded once in the controller's
main process, a worker forked after it finds them loaded and does not execute their files
again, and nothing the callback meets ever fails a run.

The loader tests run in a fresh interpreter: they need Ansible's collection finder installed
(init_plugin_loader), which must not leak into the other unit tests, and a process in which
no other test has already imported the filter files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from ansible_collections.sparkctl.spark.plugins.callback import plugin_preload

REPO = Path(__file__).resolve().parents[2]
COLLECTIONS = REPO / "collections"
FILTER_DIR = COLLECTIONS / "ansible_collections" / "sparkctl" / "spark" / "plugins" / "filter"
TEST_DIR = COLLECTIONS / "ansible_collections" / "sparkctl" / "spark" / "plugins" / "test"
PREFIX = "ansible_collections.sparkctl.spark.plugins."

SCRIPT_HEAD = textwrap.dedent(f"""
    import importlib.machinery, json, multiprocessing, sys
    from ansible.plugins.loader import MODULE_CACHE, filter_loader, init_plugin_loader, test_loader
    init_plugin_loader(COLLECTION_PATHS + [{str(COLLECTIONS)!r}])
    from ansible_collections.sparkctl.spark.plugins.callback.plugin_preload import preload
    PREFIX = {PREFIX!r}
    def ours():
        return sorted(name for name in sys.modules if name.startswith(PREFIX))
""")


def run_script(tmp_path: Path, body: str, collection_paths: tuple[Path, ...] = ()) -> dict:
    """Run SCRIPT_HEAD + body in a fresh interpreter (collection_paths searched before the
    project's collections); the JSON it prints last."""
    script = tmp_path / "probe.py"
    script.write_text(f"COLLECTION_PATHS = {[str(path) for path in collection_paths]!r}\n"
                      + SCRIPT_HEAD + textwrap.dedent(body))
    env = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_")}
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def plugin_files(directory: Path) -> list[str]:
    return sorted(path.stem for path in directory.glob("*.py") if path.stem != "__init__")


def test_preload_loads_every_filter_and_test_file_into_the_loader_caches(tmp_path):
    result = run_script(tmp_path, """
        before = ours()
        counts = preload(["sparkctl.spark"])
        print(json.dumps({
            "before": before,
            "counts": counts,
            "after": ours(),
            "cached_paths": sorted(path for cache in MODULE_CACHE.values() for path in cache),
            "builtin_wrappers": len(filter_loader._cached_non_collection_wrappers),
            "builtin_tests": len(test_loader._cached_non_collection_wrappers),
        }))
    """)
    assert not [name for name in result["before"] if ".filter." in name]
    assert result["counts"]["filter"] > 0 and result["counts"]["test"] > 0
    for stem in plugin_files(FILTER_DIR):
        assert f"{PREFIX}filter.{stem}" in result["after"], stem
        assert str(FILTER_DIR / f"{stem}.py") in result["cached_paths"], stem
    for stem in plugin_files(TEST_DIR):
        assert f"{PREFIX}test.{stem}" in result["after"], stem
    # The module_utils the filters import come along with them.
    assert f"{PREFIX}plugin_utils.profile" in result["after"]
    # The builtin filter and test wrappers (to_json, is match...) are cached too.
    assert result["builtin_wrappers"] > 0 and result["builtin_tests"] > 0


# In the child: count every plugin file the loader executes (it loads them with
# spec_from_file_location, i.e. SourceFileLoader), note which of the collection's modules were
# already present, then look up a collection filter, a collection test and builtin ones.
FORK_BODY = """
    if {preload_on}:
        preload(["sparkctl.spark"])

    def child(queue):
        executed = []
        real = importlib.machinery.SourceFileLoader.exec_module
        def exec_module(self, module):
            executed.append(module.__name__)
            return real(self, module)
        importlib.machinery.SourceFileLoader.exec_module = exec_module
        present = ours()
        found = [
            filter_loader.get("sparkctl.spark.link_ping_targets") is not None,
            filter_loader.get("sparkctl.spark.profile_load") is not None,
            test_loader.get("sparkctl.spark.apt_unresolved_in_check") is not None,
            filter_loader.get("to_json") is not None,
            test_loader.get("match") is not None,
        ]
        queue.put({{"present": present, "executed": executed, "found": found, "after": ours()}})

    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    worker = context.Process(target=child, args=(queue,))
    worker.start()
    result = queue.get(timeout=60)
    worker.join(timeout=60)
    print(json.dumps(result))
"""


def test_forked_worker_finds_the_plugins_loaded_and_executes_none_again(tmp_path):
    result = run_script(tmp_path, FORK_BODY.format(preload_on=True))
    assert result["found"] == [True] * 5
    assert f"{PREFIX}filter.link_ping" in result["present"]
    assert f"{PREFIX}test.apt_unresolved_in_check" in result["present"]
    assert result["executed"] == []
    assert result["after"] == result["present"]


def test_without_preload_the_forked_worker_executes_the_files_itself(tmp_path):
    # The control: the same child without preload executes the plugin files, so the marker
    # above does see a load when there is one.
    result = run_script(tmp_path, FORK_BODY.format(preload_on=False))
    assert result["found"] == [True] * 5
    assert f"{PREFIX}filter.link_ping" not in result["present"]
    assert f"{PREFIX}filter.link_ping" in result["executed"]
    assert any(name.startswith("ansible.plugins.filter.") for name in result["executed"]), result["executed"]


def test_unknown_collection_is_skipped(tmp_path):
    result = run_script(tmp_path, """
        unknown = preload(["nosuch.collection"])
        both = preload(["nosuch.collection", "sparkctl.spark"])
        again = preload(["sparkctl.spark"])
        print(json.dumps({"unknown": unknown, "both": both, "again": again}))
    """)
    assert result["unknown"]["filter"] > 0, "the builtin filters are still loaded"
    assert result["both"] == result["again"]
    assert result["both"]["filter"] > result["unknown"]["filter"]


class _Recorder:
    def __init__(self):
        self.lines = []

    def vvv(self, msg, *args, **kwargs):
        self.lines.append(msg)


class _BrokenLoader:
    type = "filter"

    def all(self, *args, **kwargs):
        raise RuntimeError("loader exploded")


@pytest.mark.parametrize("breakage", ["loader", "option"])
def test_a_failure_never_leaves_the_callback(monkeypatch, breakage):
    recorder = _Recorder()
    monkeypatch.setattr(plugin_preload, "display", recorder)
    callback = plugin_preload.CallbackModule()
    if breakage == "loader":
        monkeypatch.setattr(plugin_preload, "filter_loader", _BrokenLoader())
        monkeypatch.setattr(callback, "get_option", lambda name: ["sparkctl.spark"])
    else:
        def get_option(name):
            raise KeyError(name)
        monkeypatch.setattr(callback, "get_option", get_option)

    assert callback.v2_playbook_on_start(playbook=None) is None
    assert len(recorder.lines) == 1 and recorder.lines[0].startswith("plugin_preload: left to the workers")


def test_a_broken_filter_file_is_left_to_the_workers(tmp_path):
    # A collection with one good and one broken filter file: the good one is loaded, the broken
    # one only noted at -vvv (the worker reports it as it would without the callback).
    filters = tmp_path / "coll" / "ansible_collections" / "acme" / "demo" / "plugins" / "filter"
    filters.mkdir(parents=True)
    (filters / "good.py").write_text(
        "class FilterModule:\n    def filters(self):\n        return {'acme_double': lambda v: v * 2}\n")
    (filters / "broken.py").write_text("raise ImportError('broken on purpose')\n")
    result = run_script(tmp_path, """
        import ansible_collections.sparkctl.spark.plugins.callback.plugin_preload as module
        notes = []
        module.display.vvv = lambda msg, *a, **k: notes.append(msg)
        builtin = preload([])
        counts = preload(["acme.demo"])
        print(json.dumps({"builtin": builtin, "counts": counts, "notes": notes,
                          "good": "ansible_collections.acme.demo.plugins.filter.good" in sys.modules}))
    """, collection_paths=(tmp_path / "coll",))
    assert result["good"]
    assert result["counts"]["filter"] == result["builtin"]["filter"] + 1
    assert any("broken" in note and "left to the workers" in note for note in result["notes"]), result["notes"]


def test_enabled_callback_runs_in_a_playbook_and_says_so_at_vvv(tmp_path):
    playbook = tmp_path / "local.yml"
    playbook.write_text(textwrap.dedent("""
        - name: Local
          hosts: localhost
          gather_facts: false
          tasks:
            - name: A collection filter
              ansible.builtin.debug:
                msg: "{{ [{'address': '192.168.100.10/24'}] | sparkctl.spark.link_ips }}"
    """))
    env = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_")}
    env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="false",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="false")
    playbook_bin = Path(sys.executable).with_name("ansible-playbook")
    proc = subprocess.run([str(playbook_bin), "-i", "localhost,", "-c", "local", "-vvv", str(playbook)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "plugin_preload: {'filter': " in proc.stdout
    assert "192.168.100.10" in proc.stdout

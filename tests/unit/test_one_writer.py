"""Every file a role writes on the nodes has one writer (directories may be shared): two roles writing the same path
(engine.env once had two) undo each other's content, mode or restarts as soon as they
disagree. The path is known from a role default naming it (e.g. engine_service_env_file:
/etc/sparkctl/engine.env) or written literally in the task."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLES = ROOT / "roles"

# Modules that write a file's content or metadata, and the option naming the file.
WRITERS = {
    "ansible.builtin.copy": "dest",
    "ansible.builtin.template": "dest",
    "ansible.builtin.lineinfile": "path",
    "ansible.builtin.blockinfile": "path",
    "community.general.ini_file": "path",
    "ansible.builtin.file": "path",
}
# A variable reference standing for the whole path: "{{ name }}", no filter after it
# (`| dirname` is the directory, not the file).
WHOLE_VARIABLE = re.compile(r"^\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}$")


def default_paths(roles: Path) -> dict[str, str]:
    """Every role default whose value is an absolute path, by variable name."""
    paths = {}
    for defaults in sorted(roles.glob("*/defaults/main.yml")):
        for name, value in (yaml.safe_load(defaults.read_text(encoding="utf-8")) or {}).items():
            if isinstance(value, str) and value.startswith("/") and "{{" not in value:
                paths[name] = value
    return paths


def _tasks(node):
    """Every task in a task list, blocks and their rescue/always opened."""
    for task in node or []:
        if not isinstance(task, dict):
            continue
        for key in ("block", "rescue", "always"):
            if key in task:
                yield from _tasks(task[key])
        yield task


def written_paths(roles: Path) -> dict[str, set[str]]:
    """Each path a role's tasks write (resolved through the role defaults), with the roles
    writing it."""
    variables = default_paths(roles)
    writers: dict[str, set[str]] = defaultdict(set)
    for task_file in sorted(roles.glob("*/tasks/*.yml")):
        role = task_file.parts[-3]
        for task in _tasks(yaml.safe_load(task_file.read_text(encoding="utf-8"))):
            for module, option in WRITERS.items():
                args = task.get(module)
                target = args.get(option) if isinstance(args, dict) else None
                # A directory (/etc/sparkctl) is shared: every role creating it wants it the same.
                if not isinstance(target, str) or args.get("state") == "directory":
                    continue
                whole = WHOLE_VARIABLE.match(target.strip())
                if whole and whole.group(1) in variables:
                    writers[variables[whole.group(1)]].add(role)
                elif target.startswith("/"):
                    writers[target].add(role)
    return writers


def test_every_written_file_has_one_writer():
    shared = {path: sorted(roles) for path, roles in written_paths(ROLES).items() if len(roles) > 1}
    assert shared == {}, f"files written by more than one role (keep one writer, the others read): {shared}"


def test_engine_env_is_written_by_engine_service():
    assert written_paths(ROLES)["/etc/sparkctl/engine.env"] == {"engine_service"}


@pytest.mark.parametrize("second_dest", ["{{ other_env_file }}", "/etc/sparkctl/engine.env"])
def test_a_second_writer_is_found(tmp_path, second_dest):
    """The scan sees a second writer through its own default or a literal path."""
    for role, variable, dest in (("one", "one_env_file", "{{ one_env_file }}"),
                                 ("other", "other_env_file", second_dest)):
        (tmp_path / role / "defaults").mkdir(parents=True)
        (tmp_path / role / "tasks").mkdir()
        (tmp_path / role / "defaults" / "main.yml").write_text(f"{variable}: /etc/sparkctl/engine.env\n")
        (tmp_path / role / "tasks" / "main.yml").write_text(yaml.safe_dump([
            {"name": "Outer", "block": [{"name": "Write", "ansible.builtin.copy": {"dest": dest, "content": "x"}}]}]))
    assert written_paths(tmp_path) == {"/etc/sparkctl/engine.env": {"one", "other"}}


def test_a_directory_of_a_path_is_not_the_file(tmp_path):
    (tmp_path / "one" / "defaults").mkdir(parents=True)
    (tmp_path / "one" / "tasks").mkdir()
    (tmp_path / "one" / "defaults" / "main.yml").write_text("one_env_file: /etc/sparkctl/engine.env\n")
    (tmp_path / "one" / "tasks" / "main.yml").write_text(yaml.safe_dump([
        {"name": "Dir", "ansible.builtin.file": {"path": "{{ one_env_file | dirname }}", "state": "directory"}}]))
    assert written_paths(tmp_path) == {}

"""Every task of a role that installs distribution packages refreshes apt's lists when they are
stale (`cache_valid_time`, or `update_cache`), and goes through `ansible.builtin.apt` (the nodes
run DGX OS, an Ubuntu): a node whose lists were never fetched or were cleaned (a minimal image,
`apt-get clean` with the lists removed, the lab's fresh nodes) otherwise fails with "No package
matching ..." whenever the stage runs on its own (`--tags runtime`, `sparkctl fabric-test`), as
no earlier stage of that run refreshed them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROLES = Path(__file__).resolve().parents[2] / "roles"
INSTALLERS = ("ansible.builtin.apt", "ansible.builtin.package", "apt", "package")


def _tasks(items):
    for task in items or []:
        if not isinstance(task, dict):
            continue
        yield task
        for key in ("block", "rescue", "always"):
            yield from _tasks(task.get(key))


def installs():
    found = []
    for path in sorted(ROLES.glob("*/tasks/*.yml")):
        for task in _tasks(yaml.safe_load(path.read_text(encoding="utf-8"))):
            module = next((m for m in INSTALLERS if m in task), None)
            if module is None or not isinstance(task[module], dict):
                continue
            args = task[module]
            if args.get("name") and args.get("state", "present") in ("present", "latest"):
                found.append(pytest.param(path, task.get("name", ""), module, args,
                                          id=f"{path.relative_to(ROLES)}:{task.get('name', '')}"))
    return found


INSTALLS = installs()


def test_the_roles_install_packages_somewhere():
    # A parser that found nothing would make the test below vacuous.
    assert len(INSTALLS) >= 6, [p.id for p in INSTALLS]


@pytest.mark.parametrize("path, name, module, args", INSTALLS)
def test_a_package_install_refreshes_stale_apt_lists(path, name, module, args):
    assert module == "ansible.builtin.apt", f"{path}: {name!r} uses {module}; use ansible.builtin.apt"
    assert "cache_valid_time" in args or "update_cache" in args, (
        f"{path}: {name!r} installs {args['name']!r} without refreshing apt's lists; "
        "add cache_valid_time: 86400")

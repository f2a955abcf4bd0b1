# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Load the Jinja filters and tests once, in the controller's main process, so the worker
process Ansible forks for every task and host inherits them instead of importing them again."""

from __future__ import annotations

DOCUMENTATION = r"""
name: plugin_preload
type: aggregate
author: sparkctl developers (!UNKNOWN)
short_description: Load the filters and tests once, before Ansible forks its task workers
version_added: 0.1.0
description:
  - Ansible runs every task on every host in a worker process forked from the controller's main process. The main
    process does not template with filters or tests itself, so each worker imports the builtin filter and test files
    and the collections' filter and test files (with the module_utils they import) from source again, for each task
    and host.
  - At the start of a playbook this callback loads them once in the main process, through Ansible's own plugin
    loaders, so every forked worker inherits them loaded and cached.
  - It prints nothing and changes no task result. It never fails a run; a plugin it cannot load is left to the workers,
    which report it as they would without this callback. What it loaded, or why it stopped, is shown at C(-vvv).
  - Enabled in sparkctl's C(ansible.cfg) and in the molecule scenarios (C(callbacks_enabled)). C(docs/performance.md)
    in the sparkctl repository says what it saves on a no-op run.
requirements:
  - Enabled in the C(callbacks_enabled) setting (C(ANSIBLE_CALLBACKS_ENABLED)).
options:
  collections:
    description:
      - Collections whose filter and test plugins are loaded as well as the builtin ones and those on the configured
        plugin paths.
      - A collection that is not installed, or has no filter or test plugins, is skipped.
    type: list
    elements: str
    default: [sparkctl.spark]
    ini:
      - section: callback_plugin_preload
        key: collections
    env:
      - name: SPARKCTL_PLUGIN_PRELOAD_COLLECTIONS
"""

EXAMPLES = r"""
# ansible.cfg
# [defaults]
# callbacks_enabled = sparkctl.spark.plugin_preload
#
# [callback_plugin_preload]
# collections = sparkctl.spark, community.general
"""

import importlib
import pkgutil

from ansible.plugins.callback import CallbackBase
from ansible.plugins.loader import filter_loader, test_loader
from ansible.utils.display import Display

display = Display()


def preload(collections) -> dict[str, int]:
    """Load the builtin filters and tests and every filter and test file of `collections` through
    Ansible's plugin loaders; returns how many plugin names each loader resolved."""
    loaded = {}
    for loader in (filter_loader, test_loader):
        # Builtin and configured-path plugins: all() imports each file and caches a wrapper per name.
        count = sum(1 for _wrapper in loader.all())
        for collection in collections:
            package_name = f"ansible_collections.{collection}.plugins.{loader.type}"
            try:
                package = importlib.import_module(package_name)
            except ImportError:
                display.vvv(f"plugin_preload: no {loader.type} plugins in {collection}, skipped")
                continue
            for _finder, file_name, ispkg in pkgutil.iter_modules(package.__path__):
                if ispkg:
                    continue
                try:
                    # The module the loader itself would load: it reuses sys.modules by this same name.
                    module = importlib.import_module(f"{package_name}.{file_name}")
                    names = list(getattr(getattr(module, loader.class_name)(), loader.method_map_name)())
                except Exception as exc:  # pylint: disable=broad-except
                    # The workers meet the same error and report it as they would without this callback.
                    display.vvv(f"plugin_preload: {collection} {loader.type} file {file_name} left to the workers ({exc})")
                    continue
                for name in names:
                    # A lookup by full name fills the loader's module cache the workers look in.
                    if loader.get(f"{collection}.{name}") is not None:
                        count += 1
        loaded[loader.type] = count
    return loaded


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "sparkctl.spark.plugin_preload"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_start(self, playbook):
        try:
            loaded = preload(self.get_option("collections"))
        except Exception as exc:  # pylint: disable=broad-except
            # Only a speed-up: the workers load whatever is missing themselves.
            display.vvv(f"plugin_preload: left to the workers ({exc})")
            return
        display.vvv(f"plugin_preload: {loaded} plugin names loaded before the workers fork")

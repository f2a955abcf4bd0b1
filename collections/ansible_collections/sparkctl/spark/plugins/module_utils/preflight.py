# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The operating system facts preflight judges, and who the SSH user is when the read runs as root.

preflight_facts reads a node with one module run, as root: the facts setup's C(min) subset gave
(distribution, version, architecture, service manager) come from Ansible's own fact collectors, so
they mean what they meant, and the user is the one who logged in, not the root the run became.
"""

from __future__ import annotations

import getpass
import os
import platform

# /proc/self/loginuid of a process no login session started (the kernel's (uid_t)-1).
UNSET_LOGINUID = 4294967295


def parse_loginuid(text):
    """The audit login uid from /proc/self/loginuid, None when unreadable or unset."""
    try:
        uid = int((text or "").strip())
    except ValueError:
        return None
    return None if uid == UNSET_LOGINUID else uid


def login_user(environ, euid, loginuid, name_of_uid, current_user):
    """The SSH user of a module run that may have become root.

    Without become the run's own user is the SSH user (what setup's user_id reported). As root:
    sudo names who ran it in SUDO_USER; other become methods leave the session's login uid, which
    su and sudo do not change; else the run's own user is all there is.
    """
    if euid != 0:
        return current_user()
    if environ.get("SUDO_USER"):
        return environ["SUDO_USER"]
    if loginuid is not None:
        name = name_of_uid(loginuid)
        if name:
            return name
    return current_user()


def _name_of_uid(uid):
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None


def _read(path):
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return None


def read_os_facts(module, environ=None, euid=None, proc_root="/proc"):
    """distribution, distribution_version, architecture, service_mgr, kernel (as setup's min subset
    names them), user (the SSH user) and euid (what `id -u` prints) of the node the module runs on."""
    from ansible.module_utils.facts.system.distribution import DistributionFactCollector
    from ansible.module_utils.facts.system.platform import PlatformFactCollector
    from ansible.module_utils.facts.system.service_mgr import ServiceMgrFactCollector

    environ = os.environ if environ is None else environ
    euid = os.geteuid() if euid is None else euid
    facts = {"system": platform.system()}
    facts.update(PlatformFactCollector().collect(module=module, collected_facts=facts))
    facts.update(DistributionFactCollector().collect(module=module, collected_facts=facts))
    # The service manager collector reads the ansible_-prefixed names setup gives it.
    prefixed = dict(("ansible_" + key, value) for key, value in facts.items())
    facts.update(ServiceMgrFactCollector().collect(module=module, collected_facts=prefixed))
    return {
        "distribution": facts.get("distribution"),
        "distribution_version": facts.get("distribution_version"),
        "architecture": facts.get("architecture"),
        "service_mgr": facts.get("service_mgr"),
        # The release `uname -r` prints, which the known-bad platform entries match.
        "kernel": facts.get("kernel"),
        "user": login_user(environ, euid, parse_loginuid(_read(os.path.join(proc_root, "self", "loginuid"))),
                           _name_of_uid, getpass.getuser),
        "euid": euid,
    }

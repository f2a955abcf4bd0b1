# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Pending firmware updates as fwupd reports them, for preflight's firmware check.

Pure parser plus one reader that takes an AnsibleModule: the parser is tested on recorded
`fwupdmgr get-updates --json` output, the reader runs the command only where fwupdmgr exists.
"""

from __future__ import annotations

import json

# fwupdmgr's exit code when there is nothing to do (no device has an update).
FWUPD_NOTHING_TO_DO = 2


def fwupd_updates_command(fwupdmgr_path):
    return [fwupdmgr_path, "get-updates", "--json"]


def parse_fwupd_updates(text):
    """`fwupdmgr get-updates --json` -> [{name, device_id, version, update_version, summary}], one per
    device with a release newer than its own (fwupd lists only those). Raises ValueError for
    text that is not fwupd's document."""
    stripped = (text or "").strip()
    if not stripped:
        return []
    data = json.loads(stripped)
    if not isinstance(data, dict):
        raise ValueError("fwupdmgr printed JSON that is not an object")
    updates = []
    for device in data.get("Devices") or []:
        if not isinstance(device, dict):
            continue
        releases = [r for r in device.get("Releases") or [] if isinstance(r, dict)]
        # fwupd sorts a device's releases newest first.
        newest = releases[0] if releases else {}
        updates.append({
            "name": device.get("Name"),
            "device_id": device.get("DeviceId"),
            "version": device.get("Version"),
            "update_version": newest.get("Version"),
            "summary": newest.get("Summary"),
        })
    return updates


def gather_firmware_facts(run_command, fwupdmgr_path):
    """{checked, error, updates}. Not checked (no error) without fwupdmgr; a failed or unreadable
    run is checked=False with the error. run_command(args) -> (rc, stdout, stderr)."""
    facts = {"checked": False, "error": None, "fwupdmgr": fwupdmgr_path, "updates": []}
    if not fwupdmgr_path:
        return facts
    rc, stdout, stderr = run_command(fwupd_updates_command(fwupdmgr_path))
    if rc not in (0, FWUPD_NOTHING_TO_DO):
        lines = [line.strip() for line in ((stderr or "") + "\n" + (stdout or "")).splitlines() if line.strip()]
        facts["error"] = lines[0] if lines else "fwupdmgr exited with return code %d" % rc
        return facts
    try:
        facts["updates"] = parse_fwupd_updates(stdout)
    except ValueError as exc:
        if rc == FWUPD_NOTHING_TO_DO:
            # Older fwupdmgr prints a sentence instead of JSON when nothing is pending.
            facts["checked"] = True
            return facts
        facts["error"] = "fwupdmgr get-updates --json printed no usable JSON: %s" % exc
        return facts
    facts["checked"] = True
    return facts


def read_firmware_facts(module, fwupdmgr="fwupdmgr"):
    """The firmware facts as an AnsibleModule reads them; an empty fwupdmgr name skips the check."""
    path = module.get_bin_path(fwupdmgr, opt_dirs=["/usr/bin", "/usr/local/bin"]) if fwupdmgr else None

    def run_command(args):
        return module.run_command(args, check_rc=False)

    return gather_firmware_facts(run_command, path)

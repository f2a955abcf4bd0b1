# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Whether a running systemd unit predates the files it read when it started.

A unit reads its unit file, drop-ins and environment files (and whatever the caller names:
a --config file, a docker --env-file) only when its main process starts. A file changed
after that start is not in effect until the next restart, whoever changed it and whether
or not the run that changed it got as far as the restart. Comparing each input's mtime
with the start of the unit's main process finds exactly those units, on every run.

Pure except for read_show() and mtimes(), which read systemd and the file system."""

from __future__ import annotations

import os
import time

PROPERTIES = (
    "Id", "LoadState", "ActiveState", "SubState", "NeedDaemonReload", "FragmentPath", "DropInPaths",
    "EnvironmentFiles", "ExecMainStartTimestampMonotonic", "ActiveEnterTimestampMonotonic",
)
# A unit in these states has a process that read its inputs; any other will read them at its start.
RUNNING_STATES = ("active", "activating", "reloading", "deactivating")


def parse_show(text):
    """`systemctl show` output -> {property: value}; a property listed several times
    (EnvironmentFiles, one line per file) becomes a list of its values."""
    props = {}
    for line in str(text or "").splitlines():
        if "=" not in line:
            continue
        key, value = line.split("=", 1)
        if key in props:
            if not isinstance(props[key], list):
                props[key] = [props[key]]
            props[key].append(value)
        else:
            props[key] = value
    return props


def _values(value):
    return value if isinstance(value, list) else ([value] if value else [])


def declared_inputs(props):
    """The files systemd itself reads for the unit: its unit file, its drop-ins and its
    EnvironmentFile= files ("/path (ignore_errors=no)")."""
    paths = []
    if props.get("FragmentPath"):
        paths.append(props["FragmentPath"])
    for value in _values(props.get("DropInPaths")):
        paths.extend(value.split())
    for value in _values(props.get("EnvironmentFiles")):
        path = value.split(" (", 1)[0].strip()
        if path:
            paths.append(path.lstrip("-"))
    return paths


def started_monotonic_s(props):
    """Seconds on CLOCK_MONOTONIC when the unit's current main process started, or None
    (ExecMainStart follows a restart by Restart=, ActiveEnter a unit without a main process)."""
    for key in ("ExecMainStartTimestampMonotonic", "ActiveEnterTimestampMonotonic"):
        try:
            usec = int(str(props.get(key) or "0"))
        except ValueError:
            continue
        if usec > 0:
            return usec / 1e6
    return None


def judge(unit, props, mtimes, now_real, now_mono):
    """What is known about one unit: its state, when it started (wall clock), which inputs
    are newer than that start and whether it must restart (running and stale).

    mtimes maps each input path to its mtime (wall clock), None for a file that does not
    exist (nothing to compare). Wall-clock mtimes are set against the monotonic start
    through the current offset between the two clocks."""
    state = props.get("ActiveState") or "unknown"
    loaded = props.get("LoadState") not in (None, "", "not-found")
    started_mono = started_monotonic_s(props)
    started_real = None if started_mono is None else now_real - (now_mono - started_mono)
    running = loaded and state in RUNNING_STATES and started_real is not None
    newer = sorted(path for path, mtime in mtimes.items() if running and mtime is not None and mtime > started_real)
    return {
        "unit": unit,
        "loaded": loaded,
        "state": state,
        "started": started_real if running else None,
        "newer": newer,
        "stale": bool(newer),
        "daemon_reload": props.get("NeedDaemonReload") == "yes",
    }


def read_show(run, unit):
    """{property: value} of one unit; run(argv) -> (rc, stdout, stderr)."""
    rc, out, _err = run(["systemctl", "show", "--no-pager", "-p", ",".join(PROPERTIES), unit])
    return parse_show(out) if rc == 0 else {"Id": unit, "LoadState": "not-found"}


def mtimes(paths):
    """{path: mtime or None}: a file that does not exist has nothing to compare."""
    result = {}
    for path in paths:
        try:
            result[path] = os.stat(path).st_mtime
        except OSError:
            result[path] = None
    return result


def assess(units, extra_inputs, run, now=None):
    """{unit: judge(...)} for every unit; extra_inputs maps a unit to files it reads that
    systemd does not know of (a --config file, a docker --env-file). run(argv) -> (rc, out, err)
    is the module's run_command."""
    now_real, now_mono = now if now is not None else (time.time(), time.monotonic())
    result = {}
    for unit in units:
        props = read_show(run, unit)
        paths = list(dict.fromkeys(declared_inputs(props) + list((extra_inputs or {}).get(unit) or [])))
        result[unit] = judge(unit, props, mtimes(paths), now_real, now_mono)
    return result

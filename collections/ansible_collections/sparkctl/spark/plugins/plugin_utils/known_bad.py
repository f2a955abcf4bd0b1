# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Known-bad platforms: kernel releases, driver and CUDA versions and kernel memory facts that
are known to break serving, each with the reason and the fix.

The shipped list is a data file (roles/preflight/files/known_bad_platforms.yml, documented in
docs/known-bad-platforms.md); users add entries with preflight_known_bad_platforms_extra. This
module reads and checks the entries and matches them against one node's facts; the preflight_checks
filter turns the matches into the check `platform.known_bad`.

Versions are not compared with packaging.version: neither a kernel release
(`7.0.0-1019-nvidia`) nor a driver version (`580.95.05`) is a PEP 440 version. Both start with
numbers joined by dots or dashes, and that part is what is compared, number by number.
"""

from __future__ import annotations

import functools
import re

import yaml

from ansible_collections.sparkctl.spark.plugins.module_utils.host import MEMINFO_FIELDS

# The facts an entry may match, and the conditions each takes.
VERSION_FACTS = ("kernel", "driver", "cuda", "nic_firmware")
VERSION_OPS = ("equals", "prefix", "min", "max", "below")
NUMBER_OPS = ("equals", "min", "max", "below", "absent")
ENTRY_KEYS = ("id", "match", "reason", "fix", "source", "severity")
SEVERITIES = ("fail", "warn")
MEMINFO_KEYS = dict(MEMINFO_FIELDS)

_LEADING_VERSION_RE = re.compile(r"^\d+(?:[.-]\d+)*")
_ID_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
# What may follow a prefix for it to match a whole component: 7.0.0-1019 matches
# 7.0.0-1019-nvidia and 7.0.0-1019.20, never 7.0.0-10190.
_PREFIX_BOUNDARY = "-.+_~"


class KnownBadError(ValueError):
    """An entry that cannot be used; the message names the entry and the key."""


def version_key(text):
    """The leading numbers of a version, as a tuple: '7.0.0-1019-nvidia' -> (7, 0, 0, 1019),
    '580.95.05' -> (580, 95, 5), '13.0' -> (13, 0). None when it does not start with a number."""
    match = _LEADING_VERSION_RE.match(str(text or "").strip())
    if not match:
        return None
    return tuple(int(part) for part in re.split(r"[.-]", match.group(0)))


def compare_versions(left, right):
    """-1, 0 or 1 as left is older, the same or newer; missing trailing numbers count as 0
    ('13' == '13.0'). None when either has no leading number."""
    a, b = version_key(left), version_key(right)
    if a is None or b is None:
        return None
    width = max(len(a), len(b))
    a, b = a + (0,) * (width - len(a)), b + (0,) * (width - len(b))
    return (a > b) - (a < b)


def _prefix_matches(value, prefix):
    if not value.startswith(prefix):
        return False
    rest = value[len(prefix):]
    return not rest or prefix[-1] in _PREFIX_BOUNDARY or rest[0] in _PREFIX_BOUNDARY


def version_condition_holds(value, condition):
    """Whether a version string meets every condition of {equals, prefix, min, max, below}
    (min and max inclusive, below exclusive). None when value is unknown or not a version."""
    if value is None or str(value).strip() == "":
        return None
    value = str(value).strip()
    for op, bound in condition.items():
        bound = str(bound)
        if op == "equals":
            if value != bound:
                return False
        elif op == "prefix":
            if not _prefix_matches(value, bound):
                return False
        else:
            order = compare_versions(value, bound)
            if order is None:
                return None
            if (op == "min" and order < 0) or (op == "max" and order > 0) or (op == "below" and order >= 0):
                return False
    return True


def number_condition_holds(value, condition):
    """Whether a number (bytes) meets every condition of {equals, min, max, below, absent}. None when
    it is unknown and the condition needs it."""
    if "absent" in condition:
        if bool(condition["absent"]) != (value is None):
            return False
        if value is None:
            return True
    if value is None:
        return None
    for op, bound in condition.items():
        if op == "absent":
            continue
        bound = int(bound)
        if (op == "equals" and value != bound) or (op == "min" and value < bound) \
                or (op == "max" and value > bound) or (op == "below" and value >= bound):
            return False
    return True


def _describe(name, value, condition):
    words = {"equals": "=", "prefix": "prefix", "min": ">=", "max": "<=", "below": "<", "absent": "absent:"}
    shown = "absent" if value is None else value
    return "%s %s (%s)" % (name, shown, ", ".join("%s %s" % (words[op], bound) for op, bound in condition.items()))


def match_entry(entry, facts):
    """What made a checked entry match facts ({kernel, driver, cuda, nic_firmware: [versions],
    meminfo: {CmaTotal: bytes}}), as
    words ('kernel 7.0.0-1019-nvidia (prefix 7.0.0-1019)'), or None when it does not match. Every
    condition must hold; a fact the node did not report matches nothing."""
    found = []
    for fact, condition in entry["match"].items():
        if fact == "meminfo":
            meminfo = facts.get("meminfo") or {}
            for field, numbers in condition.items():
                if number_condition_holds(meminfo.get(field), numbers) is not True:
                    return None
                found.append(_describe(field, meminfo.get(field), numbers))
        else:
            # nic_firmware is one version per RDMA device of the cable: one bad adapter is enough.
            values = facts.get(fact)
            values = values if isinstance(values, (list, tuple)) else [values]
            bad = [value for value in values if version_condition_holds(value, condition) is True]
            if not bad:
                return None
            found.append(_describe(fact, bad[0], condition))
    return ", ".join(found)


def matches(entries, facts, ignore=()):
    """[(entry, what matched)] for the entries that match, in order, less the ids in ignore."""
    ignored = set(ignore or ())
    found = []
    for entry in entries:
        if entry["id"] in ignored:
            continue
        what = match_entry(entry, facts)
        if what is not None:
            found.append((entry, what))
    return found


def _version_bound(where, op, bound):
    # YAML reads 7.10 as the float 7.1: a version must be quoted to keep its digits.
    if isinstance(bound, float) or isinstance(bound, bool) or not isinstance(bound, (str, int)):
        raise KnownBadError("%s.%s: %r is not a version string; quote it (e.g. '%s')" % (where, op, bound, bound))
    if op not in ("equals", "prefix") and version_key(bound) is None:
        raise KnownBadError("%s.%s: %r does not start with a number" % (where, op, bound))
    return str(bound)


def check_entry(entry, where):
    """The entry with its conditions checked and normalised; KnownBadError names what is wrong."""
    if not isinstance(entry, dict):
        raise KnownBadError("%s: an entry must be a mapping with id, match, reason and fix" % where)
    unknown = sorted(set(entry) - set(ENTRY_KEYS))
    if unknown:
        raise KnownBadError("%s: unknown key(s) %s; an entry has %s" % (where, ", ".join(unknown), ", ".join(ENTRY_KEYS)))
    entry_id = entry.get("id")
    if not isinstance(entry_id, str) or not _ID_RE.match(entry_id):
        raise KnownBadError("%s.id: %r must be a lower-case name (letters, digits, '.', '_', '-')" % (where, entry_id))
    where = "%s (%s)" % (where, entry_id)
    for key in ("reason", "fix"):
        if not isinstance(entry.get(key), str) or not entry[key].strip():
            raise KnownBadError("%s.%s: must be a non-empty string" % (where, key))
    severity = entry.get("severity", "fail")
    if severity not in SEVERITIES:
        raise KnownBadError("%s.severity: %r is not one of %s" % (where, severity, ", ".join(SEVERITIES)))
    match = entry.get("match")
    if not isinstance(match, dict) or not match:
        raise KnownBadError("%s.match: must name at least one of %s" % (where, ", ".join(VERSION_FACTS + ("meminfo",))))
    checked = {}
    for fact, condition in match.items():
        if fact not in VERSION_FACTS + ("meminfo",):
            raise KnownBadError("%s.match.%s: unknown fact; use %s" % (where, fact, ", ".join(VERSION_FACTS + ("meminfo",))))
        if not isinstance(condition, dict) or not condition:
            raise KnownBadError("%s.match.%s: must be a mapping of conditions" % (where, fact))
        if fact == "meminfo":
            checked[fact] = {}
            for field, numbers in condition.items():
                if field not in MEMINFO_KEYS:
                    raise KnownBadError("%s.match.meminfo.%s: not a field preflight reads; use %s"
                                        % (where, field, ", ".join(MEMINFO_KEYS)))
                if not isinstance(numbers, dict) or not numbers or set(numbers) - set(NUMBER_OPS):
                    raise KnownBadError("%s.match.meminfo.%s: conditions are %s" % (where, field, ", ".join(NUMBER_OPS)))
                for op, bound in numbers.items():
                    if op != "absent" and (isinstance(bound, bool) or not isinstance(bound, int)):
                        raise KnownBadError("%s.match.meminfo.%s.%s: %r is not a number of bytes" % (where, field, op, bound))
                checked[fact][field] = dict(numbers)
            continue
        unknown_ops = sorted(set(condition) - set(VERSION_OPS))
        if unknown_ops:
            raise KnownBadError("%s.match.%s: unknown condition(s) %s; use %s"
                                % (where, fact, ", ".join(unknown_ops), ", ".join(VERSION_OPS)))
        checked[fact] = dict((op, _version_bound("%s.match.%s" % (where, fact), op, bound)) for op, bound in condition.items())
    result = dict(entry)
    result["match"] = checked
    result["severity"] = severity
    result["source"] = entry.get("source") or ""
    return result


def check_entries(entries, where):
    """Every entry checked, ids unique; where names the list in messages."""
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise KnownBadError("%s: must be a list of entries" % where)
    checked, seen = [], set()
    for index, entry in enumerate(entries):
        item = check_entry(entry, "%s[%d]" % (where, index))
        if item["id"] in seen:
            raise KnownBadError("%s[%d]: id %r is used twice" % (where, index, item["id"]))
        seen.add(item["id"])
        checked.append(item)
    return checked


@functools.lru_cache(maxsize=8)
def load_file(path):
    """The checked entries of a known-bad data file ({schema: 1, entries: [...]}), read once per process."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise KnownBadError("%s: cannot be read: %s" % (path, exc)) from None
    if not isinstance(data, dict) or data.get("schema") != 1:
        raise KnownBadError("%s: expected a mapping with schema: 1 and entries" % path)
    return tuple(check_entries(data.get("entries"), "%s: entries" % path))


def all_entries(path, extra, where_extra="preflight_known_bad_platforms_extra"):
    """The shipped file's entries then the user's; a user entry may not reuse a shipped id."""
    shipped = list(load_file(path)) if path else []
    own = check_entries(extra, where_extra)
    shipped_ids = set(entry["id"] for entry in shipped)
    for index, entry in enumerate(own):
        if entry["id"] in shipped_ids:
            raise KnownBadError("%s[%d]: id %r is already a shipped entry; choose another id" % (where_extra, index, entry["id"]))
    return shipped + own

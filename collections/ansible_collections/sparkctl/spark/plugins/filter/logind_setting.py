# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The effective value of one systemd-logind setting, resolved the way logind
itself reads logind.conf and its drop-ins (see systemd.syntax(7) and
logind.conf(5)): the main file first, then the drop-ins sorted by file name,
a drop-in in /etc masking one of the same name in /run or /usr/lib; the last
assignment wins."""

from __future__ import annotations

import base64
import posixpath

from ansible.errors import AnsibleFilterError

DOCUMENTATION = r"""
name: logind_setting
short_description: Resolve the effective value of a systemd-logind setting
version_added: 0.1.0
description:
  - Reads the texts of C(logind.conf) and its C(logind.conf.d/*.conf) drop-ins and returns the value logind uses for
    one key of the C([Login]) section, or the default when no file sets it.
  - Items given with their path are ordered as systemd orders them, whatever the order of the list. The main file is
    the first of C(/etc/systemd/logind.conf), C(/run/systemd/logind.conf), C(/usr/local/lib/systemd/logind.conf),
    C(/usr/lib/systemd/logind.conf) that is given; drop-ins follow sorted by file name, and a drop-in in a directory of
    higher priority (C(/etc) > C(/run) > C(/usr/local/lib) > C(/usr/lib)) masks one of the same name (an empty file or
    a link to C(/dev/null) masks it without setting anything).
  - Plain strings are taken in the order given.
  - An empty assignment (C(Key=)) resets the key to its default. With O(boolean=true) a value that is not a boolean is
    ignored, as logind ignores it, and the result is a bool.
options:
  _input:
    description:
      - The configuration files. Each item is a string (the text), a dict with C(path) and C(content) (the text), or an
        C(ansible.builtin.slurp) result (C(source), base64 C(content)).
    type: list
    elements: raw
    required: true
  key:
    description: The setting, e.g. C(RemoveIPC). Case-sensitive, as in logind.
    type: str
    required: true
  default:
    description: The value logind uses when no file sets the key.
    type: raw
    required: true
  section:
    description: The section the key lives in.
    type: str
    default: Login
  boolean:
    description: Parse the value as a systemd boolean and return a bool.
    type: bool
    default: false
  config_dirs:
    description: The configuration directories, highest priority first (files elsewhere rank below them).
    type: list
    elements: str
    default: [/etc/systemd, /run/systemd, /usr/local/lib/systemd, /usr/lib/systemd]
  with_source:
    description: Return a dict with the value and the file that set it instead of the value alone.
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Resolve RemoveIPC
  ansible.builtin.set_fact:
    linger_remove_ipc: "{{ linger_logind_texts.results | sparkctl.spark.logind_setting('RemoveIPC', 'yes', boolean=true) }}"
"""

RETURN = r"""
_value:
  description:
    - The effective value (a str, or a bool with O(boolean=true)).
    - With O(with_source=true) a dict with C(value), C(source) (path of the file that set it, C(default) when none did,
      C(<text N>) for a plain string item) and C(raw) (the text of the assignment, or null).
  type: raw
"""

# Highest priority first; the same order systemd searches configuration directories.
CONFIG_DIRS = ("/etc/systemd", "/run/systemd", "/usr/local/lib/systemd", "/usr/lib/systemd")
MAIN_NAME = "logind.conf"
DROPIN_DIR = "logind.conf.d"

_TRUE = {"1", "yes", "y", "true", "t", "on"}
_FALSE = {"0", "no", "n", "false", "f", "off"}


def parse_systemd_boolean(text):
    """systemd's parse_boolean(): None when the text is not a boolean."""
    word = str(text).strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    return None


def _logical_lines(text):
    """Lines as systemd's config parser sees them: a trailing backslash joins the next line."""
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if pending and line[:1] in ("#", ";"):
            continue  # comment lines inside a continuation are skipped, not ended on
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        yield pending + line
        pending = ""
    if pending:
        yield pending


def assignments(text, section="Login"):
    """Yield (key, value) for each assignment in the given section, in file order."""
    current = None
    for line in _logical_lines(text):
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1].strip()
            continue
        if current != section or "=" not in line:
            continue  # outside any section or malformed: logind ignores it
        key, _sep, value = line.partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        yield key.strip(), value


def _normalise(item, index):
    """Return (path or None, text) for one input item."""
    if isinstance(item, str):
        return None, item
    if not isinstance(item, dict):
        raise AnsibleFilterError(f"logind_setting: item {index} is a {type(item).__name__}, not a text or a dict")
    path = item.get("path") or item.get("source")
    content = item.get("content")
    if content is None:
        raise AnsibleFilterError(f"logind_setting: item {index} ({path or 'no path'}) has no 'content'")
    if item.get("encoding") == "base64":
        content = base64.b64decode(content).decode("utf-8", errors="replace")
    return path, str(content)


def _priority(directory, config_dirs):
    try:
        return config_dirs.index(directory.rstrip("/"))
    except ValueError:
        return len(config_dirs)  # unknown directory: lowest priority, still read


def order_files(items, config_dirs=CONFIG_DIRS):
    """Return [(label, text)] in the order logind applies them."""
    config_dirs = [str(d).rstrip("/") for d in config_dirs]
    plain, mains, dropins = [], [], {}
    for index, item in enumerate(items):
        path, text = _normalise(item, index)
        if path is None:
            plain.append((f"<text {index}>", text))
            continue
        directory, name = posixpath.split(path)
        if posixpath.basename(directory) == DROPIN_DIR:
            rank = _priority(posixpath.dirname(directory), config_dirs)
            known = dropins.get(name)
            if known is None or rank < known[0]:
                dropins[name] = (rank, path, text)
        else:
            mains.append((_priority(directory, config_dirs), path, text))
    ordered = []
    if mains:
        _rank, path, text = min(mains, key=lambda m: m[0])
        ordered.append((path, text))
    ordered.extend((path, text) for _name, (_rank, path, text) in sorted(dropins.items()))
    return plain + ordered


def logind_setting(files, key, default, section="Login", boolean=False, with_source=False, config_dirs=CONFIG_DIRS):
    if not isinstance(files, (list, tuple)):
        raise AnsibleFilterError("logind_setting expects a list of files")
    value, source, raw = default, "default", None
    for label, text in order_files(files, config_dirs):
        for name, assigned in assignments(text, section):
            if name != key:
                continue
            if assigned == "":
                value, source, raw = default, label, f"{name}="
            elif boolean and parse_systemd_boolean(assigned) is None:
                continue  # logind logs "Failed to parse boolean value" and keeps the previous one
            else:
                value, source, raw = assigned, label, f"{name}={assigned}"
    if boolean:
        parsed = parse_systemd_boolean(value) if not isinstance(value, bool) else value
        if parsed is None:
            raise AnsibleFilterError(f"logind_setting: the default {default!r} of {key} is not a boolean")
        value = parsed
    if with_source:
        return {"value": value, "source": source, "raw": raw}
    return value


class FilterModule:
    def filters(self):
        return {"logind_setting": logind_setting}

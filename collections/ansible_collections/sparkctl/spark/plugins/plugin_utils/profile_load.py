# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Model profiles, loading: one YAML file per served system, found in the user's profile
directories first and the collection's profiles/ second, its 'extends' chain followed, and the
inventory's overrides merged in. Pure: no host is contacted."""

from __future__ import annotations

import copy
import os
import re

import yaml

# The collection's root (galaxy.yml in a checkout, MANIFEST.json once installed), and where it
# ships its profiles.
COLLECTION_DIR = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
COLLECTION_PROFILES = os.path.join(COLLECTION_DIR, "profiles")

MAX_EXTENDS_DEPTH = 8

_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


class ProfileError(Exception):
    """A profile that cannot be loaded or is wrong; the message names the profile, the key and the fix."""


def search_dirs(paths=None, base_dir=None):
    """The user's profile directories (relative ones resolved against base_dir, the
    inventory directory), then the collection's own."""
    dirs = []
    for path in paths or []:
        path = os.path.expanduser(str(path))
        if not os.path.isabs(path) and base_dir:
            path = os.path.join(str(base_dir), path)
        dirs.append(os.path.normpath(path))
    dirs.append(COLLECTION_PROFILES)
    return dirs


def find_profile(name, dirs):
    """Path of <name>.yml (or .yaml) in the first directory holding it."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ProfileError(
            f"profile name {name!r} is not valid: use lowercase letters, digits, '.', '_' and '-', "
            "the file name without .yml (e.g. solar-open2-nvfp4-vllm-venv)."
        )
    for directory in dirs:
        for ext in (".yml", ".yaml"):
            candidate = os.path.join(directory, name + ext)
            if os.path.isfile(candidate):
                return candidate
    known = sorted(available_profiles(dirs))
    raise ProfileError(
        f"profile {name!r} was not found in {', '.join(dirs)}: set spark_model_profile to one of "
        f"{', '.join(known) or '(none)'}, or add {name}.yml to a directory listed in spark_profile_paths."
    )


def available_profiles(dirs):
    names = set()
    for directory in dirs:
        if not os.path.isdir(directory):
            continue
        for entry in os.listdir(directory):
            stem, ext = os.path.splitext(entry)
            if ext in (".yml", ".yaml") and _NAME_RE.match(stem):
                names.add(stem)
    return names


# libyaml's parser where PyYAML was built with it: the profile is read for every task that
# templates a profile-derived variable, and the pure-Python parser was most of that cost.
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _read_yaml(path, name):
    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.load(handle, Loader=_YAML_LOADER)  # noqa: S506 - a safe loader, C or Python
    except yaml.YAMLError as exc:
        raise ProfileError(f"profile {name}: {path} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ProfileError(f"profile {name}: {path} must hold a mapping at the top level.")
    return data


def deep_merge(base, override):
    """Merge override into a copy of base: mappings merge key by key, anything else
    (lists included) replaces, and None deletes the key."""
    result = copy.deepcopy(base) if isinstance(base, dict) else {}
    for key, value in (override or {}).items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = deep_merge(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result


def _load_chain(name, dirs, seen):
    if name in seen:
        raise ProfileError(f"profile {name}: 'extends' loops ({' -> '.join(seen + [name])}); remove one 'extends'.")
    if len(seen) >= MAX_EXTENDS_DEPTH:
        raise ProfileError(f"profile {seen[0]}: 'extends' is nested deeper than {MAX_EXTENDS_DEPTH} levels.")
    path = find_profile(name, dirs)
    data = _read_yaml(path, name)
    parent = data.pop("extends", None)
    if parent is None:
        return data, [path]
    if not isinstance(parent, str):
        raise ProfileError(f"profile {name}: extends: expected the name of another profile, got {parent!r}.")
    base, sources = _load_chain(parent, dirs, seen + [name])
    return deep_merge(base, data), sources + [path]


def load_profile(name, paths=None, overrides=None, base_dir=None):
    """Resolve a profile: the file (after its 'extends' chain) merged with the inventory's
    overrides. The result carries 'name' (the requested profile), '_sources' (files read)
    and '_dir' (the directory of the profile file, where build contexts and plugins live)."""
    dirs = search_dirs(paths, base_dir)
    data, sources = _load_chain(name, dirs, [])
    if overrides is not None and not isinstance(overrides, dict):
        raise ProfileError(f"profile {name}: spark_profile_overrides must be a mapping, got {type(overrides).__name__}.")
    if overrides:
        data = deep_merge(data, overrides)
    data["name"] = name
    data["_sources"] = sources
    data["_dir"] = os.path.dirname(sources[-1])
    return data

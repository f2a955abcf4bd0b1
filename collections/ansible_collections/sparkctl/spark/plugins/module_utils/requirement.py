# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Requirement strings ('Ray[default]==2.60.0', 'x @ https://...', a pip freeze line) read in
one place: their distribution name, normalised as PEP 503 says ('Torch_Audio' and
'torch.audio' are both 'torch-audio'), their extras and their version specifier.

The profile's checks, the venv's missing-package test, the runtime version report, the
requirement_name and requirement_pin filters and the lab's tests all read requirements
through these. It lives in module_utils because modules import only from there.
"""

from __future__ import annotations

import re

# A PEP 508 name, then optional [extras], then the rest (a specifier, '@ url', '; marker').
_REQUIREMENT_RE = re.compile(r"^\s*([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*(?:\[([^\]]*)\])?\s*(.*)$", re.DOTALL)
_SEPARATORS_RE = re.compile(r"[-_.]+")


def canonical_name(name):
    """PEP 503: runs of '-', '_' and '.' become one '-', lower case."""
    return _SEPARATORS_RE.sub("-", str(name)).lower()


def _parts(spec):
    match = _REQUIREMENT_RE.match(str(spec or ""))
    if not match:
        return None, "", ""
    return match.group(1), match.group(2) or "", match.group(3).strip()


def distribution_name(spec):
    """The name as written: 'vllm[audio]>=0.25' -> 'vllm', 'solar_open2 @ file:///...' ->
    'solar_open2'; None when the text does not start with a name."""
    return _parts(spec)[0]


def requirement_name(spec):
    """'Ray[default]==2.60.0' -> 'ray'; None when the text does not start with a name."""
    name = distribution_name(spec)
    return canonical_name(name) if name else None


def requirement_extras(spec):
    """'ray[Default, serve]==2.60.0' -> {'default', 'serve'}."""
    return {extra.strip().lower() for extra in _parts(spec)[1].split(",") if extra.strip()}


def split_requirement(spec):
    """(PEP 503 name, version specifier or None): 'ray[default]==2.60.0' -> ('ray', '==2.60.0');
    'x @ url' -> ('x', None) (a direct reference pins no version); a marker is dropped."""
    name, _extras, rest = _parts(spec)
    if rest.startswith("@"):
        return canonical_name(name), None
    specifier = re.sub(r"\s+", "", rest.split(";", 1)[0])
    return (canonical_name(name) if name else None), specifier or None


def requirement_pin(spec):
    """A requirement as pip freeze would list it, so pins and installed distributions compare
    as text: 'Ray[default]==2.60.0' -> 'ray==2.60.0', 'sparklab_engine==0.2.0' ->
    'sparklab-engine==0.2.0', 'x @ url' -> 'x'. The specifier is lower-cased: PEP 440 versions
    ignore case ('1.0RC1' is '1.0rc1'). Text that names no distribution (pip freeze's '-e ...'
    lines) comes back stripped, unchanged."""
    name, specifier = split_requirement(spec)
    if name is None:
        return str(spec or "").strip()
    return name + (specifier or "").lower()

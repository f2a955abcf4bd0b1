# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The checkpoint stage's two errors, and the way their text leaves a secret out.

CheckpointError: the request itself is unusable (a bad manifest, a path that is a file); the
verification and the manifest raise it, never for a problem of the checkpoint, which is reported.
SyncError: the transfer cannot be carried out at all (bad source, hub unreachable, client
missing). Every other checkpoint module raises or catches them, so they sit below all of those.
"""

from __future__ import annotations


class CheckpointError(ValueError):
    """The request itself is unusable (bad manifest, path is a file); not a checkpoint problem."""


class SyncError(Exception):
    """The request cannot be carried out at all (bad source, hub unreachable, client missing)."""


def scrub(text, secret):
    """text with the secret replaced by asterisks: a client's or rsync's error may quote a token or password."""
    text = str(text)
    if secret:
        text = text.replace(secret, "********")
    return text

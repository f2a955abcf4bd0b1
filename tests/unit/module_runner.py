"""Run a module's main() the way Ansible does, and read what it printed."""

from __future__ import annotations

import json

import pytest
from ansible.module_utils.testing import patch_module_args


def run_module(main, args, capsys, raw=False):
    """(exit code, parsed JSON result) of main() with args; raw=True returns the printed text."""
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exit_info:
            main()
    out = capsys.readouterr().out
    return exit_info.value.code, out if raw else json.loads(out)

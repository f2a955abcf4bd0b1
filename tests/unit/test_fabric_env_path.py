"""fabric.env's PATH (roles/fabric_env/vars/main.yml), evaluated by Ansible's own templating: written
for a venv runtime, whose units read the file as their environment; left out for an image runtime,
whose units hand the file to `docker run --env-file`, where it would replace the image's own PATH."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from role_templating import evaluate

ROLE = Path(__file__).resolve().parents[2] / "roles" / "fabric_env"
VARS = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
DEFAULTS = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())


def _written(profile):
    variables = {"fabric_env_path": DEFAULTS["fabric_env_path"], "fabric_env_path_written": VARS["fabric_env_path_written"]}
    if profile is not None:
        variables["spark_profile"] = profile
    return evaluate("{{ fabric_env_path_written }}", variables)


@pytest.mark.parametrize("profile, written", [
    ({"runtime": {"kind": "venv"}}, True),
    ({"runtime": {"kind": "image"}}, False),
    # The role on its own (no cluster-wide profile in the play): the host's PATH, as before.
    (None, True),
])
def test_the_path_is_written_for_a_venv_runtime_only(profile, written):
    assert _written(profile) == (DEFAULTS["fabric_env_path"] if written else [])


def test_the_filter_reads_the_runtime_aware_path():
    # The environment the template renders takes its PATH from the runtime-aware list, not the raw default.
    assert "path=fabric_env_path_written," in VARS["fabric_env_vars"].replace(" ", "").replace("\n", "")

"""Where the mesh's forced command is installed (roles/ssh_mesh/vars/main.yml), evaluated by
Ansible's own templating: on every node peers log in to, whether or not the key's line forces
it, because the checkpoint relay runs the program by its path either way."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from role_templating import evaluate

ROLE = Path(__file__).resolve().parents[2] / "roles" / "ssh_mesh"
VARS = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
COMMAND_PATH = "/usr/local/libexec/sparkctl-mesh-command"


def _variables(forced, sources, command_file):
    return {
        "ssh_mesh_forced_command": forced,
        "ssh_mesh_sources": sources,
        "ssh_mesh_command_file": command_file,
        "ssh_mesh_command_path": COMMAND_PATH,
        "ssh_mesh_command_drift": VARS["ssh_mesh_command_drift"],
    }


@pytest.mark.parametrize("forced", [True, False])
def test_the_program_is_installed_where_peers_log_in_whether_or_not_the_key_forces_it(forced):
    missing = {"differences": ["missing"]}
    assert evaluate("{{ ssh_mesh_command_drift }}", _variables(forced, [{"name": "spark1"}], missing)) is True


@pytest.mark.parametrize("forced", [True, False])
def test_an_installed_program_is_left_alone_and_a_node_nobody_logs_in_to_gets_none(forced):
    assert evaluate("{{ ssh_mesh_command_drift }}", _variables(forced, [{"name": "spark1"}], {"differences": []})) is False
    assert evaluate("{{ ssh_mesh_command_drift }}", _variables(forced, [], {"differences": ["missing"]})) is False


@pytest.mark.parametrize("forced", [True, False])
def test_the_read_covers_the_program_where_peers_log_in(forced):
    # The read is what the install is judged against: a program installed but never read would
    # count as drift on every run.
    expr = VARS["ssh_mesh_read_paths"].replace(
        "lookup('ansible.builtin.file', 'sparkctl-mesh-command', rstrip=false)", "'program'")
    variables = {"ssh_mesh_read_dir": "~sparkctl/.ssh", "ssh_mesh_targets": [], "ssh_mesh_key_name": "id",
                 "ssh_mesh_forced_command": forced, "ssh_mesh_sources": [{"name": "spark1"}],
                 "ssh_mesh_command_path": COMMAND_PATH}
    assert COMMAND_PATH in [entry["path"] for entry in evaluate(expr, variables)]

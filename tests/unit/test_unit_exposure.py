"""What the nodes' systemd units and node-side commands expose and what they can lock out,
checked on the rendered text (no node needed):

- the firewall comes back by itself when nftables.service starts, restarts or reloads
  (its config flushes the whole ruleset), and Ray, the engines and the checkpoint mirror's
  rsync daemon refuse to start while the firewall is enabled but its table is not loaded;
- fabric.env (NCCL's LD_PRELOAD among it) reaches Ray and the engine units only, never
  nginx, the firewall or rsyncd through a prefix drop-in;
- the direct cable is applied by reconfiguring its own interfaces, never `netplan apply`
  (which re-applies every netplan file, the management network's included);
- the SSH mesh authorizes the head on the workers only, restricted, from its cable addresses."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import jinja2
import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.sparkctl.spark.plugins.filter import profile as profile_filter
from ansible_collections.sparkctl.spark.plugins.module_utils import firewall as F
from test_profile import GOLDEN_CASES, cluster, load

REPO = Path(__file__).resolve().parents[2]
ROLES = REPO / "roles"
FIREWALL_UNIT = "sparkctl-firewall.service"


def _render_template(path: Path, **variables) -> str:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["sparkctl.spark.firewall_start_gate"] = lambda config_file, nft=F.NFT: F.start_gate_exec(config_file, nft)
    return env.from_string(path.read_text()).render(ansible_managed="managed", **variables)


def _sections(text: str) -> dict[str, list[str]]:
    """{section: [key=value lines]} of a unit file (comments dropped)."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1]
            sections.setdefault(current, [])
        else:
            sections[current].append(line)
    return sections


def _values(section: list[str], key: str) -> list[str]:
    return [word for line in section if line.startswith(key + "=") for word in line.split("=", 1)[1].split()]


def _rendered_units():
    for case, (name, overrides) in GOLDEN_CASES.items():
        profile = load(name, overrides)
        out = profile_filter.profile_render(profile, cluster(profile))
        for host, units in out["units"].items():
            for unit, text in units.items():
                yield f"{case}/{host}/{unit}", text


RENDERED = dict(_rendered_units())


# --- Item: the firewall stays loaded whatever deletes its table, and nothing listens without it


def _firewall_unit() -> dict[str, list[str]]:
    return _sections(_render_template(ROLES / "firewall" / "templates" / "firewall.service.j2",
                                      firewall_family="inet", firewall_table="sparkctl",
                                      firewall_config_file="/etc/sparkctl/firewall.nft", firewall_nft="/usr/sbin/nft",
                                      firewall_watch_python="/usr/bin/python3",
                                      firewall_watch_path="/opt/sparkctl/libexec/sparkctl-firewall-watch"))


def test_the_firewall_unit_loads_its_table_and_keeps_it_loaded_apart_from_nftables():
    unit = _firewall_unit()
    # Loaded after nftables.conf's flush at boot ...
    assert "nftables.service" in _values(unit["Unit"], "After")
    assert " ".join(_values(unit["Service"], "ExecStartPre")) == "/usr/sbin/nft -f /etc/sparkctl/firewall.nft"
    # ... then kept by its main process, which loads the file again whenever the table is deleted
    # (files/sparkctl-firewall-watch): nftables.service's stop must not take the table with it, so
    # the unit does not follow nftables.service.
    assert " ".join(_values(unit["Service"], "ExecStart")) == (
        "/usr/bin/python3 /opt/sparkctl/libexec/sparkctl-firewall-watch --nft /usr/sbin/nft --family inet "
        "--table sparkctl --rules /etc/sparkctl/firewall.nft")
    assert _values(unit["Service"], "Type") == ["simple"] and _values(unit["Service"], "Restart") == ["always"]
    # Its stop deletes the table after a clean stop only (systemd's SERVICE_RESULT).
    assert " ".join(_values(unit["Service"], "ExecStopPost")) == (
        "/usr/bin/python3 /opt/sparkctl/libexec/sparkctl-firewall-watch --stop-post --nft /usr/sbin/nft --family inet "
        "--table sparkctl")
    assert not _values(unit["Unit"], "PartOf") and not _values(unit["Unit"], "BindsTo")
    assert _values(unit["Install"], "WantedBy") == ["multi-user.target"]
    # The firewall never needs fabric.env and never binds a stop to the engines.
    assert not _values(unit["Service"], "EnvironmentFile")


def test_the_start_gate_refuses_only_when_enabled_and_not_loaded(tmp_path):
    nft_ok = tmp_path / "nft-ok"
    nft_ok.write_text("#!/bin/sh\nexit 0\n")
    nft_missing = tmp_path / "nft-missing"
    nft_missing.write_text("#!/bin/sh\necho 'Error: No such file or directory' >&2\nexit 1\n")
    for script in (nft_ok, nft_missing):
        script.chmod(0o755)
    enabled = tmp_path / "firewall.nft"
    enabled.write_text("table inet sparkctl\n")
    disabled = tmp_path / "absent.nft"

    def gate(config_file, nft):
        return subprocess.run(F.start_gate_argv(str(config_file), str(nft)), capture_output=True, text=True)

    assert gate(enabled, nft_ok).returncode == 0
    refused = gate(enabled, nft_missing)
    assert refused.returncode == 1
    assert "table inet sparkctl is not loaded" in refused.stderr and "systemctl restart sparkctl-firewall.service" in refused.stderr
    # Firewall turned off (the role removes the file): nothing to wait for.
    assert gate(disabled, nft_missing).returncode == 0


def test_the_start_gate_needs_no_systemd_escaping():
    value = F.start_gate_exec()
    assert value.startswith('+/bin/sh -c "') and value.endswith('"')
    inner = value[len('+/bin/sh -c "'):-1]
    assert not re.search(r'["\\$%]', inner)
    with pytest.raises(F.FirewallError):
        F.start_gate_argv(config_file="/etc/spark ctl/firewall.nft")


@pytest.mark.parametrize("unit", sorted(RENDERED))
def test_every_ray_and_engine_unit_refuses_to_start_without_the_table(unit):
    sections = _sections(RENDERED[unit])
    assert FIREWALL_UNIT in _values(sections["Unit"], "After"), unit
    assert FIREWALL_UNIT in _values(sections["Unit"], "Wants"), unit
    # Not Requires=/BindsTo=/PartOf= on the firewall: its restart with nftables must not restart the engine.
    for key in ("Requires", "BindsTo", "PartOf", "Requisite"):
        assert FIREWALL_UNIT not in _values(sections["Unit"], key), unit
    service = sections["Service"]
    pre = [line for line in service if line.startswith("ExecStartPre=")]
    assert pre and pre[0] == "ExecStartPre=" + F.start_gate_exec(), unit
    # The check comes before anything the unit runs.
    assert service.index(pre[0]) < service.index(next(line for line in service if line.startswith("ExecStart="))), unit


def _rsyncd_units() -> dict[str, dict[str, list[str]]]:
    templates = ROLES / "checkpoint" / "templates"
    variables = dict(spark_link_ips=["192.168.100.11", "192.168.101.11"], checkpoint_rsyncd_port=8730,
                     checkpoint_rsyncd_max_connections=16, checkpoint_rsyncd_config_file="/etc/sparkctl/rsyncd.conf",
                     spark_units=profile_filter.profile_units(load("solar-open2-nvfp4-vllm-venv")))
    return {name: _sections(_render_template(templates / template, **variables))
            for name, template in (("sparkctl-rsyncd.socket", "rsyncd.socket.j2"),
                                   ("sparkctl-rsyncd@.service", "rsyncd@.service.j2"))}


def test_the_rsync_daemon_does_not_listen_or_serve_without_the_table():
    units = _rsyncd_units()
    socket, service = units["sparkctl-rsyncd.socket"], units["sparkctl-rsyncd@.service"]
    for unit in (socket, service):
        assert FIREWALL_UNIT in _values(unit["Unit"], "After")
        assert FIREWALL_UNIT in _values(unit["Unit"], "Wants")
    assert "ExecStartPre=" + F.start_gate_exec() in socket["Socket"]
    assert "ExecStartPre=" + F.start_gate_exec() in service["Service"]


# --- Item: fabric.env reaches Ray and the engine units only ------------------------------------


def test_no_prefix_drop_in_hands_fabric_env_to_every_sparkctl_unit():
    # A "sparkctl-.service.d" drop-in applies to every unit named sparkctl-*: nginx's
    # proxy, the firewall and rsyncd would load NCCL's LD_PRELOAD too. The fabric_env
    # role only removes the one earlier versions wrote.
    writers = ("ansible.builtin.template", "ansible.builtin.copy")
    for path in ROLES.glob("*/tasks/*.yml"):
        for task in _tasks(path):
            for module in writers:
                dest = str((task.get(module) or {}).get("dest", ""))
                assert not re.search(r"(sparkctl-|fabric_env_unit_prefix \}\})\.service\.d", dest), (path, task)
    legacy = yaml.safe_load((ROLES / "fabric_env" / "vars" / "main.yml").read_text())["fabric_env_legacy_dropin_dir"]
    assert legacy == "/etc/systemd/system/sparkctl-.service.d"
    removal = [task for task in _tasks(ROLES / "fabric_env" / "tasks" / "render.yml")
               if "10-fabric-env.conf" in str((task.get("ansible.builtin.file") or {}).get("path", ""))]
    assert [task["ansible.builtin.file"]["state"] for task in removal] == ["absent"]
    assert not (ROLES / "fabric_env" / "templates" / "fabric-dropin.conf.j2").exists()


@pytest.mark.parametrize("unit", sorted(RENDERED))
def test_ray_and_engine_units_name_fabric_env_themselves(unit):
    text = RENDERED[unit]
    sections = _sections(text)
    service = sections["Service"]
    if any(line.startswith("User=") for line in service):
        assert "EnvironmentFile=/etc/sparkctl/fabric.env" in service, unit
    elif "/usr/bin/docker run" in text and ("sparkctl-ray-" in unit or "sglang-rank" in unit):
        # The container gets it; the docker CLI itself does not need it.
        assert "--env-file /etc/sparkctl/fabric.env" in text, unit


def test_units_outside_ray_and_the_engines_do_not_read_fabric_env():
    assert not _values(_firewall_unit()["Service"], "EnvironmentFile")
    for unit in _rsyncd_units().values():
        assert not _values(unit.get("Service", []), "EnvironmentFile")


# --- Item: only the cable's interfaces are applied -------------------------------------------


def _tasks(path: Path) -> list[dict]:
    found = []

    def walk(items):
        for task in items or []:
            found.append(task)
            for key in ("block", "rescue", "always"):
                walk(task.get(key))

    walk(yaml.safe_load(path.read_text()))
    return found


def test_the_cable_is_applied_without_netplan_apply():
    tasks = _tasks(ROLES / "direct_link" / "tasks" / "configure.yml")
    commands = [task["ansible.builtin.command"] for task in tasks if "ansible.builtin.command" in task]
    argvs = [cmd["argv"] if isinstance(cmd, dict) else cmd.split() for cmd in commands]
    assert not any(argv[:2] == ["netplan", "apply"] for argv in argvs), argvs
    assert ["netplan", "generate"] in argvs
    assert ["networkctl", "reload"] in argvs
    # Only the cable halves of this host (spark_link), never a wildcard or every link.
    assert "{{ ['networkctl', 'reconfigure'] + direct_link_interfaces }}" in argvs, argvs


# --- Item: the SSH mesh authorizes head -> workers only, restricted --------------------------

from ansible_collections.sparkctl.spark.plugins.filter.stale_mesh_keys import (  # noqa: E402
    authorized_key_current, mesh_directions, mesh_key_options, stale_mesh_keys)

GROUPS = {"spark_head": ["spark1"], "spark_workers": ["spark2", "spark3"]}


def test_the_head_logs_in_to_the_workers_and_authorizes_nobody():
    assert mesh_directions(GROUPS, "spark1") == {"targets": ["spark2", "spark3"], "sources": []}


def test_a_worker_authorizes_the_head_only_and_logs_in_nowhere():
    assert mesh_directions(GROUPS, "spark2") == {"targets": [], "sources": ["spark1"]}


def test_worker_to_worker_when_asked_for():
    assert mesh_directions(GROUPS, "spark2", worker_to_worker=True) == {"targets": ["spark3"], "sources": ["spark1", "spark3"]}


def test_the_key_line_is_restricted_to_the_sources_cable_addresses():
    options = mesh_key_options(["192.168.100.10", "192.168.101.10"], ["no-agent-forwarding"])
    assert options == 'restrict,from="192.168.100.10,192.168.101.10",no-agent-forwarding'
    with pytest.raises(AnsibleFilterError, match="must be IP addresses"):
        mesh_key_options([], [])
    with pytest.raises(AnsibleFilterError, match="must be IP addresses"):
        mesh_key_options(["192.168.100.10\",command=\"sh"], [])


def test_the_key_line_forces_the_mesh_command_onto_the_roots_given():
    options = mesh_key_options(["192.168.100.10/24"], ["no-agent-forwarding"],
                               ["/srv/sparkctl/models/x", "/var/cache/sparkctl/jit/", "/srv/sparkctl/models/x"])
    assert options == ('restrict,from="192.168.100.10",command="/usr/local/libexec/sparkctl-mesh-command '
                       '--root /srv/sparkctl/models/x --root /var/cache/sparkctl/jit",no-agent-forwarding')
    # Without roots the line is as before; with an empty list the kernel caches' root is still added.
    assert mesh_key_options(["192.168.100.10"]) == 'restrict,from="192.168.100.10"'
    assert mesh_key_options(["192.168.100.10"], [], []).endswith(
        ',command="/usr/local/libexec/sparkctl-mesh-command --root /var/cache/sparkctl/jit"')
    # As authorized_key writes it, the line reads back as current (the options compared as written).
    line = f"{options} ssh-ed25519 AAAAhead sparkctl-mesh@spark1"
    assert authorized_key_current(line + "\n", "ssh-ed25519 AAAAhead sparkctl-mesh@spark1", options)
    for bad in ['/srv/a"b', "/srv/a b", "/srv/a,b", "srv/models", "/srv/../etc", "/", "/srv/$(id)", "/srv/a;b", None]:
        with pytest.raises(AnsibleFilterError, match=re.escape(str(bad))):
            mesh_key_options(["192.168.100.10"], [], [bad])
    with pytest.raises(AnsibleFilterError, match="must be a list"):
        mesh_key_options(["192.168.100.10"], [], "/srv/x")


def test_the_head_forgets_the_workers_keys_sparkctl_added_and_nothing_else():
    text = ("ssh-ed25519 AAAAoperator me@laptop\n"
            'from="192.168.100.0/24",no-agent-forwarding ssh-ed25519 AAAAworker sparkctl-mesh@spark2\n')
    head = mesh_directions(GROUPS, "spark1")
    stale = stale_mesh_keys(text, {name: None for name in head["sources"]})
    assert [item["peer"] for item in stale] == ["spark2"]

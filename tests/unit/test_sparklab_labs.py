"""Two labs side by side (tests/lab/README.md, "A second lab"): the lab tool names every docker
object after the inventory's sparklab_name, keeps the default lab's names when there is none,
and `down` selects only its own lab's objects. Docker is a fake here: no container is touched."""

import ipaddress
import itertools
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "lab"))
sys.path.insert(0, str(REPO / "tests" / "integration"))

import labrun  # noqa: E402
import sparklab  # noqa: E402

LAB = REPO / "inventories" / "lab"
TWIN = REPO / "inventories" / "lab-twin"


@pytest.fixture
def lab_dir(tmp_path, monkeypatch):
    """The tool's .lab/ in a temporary directory (the real one belongs to the labs)."""
    monkeypatch.setattr(sparklab, "LAB_DIR", tmp_path / ".lab")
    return tmp_path / ".lab"


# The default lab keeps its names; the twin prefixes every docker name but keeps the host names.
@pytest.mark.parametrize(
    "inventory, name, label, docker_network, network, nodes, volumes, state_dir",
    [
        (LAB, "", "1", "sparklab-mgmt", "172.30.77.0/24",
         [("spark1", "spark1", "172.30.77.11"), ("spark2", "spark2", "172.30.77.12")],
         ["sparklab-spark1-docker", "sparklab-spark2-docker"], ""),
        (TWIN, "twin", "twin", "twin-mgmt", "172.30.78.0/24",
         [("spark1", "twin-spark1", "172.30.78.11"), ("spark2", "twin-spark2", "172.30.78.12")],
         ["twin-sparklab-spark1-docker", "twin-sparklab-spark2-docker"], "twin"),
    ],
    ids=["default", "twin"],
)
def test_a_labs_names(inventory, name, label, docker_network, network, nodes, volumes, state_dir):
    plan = sparklab.load_plan(inventory)
    assert (plan.name, plan.label, plan.docker_network, plan.network) == (name, label, docker_network, network)
    assert [(n.name, n.container, n.mgmt_ip) for n in plan.nodes] == nodes
    assert [plan.volume(n) for n in plan.nodes] == volumes
    assert plan.state_dir == (sparklab.LAB_DIR / state_dir if state_dir else sparklab.LAB_DIR)


def test_the_twin_has_the_labs_plan_on_its_own_network():
    lab, twin = sparklab.load_plan(LAB), sparklab.load_plan(TWIN)
    for a, b in zip(lab.nodes, twin.nodes, strict=True):
        assert (a.name, a.role, a.links, a.gid_index) == (b.name, b.role, b.links, b.gid_index)
        assert ipaddress.ip_address(b.mgmt_ip) in ipaddress.ip_network(twin.network)
    assert (lab.sysfs_root, lab.user) == (twin.sysfs_root, twin.user)
    assert not ipaddress.ip_network(lab.network).overlaps(ipaddress.ip_network(twin.network))


def test_the_twins_ansible_vars_differ_from_the_labs_only_where_meant():
    _, lab = labrun.inventory_vars(LAB / "hosts.yml")
    _, twin = labrun.inventory_vars(TWIN / "hosts.yml")
    for host in ("spark1", "spark2"):
        differ = {key for key in lab[host].keys() | twin[host].keys() if lab[host].get(key) != twin[host].get(key)}
        assert differ == {"ansible_host", "spark_management_network", "sparklab_name", "inventory_dir"}, host
    assert twin["spark1"]["sparklab_name"] == "twin"


def test_container_arguments_name_the_lab(monkeypatch):
    for inventory, name, network, label, volume in (
            (LAB, "spark1", "sparklab-mgmt", "1", "sparklab-spark1-docker"),
            (TWIN, "twin-spark1", "twin-mgmt", "twin", "twin-sparklab-spark1-docker")):
        plan = sparklab.load_plan(inventory)
        args = sparklab.container_args(plan, plan.head, "img:tag", "hash")
        pairs = list(itertools.pairwise(args))
        assert ("--name", name) in pairs and ("--hostname", "spark1") in pairs and ("--network", network) in pairs
        assert ("--label", f"org.sparkctl.lab={label}") in pairs and ("-v", f"{volume}:/var/lib/docker") in pairs
        assert ("--label", "org.sparkctl.lab.node=spark1") in pairs


@pytest.mark.parametrize("given, reason", [("sparklab", "'sparklab'"), ("Twin", "lower-case"), ("2lab", "start with a letter"),
                                           ("{{ x }}", "templated")])
def test_a_lab_name_that_would_clash_is_refused(tmp_path, given, reason):
    inventory = tmp_path / "inv"
    (inventory / "group_vars").mkdir(parents=True)
    (inventory / "hosts.yml").write_text((TWIN / "hosts.yml").read_text())
    (inventory / "group_vars" / "all.yml").write_text((LAB / "group_vars" / "all.yml").read_text()
                                                      + f"sparklab_name: {json.dumps(given)}\n")
    (inventory / "group_vars" / "sparklab.yml").write_text("ansible_user: spark\n")
    with pytest.raises(sparklab.LabError) as err:
        sparklab.load_plan(inventory)
    assert "sparklab_name" in str(err.value) and (reason in str(err.value) or reason == "templated")


def test_group_vars_are_found_as_ansible_finds_them(tmp_path):
    base = tmp_path / "group_vars"
    (base / "all").mkdir(parents=True)
    (base / "all" / "b.yml").write_text("x: 2\n")
    (base / "all" / "a.yml").write_text("x: 1\ny: 1\n")
    (base / "all" / ".hidden.yml").write_text("x: 9\n")
    (base / "all" / "notes.txt").write_text("x: 9\n")
    (base / "all.yml").write_text("x: 3\n")           # hidden by the directory, as Ansible does
    (base / "sparklab.yaml").write_text("z: 1\n")
    assert [p.name for p in sparklab.vars_files(base, "all")] == ["a.yml", "b.yml"]
    assert [p.name for p in sparklab.vars_files(base, "sparklab")] == ["sparklab.yaml"]
    assert sparklab.vars_files(base, "spark_head") == []
    assert sparklab.vars_names(base) == ["all", "sparklab"]
    assert labrun.read_group_vars(tmp_path) == {"all": {"x": 2, "y": 1}, "sparklab": {"z": 1}}


def test_the_inventory_comes_from_i_then_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv(sparklab.INVENTORY_ENV, raising=False)
    assert sparklab.inventory_path() == LAB
    monkeypatch.setenv(sparklab.INVENTORY_ENV, str(TWIN / "hosts.yml"))
    assert sparklab.inventory_path() == TWIN / "hosts.yml"
    assert sparklab.load_plan(sparklab.inventory_path()).name == "twin"
    monkeypatch.setenv(sparklab.INVENTORY_ENV, str(TWIN))
    assert sparklab.load_plan(sparklab.inventory_path()).inventory == TWIN
    assert sparklab.inventory_path(LAB) == LAB                       # -i wins
    monkeypatch.chdir(REPO)
    monkeypatch.setenv(sparklab.INVENTORY_ENV, "inventories/lab-twin")
    assert sparklab.inventory_path() == TWIN


class FakeDocker:
    """Both labs' containers, volumes and networks, answering the calls `down` makes."""

    def __init__(self):
        self.containers = {"id-s1": "1", "id-s2": "1", "id-t1": "twin", "id-t2": "twin", "id-other": None}
        self.volumes = {"sparklab-spark1-docker": "1", "sparklab-spark2-docker": "1",
                        "twin-sparklab-spark1-docker": "twin", "twin-sparklab-spark2-docker": "twin", "someones": None}
        self.networks = {"sparklab-mgmt", "twin-mgmt", "bridge"}
        self.calls = []

    def __call__(self, *args, check=True, **kw):
        self.calls.append(args)
        out = ""
        if args[:1] == ("ps",) or args[:2] == ("volume", "ls"):
            value = args[-1].split("=", 2)[2]   # --filter label=org.sparkctl.lab=VALUE
            objects = self.containers if args[0] == "ps" else self.volumes
            out = "\n".join(k for k, v in objects.items() if v == value)
        elif args[:2] == ("network", "inspect"):
            return SimpleNamespace(returncode=0 if args[2] in self.networks else 1,
                                   stdout=json.dumps([{"Name": args[2]}]), stderr="")
        elif args[:2] == ("rm", "-f"):
            for c in args[2:]:
                del self.containers[c]
        elif args[:2] == ("network", "rm"):
            self.networks -= set(args[2:])
        elif args[:2] == ("volume", "rm"):
            for v in args[2:]:
                del self.volumes[v]
        return SimpleNamespace(returncode=0, stdout=out, stderr="")


@pytest.mark.parametrize("inventory, gone, kept", [
    (TWIN, {"id-t1", "id-t2", "twin-mgmt", "twin-sparklab-spark1-docker", "twin-sparklab-spark2-docker"},
     {"id-s1", "id-s2", "sparklab-mgmt", "sparklab-spark1-docker", "sparklab-spark2-docker"}),
    (LAB, {"id-s1", "id-s2", "sparklab-mgmt", "sparklab-spark1-docker", "sparklab-spark2-docker"},
     {"id-t1", "id-t2", "twin-mgmt", "twin-sparklab-spark1-docker", "twin-sparklab-spark2-docker"}),
], ids=["twin", "default"])
def test_down_removes_only_its_own_labs_objects(monkeypatch, lab_dir, inventory, gone, kept):
    fake = FakeDocker()
    monkeypatch.setattr(sparklab, "docker", fake)
    monkeypatch.setattr(sparklab, "check_docker", lambda: None)
    monkeypatch.setattr(sparklab, "prune_old_images", lambda current: None)
    (lab_dir / "twin").mkdir(parents=True)
    for path in (lab_dir / "known_hosts", lab_dir / "twin" / "known_hosts"):
        path.write_text("keys\n")
    plan = sparklab.load_plan(inventory)

    assert set(itertools.chain(*sparklab.down_selection(plan).values())) == gone
    assert sparklab.cmd_down(plan, SimpleNamespace(keep_volumes=False)) == 0

    left = set(fake.containers) | set(fake.volumes) | fake.networks
    assert not gone & left and kept <= left and {"id-other", "someones", "bridge"} <= left
    assert not (plan.state_dir / "known_hosts").exists()
    other = lab_dir / "known_hosts" if plan.name else lab_dir / "twin" / "known_hosts"
    assert other.read_text() == "keys\n"


def test_down_keeps_volumes_when_asked(monkeypatch, lab_dir):
    fake = FakeDocker()
    monkeypatch.setattr(sparklab, "docker", fake)
    monkeypatch.setattr(sparklab, "check_docker", lambda: None)
    monkeypatch.setattr(sparklab, "prune_old_images", lambda current: None)
    sparklab.cmd_down(sparklab.load_plan(TWIN), SimpleNamespace(keep_volumes=True))
    assert "twin-sparklab-spark1-docker" in fake.volumes and "id-t1" not in fake.containers


def test_inspect_is_keyed_by_node_name(monkeypatch):
    plan = sparklab.load_plan(TWIN)
    seen = []

    def fake(*args, check=True, **kw):
        seen.append(args)
        return SimpleNamespace(returncode=0, stdout=json.dumps([{"Name": "/twin-spark1", "State": {}}]), stderr="")

    monkeypatch.setattr(sparklab, "docker", fake)
    assert list(sparklab.inspect_nodes(plan)) == ["spark1"]
    assert seen == [("container", "inspect", "twin-spark1", "twin-spark2")]


def test_each_lab_writes_its_own_ssh_config(lab_dir):
    lab_dir.mkdir()
    for inventory in (LAB, TWIN):
        sparklab.write_ssh_config(sparklab.load_plan(inventory))
    default, twin = (lab_dir / "ssh_config").read_text(), (lab_dir / "twin" / "ssh_config").read_text()
    assert "HostName 172.30.77.11" in default and f"UserKnownHostsFile {lab_dir / 'known_hosts'}" in default
    assert "HostName 172.30.78.11" in twin and f"UserKnownHostsFile {lab_dir / 'twin' / 'known_hosts'}" in twin
    assert "Host spark1\n" in twin and f"IdentityFile {lab_dir / 'id_ed25519'}" in twin   # one key for both
    assert "172.30.78" not in default


def test_node_commands_go_to_the_labs_container(monkeypatch):
    ran = []
    monkeypatch.setattr(sparklab.subprocess, "run", lambda argv, **kw: ran.append(argv) or SimpleNamespace(returncode=0))
    plan = sparklab.load_plan(TWIN)
    sparklab.cmd_exec(plan, SimpleNamespace(node="spark2", user=None, cmd=["--", "true"]))
    assert ran[-1][-2:] == ["twin-spark2", "true"]


def test_the_catalogue_moves_to_the_labs_network():
    twin = ipaddress.ip_network("172.30.78.0/24")
    text = "'spark_management_network' 172.30.77.0/24 http://172.30.77.1:8765 172.30.77.50/24 192.168.100.10 1172.30.77.5"
    assert labrun.on_this_lab(text, twin) == ("'spark_management_network' 172.30.78.0/24 http://172.30.78.1:8765 "
                                              "172.30.78.50/24 192.168.100.10 1172.30.77.5")
    assert labrun.on_this_lab(text, labrun.CATALOGUE_NETWORK) == text


def test_a_copy_of_the_twin_inventory_keeps_its_split_group_vars(tmp_path):
    hosts = labrun.write_inventory(tmp_path / "inv", source=TWIN / "hosts.yml")
    _, hostvars = labrun.inventory_vars(hosts)
    spark1 = hostvars["spark1"]
    assert (spark1["sparklab_name"], spark1["spark_management_network"]) == ("twin", "172.30.78.0/24")
    assert spark1["spark_model_profile"] == "lab-standin"        # from the lab's own all.yml
    assert spark1["spark_profile_paths"] == [str(REPO / "tests" / "lab" / "profiles")]
    assert "/.lab{{ '/' ~ sparklab_name" in spark1["ansible_ssh_common_args"]

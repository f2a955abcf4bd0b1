"""Run the real playbooks and the lab tool, as a user does, and read what they left."""

from __future__ import annotations

import functools
import hashlib
import http.client
import ipaddress
import json
import os
import re
import shlex
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path


REPO = Path(__file__).resolve().parents[2]
SPARKLAB = REPO / "tests" / "lab" / "sparklab"
sys.path.insert(0, str(SPARKLAB.parent))
import sparklab  # noqa: E402  (tests/lab/sparklab.py: the lab's naming and plan, one source of truth)

# The lab the tests run against: $SPARKLAB_INVENTORY (a lab inventory's directory or hosts.yml),
# else inventories/lab. `lab()` runs the lab tool with the same environment, so both agree.
_inventory = sparklab.inventory_path()
LAB_INVENTORY = _inventory if _inventory.is_file() else _inventory / "hosts.yml"
LAB_INVENTORY_DIR = LAB_INVENTORY.parent


@functools.cache
def lab_plan() -> sparklab.Plan:
    """The lab's plan as the lab tool reads it from LAB_INVENTORY."""
    return sparklab.load_plan(LAB_INVENTORY)


@functools.cache
def service_user() -> str:
    """The account Ray, the engines and the mirror run as on the lab: the cluster's default
    (roles/spark, spark_service_user), as the lab's inventories leave it."""
    import yaml

    return yaml.safe_load((REPO / "roles" / "spark" / "defaults" / "main.yml").read_text())["spark_service_user"]


def container(node: str) -> str:
    """The docker container of a node (spark1 in the default lab, twin-spark1 in the twin)."""
    return lab_plan().node(node).container


def configured_callbacks() -> str:
    """callbacks_enabled as ansible.cfg sets it (the plugin preload): ANSIBLE_CALLBACKS_ENABLED
    replaces that list, so a run that adds a callback through it names these too."""
    import configparser

    config = configparser.ConfigParser(interpolation=None, inline_comment_prefixes=(";",))
    config.read(REPO / "ansible.cfg")
    return config.get("defaults", "callbacks_enabled", fallback="")


def lab_profile_pins() -> dict[str, str]:
    """The lab profile's venv pins by PEP 503 name ({'ray': '2.60.0', ...}): what the venv
    runtime installs (the profile's packages, plus the Ray sparkctl supplies), read through the
    collection so a test never keeps its own copy of a version."""
    collections = str(REPO / "collections")
    if collections not in sys.path:
        sys.path.insert(0, collections)
    from ansible_collections.sparkctl.spark.plugins.plugin_utils import profile

    settings = read_group_vars(LAB_INVENTORY_DIR)["all"]
    loaded = profile.load_profile(settings["spark_model_profile"], settings.get("spark_profile_paths"),
                                  base_dir=str(LAB_INVENTORY_DIR))
    return dict(pep503_pin(spec) for spec in profile.venv_packages(loaded))


def pep503_pin(spec: str) -> tuple[str, str]:
    """'Ray[default]==2.60.0' or pip freeze's 'sparklab_engine==0.2.0' -> (PEP 503 name, version),
    read as the collection reads requirements (module_utils/requirement.py)."""
    collections = str(REPO / "collections")
    if collections not in sys.path:
        sys.path.insert(0, collections)
    from ansible_collections.sparkctl.spark.plugins.module_utils.requirement import split_requirement

    name, specifier = split_requirement(spec)
    return name, specifier[2:] if specifier and specifier.startswith("==") else ""


def management_address(node: str) -> str:
    return lab_plan().node(node).mgmt_ip


def management_network() -> ipaddress.IPv4Network:
    return ipaddress.ip_network(lab_plan().network)


def read_group_vars(inventory_dir: Path, rewrite=None) -> dict[str, dict]:
    """group -> its merged vars from inventory_dir/group_vars, the files found and ordered as
    Ansible finds them (a directory such as the twin's group_vars/all/ included); rewrite(text)
    may change each file's text before it is parsed."""
    import yaml

    merged = {}
    base = Path(inventory_dir) / "group_vars"
    for name in sparklab.vars_names(base):
        merged[name] = {}
        for path in sparklab.vars_files(base, name):
            text = path.read_text()
            merged[name].update(yaml.safe_load(rewrite(text) if rewrite else text) or {})
    return merged


@dataclass
class PlaybookRun:
    rc: int
    output: str
    recap: dict[str, dict[str, int]]

    def changed(self, host: str) -> int:
        return self.recap[host]["changed"]

    def changed_tasks(self, host: str) -> list[str]:
        """Names of the tasks that reported a change on host, in order."""
        return changed_tasks(self.output).get(host, [])


def parse_recap(output: str) -> dict[str, dict[str, int]]:
    """Per-host counters of the PLAY RECAP block."""
    recap: dict[str, dict[str, int]] = {}
    tail = output.rsplit("PLAY RECAP", 1)[-1] if "PLAY RECAP" in output else ""
    for line in tail.splitlines():
        match = re.match(r"^(\S+)\s+:\s+(.*)$", line.strip())
        if match:
            recap[match.group(1)] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", match.group(2))}
    return recap


def changed_tasks(output: str) -> dict[str, list[str]]:
    """Per host, the TASK/RUNNING HANDLER names whose result line says changed."""
    per_host: dict[str, list[str]] = {}
    task = None
    for line in output.splitlines():
        header = re.match(r"^(?:TASK|RUNNING HANDLER) \[(.*)\] \**$", line.strip())
        if header:
            task = header.group(1)
            continue
        result = re.match(r"^changed: \[([^\]\s]+)(?: -> [^\]]+)?\]", line.strip())
        if result and task is not None:
            per_host.setdefault(result.group(1), []).append(task)
    return per_host


def lab(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SPARKLAB), *args], capture_output=True, text=True, check=check, timeout=600)


def node_exec(node: str, *cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return lab("exec", node, "--", *cmd, check=check)


# The API key the serve stage generated, as KEY=value (roles/engine_service).
API_KEY_FILE = "/etc/sparkctl/api-key.env"


def api_key(node: str = "spark1") -> str:
    """The API key, read on the head; it only ever goes into Authorization headers or a client's environment."""
    return node_exec(node, "cat", API_KEY_FILE).stdout.strip().split("=", 1)[1]


def unit_command(node: str, unit: str) -> list[str]:
    """The words of a unit's ExecStart= as systemd has it (its shell quoting undone)."""
    text = node_exec(node, "systemctl", "cat", unit).stdout
    return shlex.split(next(line for line in text.splitlines() if line.startswith("ExecStart=")).split("=", 1)[1])


# The units a node runs the venv runtime from, first found first: the head's engine, a worker's Ray.
# Their command lines name <venv>/bin/python, <venv>/bin/ray or <venv>/bin/vllm (a real vLLM's own
# command; plugin_utils/profile_render.py).
VENV_UNITS = ("sparkctl-engine.service", "sparkctl-vllm-rank.service", "sparkctl-ray-worker.service",
              "sparkctl-ray-head.service")
VENV_IN_UNIT = re.compile(r"(/[^\s'\"=;]+)/bin/(?:python3?|ray|vllm)(?=[\s'\";]|$)", re.M)
# The node's own python3, which runs the rank guard in front of a vllm_ranks engine: not a venv.
NODE_PYTHON_PREFIX = "/usr"
SERVING_VENV = "{serving_venv}"


def venv_of_unit(text: str) -> str:
    """The venv a unit file's ExecStart= runs from ('' when it names none, or more than one; the
    ExecStartPre= checks run the node's own python3)."""
    found = {m.group(1) for line in text.splitlines() if line.startswith("ExecStart=")
             for m in VENV_IN_UNIT.finditer(line)} - {NODE_PYTHON_PREFIX}
    return found.pop() if len(found) == 1 else ""


def serving_venv(node: str = "spark1") -> str:
    """The venv the node serves from, read from its engine unit (the head) or Ray unit (a worker)
    as sparkctl wrote it: its path depends on the run's settings (one venv per lock puts the lock's
    digest in it), so no test keeps a copy of it."""
    # The running unit first: a switch of topology leaves the other topology's unit files behind
    # (stopped and disabled), still naming the venv they last ran from.
    active = [unit for unit in VENV_UNITS
              if node_exec(node, "systemctl", "is-active", "--quiet", unit, check=False).returncode == 0]
    for unit in active + [unit for unit in VENV_UNITS if unit not in active]:
        proc = node_exec(node, "cat", f"/etc/systemd/system/{unit}", check=False)
        venv = venv_of_unit(proc.stdout) if proc.returncode == 0 else ""
        if venv:
            return venv
    raise AssertionError(f"{node}: no sparkctl unit names a venv ({', '.join(VENV_UNITS)})")


# Where roles/engine_venv puts the venvs it creates (spark_engine_venv_path's parent).
VENV_ROOT = "/opt/sparkctl/venvs"


def distribution_version(node: str, venv: str, name: str, check: bool = True) -> str:
    """The version of the distribution `name` installed in venv on node ("" when the venv holds
    none and check is false)."""
    return node_exec(node, f"{venv}/bin/python", "-c", f"import importlib.metadata as m; print(m.version({name!r}))",
                     check=check).stdout.strip()


def standin_version(node: str, venv: str, check: bool = True) -> str:
    """The lab stand-in engine's version installed in venv on node ("" when the venv holds none
    and check is false)."""
    return distribution_version(node, venv, "sparklab-engine", check)


def node_args(node: str, args) -> list[str]:
    """A catalogue step's command line for node, its {serving_venv} placeholder filled (tests/catalogue/README.md)."""
    argv = [str(arg) for arg in args]
    if any(SERVING_VENV in arg for arg in argv):
        venv = serving_venv(node)
        argv = [arg.replace(SERVING_VENV, venv) for arg in argv]
    return argv



def read_report(report_dir: Path) -> dict:
    return json.loads((report_dir / "preflight.json").read_text())


def standin(route: str, body: dict) -> dict:
    """POST to the lab stand-in engine's loopback-only control route (/_standin/<route>), from inside the head,
    on the engine's own port (8001, profile api.engine_port): the API proxy on 8000 wants the key for it."""
    code = ("import json, sys, urllib.request\n"
            f"req = urllib.request.Request('http://127.0.0.1:8001/_standin/{route}', data=sys.argv[1].encode(),"
            " headers={'Content-Type': 'application/json'})\n"
            "print(urllib.request.urlopen(req, timeout=10).read().decode())\n")
    return json.loads(node_exec("spark1", "python3", "-c", code, json.dumps(body)).stdout)


def api_call(host: str, port: int, method: str, path: str, key: str | None = None, body: dict | None = None,
             headers: dict | None = None, timeout: float = 30):
    """(status, headers (an http.client message: names in any case), body bytes) of one request to the
    served API, body sent as JSON and key as a Bearer token. The API proxy's tests, on the lab and against
    real nginx on loopback, ask through it."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    data = None if body is None else json.dumps(body).encode()
    sent = dict(headers or {})
    if data is not None:
        sent["Content-Type"] = "application/json"
    if key:
        sent["Authorization"] = "Bearer " + key
    try:
        conn.request(method, path, body=data, headers=sent)
        response = conn.getresponse()
        return response.status, response.headers, response.read()
    finally:
        conn.close()


def stream_arrivals(host: str, port: int, body: dict, key: str, timeout: float):
    """POST body (a completion request with stream: true) to http://host:port/v1/completions with the API key;
    (the response, for its status and headers; the seconds after sending at which each data chunk but
    [DONE] arrived). The API proxy's tests read the timing: a buffering proxy hands every chunk over at once."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    started = time.monotonic()
    conn.request("POST", "/v1/completions", body=json.dumps(body).encode(),
                 headers={"Content-Type": "application/json", "Authorization": "Bearer " + key})
    response = conn.getresponse()
    arrivals = []
    while True:
        line = response.readline()
        if not line:
            break
        if line.startswith(b"data:") and b"[DONE]" not in line:
            arrivals.append(time.monotonic() - started)
    conn.close()
    return response, arrivals



def served_standin_version(head: str = "spark1") -> str:
    """What the running stand-in engine says it is (its /version on its own port, no key needed), from the head."""
    code = ("import json, urllib.request\n"
            "print(json.load(urllib.request.urlopen('http://127.0.0.1:8001/version', timeout=30))['version'])\n")
    return node_exec(head, "python3", "-c", code).stdout.strip()


def unit_started(node: str, unit: str) -> str:
    """The unit's main process's start (systemd's monotonic timestamp): unchanged while nothing restarted it."""
    return node_exec(node, "systemctl", "show", "-p", "ExecMainStartTimestampMonotonic", "--value", unit).stdout.strip()


class HealthWatch:
    """/health through the API proxy, from the control node, every 0.25 s while a step runs: the
    windows the API was down in (seconds each). Down is an answer other than 200 (the proxy's 502
    while the engine restarts) or a refused or reset connection; a request that timed out on this
    loaded machine says neither, and neither starts nor ends a window (counted in `slow`)."""

    def __init__(self, head: str = "spark1", port: int = 8000):
        self.host, self.port = management_address(head), port
        self.samples: list[tuple[float, bool]] = []
        self.slow = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self):
        while not self._stop.is_set():
            try:
                ok = api_call(self.host, self.port, "GET", "/health", timeout=5)[0] == 200
            except TimeoutError:
                self.slow += 1
                ok = None
            except OSError:
                ok = False
            if ok is not None:
                self.samples.append((time.monotonic(), ok))
            self._stop.wait(0.25)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def down_windows(self) -> list[float]:
        windows, start = [], None
        for t, ok in self.samples:
            if not ok and start is None:
                start = t
            elif ok and start is not None:
                windows.append(t - start)
                start = None
        if start is not None:
            windows.append(self.samples[-1][0] - start)
        return windows

    def summary(self) -> str:
        """The windows as a report table cell ("never" when the API answered throughout)."""
        return (", ".join(f"{w:.1f} s" for w in self.down_windows()) or "never") \
            + (f" ({self.slow} probes timed out)" if self.slow else "")


# -- modified inventories -------------------------------------------------------------------
# A copy of the lab inventory in a temporary directory, changed as a test needs: the bad-input
# catalogue (tests/catalogue/bad_inputs.yml) and the broken-inventory tests write theirs here.

CATALOGUE = REPO / "tests" / "catalogue" / "bad_inputs.yml"
CLUSTER_GROUPS = ("spark_head", "spark_workers")
_PATH_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def set_path(target: dict, path: str, value) -> None:
    """Set target's item at a path like `spark_link[0].address` (keys separated by dots, list
    indexes in brackets); a missing mapping on the way is created."""
    parts = [(key, int(index) if index else None) for key, index in _PATH_PART.findall(path)]
    steps = [key if index is None else index for key, index in parts]
    node = target
    for step, following in zip(steps, steps[1:], strict=False):
        if isinstance(step, str) and (step not in node or node[step] is None):
            node[step] = [] if isinstance(following, int) else {}
        node = node[step]
    node[steps[-1]] = value


def _cluster_hosts(children: dict) -> dict[str, dict]:
    """host -> its vars mapping inside the inventory data (changed in place by the caller)."""
    hosts = {}
    for group in CLUSTER_GROUPS:
        members = (children.get(group) or {}).get("hosts") or {}
        for host in members:
            if members[host] is None:
                members[host] = {}
            hosts.setdefault(host, members[host])
    return hosts


def write_inventory(dest: Path, mutate=None, change: dict | None = None, source: Path = LAB_INVENTORY) -> Path:
    """Copy the lab inventory (hosts.yml + group_vars) into dest, apply `change` and/or call
    `mutate(children)` on the groups under `sparklab`, and return the new hosts.yml.

    change (the catalogue's `produce`): `groups` {group: [hosts]} sets who is in spark_head /
    spark_workers (a host the lab lacks starts with no vars); `host_vars` {host: {path: value}}; `group_vars` {path: value} (into
    group_vars/all.yml); `profile_overrides` (spark_profile_overrides); `profile_files` {name:
    text} written to dest/profiles/, which goes first in spark_profile_paths. Other keys
    (extra_vars, hub) are for whoever runs the playbook. Paths the lab inventory gives relative
    to its own directory (the lab's key, known_hosts, spark_profile_paths) are made absolute."""
    import copy

    import yaml

    change = copy.deepcopy(change or {})
    data = yaml.safe_load(source.read_text())
    children = data["all"]["children"]["sparklab"]["children"]
    group_vars = read_group_vars(source.parent, lambda text: text.replace("{{ inventory_dir }}/../..", str(REPO)))
    all_vars = group_vars.setdefault("all", {})
    all_vars["spark_profile_paths"] = [
        p if os.path.isabs(p) else os.path.normpath(os.path.join(str(source.parent), p))
        for p in all_vars.get("spark_profile_paths") or []
    ]

    if "groups" in change:
        hosts = _cluster_hosts(children)
        for group, members in change["groups"].items():
            # A host the lab does not have starts empty: the entry's host_vars give it its vars
            # (a validation entry only, e.g. a third node on a direct cable; it is never contacted).
            children.setdefault(group, {})["hosts"] = {host: copy.deepcopy(hosts.get(host, {})) for host in members or []}
    for host, changes in (change.get("host_vars") or {}).items():
        hvars = _cluster_hosts(children)[host]
        for path, value in changes.items():
            set_path(hvars, path, value)
    for path, value in (change.get("group_vars") or {}).items():
        set_path(all_vars, path, value)
    if "profile_overrides" in change:
        all_vars["spark_profile_overrides"] = change["profile_overrides"]
    if change.get("profile_files"):
        (dest / "profiles").mkdir(parents=True, exist_ok=True)
        for name, text in change["profile_files"].items():
            (dest / "profiles" / name).write_text(text)
        all_vars["spark_profile_paths"] = ["profiles"] + all_vars["spark_profile_paths"]
    if mutate is not None:
        mutate(children)

    (dest / "group_vars").mkdir(parents=True, exist_ok=True)
    (dest / "hosts.yml").write_text(yaml.safe_dump(data, sort_keys=False))
    for name, gvars in group_vars.items():
        (dest / "group_vars" / f"{name}.yml").write_text(yaml.safe_dump(gvars, sort_keys=False))
    return dest / "hosts.yml"


def inventory_vars(hosts_path: Path, extra_vars: dict | None = None) -> tuple[dict, dict]:
    """(groups, hostvars) as Ansible would build them from a YAML inventory and its
    group_vars/*.yml (all < parent groups < child groups < host vars < extra vars), with
    inventory_dir; enough for the inventory_problems filter, in-process."""
    import yaml

    data = yaml.safe_load(Path(hosts_path).read_text())
    group_vars = read_group_vars(Path(hosts_path).parent)
    groups: dict[str, list[str]] = {}
    host_vars: dict[str, dict] = {}
    member_of: dict[str, list[list[str]]] = {}

    def walk(name, body, chain):
        chain = chain + [name]
        groups.setdefault(name, [])
        for host, hvars in ((body or {}).get("hosts") or {}).items():
            host_vars.setdefault(host, {}).update(hvars or {})
            member_of.setdefault(host, []).append(chain)
            for group in chain:
                if host not in groups.setdefault(group, []):
                    groups[group].append(host)
        for child, child_body in ((body or {}).get("children") or {}).items():
            walk(child, child_body, chain)

    walk("all", data["all"], [])
    hostvars = {}
    for host, hvars in host_vars.items():
        ordered = sorted({(depth, g) for chain in member_of[host] for depth, g in enumerate(chain)})
        merged = {}
        for _depth, group in ordered:
            merged.update(group_vars.get(group, {}))
        hostvars[host] = {**merged, **hvars, **(extra_vars or {}), "inventory_dir": str(Path(hosts_path).parent)}
    return groups, hostvars


# The catalogue's addresses on a management network are the default lab's; on another lab
# (inventories/lab-twin) they move to the same place in that lab's network.
CATALOGUE_NETWORK = ipaddress.ip_network("172.30.77.0/24")
_IPV4 = re.compile(r"(?<![\d.])(\d{1,3}(?:\.\d{1,3}){3})(?![\d.])")


def on_this_lab(text: str, network: ipaddress.IPv4Network | None = None) -> str:
    """text with every address of CATALOGUE_NETWORK moved into the lab's management network."""
    network = network or management_network()
    if network == CATALOGUE_NETWORK or network.prefixlen != CATALOGUE_NETWORK.prefixlen:
        return text

    def move(match: re.Match) -> str:
        try:
            address = ipaddress.ip_address(match.group(1))
        except ValueError:
            return match.group(1)
        if address not in CATALOGUE_NETWORK:
            return match.group(1)
        return str(network.network_address + (int(address) - int(CATALOGUE_NETWORK.network_address)))

    return _IPV4.sub(move, text)


def bad_inputs(path: Path = CATALOGUE) -> list[dict]:
    """The bad-input catalogue's entries (tests/catalogue/README.md), on this lab's network."""
    import yaml

    return yaml.safe_load(on_this_lab(Path(path).read_text()))["entries"]


# -- node state probe ---------------------------------------------------------------------------
# What a refused run must leave as it was, computed on the node: the files sparkctl writes
# (path, type, size, mtime, mode, owner; Python bytecode caches left out: a running engine
# may write them at any time), addresses, MTUs, the sparkctl units' states and the firewall's
# own nftables table (stateless listing).

PROBE_PATHS = ("/etc/sparkctl", "/etc/netplan", "/etc/systemd/system", "/opt/sparkctl", "/srv/sparkctl")
PROBE_SCRIPT = (
    "echo '## files'; "
    f"find {' '.join(PROBE_PATHS)} -xdev \\( -name __pycache__ -prune \\) "
    "-o \\( -type d -printf '%p d %m %u:%g\\n' \\) -o -printf '%p %y %s %T@ %m %u:%g\\n' 2>/dev/null | LC_ALL=C sort; "
    "echo '## addresses'; ip -br addr; "
    "echo '## mtu'; ip -o link | awk '{for (i = 1; i < NF; i++) if ($i == \"mtu\") print $2, $(i + 1)}'; "
    "echo '## units'; systemctl list-units 'sparkctl-*' --all --plain --no-legend --no-pager | awk '{print $1, $2, $3, $4}'; "
    "echo '## unit files'; systemctl list-unit-files 'sparkctl-*' --no-legend --no-pager | awk '{print $1, $2}'; "
    # The firewall's own table, without counters (-s): they move with every packet.
    "echo '## firewall'; (nft -s list table inet sparkctl 2>/dev/null || true) | sha256sum | cut -c1-16"
)


@dataclass(frozen=True)
class NodeState:
    node: str
    files_sha256: str
    addresses: str
    mtu: str
    units: str
    unit_files: str
    firewall: str = ""
    files: tuple[str, ...] = field(default=(), compare=False, repr=False)


def parse_probe(node: str, output: str) -> NodeState:
    sections: dict[str, list[str]] = {}
    current = None
    for line in output.splitlines():
        if line.startswith("## "):
            current = sections.setdefault(line[3:].strip(), [])
        elif current is not None and line.strip():
            current.append(line.rstrip())
    files = tuple(sections.get("files", []))
    return NodeState(
        node=node,
        files_sha256=hashlib.sha256("\n".join(files).encode()).hexdigest(),
        addresses="\n".join(sections.get("addresses", [])),
        mtu="\n".join(sections.get("mtu", [])),
        units="\n".join(sections.get("units", [])),
        unit_files="\n".join(sections.get("unit files", [])),
        firewall="\n".join(sections.get("firewall", [])),
        files=files,
    )


def probe_node(node: str) -> NodeState:
    return parse_probe(node, node_exec(node, "sh", "-c", PROBE_SCRIPT).stdout)


def probe_nodes(nodes) -> dict[str, NodeState]:
    """Every node's state, probed in parallel."""
    from concurrent.futures import ThreadPoolExecutor

    nodes = list(nodes)
    with ThreadPoolExecutor(max_workers=max(1, len(nodes))) as pool:
        return dict(zip(nodes, pool.map(probe_node, nodes), strict=True))


def state_diff(before: dict[str, NodeState], after: dict[str, NodeState], limit: int = 20) -> list[str]:
    """What changed between two probes, one line per difference (empty when equal)."""
    lines = []
    for node in sorted(set(before) | set(after)):
        old, new = before.get(node), after.get(node)
        if old is None or new is None:
            lines.append(f"{node}: probed only {'after' if old is None else 'before'}")
            continue
        if old.files_sha256 != new.files_sha256:
            gone, came = sorted(set(old.files) - set(new.files)), sorted(set(new.files) - set(old.files))
            lines += [f"{node}: - {f}" for f in gone[:limit]] + [f"{node}: + {f}" for f in came[:limit]]
        for name in ("addresses", "mtu", "units", "unit_files", "firewall"):
            if getattr(old, name) != getattr(new, name):
                lines.append(f"{node}: {name} changed:\n  before: {getattr(old, name)!r}\n  after:  {getattr(new, name)!r}")
    return lines


# -- the hub stand-in and result tables -----------------------------------------------------------

HUB_URL = "http://127.0.0.1:8765"


def hub_request(path: str, payload: dict | None = None, node: str = "spark1", check: bool = True) -> dict:
    """GET (payload None) or POST JSON to the hub stand-in's control endpoints, on the head's loopback."""
    code = ("import json, sys, urllib.request, urllib.error\n"
            "data = sys.argv[2].encode() if sys.argv[2] != 'null' else None\n"
            "req = urllib.request.Request(sys.argv[1], data=data, headers={'Content-Type': 'application/json'})\n"
            "try:\n"
            "    print(json.dumps({'status': 200, 'body': json.loads(urllib.request.urlopen(req, timeout=10).read())}))\n"
            "except urllib.error.HTTPError as err:\n"
            "    print(json.dumps({'status': err.code, 'body': err.read().decode()}))\n"
            "except OSError as err:\n"
            "    print(json.dumps({'status': None, 'body': str(err)}))\n")
    proc = node_exec(node, "python3", "-c", code, f"{HUB_URL}{path}", json.dumps(payload), check=check)
    answer = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.stdout.strip() else {"status": None, "body": proc.stderr}
    if check and answer["status"] != 200:
        raise RuntimeError(f"hub stand-in {path}: {answer}")
    return answer


def format_table(headers: list[str], rows: list[dict]) -> str:
    """A plain-text table, one row per dict (missing cells shown as '-')."""
    cells = [[str(row.get(h, "-")) for h in headers] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    line = lambda values: " | ".join(v.ljust(w) for v, w in zip(values, widths, strict=True)).rstrip()  # noqa: E731
    return "\n".join([line(headers), "-+-".join("-" * w for w in widths)] + [line(r) for r in cells])


# -- fault batches ------------------------------------------------------------------------------
# Faults that share a `batch` in tests/catalogue/faults.yml are broken together and repaired by
# ONE re-run (the union of their tags), then one quiet run; each keeps its own verdict. A change
# the repair run made is explained when some fault of the batch allows it: its owner role (any
# role when it names none) on its own nodes (any node when it is not drifted_only). The rule
# batch_problems enforces keeps that as strict as repairing each fault alone: in a batch of
# several, every fault names its owner, and two faults may share an owner only when both are
# drifted_only and broke different nodes.


def fault_nodes(fault: dict) -> set[str]:
    return {step["node"] for step in fault.get("break") or [] if "node" in step}


def fault_batches(faults: list[dict]) -> list[tuple[str, list[dict]]]:
    """(batch name, its faults) in the order each batch first appears; a fault without
    `batch` is a batch of its own, named by its id."""
    batches: dict[str, list[dict]] = {}
    for fault in faults:
        batches.setdefault(fault.get("batch") or fault["id"], []).append(fault)
    return list(batches.items())


def batch_problems(faults: list[dict]) -> list[str]:
    """Why some batch of the catalogue would weaken a fault's own checks (empty when sound)."""
    problems = []
    for name, members in fault_batches(faults):
        if len(members) < 2:
            continue
        ids = ", ".join(f["id"] for f in members)
        if len({f.get("requires") for f in members}) > 1:
            problems.append(f"batch {name} ({ids}): its faults need different lab preconditions (requires)")
        if len({json.dumps(f.get("extra_vars") or {}, sort_keys=True) for f in members}) > 1:
            problems.append(f"batch {name} ({ids}): its faults re-run with different extra_vars")
        for fault in members:
            if not fault.get("owner"):
                problems.append(f"batch {name}: {fault['id']} names no owner role, so it would explain any change; "
                                "give it a batch of its own")
        for index, first in enumerate(members):
            for second in members[index + 1:]:
                if not first.get("owner") or first.get("owner") != second.get("owner"):
                    continue
                if not (first.get("drifted_only") and second.get("drifted_only")) \
                        or fault_nodes(first) & fault_nodes(second):
                    problems.append(f"batch {name}: {first['id']} and {second['id']} share the owner {first['owner']} "
                                    "without being drifted_only on different nodes")
    return problems


def batch_tags(members: list[dict]) -> str:
    """The union of the batch's tags, in first-seen order, as --tags takes it."""
    tags: list[str] = []
    for fault in members:
        for tag in str(fault["tags"]).split(","):
            if tag.strip() and tag.strip() not in tags:
                tags.append(tag.strip())
    return ",".join(tags)


def unexplained_changes(changed: dict[str, list[str]], members: list[dict]) -> dict[str, list[str]]:
    """host -> the changed task names ("role : task") no fault of the batch explains."""
    unexplained = {}
    for host, tasks in changed.items():
        allowed = [f for f in members if not f.get("drifted_only") or host in fault_nodes(f)]
        wrong = [task for task in tasks
                 if not any(not f.get("owner") or task.startswith(f"{f['owner']} : ") for f in allowed)]
        if wrong:
            unexplained[host] = wrong
    return unexplained


# --- the kernel and JIT caches (docs/jit-cache.md) and the stand-in's compile step -----------------------
JIT_CACHE_ROOT = "/var/cache/sparkctl/jit"
JIT_KERNEL = "flashinfer/.cache/flashinfer/sparklab/fused_moe_standin.so"
JIT_ENGINE_UNIT = "sparkctl-engine.service"
_JIT_LINE = re.compile(r"^(?P<prefix>\((?:RayWorkerWrapper|VllmWorker) [^)]*\) )?"
                       r"\S+ [\d-]+ [\d:]+ \[sparklab_engine\] JIT cache (?P<state>\w+):")


VLLM_RANK_UNIT = "sparkctl-vllm-rank.service"


def jit_engine_log(head: str = "spark1", unit: str = JIT_ENGINE_UNIT) -> list[str]:
    """The node's engine unit's log (the head's API unit by default) since its current start."""
    invocation = node_exec(head, "systemctl", "show", "--property=InvocationID", "--value", unit).stdout.strip()
    assert invocation, f"{head}: {unit} is not running"
    return node_exec(head, "journalctl", "--no-pager", "-o", "cat", f"_SYSTEMD_INVOCATION_ID={invocation}").stdout.splitlines()


def jit_boots(head: str = "spark1", worker: str = "spark2") -> dict[str, str]:
    """The current boot's compile state per node (warm, cold, none): rank 0 is the head's; the worker's
    is its RayWorkerWrapper rank's in the head's log (Ray), or its own rank unit's (vllm_ranks)."""
    states = {}
    for line in jit_engine_log(head):
        match = _JIT_LINE.match(line)
        if match:
            states[worker if match["prefix"] else head] = match["state"]
    if node_exec(worker, "systemctl", "is-active", "--quiet", VLLM_RANK_UNIT, check=False).returncode == 0:
        for line in jit_engine_log(worker, VLLM_RANK_UNIT):
            match = _JIT_LINE.match(line)
            if match:
                states[worker] = match["state"]
    return states


def jit_kernel(node: str) -> tuple[str, str]:
    """(sha256, mtime) of the node's cached stand-in kernel, ('', '') when there is none."""
    path = f"{JIT_CACHE_ROOT}/current/{JIT_KERNEL}"
    out = node_exec(node, "sh", "-c", f"[ -f {path} ] && sha256sum {path} | cut -c1-64 && stat -c %Y {path}", check=False).stdout.split()
    return (out[0], out[1]) if len(out) == 2 else ("", "")


def jit_identity(node: str) -> str:
    """The runtime directory the node's cache link points at."""
    return node_exec(node, "readlink", f"{JIT_CACHE_ROOT}/current").stdout.strip()

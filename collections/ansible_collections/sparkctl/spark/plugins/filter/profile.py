# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Model profiles for playbooks: load one (user directories first), render the engine's
argv, environment and systemd units, and derive the checkpoint and memory variables the
other stages read."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.sparkctl.spark.plugins.module_utils.link_address import primary_address
from ansible_collections.sparkctl.spark.plugins.module_utils.units import unit_groups as _unit_groups, unit_stem
from ansible_collections.sparkctl.spark.plugins.plugin_utils import profile as profiles

DOCUMENTATION = r"""
name: profile_load
short_description: Load a sparkctl model profile and merge the inventory's overrides
version_added: 0.1.0
description:
  - Finds C(<name>.yml) in the user's profile directories (C(spark_profile_paths), relative ones resolved against
    O(base_dir), normally C(inventory_dir)) and then in the collection's C(profiles/) directory; the first match wins.
  - Follows C(extends:) (a profile may state only what differs from another), then deep-merges O(overrides)
    (C(spark_profile_overrides)); mappings merge key by key, lists and scalars replace, C(null) removes a key.
  - Fails naming the profile and the fix when the file is missing or not YAML. Schema and trap problems are not raised
    here; C(sparkctl.spark.inventory_problems) lists them (the validation play runs it before any host is touched),
    and C(profile_render) refuses a profile that has any.
  - Companion filters in this file, documented in RETURN, are C(profile_render) (input a loaded profile, argument
    C(cluster); returns argv, env, units, secret_files),
    C(profile_checkpoint) (a loaded profile to the C(spark_checkpoint) mapping), C(profile_node_memory_bytes)
    (weights per rank + KV pool + overhead), C(profile_engine_port) (the engine's port behind the API proxy),
    C(profile_venv_packages) (a loaded profile to the pins its venv runtime installs, namely C(runtime.venv.packages) plus
    the Ray sparkctl supports when the topology runs on Ray and the profile pins no ray itself),
    C(profile_venv_digest) (a loaded profile to the digest of what its venv is built from, the Python, the pins,
    the indexes, the wheel directories and the plugin, which C(spark_engine_venv_per_lock) puts in the venv's path),
    C(profile_units) (a loaded profile to the names of sparkctl's systemd units, C(spark_units)),
    C(unit_container) (a unit's name to the docker container an image runtime runs it in, named like the unit),
    C(profile_topology_ports) (a loaded profile to every topology port, its C(topology.<key>) or sparkctl's default, namely
    C(ray_port), C(ray_metrics_port), C(dist_init_port), C(rank0_port), C(master_port), C(guard_port), which is
    C(spark_topology_ports)),
    C(unit_groups) (any input; the engine's units of every topology, API first, and Ray's, workers first, as
    C(engine) and C(ray), which is C(spark_unit_groups)),
    C(profile_serving) (the inventory's groups and a loaded profile to the serving set C(spark_serving), in which the
    head and the first C(topology.nodes - 1) workers in inventory order serve and the other workers idle),
    C(profile_cluster) (groups, hostvars and the cluster-wide settings to the cluster C(profile_render) takes; only the
    serving set's workers).
options:
  _input:
    description: The profile name, e.g. C(solar-open2-nvfp4-vllm-venv) (the file name without C(.yml)).
    type: str
    required: true
  paths:
    description: User profile directories, searched before the collection's.
    type: list
    elements: path
    default: []
  overrides:
    description: Deep-merged over the profile (C(spark_profile_overrides)).
    type: dict
    default: {}
  base_dir:
    description: Directory relative O(paths) are resolved against (the inventory directory).
    type: path
    default: ""
"""

EXAMPLES = r"""
- name: Resolve the profile the inventory picked
  ansible.builtin.set_fact:
    spark_profile_resolved: >-
      {{ spark_model_profile | sparkctl.spark.profile_load(spark_profile_paths, spark_profile_overrides, inventory_dir) }}

- name: Render the engine's units
  ansible.builtin.set_fact:
    engine_rendered: >-
      {{ spark_profile_resolved | sparkctl.spark.profile_render({
           'head': {'name': 'spark1', 'link_ip': '192.168.100.10'},
           'workers': [{'name': 'spark2', 'link_ip': '192.168.100.11'}],
           'service_user': 'spark', 'checkpoint_dir': '/srv/sparkctl/models/solar-open2-250b-nvfp4',
           'venv_path': '/opt/sparkctl/venv', 'api_key_file': '/etc/sparkctl/api-key.env'}) }}
"""

RETURN = r"""
_value:
  description:
    - C(profile_load) returns the resolved profile (a mapping with C(name), C(_sources), C(_dir) and the schema's
      sections).
    - C(profile_render) returns C(argv) (list, the head's engine process), C(command_line) (the same, shell-quoted),
      C(env) (the engine's own variables; the fabric environment stays in C(/etc/sparkctl/fabric.env)), C(units)
      (host name to unit file name to text), C(secret_files) (path to C(format), C(key), C(mode) for the API key),
      C(inputs) (host name to unit file name to the files it reads at start besides its EnvironmentFile= ones)
      and C(api) (C(proxy), C(public) and C(engine) C({bind, port}); behind the API proxy, the cluster's
      C(api_proxy), default true, the engine listens on C(127.0.0.1:api.engine_port)).
    - C(profile_checkpoint) returns the C(spark_checkpoint) mapping with C(source=hub), C(repo_id), C(revision) and C(allow_patterns).
    - C(profile_node_memory_bytes) and C(profile_engine_port) return an integer.
    - C(profile_venv_packages) returns a list of pinned requirement strings.
    - C(profile_venv_digest) returns C(sha256:<hex>).
    - C(profile_units) returns a mapping of role to unit name, the one definition of sparkctl's unit names
      (C(ray_head), C(ray_worker), C(engine), C(sglang_rank), C(sglang_router), C(api_proxy), C(firewall),
      C(firewall_revert), C(rsyncd_socket), C(rsyncd)) plus, for this profile, C(api) (the unit serving the API)
      and C(startup) (the unit whose log holds the engine's startup lines).
    - C(unit_container) returns a string, e.g. C(sparkctl-ray-head) for C(sparkctl-ray-head.service).
    - C(profile_serving) returns C(nodes) (the profile's C(topology.nodes)), C(serving) (the head, then the first
      workers in inventory order) and C(idle) (the other workers, in inventory order).
    - C(profile_cluster) returns C(head) and C(workers) (each C(name), C(link_ip), C(interface); the workers of the
      serving set only), C(service_user), C(checkpoint_dir), C(api_key_file), C(api_proxy) and C(venv_path) or C(image).
  type: raw
"""


def profile_load(name, paths=None, overrides=None, base_dir=""):
    try:
        return profiles.load_profile(name, list(paths or []), dict(overrides or {}), base_dir or None)
    except profiles.ProfileError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def profile_render(profile, cluster):
    problems = profiles.profile_problems(profile)
    if problems:
        raise AnsibleFilterError("; ".join(problems))
    try:
        return profiles.render(profile, cluster)
    except profiles.ProfileError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def profile_checkpoint(profile):
    ckpt = profile.get("checkpoint") or {}
    return {"source": "hub", "repo_id": ckpt.get("repo_id"), "revision": ckpt.get("revision"), "allow_patterns": []}


def profile_engine_port(profile):
    """Where the engine listens on loopback behind the API proxy (api.engine_port, default api.port + 1)."""
    try:
        return profiles.engine_port(profile)
    except (KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"profile_engine_port: the profile has no usable api.port ({exc})") from exc


def profile_venv_packages(profile):
    """The pins the venv runtime installs (runtime.venv.packages, plus a pinned Ray for a Ray topology)."""
    return profiles.venv_packages(profile)


def profile_venv_digest(profile):
    """sha256:<hex> of what the venv runtime is built from (spark_engine_venv_per_lock)."""
    return profiles.venv_digest(profile)


def profile_units(profile):
    """spark_units: every sparkctl unit's name, with the API's and the startup log's for this profile."""
    try:
        return profiles.unit_names(profile)
    except (KeyError, TypeError) as exc:
        raise AnsibleFilterError(f"profile_units: the profile has no usable topology.kind ({exc})") from exc


def profile_topology_ports(profile):
    """spark_topology_ports: every topology port of the profile, set or sparkctl's default (one table of them)."""
    try:
        return {key: profiles.topology_port(profile, key) for key in profiles.TOPOLOGY_PORTS}
    except (KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"profile_topology_ports: the profile has no usable topology ({exc})") from exc


def unit_groups(_ignored=None):
    """spark_unit_groups: the engine's units of every topology and Ray's, in the order a stop takes them."""
    return _unit_groups()


def unit_container(unit):
    """The docker container an image runtime's unit runs its process in: the renderer names it like the unit."""
    return unit_stem(unit)


def profile_node_memory_bytes(profile):
    need = profiles.node_memory_bytes(profile)
    return need["weights"] + need["kv_pool"] + need["overhead"]


def profile_serving(groups, profile):
    """spark_serving: {nodes, serving, idle}. The head and the first topology.nodes - 1 workers
    in inventory order serve the profile; the other workers are idle (plugin_utils/profile_render.py,
    serving_split, the one place this is decided)."""
    head = (groups.get("spark_head") or [None])[0]
    if head is None:
        raise AnsibleFilterError("profile_serving: the inventory has no spark_head host")
    try:
        return profiles.serving_split(head, list(groups.get("spark_workers") or []), profile or {})
    except profiles.ProfileError as exc:
        raise AnsibleFilterError(f"'spark_model_profile': {exc}") from exc


def profile_cluster(groups, hostvars, service_user, checkpoint_dir, api_key_file, profile=None, venv_path=None,
                    api_proxy=True, serving=None):
    """The cluster description profile_render takes: head and workers with their first cable
    half's address, the service user, the checkpoint path, the API key file, the runtime's
    venv path or image reference (from the profile's runtime), and whether the API proxy
    fronts the engine (spark_api_proxy: the engine then listens on loopback only).

    Workers are the serving set's (`serving`, spark_serving.serving; without it, worked out from
    the profile's topology.nodes by the same function): an idle node gets no engine or Ray unit."""
    head = (groups.get("spark_head") or [None])[0]
    if head is None:
        raise AnsibleFilterError("profile_cluster: the inventory has no spark_head host")
    if serving is None:
        serving = profile_serving(groups, profile)["serving"] if (profile or {}).get("topology") else None

    def node(host):
        links = (hostvars.get(host) or {}).get("spark_link") or []
        if not links:
            raise AnsibleFilterError("profile_cluster: %s has no spark_link" % host)
        # The interface lets the Ray units wait for the cable half before binding to it.
        try:
            link_ip = primary_address(links)
        except ValueError as exc:
            raise AnsibleFilterError("profile_cluster: %s: %s" % (host, exc)) from exc
        return {"name": host, "link_ip": link_ip, "interface": links[0]["interface"]}

    cluster = {
        "head": node(head),
        "workers": [node(w) for w in groups.get("spark_workers") or []
                    if w != head and (serving is None or w in serving)],
        "service_user": service_user,
        "checkpoint_dir": checkpoint_dir,
        "api_key_file": api_key_file,
        "api_proxy": _truthy(api_proxy),
    }
    runtime = (profile or {}).get("runtime") or {}
    if runtime.get("kind") == "venv":
        cluster["venv_path"] = venv_path
    elif runtime.get("kind") == "image":
        image = runtime.get("image") or {}
        build = image.get("build") or {}
        cluster["image"] = build.get("tag") or image.get("pull") or image.get("tag") or image.get("load")
    return cluster


def _truthy(value):
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


class FilterModule:
    def filters(self):
        return {
            "profile_load": profile_load,
            "profile_render": profile_render,
            "profile_checkpoint": profile_checkpoint,
            "profile_node_memory_bytes": profile_node_memory_bytes,
            "profile_engine_port": profile_engine_port,
            "profile_venv_packages": profile_venv_packages,
            "profile_venv_digest": profile_venv_digest,
            "profile_cluster": profile_cluster,
            "profile_serving": profile_serving,
            "profile_units": profile_units,
            "unit_container": unit_container,
            "unit_groups": unit_groups,
            "profile_topology_ports": profile_topology_ports,
        }

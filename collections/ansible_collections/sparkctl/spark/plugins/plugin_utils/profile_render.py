# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Model profiles, rendering: a validated profile and the cluster description become the
engine's argv, its environment, the systemd units of every node and the API key files, plus
the digests the deployment record keeps. Pure: no host is contacted."""

from __future__ import annotations

import os
import re
import shlex

from ansible_collections.sparkctl.spark.plugins.module_utils import engine_gate, firewall, jit_cache, rank_guard
from ansible_collections.sparkctl.spark.plugins.module_utils.deployment import content_digest
from ansible_collections.sparkctl.spark.plugins.module_utils.link_address import bare_address
from ansible_collections.sparkctl.spark.plugins.module_utils.sysfs_net import RDMA_DEVICE_DIR
from ansible_collections.sparkctl.spark.plugins.module_utils.units import UNITS, unit_stem
from ansible_collections.sparkctl.spark.plugins.module_utils.venv_plugin import change_marker
from ansible_collections.sparkctl.spark.plugins.plugin_utils.profile_engine import (
    _PLACEHOLDER_RE, _engine_env, _flag, _value, engine_list_flags,
)
from ansible_collections.sparkctl.spark.plugins.plugin_utils.profile_load import ProfileError
from ansible_collections.sparkctl.spark.plugins.plugin_utils.profile_schema import TOPOLOGY_PORTS

# Behind the API proxy the engine listens here only; the proxy holds api.bind:api.port.
ENGINE_BIND_BEHIND_PROXY = "127.0.0.1"


def list_argv(key, values, engine):
    """A list-valued option as the engine's parser takes it: nargs is ONE occurrence followed by
    every value (a second occurrence would replace the first), append is the flag per value."""
    values = [_value(v) for v in values]
    if not values:
        return []
    if engine_list_flags(engine).get(key) == "append":
        return [word for v in values for word in (_flag(key), v)]
    return [_flag(key)] + values


def args_argv(args, engine):
    """engine.args -> argv: true is a bare flag, false is omitted, a list follows the flag's
    definition in engine_flags/<engine>.yml, a mapping is passed as compact JSON."""
    argv = []
    for key, value in args.items():
        if value is True:
            argv.append(_flag(key))
        elif value is False or value is None:
            continue
        elif isinstance(value, list):
            argv += list_argv(key, value, engine)
        else:
            argv += [_flag(key), _value(value)]
    return argv


def _default_command(engine, runtime):
    if engine == "vllm":
        return ["{venv}/bin/vllm", "serve", "{model_dir}"] if runtime == "venv" else ["vllm", "serve", "{model_dir}"]
    python = "{venv}/bin/python" if runtime == "venv" else "python3"
    return [python, "-m", "sglang.launch_server", "--model-path", "{model_dir}"]


def serving_split(head, workers, profile):
    """The serving set: which nodes run the profile's engine and Ray, the head and then the
    first workers in inventory order, topology.nodes in all; the other workers are idle (they
    keep the provisioned link, firewall, runtime and checkpoint, no engine or Ray unit). The one
    place this is decided: the spark role's spark_serving and the renderer's cluster read it.

    {nodes, serving: [head, ...], idle: [...]}; ProfileError when the inventory has fewer nodes
    than the profile needs (the validation play refuses that earlier, with the same fix)."""
    topo = profile.get("topology") or {}
    nodes = topo.get("nodes") or 1
    workers = [w for w in workers if w != head]
    if nodes > 1 + len(workers):
        raise ProfileError(
            f"profile {profile.get('name', '?')} runs on {nodes} nodes (topology.nodes) but the inventory has "
            f"{1 + len(workers)} (spark_head + spark_workers): add workers, or pick a profile for "
            f"{1 + len(workers)} node(s).")
    return {"nodes": nodes, "serving": [head] + workers[:nodes - 1], "idle": workers[nodes - 1:]}


def _fill(words, values):
    return [_PLACEHOLDER_RE.sub(lambda m: str(values[m.group(1)]), w) for w in words]


def _require_cluster(cluster, runtime):
    missing = [k for k in ("head", "workers", "service_user", "checkpoint_dir", "api_key_file") if not cluster.get(k)]
    if runtime == "venv" and not cluster.get("venv_path"):
        missing.append("venv_path")
    if runtime == "image" and not cluster.get("image"):
        missing.append("image")
    if missing:
        raise ProfileError(f"render: the cluster description lacks {', '.join(missing)}.")


def engine_port(profile):
    """The port the engine listens on behind the API proxy: api.engine_port, else api.port + 1."""
    api = profile.get("api") or {}
    return int(api.get("engine_port") or int(api["port"]) + 1)


def api_endpoints(profile, cluster):
    """Who listens where. `public` is what users reach (api.bind:api.port); `engine` is where the
    engine's HTTP server (vLLM's API server, SGLang's router) binds: the same address without the
    API proxy, 127.0.0.1:api.engine_port behind it (cluster['api_proxy'], default true)."""
    api = profile["api"]
    public = {"bind": str(api.get("bind", "0.0.0.0")), "port": int(api["port"])}
    proxy = bool(cluster.get("api_proxy", True))
    engine = {"bind": ENGINE_BIND_BEHIND_PROXY, "port": engine_port(profile)} if proxy else dict(public)
    return {"proxy": proxy, "public": public, "engine": engine}


def engine_takes_key(profile, cluster):
    """Whether the engine process is given the API key. vLLM always is (VLLM_API_KEY, from its
    environment file). SGLang logs its parsed server arguments at every start, the key among
    them, whichever way the key came: sglang/srt/entrypoints/engine.py logs
    f"{server_args=}" (0.5.4: the dataclass's repr, `api_key='...'`; later 0.5 releases a dict,
    `'api_key': '...'`), and --config's YAML is merged into argv before parsing
    (server_args_config_parser.py), so the journal would hold a key given to it. Behind the API
    proxy SGLang's router and rank 0 listen on loopback only and nginx requires the key on every
    route but /health, so SGLang is given none; without the proxy SGLang's own check is the only
    one, so it takes the key from its --config file (and logs it: sparkctl scrubs what it shows)."""
    if profile["engine"]["kind"] == "vllm":
        return True
    return not api_endpoints(profile, cluster)["proxy"]


def topology_port(profile, key):
    """topology.<key>, else its default (profile_schema.TOPOLOGY_PORTS, the one table of them)."""
    return int(profile["topology"].get(key, TOPOLOGY_PORTS[key]))


def engine_argv(profile, cluster, node_rank=0):
    """The argv of the engine process on node `node_rank` (0 = head)."""
    engine = profile["engine"]["kind"]
    runtime = profile["runtime"]["kind"]
    topo = profile["topology"]
    api = profile["api"]
    parsers = profile.get("parsers") or {}
    # {bind} and {port} are where this process listens: behind the API proxy, loopback only.
    listen = api_endpoints(profile, cluster)["engine"]
    values = {
        "venv": cluster.get("venv_path", ""),
        "model_dir": cluster["checkpoint_dir"],
        "served_model_name": api["served_model_name"],
        "port": listen["port"],
        "bind": listen["bind"],
    }
    argv = _fill(profile["engine"].get("command") or _default_command(engine, runtime), values)
    head_ip = bare_address(cluster["head"]["link_ip"])
    if engine == "vllm":
        argv += ["--served-model-name", api["served_model_name"], "--host", listen["bind"], "--port", str(listen["port"])]
        backend = "mp" if topo["kind"] == "vllm_ranks" else "ray"
        argv += ["--distributed-executor-backend", backend, "--tensor-parallel-size", str(topo["tensor_parallel"])]
        if topo.get("pipeline_parallel", 1) > 1:
            # Pipeline stages across nodes: tensor_parallel x pipeline_parallel ranks, one per node.
            argv += ["--pipeline-parallel-size", str(topo["pipeline_parallel"])]
        if topo["kind"] == "ray_tp_ep" or topo["kind"] == "vllm_ranks" and topo.get("expert_parallel", 1) > 1:
            argv.append("--enable-expert-parallel")
        if topo["kind"] == "vllm_ranks":
            # vLLM's own multi-node launch: every node runs `vllm serve` with the same model and
            # sizes; node 0 serves the API, the others are --headless ranks meeting at the head's
            # torch.distributed store (master_addr:master_port), over the cable.
            argv += ["--nnodes", str(topo["nodes"]), "--node-rank", str(node_rank),
                     "--master-addr", head_ip, "--master-port", str(topology_port(profile, "master_port"))]
            if node_rank > 0:
                argv.append("--headless")
        argv += args_argv(profile["engine"].get("args") or {}, engine)
        if parsers.get("auto_tool_choice"):
            argv.append("--enable-auto-tool-choice")
        if parsers.get("tool_call"):
            argv += ["--tool-call-parser", parsers["tool_call"]]
        if parsers.get("reasoning"):
            argv += ["--reasoning-parser", parsers["reasoning"]]
        argv += list_argv("logits_processors", parsers.get("logits_processors") or [], engine)
        return argv
    # SGLang: every node runs one rank of the same command; rank 0 serves HTTP on
    # loopback behind the router, and reads the API key from a --config file only when
    # no API proxy holds it (engine_takes_key).
    argv += ["--served-model-name", api["served_model_name"], "--tp-size", str(topo["tensor_parallel"])]
    if topo.get("expert_parallel", 1) > 1:
        argv += ["--ep-size", str(topo["expert_parallel"])]
    argv += ["--nnodes", str(topo["nodes"]), "--node-rank", str(node_rank),
             "--dist-init-addr", f"{head_ip}:{topology_port(profile, 'dist_init_port')}"]
    if node_rank == 0:
        argv += ["--host", "127.0.0.1", "--port", str(topology_port(profile, "rank0_port"))]
        if engine_takes_key(profile, cluster):
            argv += ["--config", cluster["api_key_file"]]
    argv += args_argv(profile["engine"].get("args") or {}, engine)
    if parsers.get("tool_call"):
        argv += ["--tool-call-parser", parsers["tool_call"]]
    if parsers.get("reasoning"):
        argv += ["--reasoning-parser", parsers["reasoning"]]
    return argv


def router_argv(profile, cluster):
    """SGLang's router on the head: the API in front of rank 0 (itself behind the API proxy,
    on loopback, unless the proxy is off)."""
    runtime = profile["runtime"]["kind"]
    python = f"{cluster['venv_path']}/bin/python" if runtime == "venv" else "python3"
    rank0 = f"http://127.0.0.1:{topology_port(profile, 'rank0_port')}"
    listen = api_endpoints(profile, cluster)["engine"]
    return [python, "-m", "sglang_router.launch_router", "--worker-urls", rank0,
            "--host", listen["bind"], "--port", str(listen["port"])]


def ray_argv(profile, cluster, node):
    """`ray start` for the head (node is None) or a worker, every port on the link address."""
    runtime = profile["runtime"]["kind"]
    ray = f"{cluster['venv_path']}/bin/ray" if runtime == "venv" else "ray"
    head_ip = bare_address(cluster["head"]["link_ip"])
    port = topology_port(profile, "ray_port")
    # The metrics agent's port is fixed so Prometheus (the observe stage) knows where to scrape;
    # like Ray's other ports it listens on every address and the firewall keeps it off the
    # management network but for the Prometheus host.
    metrics_port = topology_port(profile, "ray_metrics_port")
    common = ["--block", "--disable-usage-stats", "--num-gpus=1", "--min-worker-port=10002", "--max-worker-port=19999",
              f"--metrics-export-port={metrics_port}"]
    if node is None:
        return [ray, "start", "--head", f"--node-ip-address={head_ip}", f"--port={port}",
                # Whoever reaches the dashboard/Jobs API runs code: loopback only.
                "--dashboard-host=127.0.0.1", "--dashboard-port=8265", "--ray-client-server-port=10001"] + common
    return [ray, "start", f"--address={head_ip}:{port}", f"--node-ip-address={bare_address(node['link_ip'])}"] + common


def environment(profile):
    """The engine's own environment (profile engine.env). The fabric environment (NCCL, Gloo,
    UCX, Ray, *_HOST_IP, MAX_JOBS, PATH, LD_PRELOAD) lives in /etc/sparkctl/fabric.env, which
    every sparkctl-* unit reads first, so it is not repeated here.

    The kernel and JIT cache variables come first (module_utils/jit_cache.py: each under the
    node's per-runtime cache directory, docs/jit-cache.md); the profile's own env may override one."""
    env = dict(jit_cache.cache_environment())
    for key, value in _engine_env(profile).items():
        if value is not None:
            env[key] = str(value)
    return env


def secret_files(profile, cluster):
    """How the API key reaches the engine without appearing on argv (`ps`). The file is written
    whether or not the engine reads it (engine_takes_key): the API proxy, the probes and
    Prometheus read the key from it."""
    if profile["engine"]["kind"] == "vllm":
        # vLLM reads VLLM_API_KEY when --api-key is absent (docs: OpenAI-compatible server).
        return {cluster["api_key_file"]: {"format": "env", "key": "VLLM_API_KEY", "mode": "0600"}}
    # SGLang reads server arguments from a YAML file given with --config (without the API proxy).
    return {cluster["api_key_file"]: {"format": "yaml", "key": "api-key", "mode": "0600"}}


def systemd_quote(word):
    """One ExecStart word: '%' and '$' escaped for systemd, quoted when it holds whitespace or quotes."""
    word = str(word).replace("%", "%%").replace("$", "$$")
    if word and not re.search(r"[\s\"'\\;]", word):
        return word
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _exec(argv):
    return " ".join(systemd_quote(w) for w in argv)


def _docker_run(profile, cluster, container, argv, env_files):
    # Unlimited locked memory for RDMA registrations, unless the profile caps it (runtime.image.memlock_bytes:
    # for a host whose root cannot grant unlimited, such as the lab's machine).
    memlock = ((profile.get("runtime") or {}).get("image") or {}).get("memlock_bytes") or -1
    # NCCL's IB transport (RoCE on the cable) opens the RDMA character devices, which a container
    # gets only when given (docs/field-notes.md, "NCCL and the direct cable").
    run = ["/usr/bin/docker", "run", "--rm", "--name", container, "--network", "host", "--ipc", "host",
           "--gpus", "all", "--device", RDMA_DEVICE_DIR, "--ulimit", f"memlock={memlock}", "--ulimit", "stack=67108864"]
    for env_file in env_files:
        run += ["--env-file", env_file]
    if profile.get("cpu_affinity"):
        run += ["--cpuset-cpus", profile["cpu_affinity"]]
    ckpt = cluster["checkpoint_dir"]
    run += ["-v", f"{ckpt}:{ckpt}:ro"]
    # engine.env's cache variables name host paths under the cache root (its `current` link is
    # relative, so it resolves inside the container too): the container sees them in place.
    run += ["-v", f"{jit_cache.BASE_DIR}:{jit_cache.BASE_DIR}"]
    preload = ((profile.get("nccl") or {}).get("preload") or {}).get("path")
    if preload:
        # fabric.env's LD_PRELOAD names a host path: the container sees it at the same place.
        lib_dir = os.path.dirname(preload)
        run += ["-v", f"{lib_dir}:{lib_dir}:ro"]
    run.append(cluster["image"])
    return run + argv


# networkd's waiter (systemd package; /lib is /usr/lib on DGX OS and Debian 12).
NETWORKD_WAIT_ONLINE = "/usr/lib/systemd/systemd-networkd-wait-online"


def link_wait_argv(argv, interface, path_dirs=()):
    """argv behind a /bin/sh that waits until the cable half is routable (networkd) and puts
    path_dirs first on PATH, then execs argv unchanged ("$0" "$@": no re-quoting).

    The wait lives in ExecStart, not ExecStartPre: a Type=simple unit is "started" at once,
    so a node booting without its peer (no carrier) does not stall boot or burn the start
    limit; it logs once a minute until the peer is back. PATH is prepended here because
    fabric.env (an EnvironmentFile, which beats Environment=) spells PATH out without the
    venv, and the processes Ray starts need the venv's ninja besides nvcc."""
    script = ""
    if interface:
        script += (f"until {NETWORKD_WAIT_ONLINE} --interface={interface}:routable --timeout=60; do "
                   f"echo \"sparkctl: waiting for {interface} to be routable\" >&2; sleep 5; done; ")
    if path_dirs:
        script += f"PATH={':'.join(path_dirs)}:$PATH; export PATH; "
    if not script:
        return list(argv)
    return ["/bin/sh", "-c", script + 'exec "$0" "$@"'] + list(argv)


def _unit(description, user, exec_argv, env_files, after=(), requires=(), cpu_affinity=None, docker_name=None,
          timeout=None, restart="on-failure", restart_sec=10, start_limit_burst=3, environment=None, stop_timeout=None,
          memory_gate=None):
    # Ray and the engines bind on every address: the firewall's table must be loaded
    # first (the check is a no-op on a node with the firewall turned off).
    gate = firewall.start_gate_unit_lines()
    deps = " ".join(["network-online.target"] + list(after))
    # A crash loop stops after start_limit_burst starts in 10 minutes instead of
    # re-allocating memory forever.
    lines = ["[Unit]", f"Description={description}", f"After={deps}", "Wants=network-online.target",
             *gate["unit"], "StartLimitIntervalSec=600", f"StartLimitBurst={start_limit_burst}"]
    if requires:
        lines.append(f"Requires={' '.join(requires)}")
        lines.append(f"PartOf={' '.join(requires)}")
    lines += ["", "[Service]", "Type=simple", *gate["service"]]
    if docker_name:
        # The docker CLI runs as root; the container holds the engine and its environment.
        lines.append(f"ExecStartPre=-/usr/bin/docker rm -f {docker_name}")
    elif user:
        lines.append(f"User={user}")
        for env_file in env_files:
            lines.append(f"EnvironmentFile={env_file}")
        if cpu_affinity:
            lines.append(f"CPUAffinity={cpu_affinity}")
        lines += ["LimitMEMLOCK=infinity", "LimitNOFILE=1048576"]
    if memory_gate:
        # The units that allocate the node's unified memory: every start and restart
        # (systemd's own included) first waits for MemAvailable to be back within a margin of
        # the pre-engine baseline, else fails, and the start limit ends the tries
        # (module_utils/engine_gate.py). After the leftover container is removed: it holds memory.
        lines.append(f"ExecStartPre={engine_gate.exec_start_pre(memory_gate)}")
    for key, value in (environment or {}).items():
        lines.append(f"Environment={systemd_quote(f'{key}={value}')}")
    lines.append(f"ExecStart={_exec(exec_argv)}")
    if docker_name:
        lines.append(f"ExecStop=/usr/bin/docker stop {docker_name}")
    lines += [f"Restart={restart}", f"RestartSec={restart_sec}"]
    if timeout:
        lines.append(f"TimeoutStartSec={timeout}")
    if stop_timeout:
        lines.append(f"TimeoutStopSec={stop_timeout}")
    lines += ["", "[Install]", "WantedBy=multi-user.target", ""]
    return "\n".join(lines)


def guard_beacons(profile, cluster):
    """vllm_ranks: the rank guards' beacons, 'ADDR:PORT' on each node's cable address and
    topology.guard_port, the head's first and then the workers' in rank order."""
    port = topology_port(profile, "guard_port")
    beacons = []
    for node in [cluster["head"]] + list(cluster["workers"]):
        address = bare_address(node["link_ip"])
        beacons.append(f"[{address}]:{port}" if ":" in address else f"{address}:{port}")
    return beacons


def unit_names(profile):
    """sparkctl's unit names (module_utils/units.py) plus two that follow the profile's topology,
    as render() lays the units out: `api`, the unit serving the API (behind the API proxy), and
    `startup`, the unit whose log holds the engine's startup lines (rank 0's for SGLang)."""
    names = dict(UNITS)
    sglang = profile["topology"]["kind"] == "sglang_ranks"
    names["api"] = UNITS["sglang_router"] if sglang else UNITS["engine"]
    names["startup"] = UNITS["sglang_rank"] if sglang else UNITS["engine"]
    return names


def render(profile, cluster):
    """{argv, env, units, secret_files, api}: argv of the head's engine process, the engine's own
    environment, per host the systemd units (file name -> text), the API key files, and where the
    public API and the engine listen (api_endpoints; cluster['api_proxy'], default true, puts the
    engine on 127.0.0.1:api.engine_port behind the API proxy)."""
    _require_cluster(cluster, profile["runtime"]["kind"])
    name = profile["name"]
    engine = profile["engine"]["kind"]
    runtime = profile["runtime"]["kind"]
    topo = profile["topology"]
    user = cluster["service_user"]
    fabric_env = cluster.get("fabric_env_file", "/etc/sparkctl/fabric.env")
    engine_env = cluster.get("engine_env_file", "/etc/sparkctl/engine.env")
    key_file = cluster["api_key_file"]
    timeout = (profile.get("boot") or {}).get("timeout_seconds")
    head = cluster["head"]["name"]
    workers = list(cluster["workers"])
    units = {head: {}}
    for worker in workers:
        units[worker["name"]] = {}
    argv = engine_argv(profile, cluster, 0)
    image = runtime == "image"

    if topo["kind"] in ("ray_tp", "ray_tp_ep"):
        # Ray actors inherit the raylet's environment: the fabric and engine files go on
        # the Ray units; the API key only on the API server.
        ray_files = [fabric_env, engine_env]
        nodes = [(head, None, UNITS["ray_head"])] + [(w["name"], w, UNITS["ray_worker"]) for w in workers]
        for host, node, unit in nodes:
            ray = ray_argv(profile, cluster, node)
            files = ray_files + ([key_file] if node is None and image else [])
            exec_argv = _docker_run(profile, cluster, unit_stem(unit), ray, files) if image else ray
            # The raylet passes its PATH to every process it starts: the venv's bin (ninja)
            # goes first; nvcc's directory comes with fabric.env's PATH.
            path_dirs = [] if image else [f"{cluster['venv_path']}/bin"]
            exec_argv = link_wait_argv(exec_argv, (node or cluster["head"]).get("interface"), path_dirs)
            role = "head" if node is None else "worker"
            # No memory gate here: a raylet allocates no GPU memory itself; the engine's ranks are
            # Ray actors the engine unit's process places, so gating that unit keeps a held-back
            # engine from allocating on any node, and a gated Ray would only keep a healthy
            # cluster from rejoining (its units restart on their own, with their own limit).
            # Restart=always: Ray must come back however `ray start --block` ended (a
            # clean exit after `ray stop` by hand included). 10 starts in 10 minutes leave room for a
            # worker rejoining a restarted head (GCS "authentication error" for ~60 s).
            units[host][unit] = _unit(
                f"sparkctl Ray {role} for {name}", user, exec_argv, files, docker_name=unit_stem(unit) if image else None,
                cpu_affinity=profile.get("cpu_affinity"), restart="always", restart_sec=5, start_limit_burst=10,
                # Ray 2.60 drains a node for 30 s on SIGTERM; stopping Ray here means the
                # whole cluster goes (stop, recovery), so 5 s is plenty.
                environment=None if image else {"RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "5"}, stop_timeout=30)
        if image:
            # NVIDIA's multi-node guide: the API server runs inside the head's Ray container,
            # which already carries every environment file.
            api_exec = ["/usr/bin/docker", "exec", unit_stem(UNITS["ray_head"])] + argv
            units[head][UNITS["engine"]] = _unit(
                f"sparkctl {engine} API for {name}", None, api_exec, [], after=(UNITS["ray_head"],),
                requires=(UNITS["ray_head"],), timeout=timeout, memory_gate=UNITS["engine"])
        else:
            units[head][UNITS["engine"]] = _unit(
                f"sparkctl {engine} API for {name}", user, argv, [fabric_env, engine_env, key_file],
                after=(UNITS["ray_head"],), requires=(UNITS["ray_head"],),
                cpu_affinity=profile.get("cpu_affinity"), timeout=timeout, memory_gate=UNITS["engine"])
    elif topo["kind"] == "vllm_ranks":
        beacons = guard_beacons(profile, cluster)
        for rank, node in enumerate([cluster["head"]] + workers):
            host = node["name"]
            rank_argv = argv if rank == 0 else engine_argv(profile, cluster, rank)
            # Rank 0 is the API server (the engine unit, vLLM reads its key from VLLM_API_KEY in
            # the key file); the other ranks serve nothing and need no key.
            files = [fabric_env, engine_env] + ([key_file] if rank == 0 else [])
            unit = UNITS["engine"] if rank == 0 else UNITS["vllm_rank"]
            exec_argv = _docker_run(profile, cluster, unit_stem(unit), rank_argv, files) if image else rank_argv
            # vLLM neither takes the head down when a worker rank dies nor lets a restarted head
            # meet a stale rank: every rank runs under the rank guard, which ends its rank when
            # another rank leaves so that the units start them again together (module_utils/rank_guard.py).
            peers = beacons[1:] if rank == 0 else beacons[:1]
            exec_argv = rank_guard.exec_argv("head" if rank == 0 else "worker", rank, beacons[rank], peers, exec_argv)
            # The ranks meet over the cable: wait for it inside ExecStart, as the other topologies' units.
            exec_argv = link_wait_argv(exec_argv, node.get("interface"))
            role = "API server and rank 0" if rank == 0 else f"rank {rank}"
            # A worker rank restarts with every restart of the head (its guard ends it): 10 starts
            # in 10 minutes leave it room to follow a head through its own 3.
            units[host][unit] = _unit(
                f"sparkctl vLLM {role} of {topo['nodes']} for {name}", user, exec_argv, files,
                docker_name=unit_stem(unit) if image else None, cpu_affinity=profile.get("cpu_affinity"), timeout=timeout,
                memory_gate=unit, start_limit_burst=3 if rank == 0 else 10)
    else:
        for rank, node in enumerate([cluster["head"]] + workers):
            host = node["name"]
            rank_argv = argv if rank == 0 else engine_argv(profile, cluster, rank)
            # SGLang's key arrives through --config <file> (rank 0, without the API proxy only),
            # so no rank needs it in its environment.
            files = [fabric_env, engine_env]
            unit = UNITS["sglang_rank"]
            exec_argv = rank_argv
            if image:
                exec_argv = _docker_run(profile, cluster, unit_stem(unit), rank_argv, files)
                if rank == 0 and engine_takes_key(profile, cluster):
                    # --config reads the key file inside the container: mount it read-only.
                    idx = exec_argv.index(cluster["image"])
                    exec_argv = exec_argv[:idx] + ["-v", f"{key_file}:{key_file}:ro"] + exec_argv[idx:]
            # The ranks meet over the cable (rank 0's --dist-init-addr is its link address): as Ray's
            # units, wait for it inside ExecStart, so that a node booting before its peer neither
            # stalls its boot nor spends the start limit on an address not yet there.
            exec_argv = link_wait_argv(exec_argv, node.get("interface"))
            units[host][unit] = _unit(
                f"sparkctl SGLang rank {rank}/{topo['nodes']} for {name}", user, exec_argv, files,
                docker_name=unit_stem(unit) if image else None, cpu_affinity=profile.get("cpu_affinity"), timeout=timeout,
                memory_gate=unit)
        router = router_argv(profile, cluster)
        if image:
            router = ["/usr/bin/docker", "run", "--rm", "--name", unit_stem(UNITS["sglang_router"]), "--network", "host",
                      cluster["image"]] + router
        units[head][UNITS["sglang_router"]] = _unit(
            f"sparkctl SGLang router (public API) for {name}", user, router, [],
            after=(UNITS["sglang_rank"],), requires=(UNITS["sglang_rank"],),
            docker_name=unit_stem(UNITS["sglang_router"]) if image else None)
    return {
        "argv": argv,
        "command_line": shlex.join(argv),
        "env": environment(profile),
        "units": units,
        "secret_files": secret_files(profile, cluster),
        "inputs": unit_inputs(profile, cluster),
        "api": api_endpoints(profile, cluster),
    }


def unit_inputs(profile, cluster):
    """Per host and unit, the files a unit reads at its start that systemd does not list as its
    own (a docker --env-file, SGLang's --config key file), besides the EnvironmentFile= ones, so
    a restart can be decided from whether any of them changed after the unit started.

    A venv's units also list the venv's change marker (venv_plugin.change_marker): pins installed
    into the venv the units run from are new code the running processes never loaded (Ray's own
    processes included, which run from the venv too)."""
    image = profile["runtime"]["kind"] == "image"
    fabric_env = cluster.get("fabric_env_file", "/etc/sparkctl/fabric.env")
    engine_env = cluster.get("engine_env_file", "/etc/sparkctl/engine.env")
    key_file = cluster["api_key_file"]
    head = cluster["head"]["name"]
    workers = [w["name"] for w in cluster["workers"]]
    inputs = _unit_inputs(profile, head, workers, image, fabric_env, engine_env, key_file,
                          engine_takes_key(profile, cluster))
    if not image and cluster.get("venv_path"):
        marker = change_marker(cluster["venv_path"])
        for units in inputs.values():
            for unit, paths in units.items():
                units[unit] = paths + [marker]
    return inputs


def _unit_inputs(profile, head, workers, image, fabric_env, engine_env, key_file, takes_key):
    inputs = {host: {} for host in [head] + workers}
    if profile["topology"]["kind"] == "vllm_ranks":
        inputs[head][UNITS["engine"]] = [fabric_env, engine_env, key_file]
        for worker in workers:
            inputs[worker][UNITS["vllm_rank"]] = [fabric_env, engine_env]
    elif profile["topology"]["kind"] in ("ray_tp", "ray_tp_ep"):
        # The API server of an image runs inside the head's Ray container: its key is that container's.
        inputs[head][UNITS["ray_head"]] = [fabric_env, engine_env] + ([key_file] if image else [])
        for worker in workers:
            inputs[worker][UNITS["ray_worker"]] = [fabric_env, engine_env]
        inputs[head][UNITS["engine"]] = [] if image else [fabric_env, engine_env, key_file]
    else:
        for host in [head] + workers:
            inputs[host][UNITS["sglang_rank"]] = [fabric_env, engine_env] + ([key_file] if host == head and takes_key else [])
        inputs[head][UNITS["sglang_router"]] = []
    return inputs


def profile_digest(profile):
    """sha256:<hex> of what the resolved profile says. Keys starting with '_' (_sources, _dir:
    where it was found on this control node) are left out: the same profile read from another
    checkout is the same deployment."""
    return content_digest(dict((key, value) for key, value in profile.items() if not str(key).startswith("_")))


def venv_digest(profile):
    """sha256:<hex> of what a venv runtime is built from: the Python, the pins it installs (with
    sparkctl's Ray), the indexes, the wheel directories and the plugin. Another value is another
    venv (spark_engine_venv_per_lock puts each in a directory of its own); engine arguments and
    everything else of the profile leave it as it is."""
    from ansible_collections.sparkctl.spark.plugins.plugin_utils.profile_engine import venv_packages

    venv = ((profile.get("runtime") or {}).get("venv") or {})
    inputs = {"python": venv.get("python"), "packages": venv_packages(profile),
              "extra_index_urls": venv.get("extra_index_urls") or [],
              "find_links": venv.get("find_links") or [], "plugin": venv.get("plugin") or {}}
    # Only when set, so the venvs of profiles without it keep their digest.
    if venv.get("no_index"):
        inputs["no_index"] = True
    return content_digest(inputs)


def render_digest(rendered):
    """sha256:<hex> of what render() gives the engine: its argv, environment and every node's
    units (the API key is in a file they name, never in them)."""
    return content_digest({key: rendered.get(key) for key in ("argv", "env", "units")})

"""`--distributed-executor-backend ray`: join the running Ray cluster the way vLLM does and
prove it can place the tensor-parallel ranks: one bundle {"GPU": 1} per rank, one rank per
node (STRICT_SPREAD), and a tiny num_gpus=1 task in every bundle that reports its node.

Failure modes mirror vLLM's: Ray not importable, no cluster to join, too few nodes/GPUs
(after waiting up to SPARKLAB_ENGINE_PLACEMENT_TIMEOUT_S while printing vLLM's "Waiting for
creating a placement group" line), a placement group that never becomes ready."""

from __future__ import annotations

import logging
import threading
import time

WAIT_LOG_EVERY_S = 10.0


class PlacementError(Exception):
    pass


def _gpu_nodes(ray):
    return [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("GPU", 0) >= 1]


class RayPlacement:
    def __init__(self, tensor_parallel_size, address, timeout_s, log):
        self.tp = tensor_parallel_size
        self.address = address
        self.timeout_s = timeout_s
        self.log = log
        self.ray = None
        self.group = None
        self.ranks = []  # [{"ip", "pid", "hostname", "node_id"}], rank 0 first
        self.driver_ip = None

    def connect(self):
        try:
            import ray
            from ray.util.placement_group import placement_group
            from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
        except ImportError as exc:
            raise PlacementError(f"--distributed-executor-backend ray needs the ray package: {exc}") from None
        self.ray = ray
        try:
            ray.init(address=self.address, logging_level=logging.WARNING, log_to_driver=False, namespace="sparklab_engine")
        except Exception as exc:  # ConnectionError, RuntimeError: whatever ray says, say it once
            raise PlacementError(f"cannot connect to the Ray cluster at address={self.address!r}: {exc}") from None
        self.driver_ip = ray.util.get_node_ip_address()
        self.log.info(f"Connected to Ray cluster (address={self.address}, driver node {self.driver_ip})")

        specs = [{"GPU": 1.0} for _ in range(self.tp)]
        deadline = time.monotonic() + self.timeout_s
        started, last_log = time.monotonic(), 0.0
        while True:
            nodes = _gpu_nodes(ray)
            if len(nodes) >= self.tp:
                break
            now = time.monotonic()
            if now >= deadline:
                have = ", ".join(f"{n['NodeManagerAddress']} ({n['Resources'].get('GPU', 0):g} GPU)" for n in nodes) or "none"
                raise PlacementError(
                    f"Cannot provide a placement group of placement_group_specs={specs} within {self.timeout_s:g} seconds: "
                    f"tensor_parallel_size={self.tp} needs {self.tp} alive nodes with a GPU, the Ray cluster has "
                    f"{len(nodes)}: {have}. See `ray status` and `ray list nodes`.")
            if now - last_log >= WAIT_LOG_EVERY_S:
                self.log.info(f"Waiting for creating a placement group of specs for {int(now - started)} seconds. specs={specs}. "
                              f"Check `ray status` and `ray list nodes` to see if you have enough resources "
                              f"({len(nodes)} of {self.tp} GPU nodes alive).")
                last_log = now
            time.sleep(1.0)

        group = placement_group(specs, strategy="STRICT_SPREAD", name="sparklab_engine")
        try:
            ray.get(group.ready(), timeout=max(1.0, deadline - time.monotonic()))
        except Exception as exc:  # GetTimeoutError: the GPUs exist but are held (a stale engine?)
            ray.util.remove_placement_group(group)
            raise PlacementError(
                f"Cannot provide a placement group of placement_group_specs={specs} within {self.timeout_s:g} seconds "
                f"({type(exc).__name__}): the GPUs are registered but not free. See `ray status` and `ray list nodes`.") from None
        self.group = group

        def _probe():
            # Nested, so Ray ships it by value: a worker needs ray, not this package's version.
            import os
            import socket

            import ray

            answer = {"ip": ray.util.get_node_ip_address(), "pid": os.getpid(), "hostname": socket.gethostname()}
            try:  # the rank's compile step, on its own node (jit.py)
                from sparklab_engine import __version__, jit
            except ImportError:
                return answer
            answer["jit"] = jit.compile_step(os.environ, __version__)
            return answer

        # num_cpus=0 as vLLM's Ray workers: the bundles hold a GPU and nothing else.
        probe = ray.remote(num_gpus=1, num_cpus=0)(_probe)
        try:
            refs = [probe.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
                placement_group=group, placement_group_bundle_index=i)).remote() for i in range(self.tp)]
            answers = ray.get(refs, timeout=max(30.0, deadline - time.monotonic()))
        except Exception as exc:
            raise PlacementError(f"a rank's probe task failed on the Ray cluster: {type(exc).__name__}: {exc}") from None
        # Rank 0 lives on the driver's node when it can, as in vLLM.
        answers.sort(key=lambda a: (a["ip"] != self.driver_ip, a["ip"]))
        by_ip = {n["NodeManagerAddress"]: n["NodeID"] for n in ray.nodes() if n.get("Alive")}
        self.ranks = [dict(a, node_id=by_ip.get(a["ip"])) for a in answers]
        self.log.info(f"Ray placement: {self.tp} ranks on nodes {', '.join(a['ip'] for a in self.ranks)} "
                      f"(each answered a num_gpus=1 task)")
        return self.ranks

    def disconnect(self, timeout_s=5.0):
        """ray.shutdown(), bounded: a dead GCS must not keep a stopping engine alive."""
        if self.ray is None or not self.ray.is_initialized():
            return
        worker = threading.Thread(target=self.ray.shutdown, name="ray-shutdown", daemon=True)
        worker.start()
        worker.join(timeout_s)

    def watch(self, interval_s, on_lost, stop):
        """Call on_lost(message) once a node that holds a rank is no longer alive (what kills
        vLLM when a Ray worker dies); runs in a daemon thread until `stop` is set."""

        def loop():
            failures = 0
            wanted = {r["node_id"]: r["ip"] for r in self.ranks if r.get("node_id")}
            while not stop.wait(interval_s):
                try:
                    alive = {n["NodeID"] for n in self.ray.nodes() if n.get("Alive")}
                    failures = 0
                except Exception as exc:  # GCS unreachable: tolerate a blip, not a loss
                    failures += 1
                    if failures >= 3:
                        on_lost(f"the Ray GCS does not answer ({type(exc).__name__}: {exc})")
                        return
                    continue
                lost = [ip for node_id, ip in wanted.items() if node_id not in alive]
                if lost:
                    on_lost(f"Ray node(s) {', '.join(lost)} holding a tensor-parallel rank died (RayWorkerWrapper lost)")
                    return

        if interval_s > 0 and self.ranks:
            threading.Thread(target=loop, name="ray-watch", daemon=True).start()

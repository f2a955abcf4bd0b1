"""`serve`: bind the API at once (503 until ready), then start up like vLLM (checkpoint index,
Ray placement or the other ranks of a multi-node launch, a loading delay, the startup lines the
verify stage reads), then serve until SIGTERM/SIGINT (exit 0), a fatal startup error, a lost Ray
rank or a request that found a rank lost (exit 1). A headless rank (ranks.py) binds no API: it
joins rank 0, runs its compile step and stays up until SIGTERM/SIGINT."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time

from sparklab_engine import __version__, jit, memory
from sparklab_engine.checkpoint import GIB, CheckpointError, read_checkpoint
from sparklab_engine.cli import DEFAULT_KV_CACHE_BYTES, DEFAULT_MAX_MODEL_LEN
from sparklab_engine.cluster import PlacementError, RayPlacement
from sparklab_engine.engine import Faults, Generator, Stats
from sparklab_engine.ranks import HeadlessRank, RankError, RankMaster
from sparklab_engine.server import Server

MOE_BACKEND = "SPARKLAB_STANDIN"
# vLLM's EngineDeadError: what the request that meets a lost rank answers and logs.
ENGINE_DEAD = "EngineCore encountered an issue. See stack trace (above) for the root cause."
HOLD_CHUNK_BYTES = 64 << 20


class StartupError(Exception):
    pass


def set_comm(name):
    """Name the process (/proc/PID/comm, what earlyoom and `ps -o comm` see); best effort, Linux."""
    if not name or not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL(None, use_errno=True).prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME
    except (OSError, AttributeError):
        pass


def hold_memory(total, log, keep):
    """Allocate and touch `total` bytes in 64 MiB steps (a gradual hog the OOM guard can see
    coming), appending the chunks to `keep` so they stay resident."""
    log.warning(f"SPARKLAB_ENGINE_HOLD_BYTES: holding {total} bytes ({total / GIB:.2f} GiB) on purpose")
    left = total
    while left > 0:
        step = min(HOLD_CHUNK_BYTES, left)
        keep.append(b"\x01" * step)
        left -= step
        time.sleep(0.02)
    log.warning(f"SPARKLAB_ENGINE_HOLD_BYTES: holding {total} bytes")


class EngineServer:
    def __init__(self, settings, log):
        self.settings = settings
        self.log = log
        self.timing = settings.timing
        self.faults = Faults()
        self.stats = Stats()
        self.stop = threading.Event()
        self.generator = Generator(self.timing, settings.max_num_seqs, self.faults, self.stats, self.stop)
        self.ready = False
        self.started_at = time.time()
        self.max_model_len = settings.max_model_len or DEFAULT_MAX_MODEL_LEN
        self.exit_code = 0
        self.httpd = None
        self.placement = None
        self.ranks = None  # RankMaster on rank 0, HeadlessRank on a headless rank
        self.dead = False  # a request met a lost rank: the engine is dead, the exit is scheduled
        self._dead_lock = threading.Lock()
        self._held = []

    # ---- lifecycle ----------------------------------------------------------------------

    def bind(self):
        self.httpd = Server((self.settings.host, self.settings.port), self)
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.1}, name="http", daemon=True).start()
        return self.httpd.server_address[1]

    def shutdown(self, code=0, reason=None):
        if reason:
            self.log.error(reason)
        if not self.stop.is_set():
            self.exit_code = code
            self.stop.set()

    def close(self):
        self.stop.set()
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.server_close()
        if self.placement is not None:
            self.placement.disconnect()
        if self.ranks is not None:
            self.ranks.close()

    def run(self):
        """The whole process (main thread): returns the exit code."""
        s = self.settings
        set_comm(s.comm)
        self._handle_signals()
        if s.hold_bytes:
            threading.Thread(target=hold_memory, args=(s.hold_bytes, self.log, self._held), name="hold", daemon=True).start()
        if not s.headless:
            try:
                self.bind()
            except OSError as exc:
                return self._fatal(f"cannot listen on {s.host}:{s.port}: {exc}")
        try:
            self.start_up_headless() if s.headless else self.start_up()
        except (StartupError, CheckpointError, PlacementError, RankError, memory.SizingError) as exc:
            stopped = self.stop.is_set() and self.exit_code == 0
            self.close()
            if stopped:
                # SIGTERM/SIGINT during startup (a rank mode wait can last forever): a clean stop.
                self.log.info("Shutting down")
                return 0
            return self._fatal(str(exc))
        if self.placement is not None:
            self.placement.watch(s.ray_watch_s, lambda why: self.shutdown(1, f"EngineCore died: {why}"), self.stop)
        self.stop.wait()
        self.close()
        self.log.info("Shutting down" if self.exit_code == 0 else f"Exiting with status {self.exit_code}")
        return self.exit_code

    def _handle_signals(self):
        """SIGTERM/SIGINT end the server with status 0 (systemd's clean stop)."""
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: self.shutdown(0))

    def _fatal(self, message):
        self.log.error(f"EngineCore failed to start: {message}")
        self.log.error("RuntimeError: Engine core initialization failed. See root cause above.")
        return 1

    # ---- startup ------------------------------------------------------------------------

    def _sleep(self, seconds):
        if self.stop.wait(seconds):
            raise StartupError("interrupted during startup")

    def _log_args(self, what):
        s, log = self.settings, self.log
        log.info(f"sparklab_engine {__version__} (lab stand-in, NOT vLLM): {what}")
        ranks = (f"nnodes={s.nnodes} node_rank={s.node_rank} master_addr={s.master_addr} master_port={s.master_port} "
                 f"headless={s.headless} " if s.nnodes > 1 else "")
        log.info(f"args: tensor_parallel_size={s.tensor_parallel_size} distributed_executor_backend={s.distributed_executor_backend} "
                 f"{ranks}max_model_len={s.max_model_len} kv_cache_memory_bytes={s.kv_cache_memory_bytes} "
                 f"kv_cache_dtype={s.kv_cache_dtype} max_num_seqs={s.max_num_seqs} "
                 f"gpu_memory_utilization={s.gpu_memory_utilization} enforce_eager={s.enforce_eager} "
                 f"api_key={'set' if s.api_key else 'none'}")
        if s.ignored:
            log.info(f"Ignoring flags the stand-in does not implement: {' '.join(s.ignored)}")

    def _local_ranks(self):
        """The tensor-parallel ranks this process runs: all of them, or its node's share in rank mode."""
        s = self.settings
        per_node = max(1, s.tensor_parallel_size // s.nnodes)
        return list(range(s.node_rank * per_node, (s.node_rank + 1) * per_node))

    def _worker_prefix(self, rank):
        return f"(VllmWorker rank={rank} pid={os.getpid()}) "

    def start_up_headless(self):
        """A headless rank: join rank 0, then the compile step its node runs (as a Ray rank's
        task does), then stay up: no API, no checkpoint read, no startup lines of the head's."""
        s, log = self.settings, self.log
        self._log_args(f"headless rank {s.node_rank} of {s.nnodes} for {s.model_dir} (no API server)")
        self.ranks = HeadlessRank(s.node_rank, s.master_addr, s.master_port, log)
        self.ranks.join(self.stop)
        result = jit.compile_step(s.jit_env, __version__, sleep=self._sleep)
        for rank in self._local_ranks():
            log.info(jit.describe(result), self._worker_prefix(rank))
        if s.crash_during_boot:
            raise StartupError(f"crashing during boot on purpose ({s.crash_during_boot})")
        log.info(f"Rank {s.node_rank} joined the master at {self.ranks.where}")

    def start_up(self):
        s, log = self.settings, self.log
        self._log_args(f"serving {s.model_dir} as {s.served_model_name!r}")
        log.info(f"timing model: {self.timing.as_dict()}")
        checkpoint = read_checkpoint(s.model_dir)
        log.info(f"Checkpoint: {checkpoint['shards']} safetensors shards, {checkpoint['total_bytes']} bytes, "
                 f"architectures {checkpoint['architectures'] or 'unknown'}")
        self.max_model_len = s.max_model_len or checkpoint["max_position_embeddings"] or DEFAULT_MAX_MODEL_LEN
        tp = s.tensor_parallel_size
        if s.distributed_executor_backend == "ray":
            self.placement = RayPlacement(tp, s.ray_address, s.placement_timeout_s, log)
            ranks = self.placement.connect()
            # ray.init installs its own SIGTERM handler (exit status 15): take it back.
            self._handle_signals()
            prefixes = [""] + [f"(RayWorkerWrapper pid={r['pid']}, ip={r['ip']}) " for r in ranks[1:]]
            compiled = [r.get("jit") for r in ranks]
        else:
            if s.nnodes > 1:
                # Rank mode: the other nodes' ranks join before this node's own compile step;
                # a headless rank logs its own compile step on its node.
                self.ranks = RankMaster(s.nnodes, s.master_addr, s.master_port, log)
                self.ranks.listen()
                self.ranks.wait(self.stop)
            local = self._local_ranks()
            prefixes = [""] + [self._worker_prefix(rank) for rank in local[1:]]
            compiled = [jit.compile_step(s.jit_env, __version__, sleep=self._sleep)] * len(local)
        for rank, result in enumerate(compiled):
            if result:
                log.info(jit.describe(result), prefixes[rank])
        log.info(f"Loading weights ({checkpoint['shards']} shards) on {tp} rank(s)")
        started = time.monotonic()
        self._sleep(s.load_seconds)
        took = time.monotonic() - started
        if s.crash_during_boot:
            # A boot that dies after loading, as one whose kernels or weights fail does: the restart loop's test.
            raise StartupError(f"crashing during boot on purpose ({s.crash_during_boot})")
        if self.ranks is not None and self.ranks.lost_ranks():
            raise StartupError(f"a rank was lost during startup: {'; '.join(self.ranks.lost_ranks())}")
        # What each rank loaded, from the shards' headers and config.json, as vLLM places the tensors.
        per_rank_gib = memory.weights_per_rank(s.model_dir, checkpoint["shard_names"], checkpoint["config"], tp) / GIB
        for prefix in prefixes:
            log.info(f"Using '{MOE_BACKEND}' NvFp4 MoE backend", prefix)
        for prefix in prefixes:
            log.info(f"Model loading took {per_rank_gib:.2f} GiB and {took:.2f} seconds", prefix)
        kv_bytes = s.kv_cache_memory_bytes if s.kv_cache_memory_bytes is not None else DEFAULT_KV_CACHE_BYTES
        if s.kv_bytes_per_token:
            # SPARKLAB_ENGINE_KV_BYTES_PER_TOKEN: a fixed figure instead of the config's (tests and faults).
            kv_tokens = kv_bytes // s.kv_bytes_per_token
        else:
            kv_tokens = memory.kv_tokens(kv_bytes, memory.kv_layout(checkpoint["config"], tp, s.kv_cache_dtype))
        log.info(f"Available KV cache memory: {kv_bytes / GIB:.2f} GiB")
        if kv_tokens < self.max_model_len:
            raise StartupError(f"ValueError: The model's max seq len ({self.max_model_len}) is larger than the maximum number of "
                               f"tokens that can be stored in KV cache ({kv_tokens}). Try increasing `gpu_memory_utilization` "
                               f"or decreasing `max_model_len` when initializing the engine.")
        log.info(f"GPU KV cache size: {kv_tokens:,} tokens")
        log.info(f"Maximum concurrency for {self.max_model_len:,} tokens per request: {kv_tokens / self.max_model_len:.2f}x")
        log.info(f"Starting sparklab stand-in API server on http://{s.host}:{self.httpd.server_address[1]}")
        log.info("Application startup complete.")
        self.ready = True

    # ---- rank mode while serving --------------------------------------------------------

    @property
    def healthy(self):
        return self.ready and not self.dead

    def check_ranks(self):
        """Before a generation: None, or vLLM's EngineDeadError message once a rank is lost. The
        first such request logs it and schedules the exit; until then nothing shows (measured)."""
        lost = self.ranks.lost_ranks() if isinstance(self.ranks, RankMaster) else []
        if not lost:
            return None
        with self._dead_lock:
            if not self.dead:
                self.dead = True
                self.log.error(f"Lost tensor-parallel rank(s) of the multi-node launch: {'; '.join(lost)}")
                self.log.error(ENGINE_DEAD)
                timer = threading.Timer(self.settings.rank_lost_exit_s, self.shutdown,
                                        (1, "EngineCore is dead: shutting down the API server"))
                timer.daemon = True
                timer.start()
        return ENGINE_DEAD

"""What a benchmark run measures (validated by cli.py before any request)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

DEFAULT_PROMPT_TOKENS = (2048, 8192, 32768)
DEFAULT_CONCURRENCY = (1, 2, 4)
DEFAULT_API_KEY_ENV = "SPARKCTL_API_KEY"
# Between two tokens a healthy server takes milliseconds, seconds at worst under a prefill of
# another stream; a minute of silence is a stall, not a slow server.
DEFAULT_STALL_TIMEOUT_S = 60.0
# Requests of one rate point (--num-requests): enough for a median and a p90 that mean
# something, few enough that a sweep of a handful of rates takes minutes, not hours.
DEFAULT_NUM_REQUESTS = 16


def api_base(url: str) -> str:
    """http://HOST:PORT[/v1][/] -> http://HOST:PORT/v1 (the OpenAI routes hang off /v1)."""
    base = url.rstrip("/")
    return base if base.endswith("/v1") else base + "/v1"


@dataclass
class Settings:
    url: str
    model: str | None = None  # None: the one model GET /v1/models lists (runner.Runner.resolve_model)
    endpoint: str = "completions"
    prompt_tokens: list[int] = field(default_factory=lambda: list(DEFAULT_PROMPT_TOKENS))
    concurrency: list[int] = field(default_factory=lambda: list(DEFAULT_CONCURRENCY))
    max_tokens: int = 128
    requests_per_stream: int = 2
    warmup: int = 1
    max_model_len: int | None = None
    timeout_s: float = 600.0
    stall_timeout_s: float = DEFAULT_STALL_TIMEOUT_S
    label: str = ""
    api_key_env: str = DEFAULT_API_KEY_ENV
    ignore_eos: bool = True
    selftest_s: float = 1.5
    strict: bool = False
    model_source: str = "--model"
    # Load shapes (arrivals.py, LOAD.md). loads: the --load specs in their canonical form, in
    # the order given, or the poisson specs --sweep-rates made; [] measures the closed loops
    # of `concurrency` as before. With loads, `concurrency` holds the stream counts of their
    # concurrency:N specs (possibly none).
    loads: list[str] = field(default_factory=list)
    num_requests: int = DEFAULT_NUM_REQUESTS  # requests of each rate point, sent at the schedule's offsets
    max_concurrency: int | None = None  # at most this many rate-point requests in flight; None: unbounded
    sweep_rates: list[float] = field(default_factory=list)  # --sweep-rates as given (then `loads` holds their specs)
    burstiness: float | None = None  # --burstiness of the --sweep-rates specs
    # Latency objectives in seconds ({"ttft": 2.0, "tpot": 0.1}, goodput.parse_slo); None: no goodput.
    slo: dict[str, float] | None = None
    # The capacity search (goodput.find_capacity): the share of requests that must meet the SLO
    # at a rate; None: no search.
    capacity_fraction: float | None = None
    capacity_margin: float = 0.1
    # --repeat: each measurement point (and each workload's measurement) this many times in a
    # row; above 1 the report gives each headline figure's mean and 95 % interval (repeat.py).
    repeat: int = 1
    # Workloads (workloads.py), each measured after the points and reported under its own key.
    # dataset: the --dataset file (its conversations are read by cli.py, not kept here), sampled
    # with dataset_seed; prefix_sharing: {"requests": N, "prefix_tokens": P}; depth_sweep: the
    # context depths in tokens, ascending.
    dataset: str | None = None
    dataset_seed: int = 0
    prefix_sharing: dict[str, int] | None = None
    depth_sweep: list[int] = field(default_factory=list)
    export_vllm: str | None = None  # --export-vllm: the file vLLM-named results are written to

    @property
    def api_base(self) -> str:
        return api_base(self.url)

    @property
    def server_root(self) -> str:
        """The base URL without /v1: vLLM serves /tokenize there."""
        return self.api_base[: -len("/v1")]

    def as_dict(self) -> dict:
        """For benchmark.json: the name of the key's variable, never the key. An infinite
        burstiness is written "inf": JSON has no infinity, and Python's json would write one
        other readers refuse."""
        values = dict(asdict(self), api_base=self.api_base)
        if values["burstiness"] == math.inf:
            values["burstiness"] = "inf"
        return values

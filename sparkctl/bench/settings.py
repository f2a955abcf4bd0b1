"""What a benchmark run measures (validated by cli.py before any request)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

DEFAULT_PROMPT_TOKENS = (2048, 8192, 32768)
DEFAULT_CONCURRENCY = (1, 2, 4)
DEFAULT_API_KEY_ENV = "SPARKCTL_API_KEY"
# Between two tokens a healthy server takes milliseconds, seconds at worst under a prefill of
# another stream; a minute of silence is a stall, not a slow server.
DEFAULT_STALL_TIMEOUT_S = 60.0


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

    @property
    def api_base(self) -> str:
        return api_base(self.url)

    @property
    def server_root(self) -> str:
        """The base URL without /v1: vLLM serves /tokenize there."""
        return self.api_base[: -len("/v1")]

    def as_dict(self) -> dict:
        """For benchmark.json: the name of the key's variable, never the key."""
        return dict(asdict(self), api_base=self.api_base)

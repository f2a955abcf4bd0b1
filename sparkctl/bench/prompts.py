"""Prompts of about N tokens without a tokenizer, and the request bodies that carry them.

The filler is a fixed pseudo-random sequence of common English words, so its token count
grows steadily with the number of words whatever the model's tokenizer; the runner fits
tokens-per-word from the server's own usage.prompt_tokens (see calibrate_words). Every
request starts with a unique nonce: an engine's prefix cache keys on the leading tokens,
so a shared beginning would let it skip the prefill and make TTFT meaningless."""

from __future__ import annotations

import itertools
import random
import uuid
from dataclasses import dataclass
from functools import lru_cache

_VOCABULARY = """
time year people way day man thing woman life child world school state family student group
country problem hand part place case week company system program question work government
number night point home water room mother area money story fact month lot right study book
eye job word business issue side kind head house service friend father power hour game line
end member law car city community name president team minute idea kid body information back
parent face others level office door health person art war history party result change
morning reason research girl guy moment air teacher force education river garden mountain
window table paper music market field model answer energy picture letter record season
report rule share voice light island forest bridge engine signal layer memory cable node
""".split()

# Long enough for any context a Spark serves (the longest recipe runs 1,048,576 tokens).
_FILLER_SEED = 20260711
# English text in common BPE vocabularies runs at about 4 characters per token: the estimate
# used when the server counts no tokens (runner.py) and for a dataset's reference answers
# (workloads.py), which are counted before any request is sent.
DEFAULT_CHARS_PER_TOKEN = 4.0


@lru_cache(maxsize=1)
def _word_stream() -> tuple[str, ...]:
    """A deterministic 64K-word sequence, repeated as needed (repetition is far apart)."""
    rng = random.Random(_FILLER_SEED)
    return tuple(rng.choice(_VOCABULARY) for _ in range(65536))


def filler(words: int) -> str:
    """The first `words` words of the filler sequence, space separated."""
    if words <= 0:
        return ""
    stream = _word_stream()
    return " ".join(itertools.islice(itertools.cycle(stream), words))


class Nonces:
    """Unique, short request prefixes: `[bench RUNID-000042]`."""

    def __init__(self, run_id: str | None = None):
        self.run_id = run_id or uuid.uuid4().hex[:8]
        self._counter = itertools.count(1)

    def next(self) -> str:
        return f"[bench {self.run_id}-{next(self._counter):06d}]"


@dataclass(frozen=True)
class Prompt:
    """What one request sends: `words` filler words, or a `text` of its own (a dataset's prompt,
    a shared-prefix request); a fresh nonce in front unless `nonce_first` is False (a request
    whose shared prefix must reach the engine unchanged carries its nonce after the prefix).
    max_tokens None: the run's --max-tokens. line: the dataset line the prompt came from."""

    words: int | None = None
    text: str | None = None
    max_tokens: int | None = None
    nonce_first: bool = True
    line: int | None = None


def prompt_text(nonce: str, filler_text: str) -> str:
    return f"{nonce} {filler_text}" if filler_text else nonce


def request_body(endpoint: str, model: str, text: str, max_tokens: int, *, stream: bool, ignore_eos: bool) -> dict:
    """An OpenAI completions or chat body. Streams ask for the final usage chunk
    (stream_options.include_usage); ignore_eos (vLLM and SGLang) keeps every answer at
    max_tokens so the decode window has the same length in every request."""
    body: dict = {"model": model, "max_tokens": max_tokens, "stream": stream}
    if endpoint == "chat":
        body["messages"] = [{"role": "user", "content": text}]
    else:
        body["prompt"] = text
    if stream:
        body["stream_options"] = {"include_usage": True}
    if ignore_eos:
        body["ignore_eos"] = True
    return body


def endpoint_path(endpoint: str) -> str:
    return "/chat/completions" if endpoint == "chat" else "/completions"


class LinearFit:
    """prompt_tokens = overhead + per_word * words, from two probes of the real server (the
    overhead holds the nonce and, for chat, the template)."""

    def __init__(self, words_a: int, tokens_a: int, words_b: int, tokens_b: int):
        if words_b == words_a or tokens_b <= tokens_a:
            raise ValueError(f"cannot fit prompt tokens to words: {words_a} words -> {tokens_a} tokens, "
                             f"{words_b} words -> {tokens_b} tokens")
        self.per_word = (tokens_b - tokens_a) / (words_b - words_a)
        self.overhead = tokens_a - self.per_word * words_a

    def words_for(self, tokens: int) -> int:
        return max(0, round((tokens - self.overhead) / self.per_word))

    def as_dict(self) -> dict:
        return {"tokens_per_word": self.per_word, "overhead_tokens": self.overhead}


def estimate_tokens(chars: int, chars_per_token: float = DEFAULT_CHARS_PER_TOKEN) -> int:
    """Tokens of a text of `chars` characters without a tokenizer: chars / chars_per_token, at
    least one."""
    return max(1, round(chars / chars_per_token))


def within(measured: int, target: int, tolerance: float, ceiling: int | None = None) -> bool:
    """Is a calibrated prompt close enough? |measured - target| <= tolerance * target (at
    least one token), and never above `ceiling` (the room max_model_len leaves)."""
    if ceiling is not None and measured > ceiling:
        return False
    return abs(measured - target) <= max(1.0, tolerance * target)

"""The stand-in's "model": deterministic answers, paced by the timing model, with the faults
the verify stage must catch. No tensor, no tokenizer: a token is a whitespace-separated word."""

from __future__ import annotations

import re
import threading
import time

from sparklab_engine.timing import Pacer, sleep_until

# The smoke prompt (tests/lab/profiles/lab-standin.yml smoke) and its answers.
JAPAN = re.compile(r"capital of japan", re.I)
RIGHT_ANSWER = [" Tokyo", "."]
WRONG_ANSWER = [" Kyoto", "."]
REASONING = ["The", " user", " asks", " a", " question;", " answer", " briefly."]
FILLER = ("lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut labore "
          "et dolore magna aliqua").split()
FAULTS = ("hang_after_health", "wrong_answer")


def count_tokens(text):
    """The stand-in's tokenizer: whitespace-separated words."""
    return len(str(text).split())


def answer(text, max_tokens, wrong=False):
    """(tokens, finish_reason) for a prompt: the Japan prompt answers and stops, anything
    else is max_tokens filler words ("length")."""
    if JAPAN.search(text or ""):
        tokens = WRONG_ANSWER if wrong else RIGHT_ANSWER
        return (list(tokens), "stop") if max_tokens >= len(tokens) else (tokens[:max_tokens], "length")
    return [" " + FILLER[i % len(FILLER)] for i in range(max_tokens)], "length"


class Faults:
    def __init__(self):
        self._lock = threading.Lock()
        self.state = dict.fromkeys(FAULTS, False)

    def update(self, body):
        """POST /_standin/faults: {"reset": true} and/or {fault: bool}; returns the new state."""
        if not isinstance(body, dict):
            raise ValueError("expected a JSON object")
        unknown = sorted(set(body) - set(FAULTS) - {"reset"})
        if unknown:
            raise ValueError(f"unknown fault(s) {', '.join(unknown)}; known: reset, {', '.join(FAULTS)}")
        for key, value in body.items():
            if not isinstance(value, bool):
                raise ValueError(f"{key} must be true or false, got {value!r}")
        with self._lock:
            if body.get("reset"):
                self.state = dict.fromkeys(FAULTS, False)
            for key in FAULTS:
                if key in body:
                    self.state[key] = body[key]
            return dict(self.state)

    def __getitem__(self, key):
        return self.state[key]


class Stats:
    def __init__(self):
        self._lock = threading.Lock()
        self.counters = {"requests": 0, "generations": 0, "active_generations": 0, "queued": 0, "unauthorized": 0,
                         "rejected": 0, "prompt_tokens": 0, "completion_tokens": 0, "aborted": 0}
        self.by_route = {}

    def add(self, key, amount=1):
        with self._lock:
            self.counters[key] += amount

    def request(self, route):
        with self._lock:
            self.counters["requests"] += 1
            self.by_route[route] = self.by_route.get(route, 0) + 1

    def snapshot(self):
        with self._lock:
            return dict(self.counters, by_route=dict(self.by_route))


class Generator:
    """Paces token lists: a max_num_seqs queue, TTFT, per-stream rate, aggregate cap, hang."""

    def __init__(self, timing, max_num_seqs, faults, stats, stop):
        self.timing = timing
        self.pacer = Pacer(timing)
        self.faults = faults
        self.stats = stats
        self.stop = stop
        self._seqs = threading.BoundedSemaphore(max_num_seqs)

    def paced(self, tokens, prompt_tokens):
        """Yield the tokens at their scheduled times (close the generator to abort)."""
        self.stats.add("queued")
        try:
            while not self._seqs.acquire(timeout=0.1):
                if self.stop.is_set():
                    return
        finally:
            self.stats.add("queued", -1)
        self.stats.add("active_generations")
        done = 0
        try:
            slot = time.monotonic() + self.timing.ttft(prompt_tokens)
            for i, token in enumerate(tokens):
                if i:
                    slot += 1.0 / self.timing.token_rate
                slot = self.pacer.slot(slot)
                if not sleep_until(slot, self.stop):
                    return
                # The wedge: the API and /health answer, the engine never produces a token.
                while self.faults["hang_after_health"]:
                    if self.stop.wait(0.05):
                        return
                    slot = time.monotonic()
                done += 1
                self.stats.add("completion_tokens")
                yield token
        finally:
            if done < len(tokens):
                self.stats.add("aborted")
            self.stats.add("active_generations", -1)
            self._seqs.release()

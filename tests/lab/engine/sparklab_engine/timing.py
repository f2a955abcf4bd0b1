"""The stand-in's timing model, which issue 7's benchmark measures back:

    TTFT            = ttft_s + prompt_tokens * ttft_per_token_s   (after any max-num-seqs queue)
    token i (i>=1)  = token i-1 + 1 / token_rate                   (per stream)
    all streams     <= max_total_token_rate tokens/s together      (0 = no cap)

Times are scheduled on a virtual clock (each token's slot follows the previous SLOT, not the
moment the write returned), so sleep overshoot does not accumulate into the measured rate.
The aggregate cap is a shared slot reservation: with a cap of C, consecutive tokens of all
streams are at least 1/C apart, so N streams at rate R get min(R, C/N) each."""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass

FIELDS = ("ttft_s", "ttft_per_token_s", "token_rate", "max_total_token_rate")


@dataclass
class Timing:
    ttft_s: float = 0.1
    ttft_per_token_s: float = 0.00005
    token_rate: float = 50.0
    max_total_token_rate: float = 150.0

    def as_dict(self):
        return asdict(self)

    def ttft(self, prompt_tokens):
        return self.ttft_s + prompt_tokens * self.ttft_per_token_s


def validate_update(update):
    """The body of POST /_standin/timing -> {field: float}; ValueError names what is wrong."""
    if not isinstance(update, dict):
        raise ValueError("expected a JSON object")
    unknown = sorted(set(update) - set(FIELDS))
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(unknown)}; known: {', '.join(FIELDS)}")
    values = {}
    for key, value in update.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ValueError(f"{key} must be a number >= 0, got {value!r}")
        if key == "token_rate" and value <= 0:
            raise ValueError("token_rate must be > 0")
        values[key] = float(value)
    return values


class Pacer:
    """Hands out token emission slots under the aggregate cap."""

    def __init__(self, timing: Timing):
        self.timing = timing
        self._lock = threading.Lock()
        self._next_slot = 0.0

    def slot(self, desired):
        cap = self.timing.max_total_token_rate
        if cap <= 0:
            return desired
        with self._lock:
            when = max(desired, self._next_slot)
            self._next_slot = when + 1.0 / cap
            return when


def sleep_until(when, stop=None):
    """Sleep until monotonic time `when`; False if `stop` (an Event) was set meanwhile."""
    while True:
        left = when - time.monotonic()
        if left <= 0:
            return True
        if stop is not None:
            if stop.wait(left):
                return False
        else:
            time.sleep(left)

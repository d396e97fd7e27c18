"""The one backoff: how long to wait before the next try after failures in a row.

    backoff = Backoff(1.0, 30.0)            # 1 s doubling to 30 s
    await asyncio.sleep(backoff.next())     # after a failure: 1, 2, 4, ... 30, 30
    backoff.reset()                         # after a success: from 1 s again
    backoff.delay(3)                        # the 4th wait (counting from 0), without state

The n-th wait (n from 0) is `min(maximum, minimum * factor**n)` (a maximum below the minimum
makes every wait the maximum); with `jitter`, that is scaled by a random factor in
`[1 - jitter, 1 + jitter]` and capped at `maximum` again, so clients restarted together do not
retry in step. Every retry loop of the house uses it: the Exec
Agent's certificate requests and drain guard, `kube.informer`'s list+watch, `kube.workqueue`'s
per-key retries, `obs.supervisor`'s restarts and battery's `ReconnectPolicy`.

Here, beside `clock`, as the one place of the small pieces every deployable shares; no IO,
standard library only, Python 3.10.
"""

from __future__ import annotations

import random

MAX_EXPONENT = 64
"""The exponent stops growing here, so a long outage cannot overflow the float."""


class Backoff:
    """Waits growing by `factor` from `minimum` to `maximum`, with optional jitter; `next()`
    counts the failures in a row, `reset()` starts over."""

    def __init__(
        self,
        minimum: float = 1.0,
        maximum: float = 30.0,
        *,
        factor: float = 2.0,
        jitter: float = 0.0,
        rng: random.Random | None = None,
    ) -> None:
        if minimum < 0:
            raise ValueError(f"backoff minimum must not be negative, got {minimum}")
        if factor < 1.0:
            raise ValueError(f"backoff factor must be at least 1, got {factor}")
        if not 0.0 <= jitter <= 1.0:
            raise ValueError(f"backoff jitter must be between 0 and 1, got {jitter}")
        self.minimum = minimum
        self.maximum = maximum
        self.factor = factor
        self.jitter = jitter
        self._rng = rng
        self.attempt = 0
        """Failures in a row so far: the exponent of the next wait."""

    def delay(self, attempt: int) -> float:
        """Seconds to wait before retry number `attempt` (0 for the first retry)."""
        base = min(self.maximum, self.minimum * self.factor ** min(max(attempt, 0), MAX_EXPONENT))
        if not self.jitter:
            return float(base)
        spread = (self._rng or random).uniform(1.0 - self.jitter, 1.0 + self.jitter)
        return float(min(self.maximum, base * spread))

    def next(self) -> float:
        """The wait after one more failure in a row."""
        wait = self.delay(self.attempt)
        self.attempt += 1
        return wait

    def reset(self) -> None:
        """A success: the next wait is the first again."""
        self.attempt = 0

"""`ClaimSlots`: a bound on concurrent ClaimVM calls, so renewals never wait behind them (CL-018).

ClaimVM can take long (battery runs the Pool's pre-lease hooks inside it, under the claim
deadline), while a renewal must reach battery within the Lease's expiry threshold. The claim
controller runs N reconciles at once; ClaimVM may hold at most N-1 of them
(`ClaimSlots.for_workers`), so at least one worker is always free for a Bound claim's
Heartbeat or ListLeases.

CL-102: a bind that finds every slot taken does not wait for one: it leaves its key in a FIFO of
waiters and ends, freeing its worker. When a slot frees, it is reserved for the first waiter,
which is handed to `on_free` (the runtime queues it at once); nobody else can take a reserved
slot, so waiters are served in order and a stream of newcomers never overtakes them: 100
claims created together bind back to back, first come first served. A reservation not taken
within `retry_after` (the waiter's claim was deleted meanwhile, say) passes to the next waiter
at the next look at the slots; `forget` gives one up at once. `retry_after` is also the
fallback requeue of a waiter, should a wake-up be lost (e.g. its reconcile failed meanwhile).

The controller runs on one event loop, so counters are enough (no lock).
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Final

from batteryop.api.clock import SYSTEM_CLOCK, Clock

DEFAULT_RETRY_AFTER: Final = 1.0
"""Seconds a bind that found no free slot waits before it is tried again."""


class ClaimSlots:
    """At most `limit` ClaimVM calls at once; `try_acquire` never waits."""

    def __init__(
        self,
        limit: int,
        *,
        retry_after: float = DEFAULT_RETRY_AFTER,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        if limit < 1:
            raise ValueError(f"ClaimSlots needs at least 1 slot, got {limit}")
        if retry_after <= 0:
            raise ValueError(f"ClaimSlots retry_after must be positive, got {retry_after}")
        self._limit = limit
        self._in_use = 0
        self._waiting: OrderedDict[Hashable, None] = OrderedDict()
        self._reserved: dict[Hashable, float] = {}  # waiter -> when its reservation lapses
        self._clock = clock
        self.retry_after = retry_after
        self.on_free: Callable[[Hashable], None] | None = None

    @classmethod
    def for_workers(cls, workers: int, *, retry_after: float = DEFAULT_RETRY_AFTER) -> ClaimSlots:
        """Slots for a controller running `workers` reconciles at once: one fewer (CL-018)."""
        if workers < 2:
            raise ValueError(
                f"the claim controller needs at least 2 workers (one kept for renewals), "
                f"got {workers}"
            )
        return cls(workers - 1, retry_after=retry_after)

    @property
    def limit(self) -> int:
        return self._limit

    @property
    def in_use(self) -> int:
        return self._in_use

    @property
    def waiting(self) -> tuple[Hashable, ...]:
        return tuple(self._waiting)

    @property
    def reserved(self) -> tuple[Hashable, ...]:
        return tuple(self._reserved)

    def _lapse(self) -> None:
        now = self._clock.monotonic()
        for waiter in [w for w, until in self._reserved.items() if until <= now]:
            del self._reserved[waiter]
            self._hand_on()

    def _hand_on(self) -> None:
        """A slot is free: reserve it for the first waiter and wake that waiter."""
        if not self._waiting or self._in_use + len(self._reserved) >= self._limit:
            return
        first, _ = self._waiting.popitem(last=False)
        self._reserved[first] = self._clock.monotonic() + self.retry_after
        if self.on_free is not None:
            self.on_free(first)

    def _has_slot(self, waiter: Hashable | None) -> bool:
        """Whether `waiter` may take a slot now: its reservation, or one nobody holds."""
        self._lapse()
        if waiter is not None and waiter in self._reserved:
            return True
        return self._in_use + len(self._reserved) < self._limit

    def queue_if_full(self, waiter: Hashable) -> bool:
        """True, with `waiter` queued for the next free slot, if it may not take one now.

        For a bind to give up before its fresh read of the claim, which `try_acquire` would
        then refuse anyway: no API request is spent while the slots are busy.
        """
        if self._has_slot(waiter):
            return False
        self._waiting[waiter] = None
        return True

    def forget(self, waiter: Hashable) -> None:
        """`waiter` binds no more (its claim is gone or bound): its place and reservation go."""
        self._waiting.pop(waiter, None)
        if self._reserved.pop(waiter, None) is not None:
            self._hand_on()

    @contextlib.contextmanager
    def try_acquire(self, waiter: Hashable | None = None) -> Iterator[bool]:
        """`with slots.try_acquire(key) as acquired:` True holds a slot for the block, False
        means every slot is taken (nothing is held; `waiter` is woken when one frees)."""
        if not self._has_slot(waiter):
            if waiter is not None:
                self._waiting[waiter] = None
            yield False
            return
        if waiter is not None:
            self._waiting.pop(waiter, None)
            self._reserved.pop(waiter, None)
        self._in_use += 1
        try:
            yield True
        finally:
            self._in_use -= 1
            self._hand_on()

"""`ClaimSlots`: a bound on concurrent ClaimVM calls, so renewals never wait behind them (CL-018).

ClaimVM can take long (battery runs the Pool's pre-lease hooks inside it, under the claim
deadline), while a renewal must reach battery within the Lease's expiry threshold. The claim
controller runs N reconciles at once; ClaimVM may hold at most N-1 of them
(`ClaimSlots.for_workers`), so at least one worker is always free for a Bound claim's
Heartbeat or ListLeases. A bind that finds every slot taken does not wait for one: it leaves
its key in a FIFO of waiters and ends, freeing its worker; when a slot frees, the first waiter
is handed to `on_free` (the runtime queues it at once), so 100 claims created together bind
back to back instead of in retry rounds. `retry_after` is the fallback requeue should a wake-up
be lost (e.g. the waiter's reconcile failed meanwhile).

The controller runs on one event loop, so a counter is enough (no lock).
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Final

DEFAULT_RETRY_AFTER: Final = 1.0
"""Seconds a bind that found no free slot waits before it is tried again."""


class ClaimSlots:
    """At most `limit` ClaimVM calls at once; `try_acquire` never waits."""

    def __init__(self, limit: int, *, retry_after: float = DEFAULT_RETRY_AFTER) -> None:
        if limit < 1:
            raise ValueError(f"ClaimSlots needs at least 1 slot, got {limit}")
        if retry_after <= 0:
            raise ValueError(f"ClaimSlots retry_after must be positive, got {retry_after}")
        self._limit = limit
        self._in_use = 0
        self._waiting: OrderedDict[Hashable, None] = OrderedDict()
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

    def queue_if_full(self, waiter: Hashable) -> bool:
        """True, with `waiter` queued for the next free slot, if every slot is taken now.

        For a bind to give up before its fresh read of the claim, which `try_acquire` would
        then refuse anyway: no API request is spent while the slots are busy.
        """
        if self._in_use < self._limit:
            return False
        self._waiting[waiter] = None
        return True

    @contextlib.contextmanager
    def try_acquire(self, waiter: Hashable | None = None) -> Iterator[bool]:
        """`with slots.try_acquire(key) as acquired:` True holds a slot for the block, False
        means every slot is taken (nothing is held; `waiter` is woken when one frees)."""
        if self._in_use >= self._limit:
            if waiter is not None:
                self._waiting[waiter] = None
            yield False
            return
        if waiter is not None:
            self._waiting.pop(waiter, None)
        self._in_use += 1
        try:
            yield True
        finally:
            self._in_use -= 1
            if self._waiting and self.on_free is not None:
                first, _ = self._waiting.popitem(last=False)
                self.on_free(first)

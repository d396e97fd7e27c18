"""`Demand`: what the claims ask of each Pool, for the Pools that size themselves (PO-107).

Two figures per Pool, both from the claims the operator watches, neither written anywhere:

- arrivals: when each claim naming the Pool as its `spec.poolRef` was made (its
  creationTimestamp), kept for `KEPT` after it, released claims included: a CI fleet's claims
  often live seconds, and the claim rate is the rate they were made at. A claim is counted
  once, however often it is listed again (by uid). The newest is kept apart, for the idle
  period.
- waiting: how many claims naming the Pool as their `spec.poolRef` are Pending with no Lease
  and reason `PoolExhausted` (the claim cache's `BY_WAITING_POOL` index, `Inputs` supplies the
  count): each needs one more MicroVM than the Pool holds.

After a restart the arrivals are the claims listed at start: those still existing. Released
ones are not seen again, so for one window the rate may read low, and the newest claim may
read older than it was. `since`, the time the claims were first listed, is what `autoscale`
counts from then: no size shrinks within a window of it, and no idle period starts before it;
until it is set, a Pool keeps its size.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Final

from batteryop.operator.keys import PoolKey

KEPT: Final = timedelta(hours=1)
"""How long an arrival is kept: the longest `window` the CRD allows (the idle period needs only
the newest arrival, kept apart)."""

PRUNE_EVERY: Final = 1024
"""Arrivals recorded between two prunings of a Pool's (each pruning walks them all)."""


class Demand:
    """The claims' arrivals per Pool, and the count of claims waiting for each."""

    def __init__(
        self,
        waiting: Callable[[PoolKey], int] | None = None,
        *,
        since: datetime | None = None,
    ) -> None:
        self._arrivals: dict[PoolKey, dict[str, datetime]] = {}
        self._newest: dict[PoolKey, datetime] = {}
        self.waiting: Callable[[PoolKey], int] = waiting or (lambda _pool: 0)
        self.since = since
        """When the operator first had the complete list of claims; None before (`listed`)."""

    def listed(self, now: datetime) -> None:
        """The claims have been listed (the first time: later lists change nothing here)."""
        if self.since is None:
            self.since = now

    def record(self, pool: PoolKey, uid: str, created: datetime) -> bool:
        """A claim on `pool` made at `created`; True if it was not counted before. Every
        `PRUNE_EVERY` arrivals, those older than `KEPT` before this one are dropped."""
        arrivals = self._arrivals.setdefault(pool, {})
        if uid in arrivals:
            return False
        arrivals[uid] = created
        newest = self._newest.get(pool)
        if newest is None or created > newest:
            self._newest[pool] = created
        if len(arrivals) % PRUNE_EVERY == 0:
            self._arrivals[pool] = {u: t for u, t in arrivals.items() if t >= created - KEPT}
        return True

    def arrivals_since(self, pool: PoolKey, since: datetime) -> tuple[int, datetime | None]:
        """How many claims on `pool` were made after `since`, and when the oldest of them was
        (None if none was)."""
        recent = [t for t in self._arrivals.get(pool, {}).values() if t > since]
        return len(recent), min(recent, default=None)

    def last_arrival(self, pool: PoolKey) -> datetime | None:
        """When the newest claim on `pool` was made; None if none was seen."""
        return self._newest.get(pool)

    def forget(self, pool: PoolKey) -> None:
        """The Pool is gone, or no longer sizes itself: nothing of it stays."""
        self._arrivals.pop(pool, None)
        self._newest.pop(pool, None)


__all__ = ["KEPT", "PRUNE_EVERY", "Demand"]

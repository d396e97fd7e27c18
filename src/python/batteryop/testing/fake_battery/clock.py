"""The fake battery's injectable clock (TD-004): a small protocol, the system clock, a fake one.

Every timestamp the fake battery stores or answers (claim time, heartbeats, expiry, event and
cordon times) and every schedule it keeps (the sweep, the reconcilers' ticks) reads a `Clock`.
`FakeClock` only moves when a test calls `advance()` / `set()`; use `FakeBattery.advance()` to
also wait until the sweeps and ticks that became due have run.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    """What the fake battery reads time from."""

    def now(self) -> datetime:
        """The current time, timezone-aware (UTC)."""
        ...

    async def sleep_until(self, when: datetime) -> None:
        """Return once now() >= when."""
        ...


class SystemClock:
    """The machine's wall clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    async def sleep_until(self, when: datetime) -> None:
        while True:
            left = (when - self.now()).total_seconds()
            if left <= 0:
                return
            await asyncio.sleep(left)


class FakeClock:
    """A clock that moves only when told; sleepers wake in deadline order as it passes them."""

    def __init__(self, start: datetime | None = None) -> None:
        if start is None:
            start = datetime.now(UTC).replace(microsecond=0)
        if start.tzinfo is None:
            raise ValueError("FakeClock needs a timezone-aware start time")
        self._now = start
        self._seq = itertools.count()
        self._sleepers: list[tuple[datetime, int, asyncio.Future[None]]] = []

    def now(self) -> datetime:
        return self._now

    async def sleep_until(self, when: datetime) -> None:
        if when <= self._now:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (when, next(self._seq), future))
        await future

    def next_deadline(self) -> datetime | None:
        """The earliest time a sleeper waits for, or None."""
        self._drop_cancelled()
        return self._sleepers[0][0] if self._sleepers else None

    def advance(self, seconds: float | timedelta) -> datetime:
        """Move time forward and wake every sleeper whose time has come; return the new now."""
        delta = seconds if isinstance(seconds, timedelta) else timedelta(seconds=seconds)
        if delta < timedelta(0):
            raise ValueError("a clock does not go backwards")
        return self.set(self._now + delta)

    def set(self, when: datetime) -> datetime:
        """Move time forward to when (never backwards) and wake the due sleepers."""
        if when < self._now:
            raise ValueError(f"a clock does not go backwards ({when} < {self._now})")
        self._now = when
        while self._sleepers and self._sleepers[0][0] <= when:
            _, _, future = heapq.heappop(self._sleepers)
            if not future.done():
                future.set_result(None)
        return self._now

    def _drop_cancelled(self) -> None:
        while self._sleepers and self._sleepers[0][2].done():
            heapq.heappop(self._sleepers)

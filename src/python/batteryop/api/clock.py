"""The one clock every deployable, the client and the fakes read time from: a small protocol,
the machine's clock, and a fake one that moves only when a test says.

    clock: Clock = SYSTEM_CLOCK
    clock.now()                  # the wall clock, timezone-aware (UTC): lease expiries, Events
    clock.monotonic()            # seconds that never go back: intervals, ages, due times
    await clock.sleep_until(t)   # until the wall clock reaches t (renewals, drain timeouts)

Code that waits for or compares times takes a `Clock` (keyword `clock`, default
`SYSTEM_CLOCK`), so tests give it a `FakeClock` instead of waiting: `advance()` / `set()` move
both readings together and wake the sleepers whose time has come, in deadline order.

Here, not in `batteryop.obs`, because the client wheel ships `batteryop.api` and
`batteryop.kube` only (`src/BUILD`), and the Kubernetes exec plugin reads the wall clock too.
No IO, standard library only, and Python 3.10 (the wheel's oldest).
"""

from __future__ import annotations

import asyncio
import datetime
import heapq
import itertools
import time
from typing import Final, Protocol

from batteryop.api._compat import UTC


class Clock(Protocol):
    """The current time (wall and monotonic), and a wait until a wall-clock time."""

    def now(self) -> datetime.datetime:
        """The wall clock, timezone-aware (UTC)."""
        ...

    def monotonic(self) -> float:
        """Seconds from an arbitrary start that never go back, for intervals."""
        ...

    async def sleep_until(self, when: datetime.datetime) -> None:
        """Return once `now() >= when`."""
        ...


class SystemClock:
    """The machine's clocks."""

    def now(self) -> datetime.datetime:
        return datetime.datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep_until(self, when: datetime.datetime) -> None:
        # Wake at least every minute: a suspended machine's monotonic clock may lag the wall.
        while (left := (when - self.now()).total_seconds()) > 0:
            await asyncio.sleep(min(left, 60.0))


SYSTEM_CLOCK: Final = SystemClock()
"""The default of every `clock` parameter."""


class FakeClock:
    """A clock that moves only when told; sleepers wake in deadline order as it passes them.

    `monotonic()` counts the seconds moved since creation (plus `monotonic_start`), so both
    readings move together."""

    def __init__(
        self, start: datetime.datetime | None = None, *, monotonic_start: float = 1000.0
    ) -> None:
        if start is None:
            start = datetime.datetime.now(UTC).replace(microsecond=0)
        if start.tzinfo is None:
            raise ValueError("FakeClock needs a timezone-aware start time")
        self._start = start
        self._now = start
        self._monotonic_start = monotonic_start
        self._seq = itertools.count()
        self._sleepers: list[tuple[datetime.datetime, int, asyncio.Future[None]]] = []

    def now(self) -> datetime.datetime:
        return self._now

    def monotonic(self) -> float:
        return self._monotonic_start + (self._now - self._start).total_seconds()

    async def sleep_until(self, when: datetime.datetime) -> None:
        if when <= self._now:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (when, next(self._seq), future))
        await future

    @property
    def sleepers(self) -> int:
        """How many `sleep_until` calls wait now."""
        self._drop_cancelled()
        return sum(1 for _, _, future in self._sleepers if not future.done())

    def next_deadline(self) -> datetime.datetime | None:
        """The earliest time a sleeper waits for, or None."""
        self._drop_cancelled()
        return self._sleepers[0][0] if self._sleepers else None

    def advance(self, seconds: float | datetime.timedelta) -> datetime.datetime:
        """Move time forward and wake every sleeper whose time has come; return the new now."""
        if isinstance(seconds, datetime.timedelta):
            delta = seconds
        else:
            delta = datetime.timedelta(seconds=seconds)
        if delta < datetime.timedelta(0):
            raise ValueError("a clock does not go backwards")
        return self.set(self._now + delta)

    def set(self, when: datetime.datetime) -> datetime.datetime:
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

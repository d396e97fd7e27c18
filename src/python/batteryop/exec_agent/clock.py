"""Where the agent reads the wall clock and waits for a time: one small protocol, injected.

The certificates' renewal points (`certs`, EA-063) and the drain timeout (`drain_guard`,
EA-040) are wall-clock times, hours away. Tests give both a clock that moves only when told,
instead of waiting for them.
"""

from __future__ import annotations

import asyncio
import datetime
from datetime import UTC
from typing import Protocol


class Clock(Protocol):
    """The current time, and a wait until a given time."""

    def now(self) -> datetime.datetime: ...

    async def sleep_until(self, when: datetime.datetime) -> None: ...


class SystemClock:
    def now(self) -> datetime.datetime:
        return datetime.datetime.now(UTC)

    async def sleep_until(self, when: datetime.datetime) -> None:
        # Wake at least every minute: a suspended machine's monotonic clock may lag the wall.
        while (left := (when - self.now()).total_seconds()) > 0:
            await asyncio.sleep(min(left, 60.0))

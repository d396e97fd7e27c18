"""Waiting in tests for state that can only be read, not watched: battery's API and the fake
flintlockd's control API (neither has a watch), the components' /metrics pages.

`wait_until(probe, predicate, what=..., within=...)` reads `probe()` every `interval` seconds
until `predicate` holds of what it read, and returns that; after `within` seconds it raises
`ConditionTimeoutError` naming `what` and showing the last reading. Where the API server can
be watched, the harnesses watch instead (`host_registry_env.until_listed`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

POLL_SECONDS = 0.1


class ConditionTimeoutError(TimeoutError):
    """A polled condition did not hold in time."""

    def __init__(self, what: str, timeout: float, last: object) -> None:
        shown = f"\n{last}" if isinstance(last, str) and "\n" in last else f" {last!r}"
        super().__init__(f"timed out after {timeout}s waiting for {what}; last seen:{shown}")
        self.what = what
        self.last = last


async def wait_until(
    probe: Callable[[], Awaitable[T]],
    predicate: Callable[[T], object],
    *,
    what: str,
    within: float = 15.0,
    interval: float = POLL_SECONDS,
) -> T:
    """The first `await probe()` for which `predicate` holds, read every `interval` seconds;
    ConditionTimeoutError if none does within `within` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        last = await probe()
        if predicate(last):
            return last
        if loop.time() >= deadline:
            raise ConditionTimeoutError(what, within, last)
        await asyncio.sleep(interval)

"""`Sleeps`: a `Supervisor`'s backoff waits (its `sleep`), each lasting until the test ends it.

    sleeps = Sleeps()
    supervisor = Supervisor(sleep=sleeps)
    ...
    wait = await sleeps.next()     # a task failed and waits to be started again
    assert sleeps.delays == [1.0]  # the backoff it was given
    wait.set()                     # start it again now

So a test sees every retry and its backoff without waiting for it.
"""

from __future__ import annotations

import asyncio

from batteryop.api._compat import within


class Sleeps:
    """Backoff waits that end when the test says; `delays` records each one asked for."""

    def __init__(self) -> None:
        self.delays: list[float] = []
        self._started: asyncio.Queue[asyncio.Event] = asyncio.Queue()

    async def __call__(self, seconds: float) -> None:
        end = asyncio.Event()
        self.delays.append(seconds)
        self._started.put_nowait(end)
        await end.wait()

    async def next(self, timeout: float = 5.0) -> asyncio.Event:
        """The next wait, once it started; set the event to end it."""
        return await within(self._started.get(), timeout)

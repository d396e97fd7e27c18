"""Stopping background tasks, the one way every deployable does it.

    await cancel_all(tasks)

cancels each task, then waits until every one has ended. What a task returns or raises while
it is being stopped is dropped: the caller is shutting it down, and a loop that failed earlier
was already logged by the `Supervisor` (`obs/supervisor.py`) that ran it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any


async def cancel_all(tasks: Iterable[asyncio.Future[Any]]) -> None:
    """Cancel every task in `tasks` and wait until each has ended."""
    pending = list(tasks)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)

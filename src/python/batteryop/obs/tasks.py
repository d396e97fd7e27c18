"""Stopping background tasks, the one way every deployable does it.

    await cancel_all(tasks)

cancels each task, then waits until every one has ended. What a task returns or raises while
it is being stopped is dropped: the caller is shutting it down, and a loop that failed earlier
was already logged by the `Supervisor` (`obs/supervisor.py`) that ran it.

A task still running `STRAGGLER_SECONDS` after it was cancelled is named in a warning, once, and
still waited for: such a task caught or lost its cancellation (as Python 3.11's `wait_for`
loses one, `api._compat.within`), and the process would otherwise hang at its stop with no word
of which task holds it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any, Final

log = logging.getLogger(__name__)

STRAGGLER_SECONDS: Final = 5.0
"""How long a cancelled task may take to end before a warning names it."""


async def cancel_all(
    tasks: Iterable[asyncio.Future[Any]], *, warn_after: float = STRAGGLER_SECONDS
) -> None:
    """Cancel every task in `tasks` and wait until each has ended; a task still running
    `warn_after` seconds later is named in a warning (module docstring)."""
    pending = list(tasks)
    for task in pending:
        task.cancel()
    if not pending:
        return
    _, running = await asyncio.wait(pending, timeout=warn_after)
    if running:
        names = sorted(t.get_name() if isinstance(t, asyncio.Task) else repr(t) for t in running)
        log.warning(
            "Still running %.0fs after they were cancelled, and waited for: %s",
            warn_after,
            ", ".join(names),
        )
    await asyncio.gather(*pending, return_exceptions=True)

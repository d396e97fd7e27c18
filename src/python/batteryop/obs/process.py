"""The life of a deployable's process, once for all of them: run its main coroutine on a new
event loop until SIGINT or SIGTERM asks it to stop, and turn the errors that mean "cannot
start" into one line on stderr and an exit code, never a traceback.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Awaitable, Callable, Mapping


def run_until_signalled(
    prog: str,
    main: Callable[[asyncio.Event], Awaitable[None]],
    *,
    fatal: Mapping[type[Exception], int],
) -> int:
    """Run `main(stop)`; SIGINT and SIGTERM set `stop`, and `main` returns once it has wound
    down. An exception of a type in `fatal` prints `<prog>: <error>` and returns its code (the
    first type in `fatal` that matches); 0 when `main` returned."""
    stop = asyncio.Event()

    async def _main() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await main(stop)

    try:
        asyncio.run(_main())
    except tuple(fatal) as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return next(code for kind, code in fatal.items() if isinstance(e, kind))
    return 0

"""The life of a deployable's process, once for all of them: `run_deployable` is every
deployable's `main()` (flags, logging, then its coroutine until a signal, and the exit code);
`run_until_signalled` runs the coroutine on a new event loop until SIGINT or SIGTERM asks it to
stop, and turns the errors that mean "cannot start" into one line on stderr and an exit code,
never a traceback.

    def main(argv: Sequence[str] | None = None) -> int:
        return run_deployable(PROG, argv, parse=parse, run=run, fatal={ValueError: 2}, log=log)

Exit codes: 2 for a flag the program cannot run with (a `config_errors` error: one line per
problem, `<prog>: <problem>`), the code `fatal` maps an error to, 0 after a signal.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Protocol, TypeVar

from batteryop.obs.logging import configure_logging


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


class ProcessConfig(Protocol):
    """What `run_deployable` reads of a deployable's settings."""

    @property
    def log_level(self) -> str: ...
    @property
    def log_format(self) -> str: ...


C = TypeVar("C", bound=ProcessConfig)


def run_deployable(
    prog: str,
    argv: Sequence[str] | None,
    *,
    parse: Callable[[Sequence[str] | None], C],
    run: Callable[[C, asyncio.Event], Awaitable[None]],
    config_errors: tuple[type[Exception], ...] = (ValueError,),
    fatal: Mapping[type[Exception], int],
    log: logging.Logger,
) -> int:
    """A deployable's `main()`: parse its flags (a `config_errors` error prints one line per
    problem, `<prog>: <problem>`, and returns 2), set up logging as they say, then
    `run(config, stop)` under `run_until_signalled` with `fatal`; log "Stopped" on a clean
    exit. The exit code."""
    try:
        config = parse(argv)
    except config_errors as e:
        for problem in _problems(e):
            print(f"{prog}: {problem}", file=sys.stderr)
        return 2
    configure_logging(config.log_level, "json" if config.log_format == "json" else "text")
    code = run_until_signalled(prog, lambda stop: run(config, stop), fatal=fatal)
    if code == 0:
        log.info("Stopped")
    return code


def _problems(error: Exception) -> list[str]:
    """The lines of a settings error: one per problem when it lists them, else its message."""
    problems = getattr(error, "problems", None)
    return [str(p) for p in problems] if problems else [str(error)]

"""What the client wheel needs from Python 3.11, on 3.10 too (CC: the wheel supports 3.10..3.13).

The library packages the client ships (`batteryop.api`, `batteryop.kube`) use `StrEnum` from
here rather than from `enum`: on 3.11 and newer it *is* `enum.StrEnum`; on 3.10 it is a `str`
Enum whose `str()` and format are its value, which is all the project relies on. (`datetime.UTC`
is `UTC` from here, the same object as `datetime.timezone.utc`.) Timeouts are caught as
`TIMEOUT_ERRORS`: from 3.11 `asyncio.TimeoutError` is the built-in `TimeoutError`, but on 3.10
it is a class of its own (`concurrent.futures.TimeoutError`, not an `OSError`), which is what
`asyncio.wait_for` and `Future.result(timeout)` raise there.

An awaitable is bounded in time with `within`, never with `asyncio.wait_for` directly: on 3.11,
`wait_for` returns the result when the awaitable finished in the same loop step as the caller's
cancellation, so the cancellation is lost and a task asked to stop runs on (a watch whose next
chunk had just arrived did, and its supervisor waited for it forever). `within` is
`asyncio.timeout` from 3.11, which keeps the cancellation and runs the awaitable in the
caller's task (no task of its own per call); on 3.10, which has no `asyncio.timeout`, it is
`wait_for`.
"""

from __future__ import annotations

import datetime
import enum
import sys
from collections.abc import Awaitable
from typing import Final, TypeVar

T = TypeVar("T")

UTC = datetime.timezone.utc  # noqa: UP017 (datetime.UTC is 3.11)
"""`datetime.UTC` of 3.11, the same object."""

# CC-111: one name for a timeout on 3.10 (two classes) and on 3.11 and newer (one). asyncio is
# imported only where it has a class of its own: its import costs ~25 ms, a fifth of the
# `battery --help` budget (docs/dev/client-performance.md).
if sys.version_info >= (3, 11):  # noqa: UP036 (the client wheel also runs on 3.10)
    TIMEOUT_ERRORS: Final[tuple[type[Exception], ...]] = (TimeoutError,)
else:  # pragma: no cover - exercised by the wheel test on CPython 3.10
    import asyncio

    TIMEOUT_ERRORS: Final[tuple[type[Exception], ...]] = (TimeoutError, asyncio.TimeoutError)
"""What a timeout raises on every supported Python: `except TIMEOUT_ERRORS:` (one class from 3.11)."""

if sys.version_info >= (3, 11):  # noqa: UP036 (the client wheel also runs on 3.10)
    from enum import StrEnum
else:  # pragma: no cover - exercised by the wheel test on CPython 3.10

    class StrEnum(str, enum.Enum):
        """`enum.StrEnum` of 3.11: members are strings; `str()` and `format()` give the value."""

        def __str__(self) -> str:
            return str(self.value)

        def __format__(self, spec: str) -> str:
            return str(self.value).__format__(spec)


if sys.version_info >= (3, 11):  # noqa: UP036 (the client wheel also runs on 3.10)

    async def within(awaitable: Awaitable[T], seconds: float | None) -> T:
        """`awaitable`'s result within `seconds` (None: no bound), else a timeout
        (`TIMEOUT_ERRORS`); a cancellation of the caller is never lost (module docstring)."""
        import asyncio  # here, not above: imported by every caller already (module docstring)

        if seconds is None:
            return await awaitable
        async with asyncio.timeout(seconds):
            return await awaitable

else:  # pragma: no cover - exercised by the wheel test on CPython 3.10

    async def within(awaitable: Awaitable[T], seconds: float | None) -> T:
        """`asyncio.wait_for` on 3.10, which has no `asyncio.timeout` (module docstring)."""
        import asyncio

        if seconds is None:
            return await awaitable
        return await asyncio.wait_for(awaitable, seconds)


__all__ = ["TIMEOUT_ERRORS", "UTC", "StrEnum", "within"]

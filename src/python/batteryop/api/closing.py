"""`AsyncClosing`: the one `async with` of the house's clients, closed by their `aclose()`.

    class KubeClient(AsyncClosing):
        async def aclose(self) -> None: ...

    async with KubeClient(config) as kube:   # kube.aclose() on the way out, whatever happened
        ...

`__aenter__` returns the object itself and `__aexit__` awaits its `aclose()`; a subclass
writes only `aclose`. Used by `kube.KubeClient`, `battery.BatteryClient`, the Exec Agent's
`Flintlockd` and the client wheel's `AsyncClient`: here, in `batteryop.api`, because the wheel
ships `batteryop.api` and `batteryop.kube` only. Standard library only, Python 3.10.
"""

from __future__ import annotations

from types import TracebackType
from typing import TypeVar

_Self = TypeVar("_Self", bound="AsyncClosing")


class AsyncClosing:
    """An async context manager that returns itself and calls `aclose()` on exit."""

    async def __aenter__(self: _Self) -> _Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Release what the object holds."""
        raise NotImplementedError

"""apply with restart: without host RPCs, settled changes go in by config and one restart (IN-102).

battery v0.4.0 answers `UNIMPLEMENTED` (BA-108). At the close of the restart window (IN-012)
every change settled by then is written to battery's config (IN-010, DP-004) and battery is
restarted once (`restart`, DP-006), together with a renewed client certificate (DP-007,
DP-008). A leaving Host is drained first (`drain`, IN-013). Cordons never wait for this
(`cordons`).
"""

from __future__ import annotations

from batteryop.host_registry.inventory.drain import drain
from batteryop.host_registry.inventory.restart import restart
from batteryop.host_registry.inventory.scope import RegistryScope
from batteryop.host_registry.inventory.write_back import write_back


async def apply_with_restart(scope: RegistryScope) -> None:
    """At the window's close: one config write and one restart for everything settled."""
    state = scope.state
    if state.host_api or not state.window.due(scope.now, work=bool(scope.settled) or scope.renewed):
        return
    # IN-012: everything settled by the window's close goes in this one restart.
    settled = state.settler.settled(scope.deps.clock.monotonic())
    new = dict(state.applied)
    for name, address in settled.items():
        if address is None:
            new.pop(name, None)
        else:
            new[name] = address
    leaving = set(state.applied) - set(new)
    if leaving:
        await drain(scope, leaving)
    state.written = new
    await write_back(scope)
    await restart(scope, new)
    state.settler.applied(set(settled))

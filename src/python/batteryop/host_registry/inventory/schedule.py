"""schedule: when the registry reconciles again without an input.

The earliest of: the next pending change settling (IN-011), the restart window closing
(IN-012), the next read of battery's Host list (IN-105), and, for a settled change that is
blocked meanwhile (a refused removal, IN-104), `RETRY_SECONDS`. Nothing pending: only the
next input (`outcome.requeue_after` stays None).
"""

from __future__ import annotations

from batteryop.host_registry.inventory.hosts import RETRY_SECONDS
from batteryop.host_registry.inventory.scope import RegistryScope


async def schedule(scope: RegistryScope) -> None:
    """Ask for the next reconcile at the earliest time something falls due."""
    state = scope.state
    now = scope.deps.clock.monotonic()
    times = [t for t in (state.settler.next_settles(now), state.window.closes_at) if t]
    if state.settler.pending and not times:
        times.append(now + RETRY_SECONDS)  # settled but blocked (e.g. a refused removal)
    if state.next_check_at is not None:
        times.append(state.next_check_at)  # IN-105
    if times:
        scope.outcome.requeue(max(0.0, min(times) - now))

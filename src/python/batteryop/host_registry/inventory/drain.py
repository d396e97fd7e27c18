"""drain: a Host leaving battery is drained first (IN-013).

The Host set is published without the leaving Hosts, then the drain waits until no battery
Pool names one of them (the Pool controller follows the Host set), or the drain timeout. The
timeout runs from the first drain of each Host: a retried removal waits no more. Both ways of
applying a leave (`apply_with_api`, `apply_with_restart`) drain through here.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final

from batteryop.host_registry.inventory.publish import publish_hosts
from batteryop.host_registry.inventory.scope import RegistryScope

log = logging.getLogger("batteryop.host_registry.controller")

DRAIN_CHECK_SECONDS: Final = 0.25
"""How often a drain asks battery which Pools still name a leaving Host: battery has no
watch of Pool specs, so this one wait polls battery, bounded by the drain timeout."""


async def drain(scope: RegistryScope, leaving: set[str]) -> bool:
    """Publish the Hosts that stay, then wait until no battery Pool names a leaving Host,
    or the drain timeout. True when drained."""
    await publish_hosts(scope, excluding=leaving)
    clock, deadlines = scope.deps.clock, scope.state.drain_deadlines
    now = clock.monotonic()
    deadline = max(deadlines.setdefault(n, now + scope.deps.config.drain_timeout) for n in leaving)
    while True:
        pools = await scope.deps.battery.list_pools()
        named = {h for p in pools for h in p.spec.flintlock_hosts} & leaving
        if not named:
            return True
        if clock.monotonic() >= deadline:
            log.warning(
                "Drain timed out; Pools still name leaving Hosts",
                extra={"hosts": sorted(named)},
            )
            return False
        await asyncio.sleep(DRAIN_CHECK_SECONDS)

"""cordons: Hosts battery has are cordoned and uncordoned as their Nodes are (IN-100).

`HostAdmin.CordonHost` and `UncordonHost`, at once and without a restart, whatever battery's
version. A Host on its way out is left to its leave; one battery does not know is logged.
"""

from __future__ import annotations

import logging
from typing import Final

from batteryop.battery.errors import PreconditionFailedError
from batteryop.host_registry.inventory.scope import RegistryScope

log = logging.getLogger("batteryop.host_registry.controller")

CORDON_REASON: Final = "Node cordoned"


async def cordons(scope: RegistryScope) -> None:
    """Cordon in battery the Hosts whose Nodes are cordoned, uncordon the others."""
    state, battery, metrics = scope.state, scope.deps.battery, scope.deps.metrics
    for name in sorted(state.applied):
        a = scope.admissions.get(name)
        if a is None or not a.is_host:
            continue  # leaving: settle decides, not the cordon
        try:
            if a.cordoned and name not in state.cordoned:
                # IN-100: cordoned in battery, no restart.
                await battery.cordon_host(name, reason=CORDON_REASON)
                state.cordoned.add(name)
                metrics.host_calls.labels("CordonHost", "ok").inc()
                log.info("Cordoned Host in battery", extra={"host": name})
            elif not a.cordoned and name in state.cordoned:
                await battery.uncordon_host(name)
                state.cordoned.discard(name)
                metrics.host_calls.labels("UncordonHost", "ok").inc()
                log.info("Uncordoned Host in battery", extra={"host": name})
        except PreconditionFailedError as e:
            log.warning("battery does not know Host %s: %s", name, e)

"""listed: nothing is reconciled before the Nodes and the battery config ConfigMap are listed.

Until both lists have come in, and while the ConfigMap is missing (its absence is logged),
the chain stops here and no retry is scheduled: the next input queues the reconcile again.
"""

from __future__ import annotations

import logging

from batteryop.host_registry.inventory.scope import RegistryScope

log = logging.getLogger("batteryop.host_registry.controller")


async def listed(scope: RegistryScope) -> None:
    """Stop the chain until every input is listed and the ConfigMap exists."""
    state = scope.state
    if not (state.nodes_listed and state.configmap_listed):
        scope.stop()
        return
    if state.configmap is None:
        config = scope.deps.config
        log.warning(
            "ConfigMap %s/%s is missing; waiting for it",
            config.namespace,
            config.battery_config_map,
        )
        scope.stop()

"""write back: battery's config in the ConfigMap holds what the registry wrote (IN-014).

If it does not (something reverted it, applying install.yaml again, or a host RPC changed the
record, IN-107), the ConfigMap is written again; no restart. A restart's config write and a
resume that finishes a pending restart write through here too.
"""

from __future__ import annotations

import logging

from batteryop.host_registry.inventory.configmap import config_text, configfile_key, patch_configmap
from batteryop.host_registry.inventory.scope import RegistryScope

log = logging.getLogger("batteryop.host_registry.controller")


async def write_back(scope: RegistryScope) -> None:
    """Write battery's config naming `written` unless the ConfigMap holds it already."""
    state, config = scope.state, scope.deps.config
    want = config_text(config, state.written)
    data = (state.configmap or {}).get("data") or {}
    if data.get(configfile_key(config)) == want:
        return
    log.info("Wrote back battery's config", extra={"hosts": sorted(state.written)})
    await patch_configmap(scope, {"data": {configfile_key(config): want}})

"""apply with api: each settled change goes into battery by AddHost, UpdateHost or RemoveHost,
never a restart (IN-101).

Only when battery answers `AddHost`/`RemoveHost` (battery after v0.4.0). A joining Host or a
new address is `AddHost` or `UpdateHost`; a leaving Host is drained first (`drain`, IN-013)
and then removed with `RemoveHost`, which battery refuses while MicroVMs are still on the
Host: the refusal is reported once per reason and retried every `RETRY_SECONDS` without
waiting out the drain again, the Host out of the Host set meanwhile (IN-104). A renewed
client certificate re-dials every Host with `UpdateHost` and is recorded (ours). battery
answering `UNIMPLEMENTED` after all switches the registry to `apply_with_restart` (IN-102).
"""

from __future__ import annotations

import logging

from batteryop.api import names
from batteryop.battery.errors import UnimplementedError
from batteryop.host_registry.inventory.configmap import patch_annotations
from batteryop.host_registry.inventory.drain import drain
from batteryop.host_registry.inventory.hosts import host_tls, lose_host_api, put, remove
from batteryop.host_registry.inventory.scope import RegistryScope

log = logging.getLogger("batteryop.host_registry.controller")


async def apply_with_api(scope: RegistryScope) -> None:
    """Apply the settled changes by RPC; re-dial every Host on a renewed certificate."""
    state = scope.state
    if not state.host_api:
        return
    if scope.settled:
        await _apply(scope)
    if scope.renewed and state.host_api:
        await _redial(scope)


async def _apply(scope: RegistryScope) -> None:
    """AddHost / UpdateHost / RemoveHost of each settled change."""
    state, settled = scope.state, scope.settled
    leaving = {n for n, a in settled.items() if a is None and n in state.applied}
    try:
        for name, address in sorted(settled.items()):
            if address is None:
                continue
            rpc = await put(scope, name, address)
            log.info(
                "Added Host to battery" if rpc == "AddHost" else "Updated Host in battery",
                extra={"host": name, "address": address},
            )
        if leaving:
            drained = await drain(scope, leaving)
            for name in sorted(leaving):
                if await remove(scope, name, drained=drained):
                    log.info("Removed Host from battery", extra={"host": name})
    except UnimplementedError:
        lose_host_api(scope)
    scope.deps.metrics.hosts.set(len(state.applied))


async def _redial(scope: RegistryScope) -> None:
    """A renewed client certificate: `UpdateHost` makes battery read the files again."""
    state = scope.state
    for name in sorted(state.applied):
        try:
            await scope.deps.battery.update_host(name, state.applied[name], tls=host_tls(scope))
        except UnimplementedError:
            state.host_api = False
            return
    state.recorded_digest = scope.digest
    await patch_annotations(scope, {names.CLIENT_CERTIFICATE_SHA256_ANNOTATION: scope.digest})

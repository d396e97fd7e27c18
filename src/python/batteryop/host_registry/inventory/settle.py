"""settle: a change counts once it has held for the settle time; a flap back is forgotten (IN-011).

Each Node's wanted membership (`admit`) is observed against what battery has; what has held
for `--settle-time` by now is this reconcile's `settled`. The client certificate is read too:
one that differs from the certificate battery last read is `renewed` (DP-007), and applied
with the settled changes.
"""

from __future__ import annotations

from batteryop.host_registry.inventory.configmap import certificate_digest
from batteryop.host_registry.inventory.scope import RegistryScope


async def settle(scope: RegistryScope) -> None:
    """Observe the wanted membership; record what has settled and whether the certificate
    was renewed."""
    state = scope.state
    state.settler.observe(scope.wanted, state.applied, scope.now)
    scope.settled = state.settler.settled(scope.now)
    scope.digest = certificate_digest(scope.deps.config.client_certificate)
    scope.renewed = scope.digest is not None and scope.digest != state.recorded_digest

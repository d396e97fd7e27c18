"""restart: battery restarted on a new config, once (IN-102, DP-006..DP-008).

The ConfigMap is marked `restart-pending`; the restart waits until this container's mount of
the ConfigMap shows the new config (inotify, no polling), has `Restarter` stop battery's
process (the kubelet starts it again) and waits for the new battery to answer with the new
Hosts; then it reads what battery has, clears `restart-pending` and records the client
certificate's SHA-256 battery read (DP-007). `apply_with_restart` restarts through here, and
`resume` when it finishes a restart left pending.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from datetime import timedelta

from batteryop.api import names
from batteryop.battery.errors import BatteryUnavailableError
from batteryop.host_registry.inventory.configmap import (
    certificate_digest,
    config_text,
    patch_annotations,
)
from batteryop.host_registry.inventory.hosts import battery_hosts, learn_battery
from batteryop.host_registry.inventory.scope import RegistryScope

log = logging.getLogger("batteryop.host_registry.controller")


async def restart(scope: RegistryScope, hosts: Mapping[str, str]) -> None:
    """Restart battery on the config naming `hosts`, once it shows in the mount."""
    deps = scope.deps
    text = config_text(deps.config, hosts)
    await patch_annotations(scope, {names.RESTART_PENDING_ANNOTATION: "true"})
    await _mount_shows(scope, text)  # DP-006 (1)
    digest = certificate_digest(deps.config.client_certificate)  # DP-007: what we see
    expected = set(hosts)

    async def answered(within: float) -> None:
        await _wait_battery_has(scope, expected, within)

    took = await deps.restarter.restart(answered)
    deps.metrics.restarts.inc()
    deps.metrics.restart_seconds.observe(took)
    await learn_battery(scope)
    scope.state.recorded_digest = digest
    await patch_annotations(
        scope,
        {
            names.RESTART_PENDING_ANNOTATION: None,
            names.CLIENT_CERTIFICATE_SHA256_ANNOTATION: digest,
        },
    )
    log.info(
        "Restarted battery",
        extra={"hosts": sorted(hosts), "seconds": round(took, 3)},
    )


async def _mount_shows(scope: RegistryScope, text: str) -> None:
    """Wait until this container's mount of the ConfigMap shows `text` (inotify)."""
    deps = scope.deps
    path = deps.config.battery_config_file
    deadline = deps.clock.monotonic() + deps.config.restart_timeout
    while True:
        generation = deps.watch.generation
        try:
            if path.read_text(encoding="utf-8") == text:
                return
        except OSError:
            pass
        remaining = deadline - deps.clock.monotonic()
        if remaining <= 0 or not await deps.watch.changed_after(generation, remaining):
            raise TimeoutError(f"{path} did not show the new config in time")


async def _wait_battery_has(scope: RegistryScope, expected: set[str], within: float) -> None:
    clock = scope.deps.clock
    deadline = clock.monotonic() + within
    while True:
        remaining = deadline - clock.monotonic()
        if remaining <= 0:
            raise TimeoutError
        try:
            have = await battery_hosts(scope)
            if set(have) == expected:
                return
            await asyncio.sleep(min(0.1, remaining))  # the old process's last answers
        except BatteryUnavailableError:
            await _wait_connected(scope, remaining)


async def _wait_connected(scope: RegistryScope, within: float) -> None:
    wait = getattr(scope.deps.battery, "wait_connected", None)
    if wait is None:
        await asyncio.sleep(min(0.1, within))
        return
    try:
        await wait(timedelta(seconds=max(0.01, within)))
    except BatteryUnavailableError:
        pass

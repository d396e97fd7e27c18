"""check battery: battery's own Host list read again when due, and what drifted repaired (IN-105).

Due at start, each time the connection to battery is made again (`loops.follow_connection`:
battery restarted, or the channel dropped), and every `--host-resync-interval`. With the host
RPCs, `written` is the record of the Hosts the registry put into battery (it follows every
AddHost, UpdateHost and RemoveHost that succeeded, IN-107): a Host in it that battery lacks,
whose Node is still a Host at that address, is added again at once; a Host battery holds that
the registry removed, whose Node is not a Host, is removed again at once; one battery holds
that the registry did not add but whose Node is a Host is adopted. Each repair is counted
(`drift_repairs_total{action}`) and logged with the Host's name. The next check is one
`--host-resync-interval` later, or `RETRY_SECONDS` when battery did not answer or refused a
repair.
"""

from __future__ import annotations

import logging

from batteryop.battery.errors import BatteryError, BatteryUnavailableError, UnimplementedError
from batteryop.host_registry.inventory.hosts import (
    RETRY_SECONDS,
    learn_battery,
    lose_host_api,
    put,
    remove,
)
from batteryop.host_registry.inventory.scope import RegistryScope

log = logging.getLogger("batteryop.host_registry.controller")


async def check_battery(scope: RegistryScope) -> None:
    """Read battery's Host list if due; with the host RPCs, repair what drifted."""
    state, deps = scope.state, scope.deps
    if state.next_check_at is None or scope.now < state.next_check_at:
        return
    trigger = state.check_trigger
    try:
        await learn_battery(scope)
    except BatteryUnavailableError as e:
        log.info("battery does not answer; its Hosts are checked again later: %s", e)
        state.next_check_at = deps.clock.monotonic() + RETRY_SECONDS
        return
    deps.metrics.host_checks.labels(trigger).inc()
    retry = await _repair(scope) if state.host_api else False
    deps.metrics.hosts.set(len(state.applied))
    state.check_trigger = "retry" if retry else "periodic"
    wait = RETRY_SECONDS if retry else deps.config.host_resync_interval
    state.next_check_at = deps.clock.monotonic() + wait


async def _repair(scope: RegistryScope) -> bool:
    """Add again the Hosts battery lost, remove again the Hosts it holds that the registry
    removed. True when a repair failed and is to be tried again soon."""
    state, metrics, wanted = scope.state, scope.deps.metrics, scope.wanted
    retry = False
    for name in sorted(set(state.written) - set(state.applied)):
        address = state.written[name]
        if wanted.get(name) != address:
            # Not a Host at that address any more: battery lost what was leaving anyway, or
            # a new address settles first (IN-011).
            del state.written[name]
            continue
        log.warning(
            "battery lost Host %s; adding it again",
            name,
            extra={"host": name, "address": address},
        )
        try:
            await put(scope, name, address)
        except UnimplementedError:
            lose_host_api(scope)
            return False
        except BatteryUnavailableError:
            raise
        except BatteryError as e:
            metrics.host_calls.labels("AddHost", "error").inc()
            log.warning(
                "battery refused to add Host %s again: %s; trying again in %.0fs",
                name,
                e,
                RETRY_SECONDS,
                extra={"host": name},
            )
            retry = True
            continue
        metrics.drift_repairs.labels("add").inc()
        log.info("Added Host to battery again", extra={"host": name, "address": address})
    for name in sorted(set(state.applied) - set(state.written)):
        if name in wanted:
            state.written[name] = state.applied[name]  # put there by someone: adopted
            continue
        log.warning(
            "battery holds Host %s, which the registry removed; removing it again",
            name,
            extra={"host": name},
        )
        try:
            removed = await remove(scope, name, drained=False)
        except UnimplementedError:
            lose_host_api(scope)
            return False
        if not removed:
            retry = True
            continue
        metrics.drift_repairs.labels("remove").inc()
        log.info("Removed Host from battery again", extra={"host": name})
    return retry

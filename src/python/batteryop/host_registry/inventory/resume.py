"""resume: once, at the first reconcile, learn what battery has and what the ConfigMap holds.

Reads battery's Host list (`ListHosts`) and whether battery answers the host RPCs (GetHost of
the placeholder's name: NOT_FOUND where it does, UNIMPLEMENTED in v0.4.0, BA-108; IN-101,
IN-102), and the record of what the registry wrote from battery's config in the ConfigMap
(IN-014: a reverted file with the Hosts recorded takes battery's own list first, then the
published Host set; IN-107: with the host RPCs what battery holds counts as put there by the
registry). Records the client certificate battery started with if nothing is recorded
(DP-007), and finishes a restart left pending (`restart-pending`, DP-006). battery not
answering raises `BatteryNotReadyError`: the work queue retries with backoff.
"""

from __future__ import annotations

import logging

from batteryop.api import names
from batteryop.battery import configfile
from batteryop.battery.errors import BatteryError, BatteryUnavailableError, UnimplementedError
from batteryop.host_registry.inventory.configmap import (
    annotations_of,
    certificate_digest,
    configfile_key,
    patch_annotations,
    published_entries,
)
from batteryop.host_registry.inventory.hosts import learn_battery
from batteryop.host_registry.inventory.restart import restart
from batteryop.host_registry.inventory.scope import RegistryScope
from batteryop.host_registry.inventory.write_back import write_back

log = logging.getLogger("batteryop.host_registry.controller")


class BatteryNotReadyError(RuntimeError):
    """battery does not answer yet; the reconcile is retried."""


async def _probe_host_api(scope: RegistryScope) -> bool:
    """IN-101, IN-102: whether battery answers the host RPCs."""
    try:
        await scope.deps.battery.get_host(configfile.NO_HOSTS_NAME)
    except UnimplementedError:
        return False
    except BatteryUnavailableError:
        raise
    except BatteryError:
        pass  # NotFound and the like: the RPC exists
    return True


async def resume(scope: RegistryScope) -> None:
    """Learn battery and the ConfigMap's record, once; finish a pending restart."""
    state, deps = scope.state, scope.deps
    if state.resumed:
        return
    try:
        await learn_battery(scope)
        state.host_api = await _probe_host_api(scope)
    except BatteryUnavailableError as e:
        raise BatteryNotReadyError(f"battery does not answer yet: {e}") from None
    deps.metrics.host_api.set(1 if state.host_api else 0)
    cm = state.configmap or {}
    text = (cm.get("data") or {}).get(configfile_key(deps.config), "")
    try:
        state.written = configfile.hosts_of(text) if text else {}
    except configfile.ConfigFileError as e:
        log.warning("battery's config does not parse; it is written again: %s", e)
        state.written = {}
    if not state.written and not state.host_api:
        # IN-014: a reverted file, but the Hosts were recorded; battery's own list first.
        state.written = dict(state.applied) or published_entries(cm)
    if state.host_api:
        # IN-107: what battery holds at start counts as put there by the registry, so a
        # Host whose Node left meanwhile leaves by settling and draining, as any other.
        for name, address in state.applied.items():
            state.written.setdefault(name, address)
    state.check_trigger = "start"
    state.next_check_at = deps.clock.monotonic()
    annotations = annotations_of(scope)
    state.recorded_digest = annotations.get(names.CLIENT_CERTIFICATE_SHA256_ANNOTATION)
    if state.recorded_digest is None:
        # Nothing recorded: battery started with whatever the mount held; record that.
        state.recorded_digest = certificate_digest(deps.config.client_certificate)
        await patch_annotations(
            scope, {names.CLIENT_CERTIFICATE_SHA256_ANNOTATION: state.recorded_digest}
        )
    pending = annotations.get(names.RESTART_PENDING_ANNOTATION) == "true"
    if pending and not state.host_api and state.applied != state.written:
        log.info("Finishing a restart left pending", extra={"hosts": sorted(state.written)})
        await write_back(scope)
        await restart(scope, state.written)
    elif pending:
        await patch_annotations(scope, {names.RESTART_PENDING_ANNOTATION: None})
    state.resumed = True
    log.info(
        "Resumed",
        extra={"hosts": sorted(state.applied), "host_api": state.host_api},
    )
    scope.now = (
        deps.clock.monotonic()
    )  # a resume may have restarted battery: the reconcile's now after it

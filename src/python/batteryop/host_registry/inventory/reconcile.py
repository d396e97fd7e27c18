"""`reconcile_inventory`: one reconcile of the registry's whole inventory, Nodes to battery's Hosts.

The same shape as the operator's (`batteryop.kube.chain`): a `RegistryScope`, the steps of
`CHAIN` in order until one stops it, then every step of `LAST` (none: nothing must run after
a stop, and an error raises out of the chain to the work queue, which retries with backoff).
Those two tuples are the order; each step's module says what it owns and why it sits where
it does, and `docs/host-registry.md` lists them from here.

The inventory is one key of a one-worker work queue, so one reconcile runs at a time over
every Node. Unlike the operator's steps, the registry's call the API server themselves (the
battery config ConfigMap, ordered against battery calls; `scope` says why); the `Outcome`
carries when to reconcile again without an input (`schedule`).
"""

from __future__ import annotations

from batteryop.host_registry.inventory.admit import admit
from batteryop.host_registry.inventory.apply_with_api import apply_with_api
from batteryop.host_registry.inventory.apply_with_restart import apply_with_restart
from batteryop.host_registry.inventory.check_battery import check_battery
from batteryop.host_registry.inventory.cordons import cordons
from batteryop.host_registry.inventory.deps import RegistryDeps
from batteryop.host_registry.inventory.listed import listed
from batteryop.host_registry.inventory.publish import publish
from batteryop.host_registry.inventory.resume import resume
from batteryop.host_registry.inventory.schedule import schedule
from batteryop.host_registry.inventory.scope import RegistryScope
from batteryop.host_registry.inventory.settle import settle
from batteryop.host_registry.inventory.state import RegistryState
from batteryop.host_registry.inventory.write_back import write_back
from batteryop.kube.chain import Step, run_chain

CHAIN: tuple[Step[RegistryScope], ...] = (
    listed,
    resume,
    admit,
    check_battery,
    settle,
    cordons,
    apply_with_api,
    apply_with_restart,
    write_back,
    publish,
    schedule,
)
"""The steps, in order, until one stops the chain."""

LAST: tuple[Step[RegistryScope], ...] = ()
"""Run after the chain, always: none."""


async def reconcile_inventory(state: RegistryState, deps: RegistryDeps) -> float | None:
    """Reconcile every Node with battery; seconds until the next reconcile, or None."""
    scope = RegistryScope(state, deps, deps.clock.monotonic())
    await run_chain(scope, CHAIN, LAST)
    return scope.outcome.requeue_after


__all__ = ["CHAIN", "LAST", "RegistryDeps", "RegistryState", "reconcile_inventory"]

"""publish: the Host set on the battery config ConfigMap (`names.HOSTS_ANNOTATION`, IN-106).

The Hosts battery has, as last read and changed since, whose Nodes are not cordoned and that
are not on their way out, as `[{"name": ..., "address": ...}]`. A joining Host is published
only once battery has it; a Host battery lost stays published only if adding it again
succeeded first. A Host whose leave has settled stays out while battery still has it
(draining, or its removal refused, IN-013, IN-104); it comes back only if its Node does. A
drain publishes through `publish_hosts` too, before it waits.
"""

from __future__ import annotations

import logging
from collections.abc import Set

from batteryop.api import names
from batteryop.host_registry.inventory.configmap import (
    annotations_of,
    patch_annotations,
    publication,
)
from batteryop.host_registry.inventory.scope import RegistryScope

log = logging.getLogger("batteryop.host_registry.controller")


def leaving(scope: RegistryScope) -> set[str]:
    """Hosts battery has whose leave has settled; with the host RPCs also those the
    registry removed that battery holds again, until they are removed again (IN-105)."""
    state = scope.state
    out = {
        n
        for n, a in state.settler.settled(scope.deps.clock.monotonic()).items()
        if a is None and n in state.applied
    }
    if state.host_api:
        out |= set(state.applied) - set(state.written)
    return out


def forget_leaves(scope: RegistryScope, keep: Set[str]) -> None:
    """Drain deadlines and reported refusals of Hosts no longer leaving go."""
    state = scope.state
    for name in set(state.drain_deadlines) - set(keep):
        del state.drain_deadlines[name]
    for name in set(state.refusals) - set(keep):
        del state.refusals[name]


async def publish_hosts(scope: RegistryScope, excluding: Set[str] = frozenset()) -> None:
    """Write the Host set, without `excluding` and cordoned Hosts, if it changed."""
    state, admissions = scope.state, scope.admissions
    hosts = {
        n: a
        for n, a in state.applied.items()
        if n not in excluding and not (n in admissions and admissions[n].cordoned)
    }
    value = publication(hosts)
    scope.deps.metrics.published.set(len(hosts))
    if annotations_of(scope).get(names.HOSTS_ANNOTATION) == value:
        return
    now = scope.deps.clock.monotonic()
    for name in hosts:
        state.published_at.setdefault(name, now)
    for name in set(state.published_at) - set(hosts):
        del state.published_at[name]
    await patch_annotations(scope, {names.HOSTS_ANNOTATION: value})
    log.info("Published Host set", extra={"hosts": sorted(hosts)})


async def publish(scope: RegistryScope) -> None:
    """Publish the Host set battery has, without the Hosts on their way out."""
    out = leaving(scope)  # IN-013, IN-104
    forget_leaves(scope, keep=out)
    await publish_hosts(scope, excluding=out)
    scope.deps.metrics.pending.set(len(scope.state.settler.pending))

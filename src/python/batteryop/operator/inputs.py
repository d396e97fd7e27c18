"""`Inputs`: what the operator hears, and whom each input queues.

Pools, claims, Nodes and the battery config ConfigMap come from `informer.list_watch` (a
complete list, then each watch event; `loops`); battery's Events from its stream. A list
replaces what the operator knew: an object missing from it is gone, whatever watch events
were missed while the stream was down (a 410 Gone relist included), and leaves every cache.
The Host set is only computed from every Node (a partial one would declare a Pool to battery
on too few Hosts after a restart, PO-101).

- Pool events -> that Pool. Claim events -> that claim, and its Pool when the claim is gone
  (a deleted Pool goes as soon as its last claim is released, PO-044). A claim seen for the
  first time is an arrival on its `spec.poolRef` Pool (`pools.demand`); every event of a
  claim whose Pool has spec.autoscaling queues that Pool, coalesced (RS-108, PO-107).
- Node events -> every Pool (the Host set resolves labels on Nodes, PO-011) and the claims
  bound to that Node (agent address and HostReady, CL-005, CL-050..053).
- The battery config ConfigMap (published Host set) -> every Pool (PO-011).
- battery Events -> the Pool named (PO-023); VM_HOOK_FAILED -> a Warning on the Pool
  (PO-041); MicroVM deleted -> the claim holding it (CL-013); VM_AVAILABLE -> the claim
  waiting longest for that Pool, one per MicroVM (CL-109, `claims.waiters`).
- battery's Events stream connected, and a claim listed at start: every Bound claim, to read
  its Lease from battery at once (CL-030, `check_every_lease`).

Nothing here calls the API server or battery: each input updates a cache and queues work.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import Any

from batteryop.api import names
from batteryop.api.clock import SYSTEM_CLOCK, Clock
from batteryop.api.conditions import ClaimConditionType, ClaimPhase, ClaimReason
from batteryop.api.times import parse_time
from batteryop.battery import PoolRef
from batteryop.battery.models import EventType
from batteryop.kube.events import EventRecorder
from batteryop.operator.claim_metrics import ClaimMetrics
from batteryop.operator.claims import indexes
from batteryop.operator.claims.expiry import DeletedVMs
from batteryop.operator.claims.lease_checks import LeaseChecks
from batteryop.operator.claims.slots import ClaimSlots
from batteryop.operator.claims.waiters import Waiters
from batteryop.operator.hostset import HostsAnnotationError, host_set, published_hosts
from batteryop.operator.keys import PoolKey, pool_key_for_claim
from batteryop.operator.pools.deps import PoolDeps
from batteryop.operator.pools.hook_events import hook_failed_event
from batteryop.operator.runtime import Controller, Key, ObjectCache, key_of

log = logging.getLogger("batteryop.operator.app")

POOL_EVENT_COALESCE_SECONDS = 1.0
"""A battery Event refreshes its Pool this much later; the events meanwhile add nothing. A
burst of binds makes a burst of events for one Pool (leased, provisioning, ready, ...): at one
refresh a second its status costs a few writes per 100 claims instead of one per two."""


def _created(body: Mapping[str, Any] | None) -> str:
    """A body's creationTimestamp (RFC 3339 in UTC, so its order is the time's), or ""."""
    value = ((body or {}).get("metadata") or {}).get("creationTimestamp")
    return value if isinstance(value, str) else ""


def _bound(claim: Mapping[str, Any]) -> bool:
    """Bound to a Lease and not being deleted: a claim CL-030 checks against battery."""
    status = claim.get("status") or {}
    meta = claim.get("metadata") or {}
    return (
        status.get("phase") == ClaimPhase.BOUND
        and bool(status.get("leaseID"))
        and not meta.get("deletionTimestamp")
    )


def _exhausted_on(claim: Mapping[str, Any], pool: str) -> bool:
    """Whether the claim waits for `pool` (CL-109's index), its first Pool, with its Bound
    condition saying PoolExhausted."""
    if ((claim.get("spec") or {}).get("poolRef") or {}).get("name") != pool:
        return False
    if not indexes.waiting_on(claim):
        return False
    conditions = (claim.get("status") or {}).get("conditions") or []
    return any(
        c.get("type") == ClaimConditionType.BOUND and c.get("reason") == ClaimReason.POOL_EXHAUSTED
        for c in conditions
        if isinstance(c, Mapping)
    )


class Inputs:
    """Routes every input of the operator into its caches and work queues."""

    def __init__(
        self,
        *,
        pools: Controller,
        claims: Controller,
        nodes: ObjectCache,
        pool_deps: PoolDeps,
        deleted_vms: DeletedVMs,
        lease_checks: LeaseChecks,
        claim_slots: ClaimSlots,
        recorder: EventRecorder,
        claim_metrics: ClaimMetrics,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.pools = pools
        self.claims = claims
        self.nodes = nodes
        self.pool_deps = pool_deps
        self.deleted_vms = deleted_vms
        self.lease_checks = lease_checks
        self.claim_slots = claim_slots
        self.recorder = recorder
        self.claim_metrics = claim_metrics
        self.waiters = Waiters(clock)
        self.clock = clock
        self.pool_deps.demand.waiting = self._waiting_for
        self._sized: set[PoolKey] = set()
        """The Pools with spec.autoscaling whose arrivals are being recorded."""
        self.nodes_listed = False
        self.pools_listed = asyncio.Event()
        """Set once the Pools were listed: claims are judged against the Pool cache (CL-004),
        so their watch starts only then (`loops.Loops.watch_claims`)."""
        self.published: tuple[str, ...] | None = None

    def claims_holding(self, vm_uid: str) -> list[Key]:
        """The claims whose status records the MicroVM `vm_uid` (an index, no walk)."""
        return self.claims.cache.keys_by(indexes.BY_MICROVM, vm_uid)

    def on_pool(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        self.pools.observe(event_type, body)
        key = PoolKey(*key_of(body))
        if event_type == "DELETED" or not (body.get("spec") or {}).get("autoscaling"):
            self._sized.discard(key)
            self.pool_deps.demand.forget(key)
        elif key not in self._sized:
            # PO-107: a Pool that sizes itself from now on counts the claims already made.
            self._sized.add(key)
            for claim in self.claims.cache:
                self._demand(None, claim)

    def on_pools_listed(self, items: list[dict[str, Any]]) -> None:
        """A complete list of Pools: one missing from it is gone (its DELETED was missed)."""
        listed = {key_of(body) for body in items}
        for body in self.pools.cache:
            if key_of(body) not in listed:
                self.on_pool("DELETED", body)
        for body in items:
            self.on_pool(None, body)
        self.pools_listed.set()

    def on_claims_listed(self, items: list[dict[str, Any]]) -> None:
        """A complete list of claims: one missing from it is gone (its DELETED was missed,
        say while the watch was relisting after a 410), and leaves everything."""
        listed = {key_of(body) for body in items}
        for body in self.claims.cache:
            if key_of(body) not in listed:
                self.on_claim("DELETED", body)
        for body in items:
            self.on_claim(None, body)
        if self.pool_deps.demand.since is None:
            # PO-107: from now the policy Pools know their claims; until now they kept their
            # size.
            self.pool_deps.demand.listed(self.clock.now())
            for key in self._sized:
                self.pools.enqueue((key.namespace, key.name))

    def on_claim(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        old = self.claims.cache.get(key_of(body))
        self.claims.observe(event_type, body)
        self.claim_metrics.observe(event_type, body)
        if event_type == "DELETED":
            # Nothing of a deleted claim stays: no Lease check, no place among the ClaimVM
            # waiters (its reserved slot goes to the next one).
            self.lease_checks.done(key_of(body))
            self.claim_slots.forget(key_of(body))
        elif event_type is None and _bound(body):
            # CL-030, on start: a listed Bound claim reads its Lease from battery at once.
            self.lease_checks.require(key_of(body))
        self._demand(event_type, body, old)
        finalizers = (body.get("metadata") or {}).get("finalizers") or []
        if event_type == "DELETED" or names.CLAIM_FINALIZER not in finalizers:
            pool = pool_key_for_claim(body)
            if pool is not None:
                self.pools.enqueue((pool.namespace, pool.name))  # PO-044

    def _demand(
        self,
        event_type: str | None,
        body: Mapping[str, Any],
        old: Mapping[str, Any] | None = None,
    ) -> None:
        """PO-107: a claim's arrival on its first Pool, and that Pool queued (coalesced) when
        it sizes itself and the claim arrived or started or ended a wait (`old` is the body
        before this event): renewals and the operator's own writes queue nothing."""
        spec = body.get("spec") or {}
        meta = body.get("metadata") or {}
        pool = (spec.get("poolRef") or {}).get("name")
        namespace = meta.get("namespace")
        if not isinstance(pool, str) or not isinstance(namespace, str):
            return
        key = PoolKey(namespace, pool)
        if key not in self._sized:
            return
        created, uid = meta.get("creationTimestamp"), meta.get("uid")
        arrived = False
        if event_type != "DELETED" and isinstance(created, str) and isinstance(uid, str):
            with contextlib.suppress(ValueError):  # the API server writes RFC 3339
                arrived = self.pool_deps.demand.record(key, uid, parse_time(created))
        waits = event_type != "DELETED" and _exhausted_on(body, pool)
        waited = old is not None and _exhausted_on(old, pool)
        if arrived or waits != waited:
            self.pools.enqueue((namespace, pool), after=POOL_EVENT_COALESCE_SECONDS)

    def _waiting_for(self, pool: PoolKey) -> int:
        """PO-107: the claims whose first Pool is `pool` that wait for a MicroVM: in CL-109's
        index (Pending, no Lease, not being deleted) with reason `PoolExhausted`."""
        cache = self.claims.cache
        waiting = cache.keys_by(indexes.BY_WAITING_POOL, f"{pool.namespace}/{pool.name}")
        return sum(1 for key in waiting if _exhausted_on(cache.get(key) or {}, pool.name))

    def on_node(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        if event_type == "DELETED":
            self.nodes.drop(key_of(body))
        elif not self.nodes.put(body):
            return
        self._nodes_changed({key_of(body)[1]})

    def on_nodes_listed(self, items: list[dict[str, Any]]) -> None:
        """A complete list of Nodes: replaces the cache; the Host set is known from now on."""
        listed = {key_of(body) for body in items}
        changed = set()
        for body in self.nodes:
            if key_of(body) not in listed:
                self.nodes.drop(key_of(body))
                changed.add(key_of(body)[1])
        changed.update(key_of(body)[1] for body in items if self.nodes.put(body))
        self.nodes_listed = True
        self._nodes_changed(changed)  # once for the whole list, the Host set included

    def _nodes_changed(self, nodes: set[str]) -> None:
        """The Host set again (PO-011), and the claims bound to those Nodes (CL-005, CL-050)."""
        self._refresh_hosts()
        for node in sorted(nodes):
            for key in self.claims.cache.keys_by(indexes.BY_NODE, node):
                self.claims.enqueue(key)

    def on_battery_config(self, body: Mapping[str, Any] | None) -> None:
        try:
            published = published_hosts(body)
        except HostsAnnotationError as e:
            log.error("Ignored the published Host set: %s", e)
            return
        if published != self.published:
            self.published = published
            self._refresh_hosts()

    def _refresh_hosts(self) -> None:
        if not self.nodes_listed:
            return  # a Host set without every Node would place Pools on too few Hosts
        nodes = {key[1]: body for body in self.nodes for key in [key_of(body)]}
        hosts = host_set(self.published, nodes)
        if hosts != self.pool_deps.hosts:
            self.pool_deps.hosts = hosts
            self.pools.enqueue_all()  # PO-011

    async def on_battery_event(self, event: Any) -> None:
        deleted = self.deleted_vms.observe(event)
        if deleted is not None:
            for key in self.claims_holding(deleted):
                self.claims.enqueue(key)  # CL-013
        ref: PoolRef | None = getattr(event, "pool", None)
        if ref is not None and getattr(event, "type", None) == EventType.VM_AVAILABLE:
            self._wake_a_waiter(ref)
        if ref is not None:
            # PO-023, coalesced: a burst of claims makes a burst of events for one Pool, and
            # one refresh a moment later serves them all.
            self.pools.enqueue((ref.namespace, ref.name), after=POOL_EVENT_COALESCE_SECONDS)
            record = hook_failed_event(event)
            pool = self.pools.cache.get((ref.namespace, ref.name))
            if record is not None and pool is not None:
                self.recorder.post(
                    pool, record.type, record.reason, record.message, action=record.reason
                )  # PO-041: posted, so the Events stream never waits for the API server

    def _wake_a_waiter(self, ref: PoolRef) -> None:
        """CL-109: a MicroVM of `ref` became available; the claim waiting longest for it is
        reconciled now rather than at its backoff."""
        cache = self.claims.cache
        waiting = cache.keys_by(indexes.BY_WAITING_POOL, f"{ref.namespace}/{ref.name}")
        key = self.waiters.pick((_created(cache.get(k)), k) for k in waiting)
        if key is not None:
            self.claims.enqueue(key)

    def check_every_lease(self) -> None:
        """CL-030: every Bound claim, not being deleted, reads its Lease from battery now."""
        for body in self.claims.cache:
            if _bound(body):
                key = key_of(body)
                self.lease_checks.require(key)
                self.claims.enqueue(key)


__all__ = ["POOL_EVENT_COALESCE_SECONDS", "Inputs"]

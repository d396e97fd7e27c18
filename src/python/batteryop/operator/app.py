"""The operator process: list+watch streams in, our controllers reconcile, battery's Events feed both.

Pools, claims, Nodes and the battery config ConfigMap are each listed and watched by
`informer.list_watch` (one aiohttp session, `KubeClient`), which hands over every complete list
and then each watch event. A list replaces what the operator knew: an object missing from it
is gone, whatever watch events were missed while the stream was down (a 410 Gone relist
included), and leaves every cache. The Host set is only computed from every Node (a partial
one would declare a Pool to battery on too few Hosts after a restart). Reconciliation is ours
(`runtime`): a keyed queue per kind and an `Outcome` applied in a fixed order. (kopf watched
Pools and claims before; its per-event machinery cost as much operator CPU as our whole
reconcile path in a burst of binds, `docs/dev/operator-performance.md`.)

Inputs and who they queue:
- Pool events -> that Pool. Claim events -> that claim, and its Pool when the claim is gone
  (a deleted Pool goes as soon as its last claim is released, PO-044).
- Node events -> every Pool (the Host set resolves labels on Nodes, PO-011) and the claims
  bound to that Node (agent address and HostReady, CL-005, CL-050..053).
- The battery config ConfigMap (published Host set) -> every Pool (PO-011).
- battery Events -> the Pool named (PO-023); VM_HOOK_FAILED -> a Warning on the Pool
  (PO-041); MicroVM deleted -> the claim holding it (CL-013).
- While not subscribed to Events, every Pool on the resync interval (PO-024).
- battery's Events stream connected (at start and after every reconnect), and a claim
  listed at start: every Bound claim, to read its Lease from battery at once (CL-030).

Every background loop runs under a `Supervisor`: one that fails is logged with its
traceback and started again with backoff, and `/readyz` names it while it is down.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from batteryop.api import names
from batteryop.api.conditions import ClaimPhase
from batteryop.battery import BatteryAPI, EventStream, PoolRef
from batteryop.kube.client import KubeClient
from batteryop.kube.config import KubeConfig
from batteryop.kube.events import EventRecorder
from batteryop.kube.resources import CLAIMS, CONFIGMAPS, NODES, POOLS
from batteryop.obs.metrics import OperatorMetrics
from batteryop.operator.claims import indexes
from batteryop.operator.claims.expiry import DeletedVMs
from batteryop.operator.claims.lease_checks import LeaseChecks
from batteryop.operator.claims.lease_reads import LeaseReads
from batteryop.operator.claims.reconcile import ClaimDeps, reconcile_claim
from batteryop.operator.claims.slots import ClaimSlots
from batteryop.operator.config import OperatorConfig
from batteryop.operator.hostset import HostsAnnotationError, host_set, published_hosts
from batteryop.operator.informer import list_watch
from batteryop.operator.keys import pool_key_for_claim
from batteryop.operator.outcome import Outcome
from batteryop.operator.pools.hook_events import hook_failed_event
from batteryop.operator.pools.reconcile import PoolDeps, reconcile_pool
from batteryop.operator.runtime import Controller, Key, ObjectCache, key_of
from batteryop.operator.supervisor import Supervisor

log = logging.getLogger(__name__)

CONTROLLER_NAME = f"{names.GROUP}/operator"

POOL_EVENT_COALESCE_SECONDS = 1.0
"""A battery Event refreshes its Pool this much later; the events meanwhile add nothing. A
burst of binds makes a burst of events for one Pool (leased, provisioning, ready, ...): at one
refresh a second its status costs a few writes per 100 claims instead of one per two."""

TASKS = (
    "watch-pools",
    "watch-claims",
    "watch-battery-config",
    "watch-nodes",
    "follow-battery-events",
    "check-leases-on-connect",
    "resync-while-unsubscribed",
    "track-subscription",
)
"""The background tasks `start` runs under the `Supervisor`; `/readyz` has a check for each."""


def _now() -> datetime:
    return datetime.now(UTC)


def _bound(claim: Mapping[str, Any]) -> bool:
    """Bound to a Lease and not being deleted: a claim CL-030 checks against battery."""
    status = claim.get("status") or {}
    meta = claim.get("metadata") or {}
    return (
        status.get("phase") == ClaimPhase.BOUND
        and bool(status.get("leaseID"))
        and not meta.get("deletionTimestamp")
    )


class Operator:
    """Every controller of the operator, and the inputs that queue them."""

    def __init__(
        self,
        config: OperatorConfig,
        *,
        kube: KubeClient,
        kube_config: KubeConfig,
        battery: BatteryAPI,
        metrics: OperatorMetrics | None = None,
        instance: str = "battery-operator",
    ) -> None:
        self.config = config
        self.kube = kube
        self.kube_config = kube_config
        self.battery = battery
        self.recorder = EventRecorder(kube, controller=CONTROLLER_NAME, instance=instance)
        self.metrics = metrics
        self._first_seen: dict[Key, float] = {}
        self._phases: dict[Key, str] = {}
        self._phase_counts: Counter[str] = Counter()
        self.nodes = ObjectCache()
        self.nodes_listed = False
        self.published: tuple[str, ...] | None = None
        self.pool_deps = PoolDeps(battery=battery, hosts=None, clock=_now)
        self.pools = Controller(
            "pools",
            POOLS,
            lambda body: reconcile_pool(body, self.pool_deps),
            kube=kube,
            recorder=self.recorder,
            workers=config.pool_concurrent_reconciles,
            on_reconciled=self._on_reconciled,
        )
        self.deleted_vms = DeletedVMs(_now)
        self.lease_reads = LeaseReads(battery)  # CL-016: one ListLeases per Pool at a time
        self.lease_checks = LeaseChecks()  # CL-030
        self.claim_slots = ClaimSlots.for_workers(config.claim_concurrent_reconciles)
        self.claim_slots.on_free = self._slot_freed
        self.claim_deps = ClaimDeps(
            battery=battery,
            pool=lambda ns, n: self.pools.cache.get((ns, n)),
            node=lambda n: self.nodes.get(("", n)),
            claim_slots=self.claim_slots,
            deleted_vms=self.deleted_vms,
            clock=_now,
            lease_reads=self.lease_reads,
            lease_checks=self.lease_checks,
            bind_events=config.bind_events,
        )
        self.claims = Controller(
            "claims",
            CLAIMS,
            self._reconcile_claim,
            kube=kube,
            recorder=self.recorder,
            workers=config.claim_concurrent_reconciles,
            on_reconciled=self._on_reconciled,
            indexers=indexes.INDEXERS,
        )
        self.stream: EventStream = battery.events()
        self.supervisor = Supervisor()
        for task in TASKS:
            self.supervisor.add(task)
        if metrics is not None:
            metrics.report_sizes(self.sizes)

    def _slot_freed(self, waiter: Any) -> None:
        self.claims.enqueue(waiter)

    async def _reconcile_claim(self, body: Mapping[str, Any]) -> Outcome:
        return await reconcile_claim(body, self.claim_deps)

    def claims_holding(self, vm_uid: str) -> list[Key]:
        """The claims whose status records the MicroVM `vm_uid` (an index, no walk)."""
        return self.claims.cache.keys_by(indexes.BY_MICROVM, vm_uid)

    def sizes(self) -> dict[str, int]:
        """How many entries each map of the operator holds, by "owner:map" (leak checks; the
        `battery_operator_cache_entries` gauge reads it at every scrape)."""
        out = {f"claims:{k}": v for k, v in self.claims.sizes().items()}
        out.update({f"pools:{k}": v for k, v in self.pools.sizes().items()})
        out.update({f"nodes:{k}": v for k, v in self.nodes.sizes().items()})
        out.update({f"events:{k}": v for k, v in self.recorder.sizes().items()})
        out["claims:first_seen"] = len(self._first_seen)
        out["claims:phases"] = len(self._phases)
        out["claims:lease_checks"] = len(self.lease_checks)
        out["claims:slot_waiters"] = len(self.claim_slots.waiting) + len(self.claim_slots.reserved)
        out["claims:lease_reads"] = len(self.lease_reads)
        out["pools:backoff"] = len(self.pool_deps.backoff)
        # Remembered for an hour by design (CL-013), so it follows the churn, then empties.
        out["deleted_vms"] = len(self.deleted_vms)
        return out

    # -- inputs ------------------------------------------------------------------------

    def on_pool(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        self.pools.observe(event_type, body)

    def on_pools_listed(self, items: list[dict[str, Any]]) -> None:
        """A complete list of Pools: one missing from it is gone (its DELETED was missed)."""
        listed = {key_of(body) for body in items}
        for body in self.pools.cache:
            if key_of(body) not in listed:
                self.on_pool("DELETED", body)
        for body in items:
            self.on_pool(None, body)

    def on_claims_listed(self, items: list[dict[str, Any]]) -> None:
        """A complete list of claims: one missing from it is gone (its DELETED was missed,
        say while the watch was relisting after a 410), and leaves everything."""
        listed = {key_of(body) for body in items}
        for body in self.claims.cache:
            if key_of(body) not in listed:
                self.on_claim("DELETED", body)
        for body in items:
            self.on_claim(None, body)

    def _on_reconciled(self, controller: str, result: str, seconds: float) -> None:
        if self.metrics is None:
            return
        self.metrics.observe_reconcile(controller, result, seconds)
        queue = self.claims.queue if controller == "claims" else self.pools.queue
        self.metrics.set_workqueue_depth(controller, len(queue))

    def _observe_claim_metrics(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        if self.metrics is None:
            return
        key = key_of(body)
        phase = None if event_type == "DELETED" else (body.get("status") or {}).get("phase")
        before = self._phases.pop(key, None)
        if phase:
            self._phases[key] = str(phase)
        if before != phase:  # counted as they change: no walk over every claim per event
            if before:
                self._phase_counts[before] -= 1
            if phase:
                self._phase_counts[str(phase)] += 1
            self.metrics.set_claims_by_phase(+self._phase_counts)
        if event_type == "DELETED":
            self._first_seen.pop(key, None)
            return
        bound = (body.get("status") or {}).get("phase") == "Bound"
        if not bound:
            self._first_seen.setdefault(key, time.monotonic())
        elif key in self._first_seen:
            # From the first watch event of an unbound claim to the first one showing it
            # Bound: what a consumer waits, at this process's clock resolution.
            self.metrics.observe_claim_bound(time.monotonic() - self._first_seen.pop(key))

    def on_claim(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        self.claims.observe(event_type, body)
        self._observe_claim_metrics(event_type, body)
        if event_type == "DELETED":
            # Nothing of a deleted claim stays: no Lease check, no place among the ClaimVM
            # waiters (its reserved slot goes to the next one).
            self.lease_checks.done(key_of(body))
            self.claim_slots.forget(key_of(body))
        elif event_type is None and _bound(body):
            # CL-030, on start: a listed Bound claim reads its Lease from battery at once.
            self.lease_checks.require(key_of(body))
        finalizers = (body.get("metadata") or {}).get("finalizers") or []
        if event_type == "DELETED" or names.CLAIM_FINALIZER not in finalizers:
            pool = pool_key_for_claim(body)
            if pool is not None:
                self.pools.enqueue((pool.namespace, pool.name))  # PO-044

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

    # -- background loops --------------------------------------------------------------------

    async def watch_pools(self) -> None:
        """Every Pool (PO-*)."""
        await list_watch(self.kube, POOLS, on_list=self.on_pools_listed, on_event=self.on_pool)

    async def watch_claims(self) -> None:
        """Every MicroVMClaim (CL-*)."""
        await list_watch(self.kube, CLAIMS, on_list=self.on_claims_listed, on_event=self.on_claim)

    async def watch_battery_config(self) -> None:
        """The one battery config ConfigMap, by name (RBAC allows nothing wider)."""
        await list_watch(
            self.kube,
            CONFIGMAPS,
            namespace=self.config.namespace,
            field_selector=f"metadata.name={self.config.battery_config_map}",
            on_list=lambda items: self.on_battery_config(items[0] if items else None),
            on_event=lambda kind, obj: self.on_battery_config(None if kind == "DELETED" else obj),
        )

    async def watch_nodes(self) -> None:
        """Every Node: their labels place Pools (PO-010), their reports feed claims (CL-005)."""
        await list_watch(self.kube, NODES, on_list=self.on_nodes_listed, on_event=self.on_node)

    def check_every_lease(self) -> None:
        """CL-030: every Bound claim, not being deleted, reads its Lease from battery now."""
        for body in self.claims.cache:
            if _bound(body):
                key = key_of(body)
                self.lease_checks.require(key)
                self.claims.enqueue(key)

    async def check_leases_on_connect(self) -> None:
        """CL-030: each time battery's Events stream (re)connects, check every Lease.

        battery replays its outbox to a new subscriber and the client drops what it saw
        already, so a reconnect may bring no event at all: the stream's state says it.
        """
        checked = 0
        while True:
            await self.stream.wait_subscribed()
            if self.stream.generation != checked:
                checked = self.stream.generation
                self.check_every_lease()
            await self.stream.wait_unsubscribed()

    @property
    def events_subscribed(self) -> bool:
        """Whether battery's Events stream is open now (readiness reads this, DP-012)."""
        return self.stream.subscribed

    async def follow_battery_events(self) -> None:
        """battery's Events stream; the client reconnects and drops replayed events."""
        async for event in self.stream:
            try:
                await self.on_battery_event(event)
            except Exception:
                log.exception("Handling battery event %s failed", getattr(event, "id", "?"))

    async def track_subscription(self) -> None:
        """Mirror the Events stream's state into the battery_subscribed gauge."""
        if self.metrics is None:
            return
        while True:
            await self.stream.wait_subscribed()
            self.metrics.set_battery_subscribed(True)
            await self.stream.wait_unsubscribed()
            self.metrics.set_battery_subscribed(False)

    async def resync_while_unsubscribed(self) -> None:
        """PO-024: refresh every Pool on the resync interval while Events are down."""
        interval = self.config.pool_resync_interval.total_seconds()
        while True:
            await asyncio.sleep(interval)
            if not self.events_subscribed:
                self.pools.enqueue_all()

    async def start(self) -> None:
        await self.pools.start()
        await self.claims.start()
        loops = (
            self.watch_pools,
            self.watch_claims,
            self.watch_battery_config,
            self.watch_nodes,
            self.follow_battery_events,
            self.check_leases_on_connect,
            self.resync_while_unsubscribed,
            self.track_subscription,
        )
        for name, loop in zip(TASKS, loops, strict=True):
            self.supervisor.start(name, loop)  # logged, restarted with backoff, in /readyz

    async def stop(self) -> None:
        await self.supervisor.stop()
        await self.stream.aclose()
        await self.pools.stop()
        await self.claims.stop()

    async def run(self, stop_flag: asyncio.Event, ready_flag: asyncio.Event | None = None) -> None:
        """Run every controller and loop until `stop_flag` is set (`ready_flag`: started)."""
        await self.start()
        try:
            if ready_flag is not None:
                ready_flag.set()
            await stop_flag.wait()
        finally:
            await self.stop()


__all__ = ["Operator"]

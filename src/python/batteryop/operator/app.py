"""The operator process: its wiring, and how it starts and stops.

`Operator` builds the two controllers (`runtime.Controller` over Pools and claims: a keyed work
queue each and an `Outcome` applied in a fixed order), what their reconciles share (`PoolDeps`,
`ClaimDeps`), the Node cache, the Event recorder and the metrics, then hands them to:

- `inputs.Inputs`: what the operator hears (list+watch of Pools, claims, Nodes and the
  battery config ConfigMap; battery's Events) and whom each input queues;
- `loops.Loops`: the background tasks that feed those inputs, each under the `Supervisor`
  (one that fails is logged with its traceback and started again with backoff, and
  `/readyz` names it while it is down).

Pools and claims are listed and watched by our own `informer.list_watch` (kopf did before; its
per-event machinery cost as much operator CPU as our whole reconcile path in a burst of binds,
`docs/dev/operator-performance.md`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from batteryop.api import names
from batteryop.api.clock import SYSTEM_CLOCK
from batteryop.api.conditions import ConditionStatus, PoolConditionType, node_readiness
from batteryop.battery import BatteryAPI, EventStream
from batteryop.kube.client import KubeClient
from batteryop.kube.config import KubeConfig
from batteryop.kube.events import EventRecorder
from batteryop.kube.outcome import Outcome
from batteryop.kube.resources import CLAIMS, POOLS
from batteryop.obs.exported.operator import (
    CLAIM_PENDING_OLDEST_SECONDS,
    HOSTS_NOT_READY,
    POOLS_EXHAUSTED,
)
from batteryop.obs.metrics import OperatorMetrics
from batteryop.obs.supervisor import Supervisor
from batteryop.operator.claim_metrics import ClaimMetrics
from batteryop.operator.claims import indexes
from batteryop.operator.claims.agent import node_annotations
from batteryop.operator.claims.expiry import DeletedVMs
from batteryop.operator.claims.host_ready import host_report
from batteryop.operator.claims.lease_checks import LeaseChecks
from batteryop.operator.claims.lease_reads import LeaseReads
from batteryop.operator.claims.reconcile import ClaimDeps, reconcile_claim
from batteryop.operator.claims.slots import ClaimSlots
from batteryop.operator.config import OperatorConfig
from batteryop.operator.inputs import Inputs
from batteryop.operator.loops import TASKS, Loops
from batteryop.operator.pools.deps import PoolDeps
from batteryop.operator.pools.reconcile import reconcile_pool
from batteryop.operator.runtime import Controller, ObjectCache

log = logging.getLogger(__name__)

CONTROLLER_NAME = f"{names.GROUP}/operator"


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
        self.claim_metrics = ClaimMetrics(metrics)
        self.nodes = ObjectCache()
        self.pool_deps = PoolDeps(battery=battery, hosts=None, clock=SYSTEM_CLOCK)
        self.pools = Controller(
            "pools",
            POOLS,
            lambda body: reconcile_pool(body, self.pool_deps),
            kube=kube,
            recorder=self.recorder,
            workers=config.pool_concurrent_reconciles,
            on_reconciled=self._on_reconciled,
        )
        self.deleted_vms = DeletedVMs(SYSTEM_CLOCK)
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
            clock=SYSTEM_CLOCK,
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
        self.inputs = Inputs(
            pools=self.pools,
            claims=self.claims,
            nodes=self.nodes,
            pool_deps=self.pool_deps,
            deleted_vms=self.deleted_vms,
            lease_checks=self.lease_checks,
            claim_slots=self.claim_slots,
            recorder=self.recorder,
            claim_metrics=self.claim_metrics,
        )
        self.loops = Loops(
            config,
            kube=kube,
            inputs=self.inputs,
            pools=self.pools,
            stream=battery.events(),
            metrics=metrics,
        )
        self.supervisor = Supervisor()
        for task in TASKS:
            self.supervisor.add(task)
        if metrics is not None:
            metrics.report_sizes(self.sizes)
            # DP-108: what the alerts read, from the caches at each scrape
            metrics.follow(CLAIM_PENDING_OLDEST_SECONDS, self.claim_metrics.oldest_pending_seconds)
            metrics.follow(POOLS_EXHAUSTED, self.pools_exhausted)
            metrics.follow(HOSTS_NOT_READY, self.hosts_not_ready)

    def _slot_freed(self, waiter: Any) -> None:
        self.claims.enqueue(waiter)

    async def _reconcile_claim(self, body: Mapping[str, Any]) -> Outcome:
        return await reconcile_claim(body, self.claim_deps)

    def sizes(self) -> dict[str, int]:
        """How many entries each map of the operator holds, by "owner:map" (leak checks; the
        `battery_operator_cache_entries` gauge reads it at every scrape)."""
        out = {f"claims:{k}": v for k, v in self.claims.sizes().items()}
        out.update({f"pools:{k}": v for k, v in self.pools.sizes().items()})
        out.update({f"nodes:{k}": v for k, v in self.nodes.sizes().items()})
        out.update({f"events:{k}": v for k, v in self.recorder.sizes().items()})
        out.update(self.claim_metrics.sizes())
        out.update(self.lease_checks.sizes())
        out["claims:slot_waiters"] = len(self.claim_slots.waiting) + len(self.claim_slots.reserved)
        out["claims:lease_reads"] = len(self.lease_reads)
        out["claims:woken"] = len(self.inputs.waiters)  # each kept HOLD_SECONDS (CL-109)
        # One per Pool, each kept RECENT_SECONDS after its call started.
        out["lease_reads:recent"] = self.lease_reads.recent_answers()
        # Remembered for an hour by design (CL-013), so it follows the churn, then empties.
        out["deleted_vms"] = len(self.deleted_vms)
        return out

    def pools_exhausted(self) -> float:
        """Pools in the cache whose Exhausted condition is True (read at each scrape)."""
        return float(sum(1 for pool in self.pools.cache if _exhausted(pool)))

    def hosts_not_ready(self) -> float:
        """Host Nodes whose Exec Agent report is missing or not ready, or whose own Ready
        condition is not True, read as the claims' HostReady reads them (CL-053, CL-105; read
        at each scrape)."""
        count = 0
        for node in self.nodes:
            meta = node.get("metadata") or {}
            if (meta.get("labels") or {}).get(names.HOST_LABEL) != names.HOST_LABEL_VALUE:
                continue
            annotations = {k: v for k, v in node_annotations(node).items() if isinstance(v, str)}
            ready, _, _ = host_report(
                str(meta.get("name", "")), True, annotations, node_readiness(node)
            )
            count += not ready
        return float(count)

    def _on_reconciled(self, controller: str, result: str, seconds: float) -> None:
        if self.metrics is None:
            return
        self.metrics.observe_reconcile(controller, result, seconds)
        queue = self.claims.queue if controller == "claims" else self.pools.queue
        self.metrics.set_workqueue_depth(controller, len(queue))

    @property
    def stream(self) -> EventStream:
        """battery's Events stream, which the loops follow."""
        return self.loops.stream

    @stream.setter
    def stream(self, stream: EventStream) -> None:
        self.loops.stream = stream

    @property
    def events_subscribed(self) -> bool:
        """Whether battery's Events stream is open now (readiness reads this, DP-012)."""
        return self.stream.subscribed

    async def start(self) -> None:
        await self.pools.start()
        await self.claims.start()
        for name, loop in self.loops.tasks():
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


def _exhausted(pool: Mapping[str, Any]) -> bool:
    conditions = (pool.get("status") or {}).get("conditions") or []
    return any(
        c.get("type") == PoolConditionType.EXHAUSTED and c.get("status") == ConditionStatus.TRUE
        for c in conditions
        if isinstance(c, dict)
    )

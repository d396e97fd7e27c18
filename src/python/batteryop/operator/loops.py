"""`Loops`: the operator's background tasks, each run by the `Supervisor` (logged, restarted
with backoff, named by `/readyz` while down).

The list+watch streams of Pools, claims, Nodes and the battery config ConfigMap feed `Inputs`;
battery's Events stream feeds it too, and its connection state triggers the Lease check of
every Bound claim (CL-030), the battery_subscribed gauge and the Pool resync while
unsubscribed (PO-024).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from batteryop.battery import EventStream
from batteryop.kube.client import KubeClient
from batteryop.kube.informer import list_watch
from batteryop.kube.resources import CLAIMS, CONFIGMAPS, NODES, POOLS, name_selector
from batteryop.obs.metrics import OperatorMetrics
from batteryop.operator.config import OperatorConfig
from batteryop.operator.inputs import Inputs
from batteryop.operator.runtime import Controller

log = logging.getLogger("batteryop.operator.app")

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
"""The background tasks, by the name the `Supervisor` and `/readyz` give them."""


class Loops:
    """The operator's background tasks over its inputs, its Pools and battery's Events."""

    def __init__(
        self,
        config: OperatorConfig,
        *,
        kube: KubeClient,
        inputs: Inputs,
        pools: Controller,
        stream: EventStream,
        metrics: OperatorMetrics | None,
    ) -> None:
        self.config = config
        self.kube = kube
        self.inputs = inputs
        self.pools = pools
        self.stream = stream
        self.metrics = metrics

    def tasks(self) -> list[tuple[str, Callable[[], Awaitable[None]]]]:
        """Each task with its name, in `TASKS` order."""
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
        return list(zip(TASKS, loops, strict=True))

    async def watch_pools(self) -> None:
        """Every Pool (PO-*)."""
        await list_watch(
            self.kube, POOLS, on_list=self.inputs.on_pools_listed, on_event=self.inputs.on_pool
        )

    async def watch_claims(self) -> None:
        """Every MicroVMClaim (CL-*), once the Pools are listed: a claim reconciled before
        its Pool is in the cache would be judged PoolNotFound (CL-004). A drain that moved the
        operator's Pod showed it (tests/cluster/hosts_test.py, a cold CI run)."""
        await self.inputs.pools_listed.wait()
        await list_watch(
            self.kube, CLAIMS, on_list=self.inputs.on_claims_listed, on_event=self.inputs.on_claim
        )

    async def watch_battery_config(self) -> None:
        """The one battery config ConfigMap, by name (RBAC allows nothing wider)."""
        await list_watch(
            self.kube,
            CONFIGMAPS,
            namespace=self.config.namespace,
            field_selector=name_selector(self.config.battery_config_map),
            on_list=lambda items: self.inputs.on_battery_config(items[0] if items else None),
            on_event=lambda kind, obj: self.inputs.on_battery_config(
                None if kind == "DELETED" else obj
            ),
        )

    async def watch_nodes(self) -> None:
        """Every Node: their labels place Pools (PO-010), their reports feed claims (CL-005)."""
        await list_watch(
            self.kube, NODES, on_list=self.inputs.on_nodes_listed, on_event=self.inputs.on_node
        )

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
                self.inputs.check_every_lease()
            await self.stream.wait_unsubscribed()

    @property
    def events_subscribed(self) -> bool:
        """Whether battery's Events stream is open now (readiness reads this, DP-012)."""
        return self.stream.subscribed

    async def follow_battery_events(self) -> None:
        """battery's Events stream; the client reconnects and drops replayed events.

        An event whose handling fails is not dropped: battery will not send it again, so the
        operator does what it does when events may have been missed (a reconnect, CL-030,
        PO-024): every Bound claim reads its Lease and every Pool is refreshed, through their
        work queues, which retry with backoff. Nothing the event said can be lost that way."""
        async for event in self.stream:
            try:
                await self.inputs.on_battery_event(event)
            except Exception:
                log.exception(
                    "Handling battery event %s failed; checking every Lease and Pool instead",
                    getattr(event, "id", "?"),
                )
                self.inputs.check_every_lease()
                self.pools.enqueue_all()

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


__all__ = ["TASKS", "Loops"]

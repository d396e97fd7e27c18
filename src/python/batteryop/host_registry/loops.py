"""`Loops`: the host registry's long-lived tasks, each run by the `Supervisor` (logged,
restarted with backoff, named by `/readyz` while down, DP-107).

The list+watch streams of the Nodes and of the battery config ConfigMap feed `Inputs`;
battery's connection state asks for a read of its Host list each time it is made again
(IN-105). The reconcile itself runs in the work queue, which retries it with backoff.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Final

from batteryop.battery.models import PoolRef
from batteryop.battery.protocol import BatteryAPI
from batteryop.host_registry.config import RegistryConfig
from batteryop.host_registry.inputs import Inputs
from batteryop.kube.client import KubeClient
from batteryop.kube.informer import list_watch
from batteryop.kube.resources import CONFIGMAPS, NODES, name_selector

log = logging.getLogger("batteryop.host_registry.controller")

TASKS: Final = ("watch-nodes", "watch-battery-config", "follow-battery-connection")
"""The long-lived tasks, by the name the `Supervisor` and `/readyz` give them (DP-107); the
reconcile runs in the work queue, which retries it with backoff itself."""
CONNECTION_POOL: Final = PoolRef(namespace="batteryop-host-registry", name="_connection")
"""The Pool of the Events subscription that tells when battery's connection is made again: no
Kubernetes Pool has this name (`_` is not allowed), and battery streams nothing, and answers no
error, for a Pool it does not have (battery-api.md §3.3), so the stream carries only its state."""


class Loops:
    """The registry's long-lived tasks over its inputs."""

    def __init__(
        self, config: RegistryConfig, *, kube: KubeClient, battery: BatteryAPI, inputs: Inputs
    ) -> None:
        self.config = config
        self.kube = kube
        self.battery = battery
        self.inputs = inputs

    def tasks(self) -> list[tuple[str, Callable[[], Awaitable[None]]]]:
        """Each task with its name, in `TASKS` order."""
        loops = (self.watch_nodes, self.watch_battery_config, self.follow_connection)
        return list(zip(TASKS, loops, strict=True))

    async def watch_nodes(self) -> None:
        """Every Node: labels, reports, cordons and InternalIPs make the Hosts (IN-001)."""
        await list_watch(
            self.kube, NODES, on_list=self.inputs.on_nodes_listed, on_event=self.inputs.on_node
        )

    async def watch_battery_config(self) -> None:
        """The battery config ConfigMap, by name (RBAC allows nothing wider)."""
        await list_watch(
            self.kube,
            CONFIGMAPS,
            namespace=self.config.namespace,
            field_selector=name_selector(self.config.battery_config_map),
            on_list=self.inputs.on_configmap_listed,
            on_event=self.inputs.on_configmap,
        )

    async def follow_connection(self) -> None:
        """IN-105: each time the connection to battery is made (again), check its Host list.

        battery does not event Host changes, and a restarted battery may come back with fewer
        Hosts than it had (a lost database, a stale config file). An Events subscription knows
        when its stream is open again after battery went away (`EventStream.generation`); its
        Pool (`CONNECTION_POOL`) has no events, so battery replays nothing to it."""
        stream = self.battery.events(CONNECTION_POOL)
        seen = 0
        try:
            while True:
                await stream.wait_subscribed()
                if stream.generation != seen:
                    seen = stream.generation
                    log.debug("Connected to battery; checking its Hosts", extra={"streams": seen})
                    self.inputs.request_check("reconnect")
                await stream.wait_unsubscribed()
        finally:
            await stream.aclose()


__all__ = ["CONNECTION_POOL", "TASKS", "Loops"]

"""The host registry's controller: Nodes in, battery's Hosts and the published Host set out.

`Registry` is the wiring, in the operator's shape (`operator/app.py`): it builds what the
registry knows between reconciles (`inventory.state.RegistryState`), what its reconcile uses
(`inventory.deps.RegistryDeps`), the one-worker work queue that runs the reconcile
(`inventory.reconcile`), and hands them to:

- `inputs.Inputs`: what the registry hears (list+watch of the Nodes and the battery config
  ConfigMap, its mounts of battery's files through inotify, battery's connection made again)
  and how each input queues the reconcile;
- `loops.Loops`: the long-lived tasks that feed those inputs, each under the `Supervisor`
  (`loops.TASKS`, DP-107).

The reconcile's steps, in order, are `inventory.reconcile.CHAIN`: listed, resume, admit,
check battery, settle, cordons, apply with the host RPCs or with a restart (each draining a
leaving Host first), write back, publish, schedule. Each step's module says what it owns and
which requirements it implements; `docs/host-registry.md` lists them from the tuple.
"""

from __future__ import annotations

import asyncio

from batteryop.api.clock import SYSTEM_CLOCK, Clock
from batteryop.battery.protocol import BatteryAPI
from batteryop.host_registry.config import RegistryConfig
from batteryop.host_registry.filewatch import DirectoryWatch
from batteryop.host_registry.inputs import Inputs
from batteryop.host_registry.inventory.reconcile import (
    RegistryDeps,
    RegistryState,
    reconcile_inventory,
)
from batteryop.host_registry.loops import TASKS, Loops
from batteryop.host_registry.metrics import RegistryMetrics
from batteryop.host_registry.plan import Settler, Window
from batteryop.host_registry.restarter import Restarter
from batteryop.kube.client import KubeClient
from batteryop.kube.events import EventRecorder
from batteryop.kube.workqueue import WorkQueue
from batteryop.obs.supervisor import Supervisor


class Registry:
    """One host registry: run `run(stop)`; `ready` once it has resumed."""

    def __init__(
        self,
        config: RegistryConfig,
        kube: KubeClient,
        battery: BatteryAPI,
        *,
        events: EventRecorder,
        metrics: RegistryMetrics,
        restarter: Restarter | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.config = config
        self._events = events
        self.state = RegistryState(
            settler=Settler(config.settle_time), window=Window(config.restart_window)
        )
        self.queue: WorkQueue[str] = WorkQueue(
            self._reconcile, name="host-registry", workers=1, backoff_max=10.0
        )
        self.inputs = Inputs(self.state, self.queue, clock)
        self._watch = DirectoryWatch(
            [config.battery_config_file.parent, config.battery_tls_dir],
            on_change=self.inputs.changed,
        )
        self.deps = RegistryDeps(
            config=config,
            kube=kube,
            battery=battery,
            events=events,
            metrics=metrics,
            restarter=restarter
            or Restarter(
                process_name=config.battery_process_name,
                config_file=str(config.battery_config_file),
                timeout=config.restart_timeout,
            ),
            watch=self._watch,
            clock=clock,
        )
        self.loops = Loops(config, kube=kube, battery=battery, inputs=self.inputs)
        self.supervisor = Supervisor()
        """Runs `TASKS` (DP-107): `supervisor.checks()` belong in `/readyz`."""
        for task in TASKS:
            self.supervisor.add(task)

    @property
    def ready(self) -> bool:
        return self.state.resumed

    async def _reconcile(self, _: str) -> float | None:
        return await reconcile_inventory(self.state, self.deps)

    async def run(self, stop: asyncio.Event) -> None:
        self._watch.start()
        await self.queue.start()
        for name, loop in self.loops.tasks():
            self.supervisor.start(name, loop)
        try:
            await stop.wait()
        finally:
            await self.supervisor.stop()
            await self.queue.stop()
            self._watch.close()
            await self._events.drain(timeout=2.0)


__all__ = ["Registry"]

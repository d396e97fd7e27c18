"""The fake battery's loops: one `Reconciler` per Pool and the global `Sweeper` (TD-003),
started and stopped together by its `Schedule`.

Both run under the battery's `Supervisor` (DP-107) on its Clock; a reconciler's pass decides
how many MicroVMs to provision and where (`provision.Provisioner` does it), the sweeper runs
`FakeBattery.sweep()` every sweep interval.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from battery_protos.poolmgr.v1alpha1 import types_pb2
from batteryop.testing.fake_battery.store import PoolKey, pool_label
from batteryop.testing.fake_battery.validation import has_static_network

if TYPE_CHECKING:
    from batteryop.testing.fake_battery.battery import FakeBattery

log = logging.getLogger(__name__)

SWEEPER_TASK = "sweeper"


class Reconciler:
    """One Pool's reconciler: passes at start, on every tick and on claim/delete notifications."""

    def __init__(self, battery: FakeBattery, key: PoolKey, spec: types_pb2.PoolSpec) -> None:
        self.battery = battery
        self.key = key
        self.spec = spec
        self.next_due: datetime | None = None
        self.provisions: set[asyncio.Task[None]] = set()
        # Provisions that have not written their VM row yet, by Host.
        self.pending: dict[str, int] = {}
        self._kinds: set[str] = set()
        self._wake = asyncio.Event()
        self.name = f"reconciler {pool_label(key)}"
        # Supervised: a pass that raises is logged and the reconciler starts again (DP-107).
        self.task = battery.loops.start(self.name, self._run)

    def notify(self, kind: str) -> None:
        self._kinds.add(kind)
        self._wake.set()

    def stop(self) -> None:
        """Cancel the loop and its provisions without waiting."""
        self.battery.loops.cancel(self.name)  # a live reconciler's name is its own
        self.task.cancel()
        for task in self.provisions:
            task.cancel()

    async def stop_and_wait(self) -> None:
        self.stop()
        await asyncio.gather(self.task, *self.provisions, return_exceptions=True)

    async def _run(self) -> None:
        clock = self.battery.clock
        interval = timedelta(seconds=self.battery.timings.reconcile_interval)
        next_tick = clock.now() + interval
        self._pass({"start"})
        tick = asyncio.create_task(clock.sleep_until(next_tick))
        wake = asyncio.create_task(self._wake.wait())
        try:
            while True:
                self.next_due = next_tick
                self.battery.store.touch()
                await asyncio.wait({tick, wake}, return_when=asyncio.FIRST_COMPLETED)
                kinds: set[str] = set()
                if wake.done():
                    self._wake.clear()
                    kinds |= self._kinds
                    self._kinds = set()
                    wake = asyncio.create_task(self._wake.wait())
                if tick.done():
                    kinds.add("tick")
                    now = clock.now()
                    while next_tick <= now:
                        next_tick += interval
                    tick = asyncio.create_task(clock.sleep_until(next_tick))
                self._pass(kinds)
        finally:
            tick.cancel()
            wake.cancel()

    def _pass(self, kinds: set[str]) -> None:
        spec = self.spec
        strategy = spec.replenishment_strategy
        # BA-075, BA-076: every strategy fills the Pool when its reconciler starts and on each tick;
        # besides, IMMEDIATE_ON_LEASE tops up on a claim and REPLACE_ON_DELETE on a deletion.
        # TD-003: the fake replenishes its Pools as battery does.
        acts_on = {
            types_pb2.IMMEDIATE_ON_LEASE: {"start", "tick", "claimed"},
            types_pb2.MIN_SIZE_THRESHOLD: {"start", "tick"},
            types_pb2.REPLACE_ON_DELETE: {"start", "tick", "deleted"},
        }.get(strategy.type, set())
        if not kinds & acts_on:
            return
        counts = self.battery.store.counts(self.key)
        provisioning = counts.provisioning + sum(self.pending.values())
        if strategy.type == types_pb2.IMMEDIATE_ON_LEASE:
            shortfall = spec.size - (counts.available + counts.claiming + provisioning)
        elif strategy.type == types_pb2.MIN_SIZE_THRESHOLD:
            # BA-072: with size 0 there is never a shortfall, so nothing is provisioned.
            if counts.available >= strategy.min_size:
                shortfall = 0
            else:
                shortfall = spec.size - (
                    counts.available + counts.claiming + counts.leased + provisioning
                )
        else:
            shortfall = spec.size - (
                counts.available + counts.claiming + counts.leased + provisioning
            )
        if shortfall > 0 and has_static_network(spec.microvm_template):
            # At most one VM, and only while the Pool has no VM in any phase.
            has_any = bool(self.battery.store.pool_vms(self.key)) or any(self.pending.values())
            shortfall = 0 if has_any else 1
        placed = self.battery.provisioner.placed(self.key) if shortfall > 0 else Counter[str]()
        for _ in range(max(shortfall, 0)):
            host = self.battery.provisioner.pick_host(spec, placed, self.pending)
            if host is None:
                log.debug("pool %s: no eligible host", pool_label(self.key))
                return
            self.pending[host.name] = self.pending.get(host.name, 0) + 1
            host.placements += 1
            task = asyncio.create_task(self.battery.provisioner.provision(self, host, spec))
            self.provisions.add(task)
            task.add_done_callback(self.provisions.discard)


class Sweeper:
    """The global sweeper: every sweep_interval on the clock, the first one interval after start."""

    def __init__(self, battery: FakeBattery) -> None:
        self.battery = battery
        self.next_due: datetime | None = None
        self.sweeps = 0
        self.task = battery.loops.start(SWEEPER_TASK, self._run)  # supervised (DP-107)

    async def _run(self) -> None:
        clock = self.battery.clock
        interval = timedelta(seconds=self.battery.timings.sweep_interval)
        # BA-022: the first sweep comes one interval after start, not at start.
        self.next_due = clock.now() + interval
        while True:
            self.battery.store.touch()
            await clock.sleep_until(self.next_due)
            try:
                await self.battery.sweep()
            except Exception:
                log.exception("sweep failed")
            now = clock.now()
            while self.next_due <= now:
                self.next_due += interval


class Schedule:
    """Every loop of one FakeBattery: a Reconciler per Pool and the Sweeper, and when each is
    due next (what `FakeBattery.advance` stops at)."""

    def __init__(self, battery: FakeBattery) -> None:
        self.battery = battery
        self.reconcilers: dict[PoolKey, Reconciler] = {}
        self.sweeper: Sweeper | None = None

    def start(self) -> None:
        """A reconciler for every stored Pool, and the sweeper."""
        for key, spec in self.battery.store.pools.items():
            self.reconcilers[key] = Reconciler(self.battery, key, spec)
        self.sweeper = Sweeper(self.battery)

    async def stop(self) -> None:
        """Cancel every loop and provision, and wait for them to end."""
        tasks: list[asyncio.Task[Any]] = []
        for rec in self.reconcilers.values():
            rec.stop()
            tasks += [rec.task, *rec.provisions]
        self.reconcilers.clear()
        if self.sweeper is not None:
            self.battery.loops.cancel(SWEEPER_TASK)
            tasks.append(self.sweeper.task)
            self.sweeper = None
        await asyncio.gather(*tasks, return_exceptions=True)

    def start_reconciler(self, key: PoolKey, spec: types_pb2.PoolSpec) -> None:
        old = self.reconcilers.pop(key, None)
        if old is not None:
            old.stop()
        self.reconcilers[key] = Reconciler(self.battery, key, spec)

    async def stop_reconciler(self, key: PoolKey) -> None:
        rec = self.reconcilers.pop(key, None)
        if rec is not None:
            await rec.stop_and_wait()

    def notify(self, key: PoolKey, kind: str) -> None:
        """Wake the Pool's reconciler for a "claimed" or "deleted" MicroVM (BA-076)."""
        rec = self.reconcilers.get(key)
        if rec is not None:
            rec.notify(kind)

    def _loops(self) -> list[Reconciler | Sweeper]:
        loops: list[Reconciler | Sweeper] = list(self.reconcilers.values())
        if self.sweeper is not None:
            loops.append(self.sweeper)
        return loops

    def due_times(self) -> list[datetime]:
        return [loop.next_due for loop in self._loops() if loop.next_due is not None]

    def settled(self, now: datetime) -> bool:
        """Whether every loop has run what was due at now."""
        return all(loop.next_due is not None and loop.next_due > now for loop in self._loops())

    @property
    def sweeps(self) -> int:
        """How many sweeps have completed since the sweeper started."""
        return self.sweeper.sweeps if self.sweeper is not None else 0

    def count_sweep(self) -> None:
        if self.sweeper is not None:
            self.sweeper.sweeps += 1

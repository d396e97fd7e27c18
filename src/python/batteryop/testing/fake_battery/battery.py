"""The fake battery's lifecycle: `FakeBattery` (TD-001..006), and what a test steers it with.

It owns the store (in memory, and in a SQLite database when given `db`: BA-060), the fault
switches and the parts that do the work, each in its own module: the loops (`loops.py`: one
reconciler per Pool, the global sweeper), provisioning (`provision.py`), deletion and the sweep
(`sweep.py`) and the gRPC server (`server.py`, with the RPC handlers of `services.py`). A start
and an in-process `restart()` go through the same steps (`startup.py`), so a restarted process
and a restarted FakeBattery come back alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc

from battery_protos.poolmgr.v1alpha1 import types_pb2
from batteryop.api.clock import Clock, FakeClock, SystemClock
from batteryop.obs.supervisor import Supervisor
from batteryop.testing.fake_battery import startup
from batteryop.testing.fake_battery.db import Database
from batteryop.testing.fake_battery.faults import HOOK_KINDS, Faults
from batteryop.testing.fake_battery.hosts import HostConfig, HostTLSFilesError
from batteryop.testing.fake_battery.loops import Schedule
from batteryop.testing.fake_battery.provision import Provisioner
from batteryop.testing.fake_battery.server import ListenError, Server
from batteryop.testing.fake_battery.store import PoolKey, Store
from batteryop.testing.fake_battery.sweep import Deleter
from batteryop.testing.faultcodes import status_code

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Timings:
    """The fake battery's timings. The first three run on its Clock; the rest on real time."""

    sweep_interval: float = 10.0
    warning_window: float = 30.0
    reconcile_interval: float = 10.0
    # poolmgrd polls GetMicroVM every 2 s and waits for the guest agent 1 s apart; the fake
    # polls faster so provisioning takes milliseconds against a fake flintlockd.
    create_poll_interval: float = 0.05
    create_timeout: float = 60.0
    agent_poll_interval: float = 0.05
    agent_timeout: float = 30.0
    agent_probe_timeout: float = 5.0
    hook_cleanup_timeout: float = 30.0
    delete_timeout: float = 30.0
    version_check_timeout: float = 10.0
    rpc_timeout: float = 10.0


class BatteryStateError(Exception):
    """A FakeBattery method was called in a state that does not allow it."""

    def __init__(self, battery: FakeBattery, message: str) -> None:
        super().__init__(message)
        self.battery = battery


class WaitTimeoutError(TimeoutError):
    """A bounded wait on the fake battery's state ran out."""

    def __init__(self, what: str, timeout: float) -> None:
        super().__init__(f"timed out after {timeout}s waiting for {what}")
        self.what = what


def _host_configs(hosts: Mapping[str, str] | Iterable[HostConfig]) -> list[HostConfig]:
    if isinstance(hosts, Mapping):
        return [HostConfig(name, address) for name, address in hosts.items()]
    return list(hosts)


class FakeBattery:
    """An in-memory stand-in for poolmgrd v0.4.0, served over gRPC on loopback.

    Use `async with FakeBattery.start(hosts={"host-a": "127.0.0.1:9090"}) as battery:` and
    dial `battery.target`. See the package docstring for what differs from poolmgrd.
    """

    def __init__(
        self,
        *,
        hosts: Mapping[str, str] | Iterable[HostConfig] = (),
        address: str = "127.0.0.1:0",
        clock: Clock | None = None,
        timings: Timings | None = None,
        basic_auth_token: str = "",
        host_api: bool = False,
        db: Path | str | None = None,
    ) -> None:
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.timings = timings if timings is not None else Timings()
        self.basic_auth_token = basic_auth_token
        # battery main's HostAdmin AddHost/UpdateHost/RemoveHost/GetHost and its check of
        # flintlock_hosts against registered Hosts; off means poolmgrd v0.4.0 (UNIMPLEMENTED).
        self.host_api = host_api
        self.faults = Faults()
        # BA-060: with a database file the state outlives the process (poolmgrd's -db);
        # without one it lives in memory and outlives only restart().
        self.db = Database(db) if db is not None else None
        self.store = Store(self.clock.now, self.db.save if self.db is not None else None)
        self.host_configs = _host_configs(hosts)
        self.server = Server(self, address)
        self.provisioner = Provisioner(self)
        self.deleter = Deleter(self)
        self.schedule = Schedule(self)
        self.loops = Supervisor()
        """Runs the sweeper and each Pool's reconciler: one that raises is logged with its
        traceback and started again with backoff (`loops.down()` names it meanwhile)."""
        self._pool_locks: dict[PoolKey, asyncio.Lock] = {}
        self._crashing = False
        self._stream_generation = 0
        self._running = False

    # -- lifecycle -----------------------------------------------------------------------

    @classmethod
    @contextlib.asynccontextmanager
    async def start(cls, **kwargs: Any) -> AsyncIterator[FakeBattery]:
        """Serve a FakeBattery (arguments as for the constructor) for the block's duration."""
        battery = cls(**kwargs)
        await battery.serve()
        try:
            yield battery
        finally:
            await battery.close()

    @property
    def target(self) -> str:
        """The gRPC target to dial, e.g. "127.0.0.1:43121"."""
        if not self.server.port:
            raise BatteryStateError(self, "the fake battery is not serving")
        return self.server.target

    @property
    def listening(self) -> bool:
        return self.server.listening

    async def serve(self) -> None:
        """Read the database (if any), recover, connect to the Hosts, start reconcilers, the
        sweeper and the server. Raises DatabaseError for a database it cannot read."""
        if self._running:
            raise BatteryStateError(self, "the fake battery is already serving")
        await self._come_up()
        self._running = True

    async def close(self) -> None:
        """Stop serving and every background task; close the Host channels."""
        if not self._running:
            return
        self._running = False
        await self._crash()
        self.store.flush()
        if self.db is not None:
            self.db.close()

    async def restart(self) -> None:
        """Simulate a poolmgrd restart that keeps its database.

        In-flight work is cut off as by a crash; then the steps of a start follow (`serve`):
        with a database the state is read back from its file (what was not written is lost,
        as in a new process); as poolmgrd does at start, claims left mid-way are marked
        DELETING and placements are dropped (`startup.recover`), Hosts are dialled again (their
        version checks are repeated), every Pool's reconciler is started and the first sweep
        comes one interval later.
        """
        if not self._running:
            raise BatteryStateError(self, "the fake battery is not serving")
        await self._crash()
        # Changes of the last event-loop turn, already committed as far as anyone knows.
        self.store.flush()
        await self._come_up()

    async def _crash(self) -> None:
        """Cut off the server and in-flight work as a crash would; close the Host channels."""
        self._crashing = True
        try:
            await self.server.stop()
            await self.schedule.stop()
        finally:
            self._crashing = False
        for host in self.store.hosts.values():
            await host.close()

    async def _come_up(self) -> None:
        """The steps of every start (`startup.py`), then the Hosts, the loops, the server."""
        startup.open_state(self)
        startup.recover(self)
        for host in self.store.hosts.values():
            try:
                host.dial()
            except HostTLSFilesError as err:
                log.warning("%s; the host is skipped until it is fixed", err)
        self.schedule.start()
        await self._listen()

    async def _listen(self) -> None:
        try:
            await self.server.start()
        except ListenError as err:
            raise BatteryStateError(self, str(err)) from err

    # -- faults (TD-006) -----------------------------------------------------------------

    def set_unavailable(self, unavailable: bool = True) -> None:
        """Answer every RPC, health included, with UNAVAILABLE (or stop doing so)."""
        self.faults.unavailable = unavailable

    async def stop_listening(self) -> None:
        """Close the listening socket (callers see connection refused); state is kept."""
        if not self._running:
            raise BatteryStateError(self, "the fake battery is not serving")
        await self.server.stop()

    async def resume_listening(self) -> None:
        """Listen again on the same port after stop_listening()."""
        if not self._running:
            raise BatteryStateError(self, "the fake battery is not serving")
        if not self.server.listening:
            await self._listen()

    def delay_claims(self, seconds: float, *, after_commit: bool = False) -> None:
        """Make ClaimVM take `seconds` longer (0 clears), before choosing a VM or after commit."""
        self.faults.claim_delay = seconds
        self.faults.claim_delay_after_commit = after_commit

    def refuse_heartbeats(
        self, code: grpc.StatusCode | str | None = grpc.StatusCode.UNAVAILABLE
    ) -> None:
        """Answer Heartbeat with code, renewing nothing; None renews again."""
        self.faults.heartbeat_refusal = None if code is None else status_code(code)

    def fail_hooks(self, kind: str, times: int | None = None) -> None:
        """Fail the next `times` create or pre-lease hooks (None: all of them; 0 clears).

        A failing hook does not run its commands; battery's hook-failure policy applies.
        """
        if kind not in HOOK_KINDS:
            raise ValueError(f"hook kind must be one of {HOOK_KINDS}, not {kind!r}")
        setattr(self.faults, f"{kind}_hook_failures", times)

    def drop_event_streams(self, *, refuse_new: bool = False) -> None:
        """End every open Subscribe stream with UNAVAILABLE; optionally refuse new ones."""
        self._stream_generation += 1
        self.faults.refuse_event_streams = refuse_new
        self.store.touch()

    def lose_claim_answers(
        self, times: int = 1, code: grpc.StatusCode | str = grpc.StatusCode.UNAVAILABLE
    ) -> None:
        """The next `times` ClaimVM calls that end with a Lease keep it but answer code."""
        self.faults.lost_claim_answers = times
        self.faults.lost_claim_answer_code = status_code(code)

    def clear_faults(self) -> None:
        self.faults = Faults()

    # -- clock ---------------------------------------------------------------------------

    async def advance(self, seconds: float, *, within: float = 10.0) -> None:
        """Move the FakeClock forward, stopping at every due sweep and tick until it has run.

        Work those passes start on flintlockd (provisioning, deletes) continues in real time;
        wait for its outcome with wait_for().
        """
        clock = self.clock
        if not isinstance(clock, FakeClock):
            raise BatteryStateError(self, "advance() needs the fake battery to run on a FakeClock")
        target = clock.now() + timedelta(seconds=seconds)
        while True:
            await self._settle(within)
            if clock.now() >= target:
                return
            due = [d for d in self.schedule.due_times() if d > clock.now()]
            clock.set(min([*due, target]))

    async def _settle(self, within: float) -> None:
        def settled() -> bool:
            return self.schedule.settled(self.clock.now())

        await self.wait_for(settled, within=within, what="due sweeps and ticks to run")

    # -- inspection ----------------------------------------------------------------------

    def vm_records(self, namespace: str = "", name: str = "") -> list[types_pb2.VMRecord]:
        """Every VM row (or one Pool's), in creation order."""
        return [
            vm.record()
            for vm in self.store.vms.values()
            if not name or vm.pool == (namespace, name)
        ]

    def pool_specs(self) -> list[types_pb2.PoolSpec]:
        """Every Pool battery holds, as stored (copies)."""
        out = []
        for spec in self.store.pools.values():
            copy = types_pb2.PoolSpec()
            copy.CopyFrom(spec)
            out.append(copy)
        return out

    def lease_records(self) -> list[types_pb2.LeaseRecord]:
        return [lease.record() for lease in self.store.sorted_leases()]

    def events(self) -> list[types_pb2.Event]:
        return list(self.store.events)

    @property
    def sweeps(self) -> int:
        """How many sweeps have completed since the last (re)start."""
        return self.schedule.sweeps

    async def wait_for(
        self, predicate: Callable[[], bool], *, within: float = 10.0, what: str = "a condition"
    ) -> None:
        """Wait (bounded, real time) until predicate() holds; re-checked on every state change."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while True:
            changed = self.store.changed
            if predicate():
                return
            left = deadline - loop.time()
            if left <= 0:
                raise WaitTimeoutError(what, within)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(left, 0.25)):
                    await changed.wait()

    async def sweep(self) -> None:
        """One pass of the sweeper, now (the periodic sweeper calls this too)."""
        await self.deleter.sweep()
        self.schedule.count_sweep()
        self.store.touch()

    # -- what the services share ---------------------------------------------------------

    def pool_lock(self, key: PoolKey) -> asyncio.Lock:
        return self._pool_locks.setdefault(key, asyncio.Lock())

    @property
    def stream_generation(self) -> int:
        return self._stream_generation

    @property
    def crashing(self) -> bool:
        return self._crashing

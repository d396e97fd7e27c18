"""The fake battery's engine and lifecycle: `FakeBattery` (TD-001..006).

It owns the store (in memory, and in a database file when given `db`: BA-060), one reconciler
task per Pool, the global sweeper, the gRPC server (PoolAdmin, Lease, Events, HostAdmin,
grpc.health.v1) and the fault switches. The RPC handlers live in `services.py`; they call the
methods here. A start and an in-process `restart()` go through the same steps (`_open_state`,
`_recover`), so a restarted process and a restarted FakeBattery come back alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import uuid
from base64 import b64encode
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from battery_protos.flintlock.types import microvm_pb2
from battery_protos.poolmgr.v1alpha1 import (
    events_pb2_grpc,
    hostadmin_pb2_grpc,
    lease_pb2_grpc,
    pooladmin_pb2_grpc,
    types_pb2,
)
from batteryop.api.clock import Clock, FakeClock, SystemClock
from batteryop.obs.supervisor import Supervisor
from batteryop.testing.fake_battery.db import Database, DatabaseError
from batteryop.testing.fake_battery.faults import HOOK_KINDS, Faults
from batteryop.testing.fake_battery.hosts import (
    FlintlockVersionError,
    HostConfig,
    HostConnection,
    HostTLSConfig,
    HostTLSFilesError,
)
from batteryop.testing.fake_battery.store import Phase, PoolKey, Store, VmRow, pool_label
from batteryop.testing.fake_battery.validation import has_static_network
from batteryop.testing.faultcodes import status_code

log = logging.getLogger(__name__)

SWEEPER_TASK = "sweeper"

Policy = types_pb2.HookFailurePolicy

_GOING = frozenset({Phase.DELETING, Phase.FAILED})
"""Phases of VMs that no longer count as placed on their Host (`FakeBattery._placed`)."""
VmState = microvm_pb2.MicroVMStatus.MicroVMState


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


class _Reconciler:
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
        placed = self.battery._placed(self.key) if shortfall > 0 else Counter[str]()
        for _ in range(max(shortfall, 0)):
            host = self.battery._pick_host(spec, placed, self.pending)
            if host is None:
                log.debug("pool %s: no eligible host", pool_label(self.key))
                return
            self.pending[host.name] = self.pending.get(host.name, 0) + 1
            host.placements += 1
            task = asyncio.create_task(self.battery._provision(self, host, spec))
            self.provisions.add(task)
            task.add_done_callback(self.provisions.discard)


class _Sweeper:
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


class _Interceptor(grpc.aio.ServerInterceptor):
    """Basic auth (when configured) and the `unavailable` fault, before any handler runs; with a
    database, the store's write after the handler and before each streamed message (BA-060)."""

    def __init__(self, battery: FakeBattery) -> None:
        self._battery = battery

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        battery = self._battery
        if handler is None:
            return handler
        if battery.faults.unavailable:
            return _refusing(handler, grpc.StatusCode.UNAVAILABLE, "battery unavailable (fault)")
        token = battery.basic_auth_token
        if token:
            expected = "basic " + b64encode(token.encode()).decode()
            metadata = dict(handler_call_details.invocation_metadata or ())
            got = str(metadata.get("authorization", ""))
            if not hmac.compare_digest(got.encode(), expected.encode()):
                return _refusing(handler, grpc.StatusCode.UNAUTHENTICATED, "unauthenticated")
        if battery.store.durable:
            return _flushing(handler, battery)
        return handler


async def _synced_or_abort(battery: FakeBattery, context: grpc.aio.ServicerContext) -> None:
    try:
        await battery.store.synced()
    except DatabaseError as err:
        # As a failed COMMIT fails poolmgrd's RPC: the caller is not told of a change not kept.
        log.error("%s", err)
        await context.abort(grpc.StatusCode.INTERNAL, f"store: {err}")


def _flushing(handler: grpc.RpcMethodHandler, battery: FakeBattery) -> grpc.RpcMethodHandler:
    """handler, with what it changed made durable before its answer (or each message) leaves.

    BA-060, CL-061: a ClaimVM's Lease is in the database before its answer is sent.
    """
    kwargs = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.unary_unary is not None:
        inner = handler.unary_unary

        async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
            try:
                reply = await inner(request, context)
            except Exception:
                # An abort after a change (a failed hook's policy applied) keeps the change too.
                with contextlib.suppress(DatabaseError):
                    await battery.store.synced()
                raise
            await _synced_or_abort(battery, context)
            return reply

        return grpc.unary_unary_rpc_method_handler(unary, **kwargs)
    if handler.unary_stream is not None:
        stream_inner = handler.unary_stream

        async def stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            async for message in stream_inner(request, context):
                await _synced_or_abort(battery, context)
                yield message

        return grpc.unary_stream_rpc_method_handler(stream, **kwargs)
    return handler


def _refusing(
    handler: grpc.RpcMethodHandler, code: grpc.StatusCode, message: str
) -> grpc.RpcMethodHandler:
    """A handler of the same shape as handler that fails every call with code."""

    async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(code, message)

    async def stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        await context.abort(code, message)
        yield None  # pragma: no cover - abort raises

    kwargs = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(stream, **kwargs)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(unary, **kwargs)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(stream, **kwargs)
    return grpc.unary_unary_rpc_method_handler(unary, **kwargs)


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
        self._host_configs = _host_configs(hosts)
        self._address = address
        self._port = 0
        self._server: grpc.aio.Server | None = None
        self._health: health.aio.HealthServicer | None = None
        self._reconcilers: dict[PoolKey, _Reconciler] = {}
        self._sweeper: _Sweeper | None = None
        self.loops = Supervisor()
        """Runs the sweeper and each Pool's reconciler: one that raises is logged with its
        traceback and started again with backoff (`loops.down()` names it meanwhile)."""
        self._pool_locks: dict[PoolKey, asyncio.Lock] = {}
        self._warned: set[tuple[str, datetime]] = set()
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
        if not self._port:
            raise BatteryStateError(self, "the fake battery is not serving")
        host = self._address.rsplit(":", 1)[0]
        if host in ("", "0.0.0.0", "[::]"):
            host = "127.0.0.1"
        return f"{host}:{self._port}"

    @property
    def listening(self) -> bool:
        return self._server is not None

    async def serve(self) -> None:
        """Read the database (if any), recover, connect to the Hosts, start reconcilers, the
        sweeper and the server. Raises DatabaseError for a database it cannot read."""
        if self._running:
            raise BatteryStateError(self, "the fake battery is already serving")
        self._open_state()
        self._recover()
        self._dial_hosts()
        self._start_loops()
        await self._start_server()
        self._running = True

    async def close(self) -> None:
        """Stop serving and every background task; close the Host channels."""
        if not self._running:
            return
        self._running = False
        self._crashing = True
        try:
            await self._stop_server()
            await self._stop_loops()
        finally:
            self._crashing = False
        for host in self.store.hosts.values():
            await host.close()
        self.store.flush()

    async def restart(self) -> None:
        """Simulate a poolmgrd restart that keeps its database.

        In-flight work is cut off as by a crash; then the steps of a start follow (`serve`):
        with a database the state is read back from its file (what was not written is lost,
        as in a new process); as poolmgrd does at start, claims left mid-way are marked
        DELETING and placements are dropped (`_recover`), Hosts are dialled again (their
        version checks are repeated), every Pool's reconciler is started and the first sweep
        comes one interval later.
        """
        if not self._running:
            raise BatteryStateError(self, "the fake battery is not serving")
        self._crashing = True
        try:
            await self._stop_server()
            await self._stop_loops()
        finally:
            self._crashing = False
        for host in self.store.hosts.values():
            await host.close()
        # Changes of the last event-loop turn, already committed as far as anyone knows.
        self.store.flush()
        self._open_state()
        self._recover()
        self._dial_hosts()
        self._start_loops()
        await self._start_server()

    def _open_state(self) -> None:
        """What poolmgrd reads at start: its database (with `db`) and its config's Hosts.

        Without a database the store keeps what it holds (the in-process restart's memory),
        and only Hosts not yet known are added. With one, the store is read back from the file
        (TD-005: one file of our own format, no migrations) and Hosts are built from the config,
        each with its stored row's cordon state (v0.4.0 seeds its `hosts` table from the config
        and keeps the cordon state); with `host_api`, Hosts stored but not in the config come
        back too (battery main: the database is the only source of Hosts).
        """
        now = self.clock.now()
        if self.db is None:
            for config in self._host_configs:
                if config.name not in self.store.hosts:
                    self.store.hosts[config.name] = HostConnection(config, now)
            return
        snapshot = self.db.load()
        stored: dict[str, types_pb2.Host] = {}
        if snapshot is not None:
            self.store.replace(
                pools=snapshot.pools,
                vms=snapshot.vms,
                leases=snapshot.leases,
                events=snapshot.events,
                next_event_id=snapshot.next_event_id,
            )
            stored = snapshot.hosts
        hosts: dict[str, HostConnection] = {}
        for config in self._host_configs:
            hosts[config.name] = _with_row(HostConnection(config, now), stored.get(config.name))
        if self.host_api:
            for name, row in stored.items():
                if name not in hosts:
                    tls = HostTLSConfig(
                        insecure=row.tls.insecure,
                        ca_file=row.tls.ca_file,
                        cert_file=row.tls.cert_file,
                        key_file=row.tls.key_file,
                    )
                    config = HostConfig(name, row.address, tls)
                    hosts[name] = _with_row(HostConnection(config, now), row)
        self.store.hosts = hosts
        self.store.commit()

    def _recover(self) -> None:
        """poolmgrd's startup recovery, at every start and restart: placements are dropped and
        claims left mid-way (pre-lease hook running, or LEASED without a Lease) go DELETING, for
        the sweep to delete (TD-006, BA-060)."""
        for host in self.store.hosts.values():
            host.placements = 0
        for vm in self.store.vms.values():
            mid_claim = vm.phase == Phase.PRE_LEASE_HOOK_RUNNING or (
                vm.phase == Phase.LEASED
                and (vm.lease_id is None or vm.lease_id not in self.store.leases)
            )
            if mid_claim:
                self.store.set_phase(vm.uid, Phase.DELETING)
        self._warned.clear()

    def _dial_hosts(self) -> None:
        for host in self.store.hosts.values():
            try:
                host.dial()
            except HostTLSFilesError as err:
                log.warning("%s; the host is skipped until it is fixed", err)

    def _start_loops(self) -> None:
        for key, spec in self.store.pools.items():
            self._reconcilers[key] = _Reconciler(self, key, spec)
        self._sweeper = _Sweeper(self)

    async def _stop_loops(self) -> None:
        tasks: list[asyncio.Task[Any]] = []
        for rec in self._reconcilers.values():
            rec.stop()
            tasks += [rec.task, *rec.provisions]
        self._reconcilers.clear()
        if self._sweeper is not None:
            self.loops.cancel(SWEEPER_TASK)
            tasks.append(self._sweeper.task)
            self._sweeper = None
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _start_server(self) -> None:
        from batteryop.testing.fake_battery.services import (
            EventsService,
            HostAdminService,
            LeaseService,
            PoolAdminService,
        )

        server = grpc.aio.server(interceptors=[_Interceptor(self)])
        pooladmin_pb2_grpc.add_PoolAdminServicer_to_server(PoolAdminService(self), server)
        lease_pb2_grpc.add_LeaseServicer_to_server(LeaseService(self), server)
        events_pb2_grpc.add_EventsServicer_to_server(EventsService(self), server)
        hostadmin_pb2_grpc.add_HostAdminServicer_to_server(HostAdminService(self), server)
        self._health = health.aio.HealthServicer()
        # BA-112: the empty service name reports SERVING while battery is up.
        await self._health.set("", health_pb2.HealthCheckResponse.SERVING)
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        address = self._address
        if self._port:
            address = f"{address.rsplit(':', 1)[0]}:{self._port}"
        port = server.add_insecure_port(address)
        if port == 0:
            raise BatteryStateError(self, f"cannot listen on {address}")
        await server.start()
        self._port = port
        self._server = server

    async def _stop_server(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            if self._health is not None:
                await self._health.enter_graceful_shutdown()
            await server.stop(grace=None)

    # -- faults (TD-006) -----------------------------------------------------------------

    def set_unavailable(self, unavailable: bool = True) -> None:
        """Answer every RPC, health included, with UNAVAILABLE (or stop doing so)."""
        self.faults.unavailable = unavailable

    async def stop_listening(self) -> None:
        """Close the listening socket (callers see connection refused); state is kept."""
        if not self._running:
            raise BatteryStateError(self, "the fake battery is not serving")
        await self._stop_server()

    async def resume_listening(self) -> None:
        """Listen again on the same port after stop_listening()."""
        if not self._running:
            raise BatteryStateError(self, "the fake battery is not serving")
        if self._server is None:
            await self._start_server()

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
            due = [d for d in self._due_times() if d > clock.now()]
            clock.set(min([*due, target]))

    def _due_times(self) -> list[datetime]:
        loops: list[_Reconciler | _Sweeper] = list(self._reconcilers.values())
        if self._sweeper is not None:
            loops.append(self._sweeper)
        return [loop.next_due for loop in loops if loop.next_due is not None]

    async def _settle(self, within: float) -> None:
        def settled() -> bool:
            now = self.clock.now()
            loops: list[_Reconciler | _Sweeper] = list(self._reconcilers.values())
            if self._sweeper is not None:
                loops.append(self._sweeper)
            return all(loop.next_due is not None and loop.next_due > now for loop in loops)

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
        return self._sweeper.sweeps if self._sweeper is not None else 0

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
                await asyncio.wait_for(changed.wait(), min(left, 0.25))

    # -- engine: placement and provisioning ----------------------------------------------

    def _placed(self, key: PoolKey) -> Counter[str]:
        """The Pool's MicroVMs per Host, but those going or failed."""
        return Counter(vm.host for vm in self.store.pool_vms(key) if vm.phase not in _GOING)

    def _pick_host(
        self, spec: types_pb2.PoolSpec, placed: Mapping[str, int], pending: Mapping[str, int]
    ) -> HostConnection | None:
        """The eligible Host with the fewest of the Pool's MicroVMs, placed or on the way."""
        best: HostConnection | None = None
        best_load = 0
        for name in spec.flintlock_hosts:
            host = self.store.hosts.get(name)
            # BA-105: a cordoned Host gets no new MicroVM; those already there keep running.
            if host is None or host.cordoned:
                continue
            load = pending.get(name, 0) + placed.get(name, 0)
            if best is None or load < best_load:
                best, best_load = host, load
        return best

    async def _provision(
        self, rec: _Reconciler, host: HostConnection, spec: types_pb2.PoolSpec
    ) -> None:
        key = rec.key
        reserved = True

        def unreserve() -> None:
            nonlocal reserved
            if reserved:
                reserved = False
                host.placements -= 1
                rec.pending[host.name] -= 1

        vm: VmRow | None = None
        try:
            # BA-110: no MicroVM on a Host whose flintlockd is older than v0.15.2.
            await host.ensure_version(self.timings.version_check_timeout)
            template = microvm_pb2.MicroVMSpec()
            template.CopyFrom(spec.microvm_template)
            template.allow_guest_agent = True
            template.id = f"{key[1]}-{uuid.uuid4().hex[:8]}"
            if not template.namespace:
                template.namespace = key[0]
            # TD-002: a MicroVM exists only once the Host's flintlockd has created it.
            created = await host.create(template, self.timings.rpc_timeout)
            now = self.clock.now()
            vm = VmRow(
                uid=created.spec.uid,
                flintlock_id=template.id,
                pool=key,
                host=host.name,
                phase=Phase.PROVISIONING,
                lease_id=None,
                created_at=now,
                updated_at=now,
            )
            unreserve()
            self.store.add_vm(vm)
            self.store.emit(types_pb2.VM_PROVISIONED, key, vm.uid)
            failure = await self._bring_up(vm, host, spec)
            if failure is None:
                # BA-006: AVAILABLE only once provisioning and the create hook have completed.
                if self.store.set_phase(
                    vm.uid, Phase.AVAILABLE, expect=frozenset({Phase.CREATE_HOOK_RUNNING})
                ):
                    self.store.emit(types_pb2.VM_AVAILABLE, key, vm.uid)
                return
            log.warning("pool %s: vm %s create hook failed: %s", pool_label(key), vm.uid, failure)
            await asyncio.shield(self._hook_failed(vm, spec, failure))
        except asyncio.CancelledError:
            if vm is not None and not self._crashing:
                await asyncio.shield(self._hook_failed(vm, spec, "provision cancelled"))
            raise
        except (grpc.aio.AioRpcError, FlintlockVersionError) as err:
            log.warning("pool %s: provision on %s failed: %s", pool_label(key), host.name, err)
        finally:
            unreserve()

    async def _bring_up(
        self, vm: VmRow, host: HostConnection, spec: types_pb2.PoolSpec
    ) -> str | None:
        """Wait for CREATED and the guest agent, run the create hook; None, or why it failed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timings.create_timeout
        while True:
            try:
                got = await host.get(vm.uid, self.timings.rpc_timeout)
                if got.status.state == VmState.CREATED:
                    break
                if got.status.state == VmState.FAILED:
                    return "flintlock reports the microvm FAILED"
            except grpc.aio.AioRpcError as err:
                log.debug("vm %s: GetMicroVM: %s", vm.uid, err.code().name)
            if loop.time() >= deadline:
                return "timed out waiting for the microvm to be created"
            await asyncio.sleep(self.timings.create_poll_interval)
        if not self.store.set_phase(
            vm.uid, Phase.CREATE_HOOK_RUNNING, expect=frozenset({Phase.PROVISIONING})
        ):
            return None
        deadline = loop.time() + self.timings.agent_timeout
        while True:
            probe = await host.exec_shell(vm.uid, "true", self.timings.agent_probe_timeout)
            if not probe.rpc_failed:
                break
            if loop.time() >= deadline:
                return f"guest agent not ready: {probe.describe()}"
            await asyncio.sleep(self.timings.agent_poll_interval)
        return await self._run_hook(vm, host, spec.create_commands, "create")

    async def _run_hook(
        self, vm: VmRow, host: HostConnection, commands: Sequence[str], kind: str
    ) -> str | None:
        if self.faults.take_hook_failure(kind):
            return f"{kind} hook failed (fault injection)"
        for command in commands:
            result = await host.exec_shell(vm.uid, command, None)
            if not result.ok:
                return f"command {command!r}: {result.describe()}"
        return None

    async def _hook_failed(self, vm: VmRow, spec: types_pb2.PoolSpec, why: str) -> None:
        """Apply the Pool's hook-failure policy to vm (detached from the caller, bounded)."""
        row = self.store.vms.get(vm.uid)
        if row is None or row.phase == Phase.DELETING:
            return
        if spec.hook_failure_policy == Policy.QUARANTINE:
            self.store.set_phase(vm.uid, Phase.QUARANTINED)
        else:
            host = self.store.hosts.get(vm.host)
            if host is not None:
                try:
                    await asyncio.wait_for(
                        host.delete(vm.uid, self.timings.delete_timeout),
                        self.timings.hook_cleanup_timeout,
                    )
                except (grpc.aio.AioRpcError, TimeoutError) as err:
                    # BA-113: as poolmgrd v0.4.0 does (battery #131/#132), the row goes anyway.
                    log.warning("vm %s: best-effort delete after hook failure: %s", vm.uid, err)
            self.store.remove_vm(vm.uid)
            self._notify(vm.pool, "deleted")
        self.store.emit(types_pb2.VM_HOOK_FAILED, vm.pool, vm.uid)
        log.info(
            "vm %s: hook failed (%s); policy %s applied",
            vm.uid,
            why,
            Policy.Name(spec.hook_failure_policy),
        )

    def _notify(self, key: PoolKey, kind: str) -> None:
        rec = self._reconcilers.get(key)
        if rec is not None:
            rec.notify(kind)

    # -- engine: deletion and the sweep --------------------------------------------------

    async def _delete_on_host(self, vm: VmRow) -> bool:
        """Mark vm DELETING and ask its Host to delete it; True once flintlockd confirmed."""
        self.store.set_phase(vm.uid, Phase.DELETING)
        host = self.store.hosts.get(vm.host)
        if host is None:
            log.warning("vm %s: host %s is not registered; deletion pending", vm.uid, vm.host)
            return False
        try:
            await host.delete(vm.uid, self.timings.delete_timeout)
        except grpc.aio.AioRpcError as err:
            log.warning("vm %s: DeleteMicroVM on %s: %s", vm.uid, vm.host, err.code().name)
            return False
        return True

    async def sweep(self) -> None:
        """One pass of the sweeper, now (the periodic sweeper calls this too)."""
        store = self.store
        # 1. Finish deletions still pending (skipped while the VM's Pool is gone).
        # BA-023, BA-031: deletions flintlockd has not confirmed are tried again at every sweep.
        deleting = [
            vm for vm in store.vms.values() if vm.phase == Phase.DELETING and vm.pool in store.pools
        ]
        done = await asyncio.gather(*(self._delete_on_host(vm) for vm in deleting))
        for vm, ok in zip(deleting, done, strict=True):
            if not ok or store.remove_vm(vm.uid) is None:
                continue
            lease = store.lease_for_vm(vm.uid)
            if lease is not None:
                store.remove_lease(lease.lease_id)
                store.emit(types_pb2.VM_DELETED_ON_RELEASE, vm.pool, vm.uid)
            else:
                store.emit(types_pb2.VM_DELETED_DUE_TO_EXPIRY, vm.pool, vm.uid)
            self._notify(vm.pool, "deleted")
        # 2. Expire Leases whose expiry has passed (TD-003); warn about those about to expire.
        now = self.clock.now()
        window = timedelta(seconds=self.timings.warning_window)
        expired: list[VmRow] = []
        for lease in sorted(store.leases.values(), key=lambda lease: lease.expires_at):
            # BA-020: only the sweep removes Leases, each whose expiry is at or before its time.
            if lease.expires_at <= now:
                store.remove_lease(lease.lease_id)
                row = store.vms.get(lease.vm_uid)
                if row is not None and row.phase == Phase.LEASED:
                    expired.append(row)
            elif lease.expires_at <= now + window:
                mark = (lease.lease_id, lease.expires_at)
                if mark not in self._warned:
                    self._warned.add(mark)
                    store.emit(types_pb2.VM_EXPIRING_SOON, lease.pool, lease.vm_uid)
        done = await asyncio.gather(*(self._delete_on_host(vm) for vm in expired))
        for vm, ok in zip(expired, done, strict=True):
            # BA-051: the expiry event only once flintlockd has confirmed the deletion.
            if ok and store.remove_vm(vm.uid) is not None:
                store.emit(types_pb2.VM_DELETED_DUE_TO_EXPIRY, vm.pool, vm.uid)
                self._notify(vm.pool, "deleted")
        if self._sweeper is not None:
            self._sweeper.sweeps += 1
        store.touch()

    # -- engine: Pools -------------------------------------------------------------------

    def pool_lock(self, key: PoolKey) -> asyncio.Lock:
        return self._pool_locks.setdefault(key, asyncio.Lock())

    def start_reconciler(self, key: PoolKey, spec: types_pb2.PoolSpec) -> None:
        old = self._reconcilers.pop(key, None)
        if old is not None:
            old.stop()
        self._reconcilers[key] = _Reconciler(self, key, spec)

    async def stop_reconciler(self, key: PoolKey) -> None:
        rec = self._reconcilers.pop(key, None)
        if rec is not None:
            await rec.stop_and_wait()

    def notify(self, key: PoolKey, kind: str) -> None:
        self._notify(key, kind)

    @property
    def stream_generation(self) -> int:
        return self._stream_generation

    @property
    def crashing(self) -> bool:
        return self._crashing


def _with_row(conn: HostConnection, row: types_pb2.Host | None) -> HostConnection:
    """conn with the cordon state and update time of its stored row, if there is one."""
    if row is not None:
        conn.cordoned = row.cordoned
        conn.cordoned_reason = row.cordoned_reason
        conn.cordoned_at = row.cordoned_at.ToDatetime(UTC) if row.HasField("cordoned_at") else None
        if row.HasField("updated_at"):
            conn.updated_at = row.updated_at.ToDatetime(UTC)
    return conn

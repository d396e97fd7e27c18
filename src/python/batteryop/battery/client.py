"""`BatteryClient`: battery's PoolAdmin, Lease, Events and HostAdmin services on grpc.aio.

    async with BatteryClient.connect(config, observer=metrics) as battery:
        pool = await battery.get_pool(PoolRef(namespace="ci", name="runners"))
        vm = await battery.claim_vm(pool.ref, request_id=claim_uid)

Every unary call carries a deadline, `config.call_timeout`, except `ClaimVM`, which has its
own `config.claim_timeout` because battery runs the Pool's pre-lease hooks inside it. Calls take
and return the dataclasses of `batteryop.battery.models`; failures arrive as the errors of
`batteryop.battery.errors`, mapped in one place (`errors.rpc_boundary`). Controllers should
depend on `batteryop.battery.protocol.BatteryAPI`, which this class implements.

Requirements: DP-010 (deadline on every unary call), DP-011 (typed errors), DP-013 (ClaimVM's
own deadline), CL-060 (ClaimVM carries the caller's request id).
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

import grpc
import grpc.aio

from battery_protos.poolmgr.v1alpha1 import (
    events_pb2,
    events_pb2_grpc,
    hostadmin_pb2,
    hostadmin_pb2_grpc,
    lease_pb2,
    lease_pb2_grpc,
    pooladmin_pb2,
    pooladmin_pb2_grpc,
)
from batteryop.api.closing import AsyncClosing
from batteryop.battery import wire
from batteryop.battery.config import BatteryConfig
from batteryop.battery.errors import (
    BatteryError,
    BatteryInternalError,
    BatteryUnavailableError,
    InvalidArgumentError,
    rpc_boundary,
)
from batteryop.battery.events import EventSubscription
from batteryop.battery.models import (
    ClaimedVM,
    Host,
    HostStatus,
    HostTLS,
    Lease,
    Pool,
    PoolRef,
    PoolSpec,
)
from batteryop.battery.observer import CallObserver, notify

T = TypeVar("T")

MAX_REQUEST_ID_BYTES = 255  # battery refuses a longer ClaimVM request_id


def _ms(value: timedelta) -> int:
    return max(1, int(value.total_seconds() * 1000))


def channel_options(config: BatteryConfig) -> list[tuple[str, Any]]:
    """grpc channel arguments for `config` (keepalive, reconnect backoff, TLS name)."""
    options: list[tuple[str, Any]] = [
        ("grpc.initial_reconnect_backoff_ms", _ms(config.reconnect.initial)),
        ("grpc.max_reconnect_backoff_ms", _ms(config.reconnect.maximum)),
    ]
    if config.keepalive_time is not None:
        options += [
            ("grpc.keepalive_time_ms", _ms(config.keepalive_time)),
            ("grpc.keepalive_timeout_ms", _ms(config.keepalive_timeout)),
            # Only ping while a call (the Events stream) is open: battery's Go server
            # closes connections that ping while idle.
            ("grpc.keepalive_permit_without_calls", 0),
            ("grpc.http2.max_pings_without_data", 0),
        ]
    if config.tls is not None and config.tls.server_name:
        options.append(("grpc.ssl_target_name_override", config.tls.server_name))
    return options


class BatteryClient(AsyncClosing):
    """A connection to battery. Build it with `connect`; close it with `aclose`."""

    def __init__(
        self,
        config: BatteryConfig,
        channel: grpc.aio.Channel,
        *,
        observer: CallObserver | None = None,
    ) -> None:
        self._config = config
        self._channel = channel
        self._observer = observer
        self._metadata = config.metadata
        self._pools = pooladmin_pb2_grpc.PoolAdminStub(channel)
        self._leases = lease_pb2_grpc.LeaseStub(channel)
        self._events = events_pb2_grpc.EventsStub(channel)
        self._hosts = hostadmin_pb2_grpc.HostAdminStub(channel)
        self._subscriptions: weakref.WeakSet[EventSubscription] = weakref.WeakSet()
        self._closed = False

    @classmethod
    def connect(
        cls, config: BatteryConfig, *, observer: CallObserver | None = None
    ) -> BatteryClient:
        """Open a channel to `config.target` (lazily: the first call connects).

        Call it inside the event loop that will use the client. TLS files are read here; an
        unreadable one raises `BatteryConfigError` naming it.
        """
        options = channel_options(config)
        if config.tls is None:
            channel = grpc.aio.insecure_channel(config.target, options=options)
        else:
            ca, key, chain = config.tls.read()
            credentials = grpc.ssl_channel_credentials(
                root_certificates=ca, private_key=key, certificate_chain=chain
            )
            channel = grpc.aio.secure_channel(config.target, credentials, options=options)
        return cls(config, channel, observer=observer)

    @property
    def config(self) -> BatteryConfig:
        return self._config

    async def wait_connected(self, within: timedelta | None = None) -> None:
        """Wait until the channel to battery is connected (at most `within`, default
        `call_timeout`); `BatteryUnavailableError` if it is not.

        For start-up ordering (DP-006: nothing calls battery before it answers). A connected
        channel does not prove the token is right: the first call does.
        """
        seconds = (within or self._config.call_timeout).total_seconds()
        if self._closed:
            raise BatteryUnavailableError("Connect", "CANCELLED", "the battery client is closed")
        try:
            async with asyncio.timeout(seconds):
                await self._channel.channel_ready()
        except TimeoutError as err:
            raise BatteryUnavailableError(
                "Connect", "UNAVAILABLE", f"not connected to {self._config.target} after {seconds}s"
            ) from err

    async def aclose(self) -> None:
        """Close every event subscription, then the channel (idempotent)."""
        if self._closed:
            return
        self._closed = True
        for subscription in list(self._subscriptions):
            await subscription.aclose()
        await self._channel.close()

    # --- the boundary --------------------------------------------------------------------------

    async def _unary(
        self,
        rpc: str,
        method: Any,
        request: Any,
        parse: Callable[[Any], T],
        *,
        deadline: timedelta | None = None,
    ) -> T:
        """Call `method` with a deadline; map its failure; parse its answer; observe it."""
        seconds = (deadline or self._config.call_timeout).total_seconds()
        started = time.monotonic()
        code = "OK"
        try:
            with rpc_boundary(rpc):
                if self._closed:
                    raise BatteryUnavailableError(rpc, "CANCELLED", "the battery client is closed")
                response = await method(request, timeout=seconds, metadata=self._metadata)
            try:
                return parse(response)
            except ValueError as err:
                raise BatteryInternalError(rpc, "INTERNAL", f"unreadable answer: {err}") from err
        except BatteryError as err:
            code = err.code
            raise
        except asyncio.CancelledError:
            code = "CANCELLED"
            raise
        finally:
            notify(self._observer, rpc, code, time.monotonic() - started)

    # --- PoolAdmin -----------------------------------------------------------------------------

    async def create_pool(self, spec: PoolSpec) -> Pool:
        """Create a Pool; `AlreadyExistsError` if battery has one of that name."""
        request = pooladmin_pb2.CreatePoolRequest(spec=_spec_to_pb("CreatePool", spec))
        return await self._unary("CreatePool", self._pools.CreatePool, request, wire.pool_from_pb)

    async def update_pool(self, spec: PoolSpec) -> Pool:
        """Replace a Pool's whole spec; `BatteryNotFoundError` if battery has no such Pool."""
        request = pooladmin_pb2.UpdatePoolRequest(spec=_spec_to_pb("UpdatePool", spec))
        return await self._unary("UpdatePool", self._pools.UpdatePool, request, wire.pool_from_pb)

    async def delete_pool(self, pool: PoolRef, *, force: bool = False) -> None:
        """Drain and delete a Pool.

        Without `force`, battery refuses (`PreconditionFailedError`) while MicroVMs are
        leased; `BatteryNotFoundError` once the Pool is gone.
        """
        request = pooladmin_pb2.DeletePoolRequest(ref=wire.pool_ref_to_pb(pool), force=force)
        await self._unary("DeletePool", self._pools.DeletePool, request, _nothing)

    async def get_pool(self, pool: PoolRef) -> Pool:
        request = pooladmin_pb2.GetPoolRequest(ref=wire.pool_ref_to_pb(pool))
        return await self._unary("GetPool", self._pools.GetPool, request, wire.pool_from_pb)

    async def list_pools(self, namespace: str | None = None) -> list[Pool]:
        """Every Pool, or those of one namespace."""
        request = pooladmin_pb2.ListPoolsRequest()
        if namespace is not None:
            request.namespace = namespace
        return await self._unary(
            "ListPools",
            self._pools.ListPools,
            request,
            lambda r: [wire.pool_from_pb(p) for p in r.pools],
        )

    # --- Lease ---------------------------------------------------------------------------------

    async def claim_vm(self, pool: PoolRef, *, request_id: str) -> ClaimedVM:
        """Lease an AVAILABLE MicroVM of `pool`, with the `claim_timeout` deadline (DP-013).

        `request_id` makes the claim idempotent: the Operator passes the claim's
        `metadata.uid` (CL-060), so a retry after a lost answer gets the same Lease back
        (CL-061). Raises `BatteryPoolExhaustedError`, `BatteryNotFoundError`, `ClaimAbortedError` (the
        Lease for this request id is ending: CL-062) or `BatteryUnavailableError`.
        """
        size = len(request_id.encode())
        if not 0 < size <= MAX_REQUEST_ID_BYTES:
            raise InvalidArgumentError(
                "ClaimVM", "INVALID_ARGUMENT", f"request_id must be 1 to 255 bytes, got {size}"
            )
        request = lease_pb2.ClaimVMRequest(pool=wire.pool_ref_to_pb(pool), request_id=request_id)
        return await self._unary(
            "ClaimVM",
            self._leases.ClaimVM,
            request,
            wire.claimed_vm_from_pb,
            deadline=self._config.claim_timeout,
        )

    async def heartbeat(self, lease_id: str) -> datetime:
        """Renew a Lease; returns its new expiry. `BatteryNotFoundError` if the Lease is gone."""
        request = lease_pb2.HeartbeatRequest(lease_id=lease_id)
        return await self._unary(
            "Heartbeat", self._leases.Heartbeat, request, wire.heartbeat_expiry_from_pb
        )

    async def release_vm(self, lease_id: str) -> None:
        """End a Lease; battery deletes the MicroVM.

        `BatteryUnavailableError` also when battery could not yet confirm the deletion
        (it keeps the Lease and retries); `BatteryNotFoundError` once the Lease is gone.
        """
        request = lease_pb2.ReleaseVMRequest(lease_id=lease_id)
        await self._unary("ReleaseVM", self._leases.ReleaseVM, request, _nothing)

    async def list_leases(self, pool: PoolRef | None = None) -> Sequence[Lease]:
        """Every Lease battery holds, or one Pool's, expired-but-unswept ones included."""
        request = lease_pb2.ListLeasesRequest()
        if pool is not None:
            request.pool_ref.CopyFrom(wire.pool_ref_to_pb(pool))
        return await self._unary(
            "ListLeases",
            self._leases.ListLeases,
            request,
            lambda r: wire.LeaseList(r.leases),  # each Lease converted when read
        )

    # --- Events --------------------------------------------------------------------------------

    def events(
        self, pool: PoolRef | None = None, *, after_id: int | None = None
    ) -> EventSubscription:
        """Subscribe to battery's events, every Pool's or one's, across reconnects.

        battery replays its whole outbox to each new stream; events with an id at or below
        `after_id` are skipped, and so is every event this subscription already yielded.
        """
        if self._closed:
            raise BatteryUnavailableError("Subscribe", "CANCELLED", "the battery client is closed")
        request = events_pb2.SubscribeRequest()
        if pool is not None:
            request.pool.CopyFrom(wire.pool_ref_to_pb(pool))

        def opener() -> Any:
            # No deadline: the stream is meant to stay open; keepalive notices a dead peer.
            return self._events.Subscribe(request, metadata=self._metadata)

        subscription = EventSubscription(
            opener,
            self._channel,
            policy=self._config.reconnect,
            capacity=self._config.seen_event_ids,
            after_id=after_id,
            observer=self._observer,
            on_close=self._subscriptions.discard,
        )
        self._subscriptions.add(subscription)
        return subscription

    # --- HostAdmin -----------------------------------------------------------------------------

    async def cordon_host(self, name: str, *, reason: str = "") -> Host:
        """Stop new placements on a Host; `PreconditionFailedError` if it is unregistered."""
        request = hostadmin_pb2.CordonHostRequest(name=name, reason=reason)
        return await self._unary("CordonHost", self._hosts.CordonHost, request, wire.host_from_pb)

    async def uncordon_host(self, name: str) -> Host:
        request = hostadmin_pb2.UncordonHostRequest(name=name)
        return await self._unary(
            "UncordonHost", self._hosts.UncordonHost, request, wire.host_from_pb
        )

    async def list_hosts(self) -> list[HostStatus]:
        return await self._unary(
            "ListHosts",
            self._hosts.ListHosts,
            hostadmin_pb2.ListHostsRequest(),
            lambda r: [wire.host_status_from_pb(h) for h in r.hosts],
        )

    async def add_host(
        self,
        name: str,
        address: str,
        *,
        tls: HostTLS | None = None,
        skip_validation: bool = False,
    ) -> Host:
        """Register a Host (battery after v0.4.0; v0.4.0 raises `UnimplementedError`)."""
        request = hostadmin_pb2.AddHostRequest(
            host=wire.host_to_pb(name, address, tls), skip_validation=skip_validation
        )
        return await self._unary("AddHost", self._hosts.AddHost, request, wire.host_from_pb)

    async def update_host(
        self,
        name: str,
        address: str,
        *,
        tls: HostTLS | None = None,
        skip_validation: bool = False,
    ) -> Host:
        """Change a Host's address or TLS (after v0.4.0; else `UnimplementedError`)."""
        request = hostadmin_pb2.UpdateHostRequest(
            host=wire.host_to_pb(name, address, tls), skip_validation=skip_validation
        )
        return await self._unary("UpdateHost", self._hosts.UpdateHost, request, wire.host_from_pb)

    async def remove_host(self, name: str) -> None:
        """Unregister a Host (after v0.4.0; else `UnimplementedError`).

        `PreconditionFailedError` while a Pool names it or it has MicroVMs.
        """
        request = hostadmin_pb2.RemoveHostRequest(name=name)
        await self._unary("RemoveHost", self._hosts.RemoveHost, request, _nothing)

    async def get_host(self, name: str) -> HostStatus:
        """One Host (after v0.4.0; else `UnimplementedError`)."""
        request = hostadmin_pb2.GetHostRequest(name=name)
        return await self._unary("GetHost", self._hosts.GetHost, request, wire.host_status_from_pb)


def _nothing(_: Any) -> None:
    return None


def _spec_to_pb(rpc: str, spec: PoolSpec) -> Any:
    # battery stores zero durations, after which every Lease expires at once; refuse them
    # here rather than create a Pool nobody can hold a MicroVM of.
    for name in ("heartbeat_interval", "heartbeat_expiry_threshold"):
        if getattr(spec, name) <= timedelta(0):
            raise InvalidArgumentError(rpc, "INVALID_ARGUMENT", f"{name} must be positive")
    return wire.pool_spec_to_pb(spec)

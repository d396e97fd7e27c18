"""Helpers for tests that talk to a battery (fake or real) through the raw generated stubs.

`BatteryStubs` holds one channel's stubs for every battery service; `pool_spec()` builds a
PoolSpec that a fake flintlockd accepts; `wait_status()` polls GetPool (`testing.polling`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import grpc
from google.protobuf import duration_pb2
from grpc_health.v1 import health_pb2_grpc

from battery_protos.flintlock.types import microvm_pb2
from battery_protos.poolmgr.v1alpha1 import (
    events_pb2_grpc,
    hostadmin_pb2_grpc,
    lease_pb2,
    lease_pb2_grpc,
    pooladmin_pb2,
    pooladmin_pb2_grpc,
    types_pb2,
)
from batteryop.testing.polling import wait_until

RPC_TIMEOUT = 10.0
POLL_SECONDS = 0.02
"""How often a test reads a battery's state: a call to a local battery takes about a millisecond,
and a battery under a test's clock changes as soon as the test advances it."""


@dataclass
class BatteryStubs:
    """Stubs for every battery service on one channel."""

    channel: grpc.aio.Channel
    pools: pooladmin_pb2_grpc.PoolAdminStub
    leases: lease_pb2_grpc.LeaseStub
    events: events_pb2_grpc.EventsStub
    hosts: hostadmin_pb2_grpc.HostAdminStub
    health: health_pb2_grpc.HealthStub

    @classmethod
    def on(cls, channel: grpc.aio.Channel) -> BatteryStubs:
        return cls(
            channel=channel,
            pools=pooladmin_pb2_grpc.PoolAdminStub(channel),
            leases=lease_pb2_grpc.LeaseStub(channel),
            events=events_pb2_grpc.EventsStub(channel),
            hosts=hostadmin_pb2_grpc.HostAdminStub(channel),
            health=health_pb2_grpc.HealthStub(channel),
        )

    async def create_pool(self, spec: types_pb2.PoolSpec) -> types_pb2.Pool:
        return await self.pools.CreatePool(
            pooladmin_pb2.CreatePoolRequest(spec=spec), timeout=RPC_TIMEOUT
        )

    async def get_pool(self, ref: types_pb2.PoolRef) -> types_pb2.Pool:
        return await self.pools.GetPool(pooladmin_pb2.GetPoolRequest(ref=ref), timeout=RPC_TIMEOUT)

    async def claim(
        self, ref: types_pb2.PoolRef, request_id: str = ""
    ) -> lease_pb2.ClaimVMResponse:
        return await self.leases.ClaimVM(
            lease_pb2.ClaimVMRequest(pool=ref, request_id=request_id), timeout=RPC_TIMEOUT
        )

    async def heartbeat(self, lease_id: str) -> lease_pb2.HeartbeatResponse:
        return await self.leases.Heartbeat(
            lease_pb2.HeartbeatRequest(lease_id=lease_id), timeout=RPC_TIMEOUT
        )

    async def release(self, lease_id: str) -> None:
        await self.leases.ReleaseVM(
            lease_pb2.ReleaseVMRequest(lease_id=lease_id), timeout=RPC_TIMEOUT
        )

    async def list_leases(
        self, ref: types_pb2.PoolRef | None = None
    ) -> list[types_pb2.LeaseRecord]:
        request = lease_pb2.ListLeasesRequest()
        if ref is not None:
            request.pool_ref.CopyFrom(ref)
        reply = await self.leases.ListLeases(request, timeout=RPC_TIMEOUT)
        return list(reply.leases)

    async def wait_status(
        self,
        ref: types_pb2.PoolRef,
        predicate: Callable[[types_pb2.PoolStatus], bool],
        *,
        what: str,
        within: float = 15.0,
    ) -> types_pb2.PoolStatus:
        """Poll GetPool until predicate(status) holds."""

        async def status() -> types_pb2.PoolStatus:
            return (await self.get_pool(ref)).status

        return await wait_until(status, predicate, what=what, within=within, interval=POLL_SECONDS)


def template(*, guest_mac: str = "") -> microvm_pb2.MicroVMSpec:
    """A MicroVM template flintlockd accepts: kernel, root volume, one TAP interface (DHCP)."""
    iface = microvm_pb2.NetworkInterface(device_id="eth1", type=microvm_pb2.NetworkInterface.TAP)
    if guest_mac:
        iface.guest_mac = guest_mac
    return microvm_pb2.MicroVMSpec(
        kernel=microvm_pb2.Kernel(image="ghcr.io/example/kernel:6.1", filename="boot/vmlinux"),
        root_volume=microvm_pb2.Volume(
            id="root",
            source=microvm_pb2.VolumeSource(container_source="ghcr.io/example/rootfs:24.04"),
        ),
        interfaces=[iface],
    )


def pool_spec(
    name: str,
    namespace: str,
    hosts: list[str],
    *,
    size: int = 1,
    strategy: types_pb2.ReplenishmentStrategyType.ValueType = types_pb2.REPLACE_ON_DELETE,
    min_size: int | None = None,
    policy: types_pb2.HookFailurePolicy.ValueType = types_pb2.DELETE_AND_REPLACE,
    create_commands: list[str] | None = None,
    pre_lease_commands: list[str] | None = None,
    heartbeat_interval: float = 1.0,
    expiry_threshold: float = 3.0,
    guest_mac: str = "",
) -> types_pb2.PoolSpec:
    """A valid PoolSpec (durations in seconds)."""
    strategy_msg = types_pb2.ReplenishmentStrategy(type=strategy)
    if min_size is not None:
        strategy_msg.min_size = min_size
    spec = types_pb2.PoolSpec(
        name=name,
        namespace=namespace,
        microvm_template=template(guest_mac=guest_mac),
        size=size,
        flintlock_hosts=hosts,
        replenishment_strategy=strategy_msg,
        create_commands=create_commands or [],
        pre_lease_commands=pre_lease_commands or [],
        hook_failure_policy=policy,
    )
    spec.heartbeat_interval.CopyFrom(_duration(heartbeat_interval))
    spec.heartbeat_expiry_threshold.CopyFrom(_duration(expiry_threshold))
    return spec


def ref_of(spec: types_pb2.PoolSpec) -> types_pb2.PoolRef:
    return types_pb2.PoolRef(name=spec.name, namespace=spec.namespace)


def _duration(seconds: float) -> duration_pb2.Duration:
    value = duration_pb2.Duration()
    value.FromNanoseconds(int(seconds * 1e9))
    return value

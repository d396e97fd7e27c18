"""`BatteryAPI`: what controller steps need from battery, so tests can pass a stub.

`BatteryClient` implements it; so can the fake battery's client or a hand-written stub. The
methods, arguments and errors are those of `batteryop.battery.client.BatteryClient`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from typing import Protocol, runtime_checkable

from batteryop.battery.models import (
    ClaimedVM,
    Event,
    Host,
    HostStatus,
    HostTLS,
    Lease,
    Pool,
    PoolRef,
    PoolSpec,
)


@runtime_checkable
class EventStream(Protocol):
    """An Events subscription: an async iterator plus its connection state."""

    def __aiter__(self) -> AsyncIterator[Event]: ...

    async def __anext__(self) -> Event: ...

    @property
    def subscribed(self) -> bool: ...

    @property
    def generation(self) -> int: ...

    def start(self) -> None: ...

    async def wait_subscribed(self) -> None: ...

    async def wait_unsubscribed(self) -> None: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class BatteryAPI(Protocol):
    """battery's PoolAdmin, Lease, Events and HostAdmin calls, in project types."""

    async def create_pool(self, spec: PoolSpec) -> Pool: ...

    async def update_pool(self, spec: PoolSpec) -> Pool: ...

    async def delete_pool(self, pool: PoolRef, *, force: bool = False) -> None: ...

    async def get_pool(self, pool: PoolRef) -> Pool: ...

    async def list_pools(self, namespace: str | None = None) -> list[Pool]: ...

    async def claim_vm(self, pool: PoolRef, *, request_id: str) -> ClaimedVM: ...

    async def heartbeat(self, lease_id: str) -> datetime: ...

    async def release_vm(self, lease_id: str) -> None: ...

    async def list_leases(self, pool: PoolRef | None = None) -> Sequence[Lease]: ...

    def events(
        self, pool: PoolRef | None = None, *, after_id: int | None = None
    ) -> EventStream: ...

    async def cordon_host(self, name: str, *, reason: str = "") -> Host: ...

    async def uncordon_host(self, name: str) -> Host: ...

    async def list_hosts(self) -> list[HostStatus]: ...

    async def add_host(
        self,
        name: str,
        address: str,
        *,
        tls: HostTLS | None = None,
        skip_validation: bool = False,
    ) -> Host: ...

    async def update_host(
        self,
        name: str,
        address: str,
        *,
        tls: HostTLS | None = None,
        skip_validation: bool = False,
    ) -> Host: ...

    async def remove_host(self, name: str) -> None: ...

    async def get_host(self, name: str) -> HostStatus: ...

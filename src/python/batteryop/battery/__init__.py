"""The battery (poolmgrd v0.4.0) client every deployable shares.

- `config`: `BatteryConfig` (address, deadlines, TLS, token, reconnect), checked on creation.
- `client`: `BatteryClient` on grpc.aio, one method per RPC of PoolAdmin, Lease, Events and
  HostAdmin; plain dataclasses in and out (`models`, translated by `wire`).
- `errors`: the error tree, and `rpc_boundary`, the one place gRPC failures are mapped.
- `events`: the Events subscription that reconnects and drops replayed events.
- `protocol`: `BatteryAPI`, the interface controller steps depend on.
- `observer`: `CallObserver`, the hook for call latency and outcome metrics.

Requirements: DP-010, DP-011, DP-012, DP-013, CL-060, CL-062, BA-050.
"""

from batteryop.battery.client import BatteryClient
from batteryop.battery.config import BatteryConfig, ReconnectPolicy, TLSConfig
from batteryop.battery.errors import (
    AccessDeniedError,
    AlreadyExistsError,
    BatteryConfigError,
    BatteryError,
    BatteryInternalError,
    BatteryNotFoundError,
    BatteryPoolExhaustedError,
    BatteryUnavailableError,
    ClaimAbortedError,
    InvalidArgumentError,
    PreconditionFailedError,
    UnimplementedError,
)
from batteryop.battery.events import EventSubscription
from batteryop.battery.models import (
    ClaimedVM,
    Event,
    EventType,
    HookFailurePolicy,
    Host,
    HostInfo,
    HostStatus,
    HostTLS,
    Initrd,
    InterfaceStatus,
    InterfaceType,
    Kernel,
    Lease,
    MicroVMTemplate,
    NetworkInterface,
    Pool,
    PoolRef,
    PoolSpec,
    PoolStatus,
    Replenishment,
    ReplenishmentType,
    StaticAddress,
    Volume,
)
from batteryop.battery.observer import CallObserver
from batteryop.battery.protocol import BatteryAPI, EventStream

__all__ = [
    "AccessDeniedError",
    "AlreadyExistsError",
    "BatteryAPI",
    "BatteryClient",
    "BatteryConfig",
    "BatteryConfigError",
    "BatteryError",
    "BatteryInternalError",
    "BatteryNotFoundError",
    "BatteryPoolExhaustedError",
    "BatteryUnavailableError",
    "CallObserver",
    "ClaimAbortedError",
    "ClaimedVM",
    "Event",
    "EventStream",
    "EventSubscription",
    "EventType",
    "HookFailurePolicy",
    "Host",
    "HostInfo",
    "HostStatus",
    "HostTLS",
    "Initrd",
    "InterfaceStatus",
    "InterfaceType",
    "InvalidArgumentError",
    "Kernel",
    "Lease",
    "MicroVMTemplate",
    "NetworkInterface",
    "Pool",
    "PoolRef",
    "PoolSpec",
    "PoolStatus",
    "PreconditionFailedError",
    "ReconnectPolicy",
    "Replenishment",
    "ReplenishmentType",
    "StaticAddress",
    "TLSConfig",
    "UnimplementedError",
    "Volume",
]

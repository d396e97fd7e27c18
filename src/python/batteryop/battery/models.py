"""battery's objects as plain frozen dataclasses: what the rest of the project sees.

These mirror battery's poolmgr.v1alpha1 messages (v0.4.0) field for field, minus protobuf:
durations are `timedelta`, timestamps are timezone-aware UTC `datetime` (`None` where battery
leaves one unset), repeated fields are tuples and maps are plain dicts (so an object holding
a map compares by value but cannot be hashed). Enums keep battery's value names. `batteryop.battery.wire` translates to and from the messages.

A Pool's `microvm_template` is flintlock's MicroVMSpec without the fields battery or
flintlock own: `id`, `uid` and the timestamps are set per MicroVM, and `allow_guest_agent` is
always forced on by battery, so none of them is modelled.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol, runtime_checkable


class ReplenishmentType(enum.StrEnum):
    """How a Pool tops itself up (battery's ReplenishmentStrategyType)."""

    UNSPECIFIED = "REPLENISHMENT_STRATEGY_TYPE_UNSPECIFIED"
    IMMEDIATE_ON_LEASE = "IMMEDIATE_ON_LEASE"
    MIN_SIZE_THRESHOLD = "MIN_SIZE_THRESHOLD"
    REPLACE_ON_DELETE = "REPLACE_ON_DELETE"


class HookFailurePolicy(enum.StrEnum):
    """What battery does with a MicroVM whose create or pre-lease hook fails."""

    UNSPECIFIED = "HOOK_FAILURE_POLICY_UNSPECIFIED"
    DELETE_AND_REPLACE = "DELETE_AND_REPLACE"
    QUARANTINE = "QUARANTINE"


class EventType(enum.StrEnum):
    """battery's event types. A number this client does not know reads as UNSPECIFIED."""

    UNSPECIFIED = "EVENT_TYPE_UNSPECIFIED"
    VM_PROVISIONED = "VM_PROVISIONED"
    VM_AVAILABLE = "VM_AVAILABLE"
    VM_CLAIMED = "VM_CLAIMED"
    VM_RELEASED = "VM_RELEASED"
    VM_EXPIRING_SOON = "VM_EXPIRING_SOON"
    VM_DELETED_DUE_TO_EXPIRY = "VM_DELETED_DUE_TO_EXPIRY"
    VM_DELETED_ON_RELEASE = "VM_DELETED_ON_RELEASE"
    VM_HOOK_FAILED = "VM_HOOK_FAILED"
    POOL_REPLENISHING = "POOL_REPLENISHING"
    POOL_SIZE_BELOW_TARGET = "POOL_SIZE_BELOW_TARGET"
    VM_DELETED_ON_POOL_DELETE = "VM_DELETED_ON_POOL_DELETE"


class InterfaceType(enum.StrEnum):
    """flintlock's network interface types."""

    MACVTAP = "MACVTAP"
    TAP = "TAP"


@dataclass(frozen=True)
class PoolRef:
    """Names a Pool in battery: a Kubernetes namespace and name."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


# --- the MicroVM template (flintlock.types.MicroVMSpec) --------------------------------------


@dataclass(frozen=True)
class Kernel:
    image: str
    filename: str | None = None
    cmdline: Mapping[str, str] = field(default_factory=dict)
    add_network_config: bool = False


@dataclass(frozen=True)
class Initrd:
    image: str
    filename: str | None = None


@dataclass(frozen=True)
class Volume:
    """A disk: from an OCI image (`container_source`) or a host path (`virtiofs_source`)."""

    id: str
    container_source: str | None = None
    virtiofs_source: str | None = None
    read_only: bool = False
    mount_point: str | None = None
    partition_id: str | None = None
    size_in_mb: int | None = None


@dataclass(frozen=True)
class StaticAddress:
    address: str
    gateway: str | None = None
    nameservers: tuple[str, ...] = ()


@dataclass(frozen=True)
class NetworkInterface:
    """A guest interface; `bridge_name` is flintlock's per-interface bridge override."""

    device_id: str
    type: InterfaceType = InterfaceType.MACVTAP
    guest_mac: str | None = None
    address: StaticAddress | None = None
    bridge_name: str | None = None


@dataclass(frozen=True)
class MicroVMTemplate:
    """The MicroVM every member of a Pool is created from.

    `namespace` is flintlock's; battery fills in the Pool's namespace when it is empty.
    """

    vcpu: int
    memory_in_mb: int
    kernel: Kernel
    root_volume: Volume
    initrd: Initrd | None = None
    additional_volumes: tuple[Volume, ...] = ()
    interfaces: tuple[NetworkInterface, ...] = ()
    metadata: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    provider: str | None = None
    namespace: str = ""


# --- Pools -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Replenishment:
    """A Pool's replenishment strategy; `min_size` is read by MIN_SIZE_THRESHOLD only."""

    type: ReplenishmentType
    min_size: int | None = None


@dataclass(frozen=True)
class PoolSpec:
    """A Pool as battery stores it.

    battery accepts zero durations and then expires every Lease at once, so
    `BatteryClient` refuses to send a spec whose durations are not positive.
    """

    namespace: str
    name: str
    template: MicroVMTemplate
    size: int
    replenishment: Replenishment
    hook_failure_policy: HookFailurePolicy
    heartbeat_interval: timedelta
    heartbeat_expiry_threshold: timedelta
    flintlock_hosts: tuple[str, ...] = ()
    create_commands: tuple[str, ...] = ()
    pre_lease_commands: tuple[str, ...] = ()

    @property
    def ref(self) -> PoolRef:
        return PoolRef(namespace=self.namespace, name=self.name)


@dataclass(frozen=True)
class PoolStatus:
    """battery's live counts for a Pool (DELETING and FAILED MicroVMs are not counted)."""

    available: int = 0
    leased: int = 0
    provisioning: int = 0
    quarantined: int = 0


@dataclass(frozen=True)
class Pool:
    spec: PoolSpec
    status: PoolStatus

    @property
    def ref(self) -> PoolRef:
        return self.spec.ref


# --- Leases ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class InterfaceStatus:
    """A MicroVM network interface as flintlock reports it (the MAC is the host-side TAP's)."""

    host_device_name: str
    index: int
    mac_address: str


@dataclass(frozen=True)
class HostInfo:
    """Where a leased MicroVM runs: the Host's name and its flintlockd address."""

    name: str
    address: str


@dataclass(frozen=True)
class ClaimedVM:
    """battery's answer to ClaimVM: the Lease and the MicroVM it holds.

    `network_interfaces` is best effort (empty if battery could not ask flintlock).
    """

    lease_id: str
    vm_uid: str
    host: HostInfo
    network_interfaces: Mapping[str, InterfaceStatus] = field(default_factory=dict)


@dataclass(frozen=True)
class Lease:
    """A Lease row (ListLeases). `request_id` is empty for a claim made without one."""

    lease_id: str
    vm_uid: str
    pool: PoolRef
    claimed_at: datetime
    last_heartbeat_at: datetime
    expires_at: datetime
    request_id: str = ""


@runtime_checkable
class LeaseLookup(Protocol):
    """A ListLeases answer that finds a Lease by id without reading the others (the client's
    `LeaseList`)."""

    def get(self, lease_id: str) -> Lease | None: ...


def find_lease(leases: Sequence[Lease], lease_id: str) -> Lease | None:
    """The Lease with `lease_id` in a ListLeases answer, or None."""
    if isinstance(leases, LeaseLookup):
        return leases.get(lease_id)
    return next((lease for lease in leases if lease.lease_id == lease_id), None)


# --- Events ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Event:
    """One outbox row. `id` is battery's single global sequence (ascending per stream)."""

    id: int
    type: EventType
    pool: PoolRef
    vm_uid: str
    created_at: datetime | None
    payload_json: str = ""


# --- Hosts -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class HostTLS:
    """How battery dials a Host's flintlockd; the paths are on battery's machine."""

    insecure: bool = False
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""


@dataclass(frozen=True)
class Host:
    """A flintlockd Host registered in battery."""

    name: str
    address: str
    cordoned: bool = False
    cordoned_reason: str = ""
    cordoned_at: datetime | None = None
    updated_at: datetime | None = None
    tls: HostTLS | None = None


@dataclass(frozen=True)
class HostStatus:
    """A Host with its MicroVM count (every phase, plus reservations) and flintlock version.

    `flintlock_version` is empty until battery has checked the Host.
    """

    host: Host
    vm_count: int = 0
    flintlock_version: str = ""

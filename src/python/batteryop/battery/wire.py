"""Translation between `batteryop.battery.models` and battery's protobuf messages.

The only module besides `client` and `events` that imports generated code. Readers raise
`ValueError` for an answer that lacks a field the model needs; the client reports that as
`BatteryInternalError`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Literal, overload

from google.protobuf import duration_pb2, timestamp_pb2

from battery_protos.flintlock.types import microvm_pb2
from battery_protos.poolmgr.v1alpha1 import hostadmin_pb2, lease_pb2, types_pb2
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

# --- scalars ---------------------------------------------------------------------------------


def duration_to_pb(value: timedelta) -> duration_pb2.Duration:
    msg = duration_pb2.Duration()
    msg.FromTimedelta(value)
    return msg


def timestamp_from_pb(msg: timestamp_pb2.Timestamp) -> datetime:
    return msg.ToDatetime(tzinfo=UTC)


def _optional_time(parent: object, name: str) -> datetime | None:
    if not parent.HasField(name):  # type: ignore[attr-defined]
        return None
    return timestamp_from_pb(getattr(parent, name))


def _require(parent: object, name: str) -> None:
    """A field every reader of `parent` needs: ValueError naming it when unset."""
    if not parent.HasField(name):  # type: ignore[attr-defined]
        raise ValueError(f"{type(parent).__name__}.{name} is unset")


def _required_time(parent: object, name: str) -> datetime:
    _require(parent, name)
    return timestamp_from_pb(getattr(parent, name))


def _opt(parent: object, name: str) -> str | None:
    return getattr(parent, name) if parent.HasField(name) else None  # type: ignore[attr-defined]


def pool_ref_to_pb(ref: PoolRef) -> types_pb2.PoolRef:
    return types_pb2.PoolRef(name=ref.name, namespace=ref.namespace)


def pool_ref_from_pb(namespace: str, name: str) -> PoolRef:
    return PoolRef(namespace=namespace, name=name)


# --- the MicroVM template --------------------------------------------------------------------


def _volume_to_pb(volume: Volume) -> microvm_pb2.Volume:
    msg = microvm_pb2.Volume(id=volume.id, is_read_only=volume.read_only)
    if volume.container_source is not None:
        msg.source.container_source = volume.container_source
    if volume.virtiofs_source is not None:
        msg.source.virtiofs_source = volume.virtiofs_source
    if volume.mount_point is not None:
        msg.mount_point = volume.mount_point
    if volume.partition_id is not None:
        msg.partition_id = volume.partition_id
    if volume.size_in_mb is not None:
        msg.size_in_mb = volume.size_in_mb
    return msg


def _volume_from_pb(msg: microvm_pb2.Volume) -> Volume:
    return Volume(
        id=msg.id,
        container_source=_opt(msg.source, "container_source"),
        virtiofs_source=_opt(msg.source, "virtiofs_source"),
        read_only=msg.is_read_only,
        mount_point=_opt(msg, "mount_point"),
        partition_id=_opt(msg, "partition_id"),
        size_in_mb=msg.size_in_mb if msg.HasField("size_in_mb") else None,
    )


def _interface_to_pb(iface: NetworkInterface) -> microvm_pb2.NetworkInterface:
    msg = microvm_pb2.NetworkInterface(
        device_id=iface.device_id,
        type=microvm_pb2.NetworkInterface.IfaceType.Value(iface.type.value),
    )
    if iface.guest_mac is not None:
        msg.guest_mac = iface.guest_mac
    if iface.address is not None:
        msg.address.address = iface.address.address
        if iface.address.gateway is not None:
            msg.address.gateway = iface.address.gateway
        msg.address.nameservers.extend(iface.address.nameservers)
    if iface.bridge_name is not None:
        msg.overrides.bridge_name = iface.bridge_name
    return msg


def _interface_from_pb(msg: microvm_pb2.NetworkInterface) -> NetworkInterface:
    address = None
    if msg.HasField("address"):
        address = StaticAddress(
            address=msg.address.address,
            gateway=_opt(msg.address, "gateway"),
            nameservers=tuple(msg.address.nameservers),
        )
    bridge = _opt(msg.overrides, "bridge_name") if msg.HasField("overrides") else None
    return NetworkInterface(
        device_id=msg.device_id,
        type=InterfaceType(microvm_pb2.NetworkInterface.IfaceType.Name(msg.type)),
        guest_mac=_opt(msg, "guest_mac"),
        address=address,
        bridge_name=bridge,
    )


def template_to_pb(template: MicroVMTemplate) -> microvm_pb2.MicroVMSpec:
    msg = microvm_pb2.MicroVMSpec(
        namespace=template.namespace,
        labels=dict(template.labels),
        vcpu=template.vcpu,
        memory_in_mb=template.memory_in_mb,
        kernel=microvm_pb2.Kernel(
            image=template.kernel.image,
            cmdline=dict(template.kernel.cmdline),
            add_network_config=template.kernel.add_network_config,
        ),
        root_volume=_volume_to_pb(template.root_volume),
        additional_volumes=[_volume_to_pb(v) for v in template.additional_volumes],
        interfaces=[_interface_to_pb(i) for i in template.interfaces],
        metadata=dict(template.metadata),
    )
    if template.kernel.filename is not None:
        msg.kernel.filename = template.kernel.filename
    if template.initrd is not None:
        msg.initrd.image = template.initrd.image
        if template.initrd.filename is not None:
            msg.initrd.filename = template.initrd.filename
    if template.provider is not None:
        msg.provider = template.provider
    return msg


def template_from_pb(msg: microvm_pb2.MicroVMSpec) -> MicroVMTemplate:
    initrd = None
    if msg.HasField("initrd"):
        initrd = Initrd(image=msg.initrd.image, filename=_opt(msg.initrd, "filename"))
    return MicroVMTemplate(
        vcpu=msg.vcpu,
        memory_in_mb=msg.memory_in_mb,
        kernel=Kernel(
            image=msg.kernel.image,
            filename=_opt(msg.kernel, "filename"),
            cmdline=dict(msg.kernel.cmdline),
            add_network_config=msg.kernel.add_network_config,
        ),
        root_volume=_volume_from_pb(msg.root_volume),
        initrd=initrd,
        additional_volumes=tuple(_volume_from_pb(v) for v in msg.additional_volumes),
        interfaces=tuple(_interface_from_pb(i) for i in msg.interfaces),
        metadata=dict(msg.metadata),
        labels=dict(msg.labels),
        provider=_opt(msg, "provider"),
        namespace=msg.namespace,
    )


# --- Pools -----------------------------------------------------------------------------------


def pool_spec_to_pb(spec: PoolSpec) -> types_pb2.PoolSpec:
    strategy = types_pb2.ReplenishmentStrategy(
        type=types_pb2.ReplenishmentStrategyType.Value(spec.replenishment.type.value)
    )
    if spec.replenishment.min_size is not None:
        strategy.min_size = spec.replenishment.min_size
    return types_pb2.PoolSpec(
        name=spec.name,
        namespace=spec.namespace,
        microvm_template=template_to_pb(spec.template),
        size=spec.size,
        flintlock_hosts=list(spec.flintlock_hosts),
        replenishment_strategy=strategy,
        create_commands=list(spec.create_commands),
        pre_lease_commands=list(spec.pre_lease_commands),
        hook_failure_policy=types_pb2.HookFailurePolicy.Value(spec.hook_failure_policy.value),
        heartbeat_interval=duration_to_pb(spec.heartbeat_interval),
        heartbeat_expiry_threshold=duration_to_pb(spec.heartbeat_expiry_threshold),
    )


def _enum_name(enum_type: object, number: int, default: str) -> str:
    try:
        return str(enum_type.Name(number))  # type: ignore[attr-defined]
    except ValueError:
        return default


def pool_spec_from_pb(msg: types_pb2.PoolSpec) -> PoolSpec:
    strategy = msg.replenishment_strategy
    return PoolSpec(
        namespace=msg.namespace,
        name=msg.name,
        template=template_from_pb(msg.microvm_template),
        size=msg.size,
        replenishment=Replenishment(
            type=ReplenishmentType(
                _enum_name(
                    types_pb2.ReplenishmentStrategyType,
                    strategy.type,
                    ReplenishmentType.UNSPECIFIED.value,
                )
            ),
            min_size=strategy.min_size if strategy.HasField("min_size") else None,
        ),
        hook_failure_policy=HookFailurePolicy(
            _enum_name(
                types_pb2.HookFailurePolicy,
                msg.hook_failure_policy,
                HookFailurePolicy.UNSPECIFIED.value,
            )
        ),
        heartbeat_interval=msg.heartbeat_interval.ToTimedelta(),
        heartbeat_expiry_threshold=msg.heartbeat_expiry_threshold.ToTimedelta(),
        flintlock_hosts=tuple(msg.flintlock_hosts),
        create_commands=tuple(msg.create_commands),
        pre_lease_commands=tuple(msg.pre_lease_commands),
    )


def pool_from_pb(msg: types_pb2.Pool) -> Pool:
    if not msg.HasField("spec"):
        raise ValueError("Pool.spec is unset")
    status = msg.status
    return Pool(
        spec=pool_spec_from_pb(msg.spec),
        status=PoolStatus(
            available=status.available_count,
            leased=status.leased_count,
            provisioning=status.provisioning_count,
            quarantined=status.quarantined_count,
        ),
    )


# --- Leases ----------------------------------------------------------------------------------


def claimed_vm_from_pb(msg: lease_pb2.ClaimVMResponse) -> ClaimedVM:
    if not msg.lease_id or not msg.vm_uid:
        raise ValueError("ClaimVMResponse lacks lease_id or vm_uid")
    interfaces: Mapping[str, InterfaceStatus] = {
        name: InterfaceStatus(
            host_device_name=status.host_device_name,
            index=status.index,
            mac_address=status.mac_address,
        )
        for name, status in msg.network_interfaces.items()
    }
    return ClaimedVM(
        lease_id=msg.lease_id,
        vm_uid=msg.vm_uid,
        host=HostInfo(name=msg.host.name, address=msg.host.address),
        network_interfaces=interfaces,
    )


def lease_from_pb(msg: types_pb2.LeaseRecord) -> Lease:
    return Lease(
        lease_id=msg.lease_id,
        vm_uid=msg.vm_uid,
        pool=pool_ref_from_pb(msg.pool_namespace, msg.pool_name),
        claimed_at=_required_time(msg, "claimed_at"),
        last_heartbeat_at=_required_time(msg, "last_heartbeat_at"),
        expires_at=_required_time(msg, "expires_at"),
        request_id=msg.request_id,
    )


_LEASE_TIMES: tuple[Literal["claimed_at", "last_heartbeat_at", "expires_at"], ...] = (
    "claimed_at",
    "last_heartbeat_at",
    "expires_at",
)


class LeaseList(Sequence[Lease]):
    """ListLeases' answer, each Lease converted when it is first read.

    A Pool's answer holds every Lease of the Pool, and an expiry check reads one of them
    (`get`, through `models.find_lease`): converting 1,000 records took 13 ms of the
    operator's single event loop per check, while indexing their ids takes 0.2 ms. Every
    record is checked for the fields a `Lease` needs up front, so an unreadable answer still
    fails as the call's answer does.
    """

    def __init__(self, records: Sequence[types_pb2.LeaseRecord]) -> None:
        for record in records:
            for name in _LEASE_TIMES:
                _require(record, name)  # as `lease_from_pb` would, for every record
        self._records = records
        self._leases: dict[int, Lease] = {}
        self._ids: dict[str, int] | None = None

    def __len__(self) -> int:
        return len(self._records)

    @overload
    def __getitem__(self, index: int) -> Lease: ...

    @overload
    def __getitem__(self, index: slice) -> list[Lease]: ...

    def __getitem__(self, index: int | slice) -> Lease | list[Lease]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        lease = self._leases.get(index)
        if lease is None:
            lease = self._leases[index] = lease_from_pb(self._records[index])
        return lease

    def __iter__(self) -> Iterator[Lease]:
        return (self[i] for i in range(len(self)))

    def get(self, lease_id: str) -> Lease | None:
        """The Lease with this id, or None; only it is converted."""
        if self._ids is None:
            self._ids = {record.lease_id: i for i, record in enumerate(self._records)}
        index = self._ids.get(lease_id)
        return None if index is None else self[index]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable-looking, like list

    def __repr__(self) -> str:
        return f"LeaseList({list(self)!r})"


def heartbeat_expiry_from_pb(msg: lease_pb2.HeartbeatResponse) -> datetime:
    return _required_time(msg, "expires_at")


# --- Events ----------------------------------------------------------------------------------


def event_from_pb(msg: types_pb2.Event) -> Event:
    return Event(
        id=msg.id,
        type=EventType(_enum_name(types_pb2.EventType, msg.type, EventType.UNSPECIFIED.value)),
        pool=pool_ref_from_pb(msg.pool_namespace, msg.pool_name),
        vm_uid=msg.vm_uid,
        created_at=_optional_time(msg, "created_at"),
        payload_json=msg.payload_json,
    )


# --- Hosts -----------------------------------------------------------------------------------


def host_to_pb(name: str, address: str, tls: HostTLS | None) -> types_pb2.Host:
    msg = types_pb2.Host(name=name, address=address)
    if tls is not None:
        msg.tls.CopyFrom(
            types_pb2.HostTLS(
                insecure=tls.insecure,
                ca_file=tls.ca_file,
                cert_file=tls.cert_file,
                key_file=tls.key_file,
            )
        )
    return msg


def host_from_pb(msg: types_pb2.Host) -> Host:
    tls = None
    if msg.HasField("tls"):
        tls = HostTLS(
            insecure=msg.tls.insecure,
            ca_file=msg.tls.ca_file,
            cert_file=msg.tls.cert_file,
            key_file=msg.tls.key_file,
        )
    return Host(
        name=msg.name,
        address=msg.address,
        cordoned=msg.cordoned,
        cordoned_reason=msg.cordoned_reason,
        cordoned_at=_optional_time(msg, "cordoned_at"),
        updated_at=_optional_time(msg, "updated_at"),
        tls=tls,
    )


def host_status_from_pb(msg: hostadmin_pb2.HostStatus) -> HostStatus:
    if not msg.HasField("host"):
        raise ValueError("HostStatus.host is unset")
    return HostStatus(
        host=host_from_pb(msg.host),
        vm_count=msg.vm_count,
        flintlock_version=msg.flintlock_version,
    )

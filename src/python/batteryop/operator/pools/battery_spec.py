"""A Pool's spec as battery's PoolSpec (`batteryop.battery.models`), and the drained spec.

The mapping, field by field:

| battery PoolSpec            | Pool                                                    |
|-----------------------------|---------------------------------------------------------|
| namespace, name             | metadata.namespace, metadata.name                       |
| microvm_template            | spec.template (camelCase → snake_case, Tap/Macvtap → TAP/MACVTAP) |
| size                        | spec.size, or the size spec.autoscaling decides (the caller's) |
| flintlock_hosts             | the Hosts whose Nodes match spec.placement.nodeSelector (the caller resolves them) |
| replenishment_strategy      | spec.replenishment.type / .minSize                      |
| create_commands             | spec.hooks.create                                       |
| pre_lease_commands          | spec.hooks.preLease                                     |
| hook_failure_policy         | spec.hooks.failurePolicy                                |
| heartbeat_interval          | spec.lease.heartbeatInterval                            |
| heartbeat_expiry_threshold  | spec.lease.expiryThreshold                              |

`allow_guest_agent` is not mapped: battery forces it on. There is no placement strategy:
battery puts each MicroVM on the least loaded of `flintlock_hosts`.

It lives with the Pool controller, not in `batteryop.api`: it needs battery's dataclasses,
and `batteryop.api` imports nothing of ours so the client wheel can ship it without gRPC.

Requirements: RS-010, RS-011, PO-010 (flintlock_hosts from the selector), PO-042 (the drained
spec).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Final

from batteryop.api.pool import (
    HookFailurePolicy,
    InterfaceType,
    MicroVMTemplate,
    NetworkInterface,
    Pool,
    ReplenishmentType,
    Volume,
)
from batteryop.battery import models as battery

REPLENISHMENT_TYPES: Final[Mapping[ReplenishmentType, battery.ReplenishmentType]] = (
    MappingProxyType(
        {
            ReplenishmentType.IMMEDIATE_ON_LEASE: battery.ReplenishmentType.IMMEDIATE_ON_LEASE,
            ReplenishmentType.MIN_SIZE_THRESHOLD: battery.ReplenishmentType.MIN_SIZE_THRESHOLD,
            ReplenishmentType.REPLACE_ON_DELETE: battery.ReplenishmentType.REPLACE_ON_DELETE,
        }
    )
)
"""spec.replenishment.type → battery's ReplenishmentStrategyType."""

HOOK_FAILURE_POLICIES: Final[Mapping[HookFailurePolicy, battery.HookFailurePolicy]] = (
    MappingProxyType(
        {
            HookFailurePolicy.DELETE_AND_REPLACE: battery.HookFailurePolicy.DELETE_AND_REPLACE,
            HookFailurePolicy.QUARANTINE: battery.HookFailurePolicy.QUARANTINE,
        }
    )
)
"""spec.hooks.failurePolicy → battery's HookFailurePolicy."""

INTERFACE_TYPES: Final[Mapping[InterfaceType, battery.InterfaceType]] = MappingProxyType(
    {
        InterfaceType.MACVTAP: battery.InterfaceType.MACVTAP,
        InterfaceType.TAP: battery.InterfaceType.TAP,
    }
)
"""A template interface's type → flintlock's IfaceType."""


ROOT_VOLUME_ID = "root"
"""The id given to a root volume the Pool leaves unnamed: flintlockd requires every volume id."""


def _volume(volume: Volume, default_id: str) -> battery.Volume:
    return battery.Volume(
        id=volume.id or default_id,
        container_source=volume.container_source,
        virtiofs_source=volume.virtiofs_source,
        read_only=volume.read_only,
        mount_point=volume.mount_point,
        partition_id=volume.partition_id,
        size_in_mb=volume.size_in_mb,
    )


def _interface(iface: NetworkInterface) -> battery.NetworkInterface:
    address = None
    if iface.address is not None:
        address = battery.StaticAddress(
            address=iface.address.address,
            gateway=iface.address.gateway,
            nameservers=iface.address.nameservers,
        )
    return battery.NetworkInterface(
        device_id=iface.device_id,
        type=INTERFACE_TYPES[iface.type],
        guest_mac=iface.guest_mac,
        address=address,
        bridge_name=iface.bridge_name,
    )


def to_battery_template(template: MicroVMTemplate) -> battery.MicroVMTemplate:
    """spec.template as battery's microvm_template (flintlock's MicroVMSpec)."""
    initrd = None
    if template.initrd is not None:
        initrd = battery.Initrd(image=template.initrd.image, filename=template.initrd.filename)
    return battery.MicroVMTemplate(
        vcpu=template.vcpu,
        memory_in_mb=template.memory_in_mb,
        kernel=battery.Kernel(
            image=template.kernel.image,
            filename=template.kernel.filename,
            cmdline=dict(template.kernel.cmdline),
            add_network_config=template.kernel.add_network_config,
        ),
        root_volume=_volume(template.root_volume, ROOT_VOLUME_ID),
        initrd=initrd,
        additional_volumes=tuple(
            _volume(v, f"volume-{i}") for i, v in enumerate(template.additional_volumes, 1)
        ),
        interfaces=tuple(_interface(i) for i in template.interfaces),
        metadata=dict(template.metadata),
        labels=dict(template.labels),
        provider=template.provider,
    )


def to_battery_spec(
    pool: Pool, flintlock_hosts: Iterable[str], size: int | None = None
) -> battery.PoolSpec:
    """The PoolSpec to send battery for `pool`, placed on `flintlock_hosts`, of `size` (the
    policy's, RS-108; spec.size when None).

    `flintlock_hosts` are the names of the Hosts whose Nodes match the Pool's node selector
    (PO-010); they are sent sorted and without duplicates, so the same set always gives an
    equal spec.
    """
    spec = pool.spec
    size = spec.size if size is None else size
    if size is None:
        raise ValueError("a Pool with spec.autoscaling needs the size its policy decided")
    return battery.PoolSpec(
        namespace=pool.namespace,
        name=pool.name,
        template=to_battery_template(spec.template),
        size=size,
        replenishment=battery.Replenishment(
            type=REPLENISHMENT_TYPES[spec.replenishment.type],
            min_size=spec.replenishment.min_size,
        ),
        hook_failure_policy=HOOK_FAILURE_POLICIES[spec.hooks.failure_policy],
        heartbeat_interval=spec.lease.heartbeat_interval,
        heartbeat_expiry_threshold=spec.lease.expiry_threshold,
        flintlock_hosts=tuple(sorted(set(flintlock_hosts))),
        create_commands=spec.hooks.create,
        pre_lease_commands=spec.hooks.pre_lease,
    )


def drained_spec(spec: battery.PoolSpec) -> battery.PoolSpec:
    """`spec` with nothing to keep warm, held while battery refuses to delete the Pool (PO-042).

    Size 0 under MinSizeThreshold with a minimum of 1 never provisions; no pre-lease commands
    and DeleteAndReplace mean nothing new is run or quarantined. Template, Hosts and lease
    durations stay, so the Pool's Leases keep their terms.
    """
    return replace(
        spec,
        size=0,
        replenishment=battery.Replenishment(
            type=battery.ReplenishmentType.MIN_SIZE_THRESHOLD, min_size=1
        ),
        pre_lease_commands=(),
        hook_failure_policy=battery.HookFailurePolicy.DELETE_AND_REPLACE,
    )


def is_drained(spec: battery.PoolSpec) -> bool:
    """Whether `spec` is already the drained form of itself."""
    return spec == drained_spec(spec)

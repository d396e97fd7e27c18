"""A Pool as frozen dataclasses, parsed from and rendered to its Kubernetes body.

`Pool.from_dict` reads a body as the API server returns it; it also fills in what the CRD
defaults (`DEFAULT_*` below), so a body built by hand reads the same as the stored one.
`to_dict` renders every field the server would hold, defaults included, and leaves out unset
optional ones, so `Pool.from_dict(p.to_dict()) == p`.

The template is flintlock's MicroVMSpec in the CRD's camelCase, without what battery or
flintlock set per MicroVM (id, namespace, uid, timestamps, allow_guest_agent).
`batteryop.operator.pools.battery_spec` maps it to battery's PoolSpec.

Requirements: RS-010 (one field per battery PoolSpec field), RS-011 (nodeSelector), RS-013
(status counts and conditions).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

from batteryop.api import names
from batteryop.api._compat import StrEnum
from batteryop.api._fields import Fields
from batteryop.api.conditions import (
    Condition,
    PoolConditionType,
    find_condition,
    parse_conditions,
)
from batteryop.api.lease import LeaseSettings
from batteryop.api.meta import Named, ObjectMeta, read_object, write_object
from batteryop.api.times import format_duration, format_time


class ReplenishmentType(StrEnum):
    """How a Pool tops itself up (battery's ReplenishmentStrategyType)."""

    IMMEDIATE_ON_LEASE = "ImmediateOnLease"
    MIN_SIZE_THRESHOLD = "MinSizeThreshold"
    REPLACE_ON_DELETE = "ReplaceOnDelete"


class HookFailurePolicy(StrEnum):
    """What battery does with a MicroVM whose create or pre-lease hook fails."""

    DELETE_AND_REPLACE = "DeleteAndReplace"
    QUARANTINE = "Quarantine"


class InterfaceType(StrEnum):
    """flintlock's interface types; Macvtap is flintlock's zero value, Firecracker needs Tap."""

    MACVTAP = "Macvtap"
    TAP = "Tap"


# The CRD's defaults (crds/pools.yaml); crds_test checks the two agree.
DEFAULT_REPLENISHMENT_TYPE: Final = ReplenishmentType.IMMEDIATE_ON_LEASE
DEFAULT_HOOK_FAILURE_POLICY: Final = HookFailurePolicy.DELETE_AND_REPLACE
DEFAULT_INTERFACE_TYPE: Final = InterfaceType.MACVTAP
DEFAULT_MIN_IDLE: Final = 0
DEFAULT_AUTOSCALING_WINDOW: Final = timedelta(seconds=60)
# The lease's defaults are with its settings (batteryop.api.lease).


def _put(out: dict[str, Any], key: str, value: Any) -> None:
    """Set `key` unless `value` is None or an empty map or list."""
    if value is None or (isinstance(value, Mapping | list | tuple) and not value):
        return
    out[key] = dict(value) if isinstance(value, Mapping) else value


# --- template --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Kernel:
    image: str
    filename: str
    cmdline: Mapping[str, str] = field(default_factory=dict)
    add_network_config: bool = False

    @classmethod
    def parse(cls, f: Fields) -> Kernel:
        return cls(
            image=f.string("image"),
            filename=f.string("filename"),
            cmdline=f.str_map("cmdline"),
            add_network_config=f.boolean("addNetworkConfig"),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"image": self.image, "filename": self.filename}
        _put(out, "cmdline", self.cmdline)
        if self.add_network_config:
            out["addNetworkConfig"] = True
        return out


@dataclass(frozen=True)
class Initrd:
    image: str
    filename: str | None = None

    @classmethod
    def parse(cls, f: Fields) -> Initrd:
        return cls(image=f.string("image"), filename=f.opt_string("filename"))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"image": self.image}
        _put(out, "filename", self.filename)
        return out


@dataclass(frozen=True)
class Volume:
    """A disk from an OCI image (`container_source`) or a Host path (`virtiofs_source`)."""

    id: str | None = None
    container_source: str | None = None
    virtiofs_source: str | None = None
    read_only: bool = False
    mount_point: str | None = None
    partition_id: str | None = None
    size_in_mb: int | None = None

    @classmethod
    def parse(cls, f: Fields) -> Volume:
        return cls(
            id=f.opt_string("id"),
            container_source=f.opt_string("containerSource"),
            virtiofs_source=f.opt_string("virtiofsSource"),
            read_only=f.boolean("readOnly"),
            mount_point=f.opt_string("mountPoint"),
            partition_id=f.opt_string("partitionId"),
            size_in_mb=f.opt_integer("sizeInMb"),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        _put(out, "id", self.id)
        _put(out, "containerSource", self.container_source)
        _put(out, "virtiofsSource", self.virtiofs_source)
        if self.read_only:
            out["readOnly"] = True
        _put(out, "mountPoint", self.mount_point)
        _put(out, "partitionId", self.partition_id)
        _put(out, "sizeInMb", self.size_in_mb)
        return out


@dataclass(frozen=True)
class StaticAddress:
    address: str
    gateway: str | None = None
    nameservers: tuple[str, ...] = ()

    @classmethod
    def parse(cls, f: Fields) -> StaticAddress:
        return cls(
            address=f.string("address"),
            gateway=f.opt_string("gateway"),
            nameservers=f.str_list("nameservers"),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"address": self.address}
        _put(out, "gateway", self.gateway)
        _put(out, "nameservers", list(self.nameservers))
        return out


@dataclass(frozen=True)
class NetworkInterface:
    """A guest interface. `bridge_name` is flintlock's per-interface bridge override."""

    device_id: str
    type: InterfaceType = DEFAULT_INTERFACE_TYPE
    guest_mac: str | None = None
    address: StaticAddress | None = None
    bridge_name: str | None = None

    @classmethod
    def parse(cls, f: Fields) -> NetworkInterface:
        address = f.opt_obj("address")
        overrides = f.opt_obj("overrides")
        return cls(
            device_id=f.string("deviceId"),
            type=f.choice("type", InterfaceType, DEFAULT_INTERFACE_TYPE),
            guest_mac=f.opt_string("guestMac"),
            address=StaticAddress.parse(address) if address else None,
            bridge_name=overrides.opt_string("bridgeName") if overrides else None,
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"deviceId": self.device_id, "type": str(self.type)}
        _put(out, "guestMac", self.guest_mac)
        if self.address is not None:
            out["address"] = self.address.to_dict()
        if self.bridge_name is not None:
            out["overrides"] = {"bridgeName": self.bridge_name}
        return out


@dataclass(frozen=True)
class MicroVMTemplate:
    """What every MicroVM of the Pool is created from (battery's microvm_template)."""

    vcpu: int
    memory_in_mb: int
    kernel: Kernel
    root_volume: Volume
    interfaces: tuple[NetworkInterface, ...]
    initrd: Initrd | None = None
    additional_volumes: tuple[Volume, ...] = ()
    metadata: Mapping[str, str] = field(default_factory=dict)
    """Metadata service items (cloud-init's meta-data, user-data, ...), base64 encoded."""
    labels: Mapping[str, str] = field(default_factory=dict)
    provider: str | None = None
    """flintlock's provider (`firecracker` or `cloudhypervisor`); None for the Host default."""

    @classmethod
    def parse(cls, f: Fields) -> MicroVMTemplate:
        initrd = f.opt_obj("initrd")
        return cls(
            vcpu=f.integer("vcpu"),
            memory_in_mb=f.integer("memoryInMb"),
            kernel=Kernel.parse(f.obj("kernel")),
            root_volume=Volume.parse(f.obj("rootVolume")),
            interfaces=tuple(NetworkInterface.parse(i) for i in f.obj_list("interfaces")),
            initrd=Initrd.parse(initrd) if initrd else None,
            additional_volumes=tuple(Volume.parse(v) for v in f.obj_list("additionalVolumes")),
            metadata=f.str_map("metadata"),
            labels=f.str_map("labels"),
            provider=f.opt_string("provider"),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        _put(out, "provider", self.provider)
        out["vcpu"] = self.vcpu
        out["memoryInMb"] = self.memory_in_mb
        out["kernel"] = self.kernel.to_dict()
        if self.initrd is not None:
            out["initrd"] = self.initrd.to_dict()
        out["rootVolume"] = self.root_volume.to_dict()
        _put(out, "additionalVolumes", [v.to_dict() for v in self.additional_volumes])
        out["interfaces"] = [i.to_dict() for i in self.interfaces]
        _put(out, "metadata", self.metadata)
        _put(out, "labels", self.labels)
        return out


# --- spec ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Replenishment:
    """The strategy; battery reads `min_size` only for MinSizeThreshold."""

    type: ReplenishmentType = DEFAULT_REPLENISHMENT_TYPE
    min_size: int | None = None

    @classmethod
    def parse(cls, f: Fields) -> Replenishment:
        return cls(
            type=f.choice("type", ReplenishmentType, DEFAULT_REPLENISHMENT_TYPE),
            min_size=f.opt_integer("minSize"),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": str(self.type)}
        _put(out, "minSize", self.min_size)
        return out


@dataclass(frozen=True)
class Hooks:
    """Commands battery runs in each MicroVM: once after boot, and before each lease."""

    create: tuple[str, ...] = ()
    pre_lease: tuple[str, ...] = ()
    failure_policy: HookFailurePolicy = DEFAULT_HOOK_FAILURE_POLICY

    @classmethod
    def parse(cls, f: Fields) -> Hooks:
        return cls(
            create=f.str_list("create"),
            pre_lease=f.str_list("preLease"),
            failure_policy=f.choice(
                "failurePolicy", HookFailurePolicy, DEFAULT_HOOK_FAILURE_POLICY
            ),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        _put(out, "create", list(self.create))
        _put(out, "preLease", list(self.pre_lease))
        out["failurePolicy"] = str(self.failure_policy)
        return out


@dataclass(frozen=True)
class Autoscaling:
    """spec.autoscaling: the Pool's own sizing policy (RS-107); the operator sizes the Pool
    (`batteryop.operator.pools.autoscale`) and the Pool has no spec.size."""

    max_size: int
    """The ceiling on the size battery is given."""
    min_idle: int = DEFAULT_MIN_IDLE
    """The warm buffer: MicroVMs kept available beyond what claims hold."""
    window: timedelta = DEFAULT_AUTOSCALING_WINDOW
    """The claim rate's window (the buffer covers the claims of the last window), and how long
    a size stays before it may shrink."""
    scale_to_zero_after: timedelta | None = None
    """With no claim made and none waiting for this long, the size is 0; None never."""

    @classmethod
    def parse(cls, f: Fields) -> Autoscaling:
        return cls(
            max_size=f.integer("maxSize"),
            min_idle=f.opt_integer("minIdle") or DEFAULT_MIN_IDLE,
            window=f.duration("window", DEFAULT_AUTOSCALING_WINDOW),
            scale_to_zero_after=f.opt_duration("scaleToZeroAfter"),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "maxSize": self.max_size,
            "minIdle": self.min_idle,
            "window": format_duration(self.window),
        }
        if self.scale_to_zero_after is not None:
            out["scaleToZeroAfter"] = format_duration(self.scale_to_zero_after)
        return out


@dataclass(frozen=True)
class PoolSpec:
    template: MicroVMTemplate
    size: int | None
    """spec.size; None when `autoscaling` sizes the Pool (the CRD requires exactly one)."""
    node_selector: Mapping[str, str] = field(default_factory=dict)
    """spec.placement.nodeSelector: labels a Host's Node must carry; empty selects every Host."""
    replenishment: Replenishment = field(default_factory=Replenishment)
    hooks: Hooks = field(default_factory=Hooks)
    lease: LeaseSettings = field(default_factory=LeaseSettings)
    autoscaling: Autoscaling | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, path: str = "spec") -> PoolSpec:
        f = Fields(data, path)
        autoscaling = f.opt_obj("autoscaling")
        return cls(
            template=MicroVMTemplate.parse(f.obj("template")),
            size=f.integer("size") if autoscaling is None else f.opt_integer("size"),
            node_selector=f.obj_or_empty("placement").str_map("nodeSelector"),
            replenishment=Replenishment.parse(f.obj_or_empty("replenishment")),
            hooks=Hooks.parse(f.obj_or_empty("hooks")),
            lease=LeaseSettings.parse(f.obj_or_empty("lease")),
            autoscaling=None if autoscaling is None else Autoscaling.parse(autoscaling),
        )

    def to_dict(self) -> dict[str, Any]:
        placement: dict[str, Any] = {}
        _put(placement, "nodeSelector", self.node_selector)
        out: dict[str, Any] = {"template": self.template.to_dict()}
        _put(out, "size", self.size)
        out.update(
            placement=placement,
            replenishment=self.replenishment.to_dict(),
            hooks=self.hooks.to_dict(),
            lease=self.lease.to_dict(),
        )
        if self.autoscaling is not None:
            out["autoscaling"] = self.autoscaling.to_dict()
        return out


# --- status ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PoolStatus:
    """What the Pool controller writes: battery's counts (PO-020) and the conditions."""

    observed_generation: int | None = None
    """The generation battery last accepted (PO-002)."""
    available: int = 0
    leased: int = 0
    provisioning: int = 0
    quarantined: int = 0
    conditions: tuple[Condition, ...] = ()
    replicas: int | None = None
    """The MicroVMs that count toward `spec.size` (RS-106): what the `scale` subresource
    reports as the current replicas."""
    selector: str | None = None
    """The `scale` subresource's label selector (RS-106): `<group>/pool=<name>`."""
    size: int | None = None
    """The size battery last accepted: spec.size, or the policy's (RS-108)."""
    last_scale_time: datetime | None = None
    """When the policy last changed `size` (RS-108); it shrinks no sooner than a window later."""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, path: str = "status") -> PoolStatus:
        f = Fields(data or {}, path)
        return cls(
            observed_generation=f.opt_integer("observedGeneration"),
            available=f.opt_integer("available") or 0,
            leased=f.opt_integer("leased") or 0,
            provisioning=f.opt_integer("provisioning") or 0,
            quarantined=f.opt_integer("quarantined") or 0,
            conditions=parse_conditions(f.obj_list("conditions")),
            replicas=f.opt_integer("replicas"),
            selector=f.opt_string("selector"),
            size=f.opt_integer("size"),
            last_scale_time=f.opt_time("lastScaleTime"),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        _put(out, "observedGeneration", self.observed_generation)
        out.update(
            available=self.available,
            leased=self.leased,
            provisioning=self.provisioning,
            quarantined=self.quarantined,
            conditions=[c.to_dict() for c in self.conditions],
        )
        _put(out, "replicas", self.replicas)
        _put(out, "selector", self.selector)
        _put(out, "size", self.size)
        if self.last_scale_time is not None:
            out["lastScaleTime"] = format_time(self.last_scale_time)
        return out

    def condition(self, type: PoolConditionType) -> Condition | None:
        return find_condition(self.conditions, type)


# --- the object ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pool(Named):
    metadata: ObjectMeta
    spec: PoolSpec
    status: PoolStatus = field(default_factory=PoolStatus)

    @classmethod
    def from_dict(cls, body: Mapping[str, Any]) -> Pool:
        return cls(*read_object(body, names.POOL_KIND, PoolSpec.from_dict, PoolStatus.from_dict))

    def to_dict(self) -> dict[str, Any]:
        """The whole body; `status` only when it is not the empty status."""
        status = None if self.status == PoolStatus() else self.status.to_dict()
        return write_object(names.POOL_KIND, self.metadata, self.spec.to_dict(), status)

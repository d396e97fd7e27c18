"""battery's checks of a PoolSpec on CreatePool and UpdatePool (all INVALID_ARGUMENT).

Messages the spec quotes are kept; the others are our own wording of the same rule.
"""

from __future__ import annotations

from collections.abc import Collection

from battery_protos.flintlock.types import microvm_pb2
from battery_protos.poolmgr.v1alpha1 import types_pb2

MAX_REQUEST_ID_BYTES = 255


class PoolSpecInvalidError(ValueError):
    """A PoolSpec battery refuses; the message says why."""

    def __init__(self, spec: types_pb2.PoolSpec | None, message: str) -> None:
        super().__init__(message)
        self.spec = spec


def can_hold_several(spec: types_pb2.PoolSpec) -> bool:
    """Whether the Pool may hold more than one VM at once."""
    return (
        spec.size > 1
        or spec.replenishment_strategy.type == types_pb2.IMMEDIATE_ON_LEASE
        or spec.hook_failure_policy == types_pb2.QUARANTINE
    )


def has_static_network(template: microvm_pb2.MicroVMSpec) -> bool:
    """Whether any interface of the template fixes a guest MAC or a static address."""
    return any(
        (iface.HasField("guest_mac") and iface.guest_mac) or iface.HasField("address")
        for iface in template.interfaces
    )


def validate_pool_spec(
    spec: types_pb2.PoolSpec | None, known_hosts: Collection[str] | None
) -> types_pb2.PoolSpec:
    """Check spec as battery's handler does; return the copy to store.

    known_hosts is None for battery v0.4.0 (which does not check flintlock_hosts) and the
    registered Host names for battery main.
    """
    if spec is None:
        raise PoolSpecInvalidError(spec, "spec is required")
    if not spec.name:
        raise PoolSpecInvalidError(spec, "spec.name is required")
    if not spec.namespace:
        raise PoolSpecInvalidError(spec, "spec.namespace is required")
    if not spec.HasField("replenishment_strategy"):
        raise PoolSpecInvalidError(spec, "spec.replenishment_strategy is required")
    strategy = spec.replenishment_strategy
    if strategy.type == types_pb2.REPLENISHMENT_STRATEGY_TYPE_UNSPECIFIED:
        raise PoolSpecInvalidError(spec, "spec.replenishment_strategy.type is required")
    if strategy.type not in types_pb2.ReplenishmentStrategyType.values():
        raise PoolSpecInvalidError(
            spec, f"spec.replenishment_strategy.type {strategy.type} is unknown"
        )
    if strategy.type == types_pb2.MIN_SIZE_THRESHOLD and (
        not strategy.HasField("min_size") or strategy.min_size <= 0
    ):
        raise PoolSpecInvalidError(
            spec, "spec.replenishment_strategy.min_size must be set and > 0 for MIN_SIZE_THRESHOLD"
        )
    if spec.hook_failure_policy not in (types_pb2.DELETE_AND_REPLACE, types_pb2.QUARANTINE):
        raise PoolSpecInvalidError(
            spec, "spec.hook_failure_policy must be DELETE_AND_REPLACE or QUARANTINE"
        )
    if not spec.HasField("microvm_template"):
        raise PoolSpecInvalidError(spec, "spec.microvm_template is required")
    # BA-111: a static address or guest_mac only in a Pool that holds one MicroVM.
    if can_hold_several(spec) and has_static_network(spec.microvm_template):
        raise PoolSpecInvalidError(
            spec,
            "spec.microvm_template: guest_mac and static addresses are not allowed in a pool "
            "that can hold more than one VM (size > 1, IMMEDIATE_ON_LEASE or QUARANTINE); "
            "leave them unset and use DHCP",
        )
    if known_hosts is not None:
        unknown = [h for h in spec.flintlock_hosts if h not in known_hosts]
        if unknown:
            raise PoolSpecInvalidError(
                spec, f"unknown hosts {unknown}; add them with HostAdmin.AddHost first"
            )
    stored = types_pb2.PoolSpec()
    stored.CopyFrom(spec)
    stored.microvm_template.allow_guest_agent = True
    return stored


def missing_duration(spec: types_pb2.PoolSpec) -> str | None:
    """The first heartbeat duration left unset (the store refuses it as INTERNAL), or None."""
    for name in ("heartbeat_interval", "heartbeat_expiry_threshold"):
        if not spec.HasField(name):
            return name
    return None

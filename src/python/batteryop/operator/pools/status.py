"""status: the Pool's status, from battery's answer only (PO-020, PO-021, PO-022).

- Counts: battery's PoolStatus as answered in this reconcile, zeros while battery does not
  hold the Pool; never counted or guessed by the Operator (PO-020).
- Exhausted (PO-021): False `SizeZero` for size 0; True `NoneAvailable` when battery reports
  no available MicroVM; else False `Available`.
- Ready (PO-022), the first that applies: `Rejected` with battery's message (PO-004),
  `NoEligibleHost` (PO-012), `NotInBattery`, `BelowSize`, `AtSize` (True). The last two say
  "N of M MicroVMs are available, leased or provisioning".
- While deleting and refused: Ready False `DeletionBlocked` with the leased count (PO-043).
- When battery did not answer: the counts and every condition stay; only Ready's message
  says why nothing was refreshed (a new Pool gets Ready False `NotInBattery`).
- `size` is the size battery holds, as answered (RS-108); for a Pool with spec.autoscaling,
  Autoscaling True with the term of the policy that decided it (`autoscale`), and
  `lastScaleTime` when the size moved. A Pool without a policy has no Autoscaling condition.

The whole conditions list is written; a condition's lastTransitionTime moves only when its
status does (`set_condition`), and `observedGeneration` on each is the Pool's generation.
`status_patch` returns None when nothing changed, so a steady reconcile writes nothing.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

from batteryop.api import names
from batteryop.api.conditions import (
    Condition,
    ConditionStatus,
    PoolConditionType,
    PoolReason,
    set_condition,
)
from batteryop.api.pool import Pool, PoolStatus, ReplenishmentType
from batteryop.battery import models as battery
from batteryop.battery.errors import BatteryError
from batteryop.kube.outcome import merge_patch_from
from batteryop.operator.pools.scope import Declared, PoolScope, Sizing


def _microvms(n: int) -> str:
    return f"{n} MicroVM" if n == 1 else f"{n} MicroVMs"


def _selector(selector: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(selector.items()))


def _generation(pool: Pool) -> int | None:
    return pool.metadata.generation or None


def exhausted(size: int, counts: battery.PoolStatus) -> tuple[bool, PoolReason, str]:
    """Exhausted's status, reason and message (PO-021)."""
    if size == 0:
        return False, PoolReason.SIZE_ZERO, "The Pool's size is 0"
    if counts.available == 0:
        return True, PoolReason.NONE_AVAILABLE, "battery reports no available MicroVM"
    verb = "is" if counts.available == 1 else "are"
    return False, PoolReason.AVAILABLE, f"{_microvms(counts.available)} {verb} available"


def ready(pool: Pool, declared: Declared) -> tuple[bool, PoolReason, str]:
    """Ready's status, reason and message (PO-022, in the order PO-004, PO-012, size)."""
    if declared.rejected is not None:
        return False, PoolReason.REJECTED, declared.rejected  # PO-004: beats NoEligibleHost
    if not declared.selected and declared.hosts_published:  # PO-101: not before publication
        selector = dict(pool.spec.node_selector)
        if selector:
            return False, PoolReason.NO_ELIGIBLE_HOST, f"No Host matches {_selector(selector)}"
        return False, PoolReason.NO_ELIGIBLE_HOST, "No Host is published"  # PO-012
    if declared.held is None:
        message = "battery does not hold the Pool"
        if not declared.hosts_published:
            message += ": waiting for the host registry to publish the Hosts"
        return False, PoolReason.NOT_IN_BATTERY, message
    counts = declared.held.status
    total = counts.available + counts.leased + counts.provisioning
    size = declared.held.spec.size
    message = f"{total} of {size} MicroVMs are available, leased or provisioning"
    if total >= size:
        return True, PoolReason.AT_SIZE, message
    return False, PoolReason.BELOW_SIZE, message


def _with(
    conditions: tuple[Condition, ...],
    pool: Pool,
    type: PoolConditionType,
    value: tuple[bool, PoolReason, str],
    now: datetime,
) -> tuple[Condition, ...]:
    status, reason, message = value
    return set_condition(conditions, type, status, reason, message, now, _generation(pool))


def replicas(pool: Pool, counts: battery.PoolStatus) -> int:
    """The MicroVMs that count toward `spec.size` as battery's replenishment counts them
    (RS-106): the warm ones (available and provisioning) for ImmediateOnLease, whose leased
    MicroVMs are extra, and the leased ones too for the other two strategies."""
    warm = counts.available + counts.provisioning
    if pool.spec.replenishment.type is ReplenishmentType.IMMEDIATE_ON_LEASE:
        return warm
    return warm + counts.leased


def _counted(
    pool: Pool, base: PoolStatus, counts: battery.PoolStatus, conditions: tuple[Condition, ...]
) -> PoolStatus:
    return replace(
        base,
        available=counts.available,  # PO-020: battery's counts, as answered
        leased=counts.leased,
        provisioning=counts.provisioning,
        quarantined=counts.quarantined,
        conditions=conditions,
        replicas=replicas(pool, counts),  # RS-106: the scale subresource's
        selector=names.pool_selector(pool.metadata.name),
    )


async def report(scope: PoolScope) -> None:
    """The step: the status of a Pool `declare` got battery's answer for."""
    if scope.declared is not None:
        scope.status = declared_status(scope.pool, scope.declared, scope.now, scope.sizing)


def _size(pool: Pool) -> int:
    """The size the Pool has: spec.size, or the policy's as battery last took it."""
    return pool.spec.size if pool.spec.size is not None else pool.status.size or 0


def declared_status(
    pool: Pool, declared: Declared, now: datetime, sizing: Sizing | None = None
) -> PoolStatus:
    """The status of a Pool battery was asked to hold (`declare` done), sized by `sizing`."""
    held = declared.held
    counts = held.status if held is not None else battery.PoolStatus()
    size = held.spec.size if held is not None else _size(pool)
    conditions = _with(
        pool.status.conditions, pool, PoolConditionType.READY, ready(pool, declared), now
    )
    conditions = _with(conditions, pool, PoolConditionType.EXHAUSTED, exhausted(size, counts), now)
    base = replace(
        pool.status,
        observed_generation=declared.observed_generation,
        size=size if held is not None else pool.status.size,
    )
    if pool.spec.autoscaling is None:
        conditions = tuple(c for c in conditions if c.type != PoolConditionType.AUTOSCALING)
        base = replace(base, last_scale_time=None)
    else:
        if sizing is not None and sizing.reason is not None:
            message = sizing.message
            if sizing.size != size:  # refused, not sent yet, or battery did not answer
                message = f"{sizing.size} decided, battery holds {size}: {message}"
            value = (True, sizing.reason, message)
            conditions = _with(conditions, pool, PoolConditionType.AUTOSCALING, value, now)
        if base.size != pool.status.size:
            base = replace(base, last_scale_time=now)  # PO-107: a window before it shrinks
    return _counted(pool, base, counts, conditions)


def blocked_status(pool: Pool, held: battery.Pool, now: datetime) -> PoolStatus:
    """The status of a deleted Pool battery will not delete while MicroVMs are leased (PO-043)."""
    leased = held.status.leased
    verb = "is" if leased == 1 else "are"
    message = (
        f"battery refuses to delete the Pool while {_microvms(leased)} {verb} leased; "
        "it is deleted once the claims on it are released"
    )
    value = (False, PoolReason.DELETION_BLOCKED, message)
    conditions = _with(pool.status.conditions, pool, PoolConditionType.READY, value, now)
    conditions = _with(
        conditions, pool, PoolConditionType.EXHAUSTED, exhausted(_size(pool), held.status), now
    )
    return _counted(pool, pool.status, held.status, conditions)


def unanswered_status(pool: Pool, err: BatteryError, now: datetime) -> PoolStatus:
    """The status when battery did not answer: as it was, with Ready's message saying why."""
    message = f"Could not refresh the Pool from battery: {err}"
    current = pool.status.condition(PoolConditionType.READY)
    if current is None:
        conditions = set_condition(
            pool.status.conditions,
            PoolConditionType.READY,
            ConditionStatus.FALSE,
            PoolReason.NOT_IN_BATTERY,
            message,
            now,
            _generation(pool),
        )
    else:
        conditions = set_condition(
            pool.status.conditions,
            current.type,
            current.status,
            current.reason,
            message,
            now,
            current.observed_generation,
        )
    return replace(pool.status, conditions=conditions)


def status_patch(pool: Pool, status: PoolStatus) -> dict[str, Any] | None:
    """The merge-patch taking the Pool's status as read to `status` (`outcome.merge_patch_from`,
    as for claims), or None if nothing changed.

    A Pool without a status reads as zero counts, so its first patch is the whole status:
    a diff from the parsed zeros would leave the counts out of the stored object."""
    if status == pool.status:
        return None
    before = {} if pool.status == PoolStatus() else pool.status.to_dict()
    return merge_patch_from(before, status.to_dict())

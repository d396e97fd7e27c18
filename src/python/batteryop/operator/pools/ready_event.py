"""ready event: every change of the Pool's Ready reason is also a Kubernetes Event a person
can read (PO-102).

Always run, last, on the status the chain decided: Normal for `AtSize` and for `BelowSize`
(filling up is the normal way to Ready), Warning for every other reason, which needs
attention (`Rejected` with battery's message, `NoEligibleHost`, `DeletionBlocked` with the
leased count, `NotInBattery`, ...). The same reason again posts nothing.
"""

from __future__ import annotations

from batteryop.api.conditions import (
    ConditionStatus,
    EventType,
    PoolConditionType,
    PoolReason,
    find_condition,
)
from batteryop.operator.pools.scope import PoolScope


async def ready_event(scope: PoolScope) -> None:
    """An Event when Ready's reason differs from the one read."""
    old = find_condition(scope.pool.status.conditions, PoolConditionType.READY)
    new = find_condition(scope.status.conditions, PoolConditionType.READY)
    if new is None or (old is not None and old.reason == new.reason):
        return
    kind = EventType.NORMAL if new.status == ConditionStatus.TRUE else EventType.WARNING
    if new.reason == PoolReason.BELOW_SIZE:
        kind = EventType.NORMAL  # filling up is the normal way to Ready
    scope.event(kind, new.reason, new.message)

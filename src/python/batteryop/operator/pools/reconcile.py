"""`reconcile_pool`: one reconcile of one Pool, returned as an `Outcome` for the runtime.

The steps, in order (each module's docstring says why the order matters):

1. Deleted Pool: `delete.delete_pool` (PO-042, PO-043, PO-044), and nothing else.
2. `finalizer.ensure_finalizer`: a Pool without the finalizer gets only that (PO-001).
3. `declare.declare_pool`: GetPool, then CreatePool / UpdatePool if anything changed, on the
   Hosts the node selector picks (PO-002, PO-004, PO-010, PO-011, PO-012).
4. `status.declared_status`: counts, Exhausted and Ready from battery's answer (PO-020..022).

battery failing in transit or otherwise (`BatteryError` not handled by a step) ends the
reconcile normally: the status stays as it was but for Ready's message, and the outcome backs
off (`Outcome.back_off`): the work queue retries the Pool after its per-object backoff, 1 s
doubling to 30 s, as it retries a reconcile that raised. A reconcile that completes asks for
no requeue, which starts that backoff over: battery's events (PO-023) and the runtime's resync
(PO-024) bring the Pool back, as do changes of the Pool and of the Host set (the runtime
queues every Pool when the Host set changes: PO-011).

A steady Pool costs one GetPool and writes nothing (`Outcome.status` is None when unchanged).
A Pool body the CRD would not admit raises `batteryop.api.errors.MalformedObjectError`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from batteryop.api.conditions import (
    ConditionStatus,
    EventType,
    PoolConditionType,
    PoolReason,
    find_condition,
)
from batteryop.api.pool import Pool, PoolStatus
from batteryop.battery.errors import BatteryError
from batteryop.battery.protocol import BatteryAPI
from batteryop.operator.keys import PoolKey
from batteryop.operator.outcome import Outcome
from batteryop.operator.pools.declare import declare_pool
from batteryop.operator.pools.delete import delete_pool
from batteryop.operator.pools.finalizer import ensure_finalizer
from batteryop.operator.pools.hosts import HostSet
from batteryop.operator.pools.status import declared_status, status_patch, unanswered_status

_log = logging.getLogger(__name__)


@dataclass
class PoolDeps:
    """What a Pool reconcile uses besides the Pool body.

    `hosts` is the Host set as last published, None until the host registry has published
    one; the runtime replaces it when a new one is published.
    """

    battery: BatteryAPI
    hosts: HostSet | None
    clock: Callable[[], datetime]
    logger: logging.Logger | logging.LoggerAdapter[Any] = _log


async def reconcile_pool(body: Mapping[str, Any], deps: PoolDeps) -> Outcome:
    """Reconcile the Pool `body` (as the API server returned it) with battery."""
    outcome = await _reconcile(body, deps)
    _event_on_ready_change(body, outcome)
    return outcome


def _event_on_ready_change(body: Mapping[str, Any], outcome: Outcome) -> None:
    """Every change of the Ready reason is also a Kubernetes Event a person can read.

    Normal for AtSize, Warning for every reason that needs attention (Rejected with battery's
    message, NoEligibleHost, DeletionBlocked with the leased count, ...).
    """
    if not outcome.status or "conditions" not in outcome.status:
        return
    old = find_condition(
        PoolStatus.from_dict(body.get("status")).conditions, PoolConditionType.READY
    )
    new = find_condition(PoolStatus.from_dict(outcome.status).conditions, PoolConditionType.READY)
    if new is None or (old is not None and old.reason == new.reason):
        return
    kind = EventType.NORMAL if new.status == ConditionStatus.TRUE else EventType.WARNING
    if new.reason == PoolReason.BELOW_SIZE:
        kind = EventType.NORMAL  # filling up is the normal way to Ready
    outcome.event(kind, new.reason, new.message)


async def _reconcile(body: Mapping[str, Any], deps: PoolDeps) -> Outcome:
    pool = Pool.from_dict(body)
    key = PoolKey(pool.namespace, pool.name)
    now = deps.clock()
    try:
        if pool.metadata.deleting:
            return await delete_pool(pool, deps.battery, now=now, logger=deps.logger)
        added = ensure_finalizer(pool)
        if added is not None:
            return added
        declared = await declare_pool(pool, deps.hosts, deps.battery, deps.logger)
    except BatteryError as err:
        return _unanswered(pool, key, err, now, deps)
    return Outcome(status=status_patch(pool, declared_status(pool, declared, now)))


def _unanswered(
    pool: Pool, key: PoolKey, err: BatteryError, now: datetime, deps: PoolDeps
) -> Outcome:
    deps.logger.warning(
        "battery call failed for Pool; retrying with backoff",
        extra={"pool": str(key), "error": str(err)},
    )
    outcome = Outcome(status=status_patch(pool, unanswered_status(pool, err, now)))
    outcome.back_off()
    return outcome

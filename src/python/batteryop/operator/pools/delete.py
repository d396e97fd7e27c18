"""The deletion path: battery drains and removes the Pool itself (PO-042, PO-043, PO-044).

Order, for a Pool with a deletionTimestamp:

1. No Pool finalizer: nothing to do. The finalizer is stored before CreatePool (PO-001), so
   a Pool without it has nothing in battery on our account.
2. DeletePool (without force). battery drains the available, provisioning and quarantined
   MicroVMs itself. OK, or NotFound (battery no longer holds the Pool): remove the finalizer,
   and nothing else (PO-044).
3. FAILED_PRECONDITION: battery refuses while MicroVMs are leased. GetPool for its spec and
   counts; if its spec is not yet the drained spec, UpdatePool with it, so battery replaces
   no MicroVM meanwhile (PO-042). The finalizer stays; status shows Ready False
   `DeletionBlocked` with the leased count (PO-043); retry after the work queue's backoff
   (`Outcome.back_off`). The
   runtime also queues the Pool when a claim on it goes (`operator.keys.pool_key_for_claim`), which
   is when DeletePool can succeed.

Other battery failures propagate as `BatteryError` for `reconcile` to map.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from batteryop.api import names
from batteryop.api.pool import Pool
from batteryop.battery import models as battery
from batteryop.battery.errors import NotFoundError, PreconditionFailedError
from batteryop.battery.protocol import BatteryAPI
from batteryop.operator.keys import PoolKey
from batteryop.operator.outcome import Outcome
from batteryop.operator.pools.battery_spec import drained_spec, is_drained
from batteryop.operator.pools.declare import get_held
from batteryop.operator.pools.status import blocked_status, status_patch


def _released() -> Outcome:
    return Outcome(remove_finalizer=names.POOL_FINALIZER)  # PO-044


async def delete_pool(
    pool: Pool,
    api: BatteryAPI,
    *,
    now: datetime,
    logger: logging.Logger | logging.LoggerAdapter[Any],
) -> Outcome:
    """One reconcile of a deleted Pool; see the module docstring for the order.

    Calls: DeletePool; when refused, GetPool and at most one UpdatePool.
    """
    if not pool.metadata.has_finalizer(names.POOL_FINALIZER):
        return Outcome()
    key = PoolKey(pool.namespace, pool.name)
    try:
        await api.delete_pool(key.ref)
    except NotFoundError:
        logger.info("battery no longer holds deleted Pool", extra={"pool": str(key)})
        return _released()
    except PreconditionFailedError as refusal:
        held = await get_held(api, key.ref)
        if held is None:  # released and deleted since the refusal
            return _released()
        if not is_drained(held.spec):
            try:
                held = await api.update_pool(drained_spec(held.spec))  # PO-042
            except NotFoundError:
                return _released()
            logger.info("Drained Pool spec in battery", extra={"pool": str(key)})
        return _blocked(pool, held, refusal, now=now, logger=logger, key=key)
    logger.info("Deleted Pool in battery", extra={"pool": str(key)})
    return _released()


def _blocked(
    pool: Pool,
    held: battery.Pool,
    refusal: PreconditionFailedError,
    *,
    now: datetime,
    logger: logging.Logger | logging.LoggerAdapter[Any],
    key: PoolKey,
) -> Outcome:
    logger.info(
        "battery refused to delete Pool",
        extra={"pool": str(key), "leased": held.status.leased, "error": refusal.message},
    )
    outcome = Outcome(status=status_patch(pool, blocked_status(pool, held, now)))  # PO-043
    outcome.back_off()
    return outcome

"""delete: a deleted Pool is drained and removed by battery itself (PO-042, PO-043, PO-044).

For a Pool with a deletionTimestamp, and only for it, this step is the whole chain (then the
`last` steps); in order:

1. No Pool finalizer: nothing to do. The finalizer is stored before CreatePool (PO-001), so
   a Pool without it has nothing in battery on our account.
2. DeletePool (without force). battery drains the available, provisioning and quarantined
   MicroVMs itself. OK, or NotFound (battery no longer holds the Pool): remove the finalizer,
   and nothing else (PO-044); until then it stays (PO-003).
3. FAILED_PRECONDITION: battery refuses while MicroVMs are leased. GetPool for its spec and
   counts; if its spec is not yet the drained spec, UpdatePool with it, so battery replaces
   no MicroVM meanwhile (PO-042). The finalizer stays; status shows Ready False
   `DeletionBlocked` with the leased count (PO-043); retry after the work queue's backoff
   (`Outcome.back_off`). The
   runtime also queues the Pool when a claim on it goes (`operator.keys.pool_key_for_claim`), which
   is when DeletePool can succeed.

Other battery failures end the chain (`PoolScope.failed`) for `answered` to report.
"""

from __future__ import annotations

from batteryop.api import names
from batteryop.battery import models as battery
from batteryop.battery.errors import BatteryError, BatteryNotFoundError, PreconditionFailedError
from batteryop.operator.pools.battery_spec import drained_spec, is_drained
from batteryop.operator.pools.declare import get_held
from batteryop.operator.pools.scope import PoolScope
from batteryop.operator.pools.status import blocked_status


async def delete_pool(scope: PoolScope) -> None:
    """The step: for a deleted Pool, the order above, and the chain ends.

    Calls: DeletePool; when refused, GetPool and at most one UpdatePool.
    """
    if not scope.pool.metadata.deleting:
        return
    scope.stop()
    if not scope.pool.metadata.has_finalizer(names.POOL_FINALIZER):
        return
    try:
        await _delete(scope)
    except BatteryError as err:
        scope.failed(err)


def _released(scope: PoolScope) -> None:
    scope.outcome.remove_finalizer = names.POOL_FINALIZER  # PO-044


async def _delete(scope: PoolScope) -> None:
    key, api = scope.key, scope.deps.battery
    try:
        await api.delete_pool(key.ref)
    except BatteryNotFoundError:
        scope.logger.info("battery no longer holds deleted Pool", extra={"pool": str(key)})
        return _released(scope)
    except PreconditionFailedError as refusal:
        held = await get_held(api, key.ref)
        if held is None:  # released and deleted since the refusal
            return _released(scope)
        if not is_drained(held.spec):
            try:
                held = await api.update_pool(drained_spec(held.spec))  # PO-042
            except BatteryNotFoundError:
                return _released(scope)
            scope.logger.info("Drained Pool spec in battery", extra={"pool": str(key)})
        return _blocked(scope, held, refusal)
    scope.logger.info("Deleted Pool in battery", extra={"pool": str(key)})
    _released(scope)


def _blocked(scope: PoolScope, held: battery.Pool, refusal: PreconditionFailedError) -> None:
    scope.logger.info(
        "battery refused to delete Pool",
        extra={"pool": str(scope.key), "leased": held.status.leased, "error": refusal.message},
    )
    scope.status = blocked_status(scope.pool, held, scope.now)  # PO-043
    scope.outcome.back_off()

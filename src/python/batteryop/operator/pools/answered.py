"""answered: when battery did not answer, the Pool's status stays and says so, and the Pool
backs off.

Always run, after the chain, whether it stopped or not (as `synced` for a claim). Only when a
step recorded a battery failure it did not act on (`PoolScope.failed`: a failure in
transit, or an error no step handles): the counts and every condition stay as they were and
only Ready's message says why nothing was refreshed (a new Pool gets Ready False
`NotInBattery`, `status.unanswered_status`); a Warning is logged; the outcome backs off
(`Outcome.back_off`): the work queue retries the Pool after its per-object backoff, 1 s
doubling to 30 s, as it retries a reconcile that raised. A reconcile that completes asks for
no requeue, which starts that backoff over: battery's events (PO-023) and the runtime's
resync (PO-024) bring the Pool back, as do changes of the Pool and of the Host set (PO-011).
"""

from __future__ import annotations

from batteryop.operator.pools.scope import PoolScope
from batteryop.operator.pools.status import unanswered_status


async def answered(scope: PoolScope) -> None:
    """Report a battery failure the chain stopped on; back off."""
    if scope.error is None:
        return
    scope.logger.warning(
        "battery call failed for Pool; retrying with backoff",
        extra={"pool": str(scope.key), "error": str(scope.error)},
    )
    scope.status = unanswered_status(scope.pool, scope.error, scope.now)
    scope.outcome.back_off()

"""finalizer: the Pool's finalizer is stored before battery hears of the Pool (PO-001).

A Pool without the finalizer gets an `Outcome` that only adds it, and the reconcile stops
there: the runtime writes it with the resourceVersion lock, caches the write's answer and
reconciles the Pool again at once (the write's own watch event queues nothing), so the next
reconcile sees the finalizer stored. Only then may `declare` call CreatePool, so
a Pool deleted meanwhile can never leave a Pool behind in battery (PO-044 removes the
finalizer only once battery no longer holds the Pool).
"""

from __future__ import annotations

from batteryop.api import names
from batteryop.operator.pools.scope import PoolScope


async def ensure_finalizer(scope: PoolScope) -> None:
    """Add the Pool finalizer if the Pool lacks it, and stop the chain there.

    Only for a Pool that is not being deleted (`delete` ends the chain of a deleted Pool): a
    deleted Pool never gains a finalizer.
    """
    if scope.pool.metadata.has_finalizer(names.POOL_FINALIZER):
        return
    scope.outcome.add_finalizer = names.POOL_FINALIZER  # PO-001: stored before CreatePool; PO-003
    scope.stop()

"""Step 2: the Pool's finalizer is stored before battery hears of the Pool (PO-001).

A Pool without the finalizer gets an `Outcome` that only adds it, and the reconcile stops
there: the runtime writes it with the resourceVersion lock, caches the write's answer and
reconciles the Pool again at once (the write's own watch event queues nothing), so the next
reconcile sees the finalizer stored. Only then may `declare` call CreatePool, so
a Pool deleted meanwhile can never leave a Pool behind in battery (PO-044 removes the
finalizer only once battery no longer holds the Pool).
"""

from __future__ import annotations

from batteryop.api import names
from batteryop.api.pool import Pool
from batteryop.operator.outcome import Outcome


def ensure_finalizer(pool: Pool) -> Outcome | None:
    """An Outcome adding the Pool finalizer if `pool` lacks it (stop there), else None.

    Only for a Pool that is not being deleted: a deleted Pool never gains a finalizer.
    """
    if pool.metadata.has_finalizer(names.POOL_FINALIZER):
        return None
    return Outcome(add_finalizer=names.POOL_FINALIZER)  # PO-001: stored before CreatePool

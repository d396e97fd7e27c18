"""`reconcile_pool`: one reconcile of one Pool, returned as an `Outcome` for the runtime.

The same shape as a claim's (`batteryop.kube.chain`): a `PoolScope`, the steps of
`CHAIN` in order until one stops it, then every step of `LAST`. Those two tuples are the
order; each step's module says what it owns and why it sits where it does, and
`docs/operator.md` lists them from here. The result is one `Outcome`: a status merge-patch
(None when nothing changed), Events, a finalizer to add or remove, and a backoff when battery
did not answer or refused a deletion.

A steady Pool costs one GetPool and writes nothing. A Pool body the CRD would not admit
raises `batteryop.api.errors.MalformedObjectError`: the runtime retries it with its own
backoff.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from batteryop.api.pool import Pool
from batteryop.kube.chain import Step, run_chain
from batteryop.kube.outcome import Outcome
from batteryop.operator.pools.answered import answered
from batteryop.operator.pools.autoscale import autoscale, resized_event
from batteryop.operator.pools.declare import declare
from batteryop.operator.pools.delete import delete_pool
from batteryop.operator.pools.deps import PoolDeps
from batteryop.operator.pools.finalizer import ensure_finalizer
from batteryop.operator.pools.ready_event import ready_event
from batteryop.operator.pools.scope import PoolScope
from batteryop.operator.pools.status import report, status_patch

CHAIN: tuple[Step[PoolScope], ...] = (delete_pool, ensure_finalizer, autoscale, declare, report)
"""The steps, in order, until one stops the chain."""

LAST: tuple[Step[PoolScope], ...] = (answered, ready_event, resized_event)
"""Run after the chain, always."""


async def reconcile_pool(body: Mapping[str, Any], deps: PoolDeps) -> Outcome:
    """Reconcile the Pool `body` (as the API server or its cache returned it) with battery."""
    scope = PoolScope(Pool.from_dict(body), deps, deps.clock.now())
    await run_chain(scope, CHAIN, LAST)
    outcome = scope.outcome
    outcome.status = status_patch(scope.pool, scope.status)
    return outcome


__all__ = ["CHAIN", "LAST", "PoolDeps", "reconcile_pool"]

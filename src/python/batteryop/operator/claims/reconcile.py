"""`reconcile_claim`: one reconcile of one MicroVMClaim, returned as an `Outcome` for the runtime.

The same shape as a Pool's (`batteryop.kube.chain`): a `ClaimScope`, the steps of `CHAIN`
in order until one stops it, then every step of `LAST`. Those two tuples are the order; each
step's module says what it owns and why it sits where it does, and `docs/operator.md` lists
them from here. A deleted claim's chain is `release` alone; a claim without the finalizer
gets only that (CL-001); a successful `bind` stops the chain so that no other battery call
comes before its status write (CL-002), and `after_bind` still adds what the cache alone
tells (the Exec Agent address, HostReady) to that same write.

The result is one Outcome: a status merge-patch (None when nothing changed), Events, a
finalizer to add or remove, a requeue. The runtime applies it in a fixed order
(`batteryop.kube.outcome`): the finalizer add alone, with the resourceVersion lock;
status, locked to the version read (CL-002); Events; the finalizer removal with the lock,
last (CL-020).

battery failures never raise out of here; they end the reconcile with Synced=False and a
requeue. A claim body the CRD would not admit raises `MalformedObjectError`: the runtime
retries it with its own backoff.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from batteryop.api.claim import MicroVMClaim
from batteryop.kube.chain import Step, run_chain
from batteryop.kube.outcome import Outcome
from batteryop.operator.claims.after_bind import after_bind
from batteryop.operator.claims.agent import agent_address
from batteryop.operator.claims.bind import bind
from batteryop.operator.claims.check_expiry import check_expiry
from batteryop.operator.claims.deps import ClaimDeps
from batteryop.operator.claims.expiry import expire_deleted
from batteryop.operator.claims.finalizer import ensure_finalizer
from batteryop.operator.claims.give_up import give_up
from batteryop.operator.claims.host_ready import host_ready
from batteryop.operator.claims.pending import pending
from batteryop.operator.claims.release import release
from batteryop.operator.claims.renew import renew
from batteryop.operator.claims.scope import ClaimScope
from batteryop.operator.claims.status import status_patch
from batteryop.operator.claims.synced import synced

_log = logging.getLogger(__name__)

CHAIN: tuple[Step[ClaimScope], ...] = (
    release,
    ensure_finalizer,
    give_up,
    bind,
    pending,
    expire_deleted,
    renew,
    check_expiry,
    agent_address,
    host_ready,
)
"""The steps, in order, until one stops the chain."""

LAST: tuple[Step[ClaimScope], ...] = (after_bind, synced)
"""Run after the chain, always; `synced` last."""


async def reconcile_claim(body: Mapping[str, Any], deps: ClaimDeps) -> Outcome:
    """Reconcile the MicroVMClaim `body` (as the API server or its cache returned it)."""
    scope = ClaimScope(MicroVMClaim.from_dict(body), deps, deps.clock.now())
    await run_chain(scope, CHAIN, LAST)
    outcome = scope.outcome
    outcome.status = status_patch(scope.claim.status, scope.status)
    return outcome


__all__ = ["CHAIN", "LAST", "ClaimDeps", "reconcile_claim"]

"""`reconcile_claim`: one reconcile of one MicroVMClaim, returned as an `Outcome` for the runtime.

The chain, in order (each step's module says what it owns and why it sits where it does):

1. `release.release` — a deleted claim: ReleaseVM, then the finalizer goes (CL-020..CL-022).
   For a deleted claim this is the whole chain.
2. `finalizer.ensure_finalizer` — a claim without the finalizer gets only that, and the
   reconcile ends there (CL-001).
3. `bind.bind` — ClaimVM for a claim with no Lease, its status write locked to the version
   read (CL-002, CL-008, CL-018, CL-060, CL-061, CL-063); on success the chain stops so the
   status write comes next.
4. `pending.pending` — why the claim is not bound, and the retry (CL-003, CL-004, CL-007,
   CL-062, CL-063).
5. `expiry.expire_deleted` — battery reported the MicroVM deleted (CL-013).
6. `renew.renew` — relay a pending renewal as a Heartbeat (CL-010, CL-011, CL-015, CL-019).
7. `check_expiry.check_expiry` — requeue at the expiry, or ListLeases once it is due
   (CL-012, CL-014, CL-016, CL-017, CL-032).
8. `agent.agent_address` — the Exec Agent address from the Node report (CL-005, CL-006).
9. `host_ready.host_ready` — HostReady from the Node report (CL-050..CL-053).
10. `synced.synced` — always last: Synced from this reconcile's battery call (CL-040..CL-042).

A step may stop the chain; `synced` runs anyway. The result is one Outcome: a status
merge-patch (None when nothing changed), Events, a finalizer to add or remove, a requeue. The
runtime applies it in a fixed order (`batteryop.operator.outcome`): the finalizer add alone,
with the resourceVersion lock; status, locked to the version read (CL-002);
Events; the finalizer removal with the lock, last (CL-020).

battery failures never raise out of here; they end the reconcile with Synced=False and a
requeue. A claim body the CRD would not admit raises `MalformedObjectError`: the runtime
retries it with its own backoff.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from batteryop.api.claim import MicroVMClaim
from batteryop.operator.claims.agent import agent_address
from batteryop.operator.claims.bind import bind
from batteryop.operator.claims.check_expiry import check_expiry
from batteryop.operator.claims.deps import ClaimDeps
from batteryop.operator.claims.expiry import expire_deleted
from batteryop.operator.claims.finalizer import ensure_finalizer
from batteryop.operator.claims.host_ready import host_ready
from batteryop.operator.claims.pending import pending
from batteryop.operator.claims.release import release
from batteryop.operator.claims.renew import renew
from batteryop.operator.claims.scope import ClaimScope
from batteryop.operator.claims.status import status_patch
from batteryop.operator.claims.synced import synced
from batteryop.operator.outcome import Outcome

_log = logging.getLogger(__name__)

Step = Callable[[ClaimScope], Awaitable[None]]

CHAIN: tuple[Step, ...] = (
    bind,
    pending,
    expire_deleted,
    renew,
    check_expiry,
    agent_address,
    host_ready,
)
"""The steps after release and the finalizer, in order; `synced` follows them all."""

AFTER_BIND: tuple[Step, ...] = (agent_address, host_ready)
"""Steps that read only the cache (the Node report), run in the reconcile that binds."""


async def reconcile_claim(body: Mapping[str, Any], deps: ClaimDeps) -> Outcome:
    """Reconcile the MicroVMClaim `body` (as the API server or its cache returned it)."""
    scope = ClaimScope(MicroVMClaim.from_dict(body), deps, deps.clock())
    await release(scope)
    if not scope.stopped:
        added = ensure_finalizer(scope.claim)
        if added is not None:
            return added  # CL-001: the finalizer alone, before anything else
    for step in CHAIN:
        if scope.stopped:
            break
        await step(scope)
    if scope.just_bound:
        # Cache-only steps: they call nothing, so the bind's status write stays the next
        # write and carries the agent address and HostReady too (one write instead of two).
        for step in AFTER_BIND:
            await step(scope)
    await synced(scope)
    outcome = scope.outcome
    outcome.status = status_patch(scope.claim.status, scope.status)
    return outcome


__all__ = ["AFTER_BIND", "CHAIN", "ClaimDeps", "Step", "reconcile_claim"]

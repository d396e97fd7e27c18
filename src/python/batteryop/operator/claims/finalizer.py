"""finalizer: the claim finalizer is stored before battery is ever asked for a MicroVM (CL-001).

A claim (not being deleted) without the claim finalizer gets an Outcome that only adds it,
and the reconcile ends there. The runtime writes it with the resourceVersion lock, caches the
write's answer and reconciles the claim again at once (the write's own watch event queues
nothing), so the next reconcile sees the finalizer stored. Only then may `bind`
call ClaimVM, on a read that carries the finalizer, and the bind's status write is locked to
exactly that version: so every Lease battery hands out is covered by a finalizer, and a
deleted claim always reaches `release`.
"""

from __future__ import annotations

from batteryop.api import names
from batteryop.operator.claims.scope import ClaimScope


async def ensure_finalizer(scope: ClaimScope) -> None:
    """Add the claim finalizer if the claim lacks it, and stop the chain there.

    Only for a claim that is not being deleted (`release` ends the chain of a deleted one).
    """
    if scope.claim.metadata.has_finalizer(names.CLAIM_FINALIZER):
        return
    scope.outcome.add_finalizer = names.CLAIM_FINALIZER  # CL-001: before any ClaimVM
    scope.stop()

"""Step 2, ensure the finalizer: stored before battery is ever asked for a MicroVM (CL-001).

A claim (not being deleted) without the claim finalizer gets an Outcome that only adds it,
and the reconcile ends there. The runtime writes it with the resourceVersion lock, caches the
write's answer and reconciles the claim again at once (the write's own watch event queues
nothing), so the next reconcile sees the finalizer stored. Only then may `bind`
call ClaimVM, and `bind` checks the finalizer on a fresh read, not the cache: so every Lease
battery hands out is covered by a finalizer, and a deleted claim always reaches `release`.
"""

from __future__ import annotations

from batteryop.api import names
from batteryop.api.claim import MicroVMClaim
from batteryop.operator.outcome import Outcome


def ensure_finalizer(claim: MicroVMClaim) -> Outcome | None:
    """An Outcome adding the claim finalizer if `claim` lacks it (stop there), else None."""
    if claim.metadata.has_finalizer(names.CLAIM_FINALIZER):
        return None
    return Outcome(add_finalizer=names.CLAIM_FINALIZER)  # CL-001: before any ClaimVM

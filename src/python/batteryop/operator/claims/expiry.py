"""expiry from events: a Bound claim whose MicroVM battery deleted is Expired (CL-013).

battery's Events stream reports every MicroVM it deletes (`VM_DELETED_DUE_TO_EXPIRY`,
`VM_DELETED_ON_RELEASE`, `VM_DELETED_ON_POOL_DELETE`). The runtime feeds each event to
`DeletedVMs.observe`, which remembers the MicroVM's uid for one hour on the injectable clock,
and queues the claims that record that uid. The next reconcile of such a claim, Bound and not
being deleted, sets phase Expired, Bound=False `LeaseExpired`, without calling battery.

Remembering rather than acting on the event alone covers an event that arrives before the
claim's binding is written: ClaimVM answered, the Lease expired or was released at once, and
the event came while the status write was still on its way. The binding lands, and the next
reconcile finds the uid remembered. An hour is far beyond that window; after an Operator
restart the stream replays battery's whole outbox, so the memory is rebuilt. What it misses,
`check_expiry` finds through ListLeases (CL-012).

`expire` is the one way any step expires a claim (CL-012, CL-013, CL-014): phase Expired,
Bound=False `LeaseExpired`, a Warning Event, and the chain stops. The expiry is always
battery's word (an event, NOT_FOUND, or ListLeases), never computed here (CL-011).
"""

from __future__ import annotations

from batteryop.api.conditions import ClaimConditionType, ClaimPhase, ClaimReason, EventType
from batteryop.operator.claims.deleted_vms import DELETION_EVENTS, REMEMBER_FOR, DeletedVMs
from batteryop.operator.claims.scope import ClaimScope

__all__ = ["DELETION_EVENTS", "REMEMBER_FOR", "DeletedVMs", "expire", "expire_deleted"]


def expire(scope: ClaimScope, message: str) -> None:
    """Phase Expired, Bound=False `LeaseExpired`, a Warning Event; the chain stops."""
    scope.update(phase=ClaimPhase.EXPIRED)
    scope.set_condition(ClaimConditionType.BOUND, False, ClaimReason.LEASE_EXPIRED, message)
    scope.event(EventType.WARNING, ClaimReason.LEASE_EXPIRED, message)
    scope.logger.info("Expired MicroVMClaim", extra=scope.log_extra(detail=message))
    scope.stop()


async def expire_deleted(scope: ClaimScope) -> None:
    """Expire a Bound claim whose MicroVM battery reported deleted (CL-013)."""
    if not scope.bound:
        return
    vm = scope.status.microvm_uid
    if vm is not None and vm in scope.deps.deleted_vms:
        expire(scope, f"battery deleted MicroVM {vm}; Lease {scope.status.lease_id} has ended")

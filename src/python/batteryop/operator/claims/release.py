"""release: a deleted claim gives its MicroVM back before its finalizer goes.

For a claim with a deletionTimestamp, and only for it, this step is the whole chain (then
`synced`); a deleting claim is never bound, renewed or expired:

- Without the claim finalizer: nothing to do (it was never ours to release, or is released).
- No lease id recorded: remove the finalizer without calling battery (CL-021). A Lease whose
  ClaimVM answer was lost is never adopted or released here (CL-008, CL-031); battery expires
  it on its own.
- Otherwise ReleaseVM(lease id). OK, or NOT_FOUND (battery no longer holds the Lease: it
  expired, or an earlier release succeeded): remove the finalizer, with a `Released` Event
  (CL-020). The runtime removes it last, after everything else in the Outcome is written.
- Failed in transit, including battery's UNAVAILABLE while flintlockd has not confirmed the
  deletion: keep the finalizer; `synced` sets Synced=False and queues a retry after the
  time since Synced changed, 1-30 s (CL-022). Any other error: the same with BatteryError.
"""

from __future__ import annotations

from batteryop.api import names
from batteryop.api.conditions import EventReason, EventType
from batteryop.battery.errors import BatteryError, BatteryNotFoundError
from batteryop.operator.claims.scope import ClaimScope


def _released(scope: ClaimScope, message: str) -> None:
    scope.outcome.remove_finalizer = names.CLAIM_FINALIZER  # CL-020, CL-021
    scope.event(EventType.NORMAL, EventReason.RELEASED, message)
    scope.logger.info("Released MicroVMClaim", extra=scope.log_extra(detail=message))


async def release(scope: ClaimScope) -> None:
    """Release a deleted claim's Lease; stops the chain for every deleted claim."""
    claim = scope.claim
    if not claim.metadata.deleting:
        return
    scope.stop()  # a deleting claim is never bound, renewed or expired
    if not claim.metadata.has_finalizer(names.CLAIM_FINALIZER):
        return
    lease_id = scope.status.lease_id
    if lease_id is None:
        scope.outcome.remove_finalizer = names.CLAIM_FINALIZER  # CL-021: nothing to release
        return
    try:
        await scope.deps.battery.release_vm(lease_id)
    except BatteryNotFoundError as err:
        scope.answered(err.rpc, err)
        _released(scope, f"battery no longer holds Lease {lease_id}")  # CL-020
        return
    except BatteryError as err:
        scope.failed(err)  # CL-022: the finalizer stays; synced backs off
        scope.logger.warning(
            "battery did not release MicroVMClaim's Lease",
            extra=scope.log_extra(lease=lease_id, error=str(err)),
        )
        return
    scope.answered("ReleaseVM")
    vm = scope.status.microvm_uid or "(unknown)"
    _released(scope, f"battery released Lease {lease_id} and deletes MicroVM {vm}")

"""synced: always run, after the chain: Synced reports this reconcile's battery call
(CL-040, CL-041, CL-042).

Only when the reconcile called battery (a claim that needed no call keeps Synced as it was):

- battery answered, successfully or with an answer a step acted on (NOT_FOUND,
  RESOURCE_EXHAUSTED, ABORTED): Synced=True `Synced` (CL-042).
- The call failed in transit: Synced=False `BatteryUnavailable` (CL-040).
- Any other error (INVALID_ARGUMENT, INTERNAL, FAILED_PRECONDITION, ...): Synced=False
  `BatteryError` with battery's message (CL-041).

A released claim (its finalizer about to go) gets no Synced write: the finalizer's removal
deletes it. The phase is never changed here. While Synced is False the claim is queued again
after the time since Synced changed, clamped to 1-30 s, unless a step already asked for a retry
(a Pending claim's wait is measured from Bound instead). A Warning Event is posted when Synced
turns False or its reason changes.
"""

from __future__ import annotations

from batteryop.api.conditions import ClaimConditionType, ClaimReason, ConditionStatus, EventType
from batteryop.battery.errors import (
    BatteryNotFoundError,
    BatteryPoolExhaustedError,
    BatteryUnavailableError,
    ClaimAbortedError,
)
from batteryop.kube.outcome import backoff_since
from batteryop.operator.claims.scope import ClaimScope

ANSWERS = (BatteryNotFoundError, BatteryPoolExhaustedError, ClaimAbortedError)
"""Errors that are battery's answer about the claim, acted on by a step: Synced stays True."""


async def synced(scope: ClaimScope) -> None:
    """Report the reconcile's battery call as Synced; back off while it failed."""
    call = scope.call
    if call is None:
        return
    error = call.error
    if error is None or isinstance(error, ANSWERS):
        if scope.claim.metadata.deleting:
            # A deleting claim's one battery call is its release, and answered, its finalizer
            # goes (`release`): that write deletes the claim. Writing Synced before it would be
            # one more request per claim for an object then gone.
            return
        scope.set_condition(  # CL-042
            ClaimConditionType.SYNCED, True, ClaimReason.SYNCED, f"battery answered {call.rpc}"
        )
        return
    if isinstance(error, BatteryUnavailableError):
        reason = ClaimReason.BATTERY_UNAVAILABLE  # CL-040
    else:
        reason = ClaimReason.BATTERY_ERROR  # CL-041
    before = scope.condition(ClaimConditionType.SYNCED)
    condition = scope.set_condition(ClaimConditionType.SYNCED, False, reason, str(error))
    if before is None or before.status != ConditionStatus.FALSE or before.reason != reason:
        scope.event(EventType.WARNING, reason, str(error))
    if scope.outcome.requeue_after is None:
        scope.outcome.requeue(backoff_since(condition, scope.now))

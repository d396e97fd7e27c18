"""pending: a claim `bind` could not bind stays Pending, says why, and retries.

Takes `bind`'s `PendingCause` and writes phase Pending with Bound=False and its reason:

- `PoolExhausted`: ClaimVM found no available MicroVM (CL-003).
- `PoolNotFound`: the Pool does not exist, in Kubernetes or in battery (CL-004, CL-063).
- `PoolDeleting`: the Pool is being deleted; ClaimVM was not called (CL-063).
- `BatteryUnavailable`: ClaimVM failed in transit (CL-007).
- `ClaimAborted`: battery answered ABORTED, the Lease of an earlier ClaimVM for this claim is
  being released (CL-062).
- `HostCordoned`: every ClaimVM answer was on a cordoned Host and was given back, or giving
  one back failed (CL-103, CL-104).
- `LeasedFromAnotherPool`: the first Pool of the claim's list answered that battery leased
  the claim from another of them, which could not be asked (CL-107).

With `spec.fallbackPoolRefs` the reason is about the whole list: `PoolExhausted` if any Pool
was only out of MicroVMs, else the first Pool's, and the message names each Pool (CL-106).

The retry waits the time the claim has already been pending, measured from Bound's
lastTransitionTime and clamped to 1-30 s, so the wait grows while the claim waits and an
Operator restart does not reset it; no later than the claim's `spec.waitForCapacity`
deadline (`give_up`, CL-110). A MicroVM made available wakes a waiting claim sooner
(CL-109). A Warning Event is posted when the reason changes, not on
every retry. The chain stops here: an unbound claim has nothing to renew or check.
"""

from __future__ import annotations

from batteryop.api.conditions import ClaimConditionType, ClaimPhase, ConditionStatus, EventType
from batteryop.kube.outcome import backoff_since
from batteryop.operator.claims.scope import ClaimScope


async def pending(scope: ClaimScope) -> None:
    """Write why the claim is still Pending and queue the retry; stop the chain."""
    cause = scope.pending
    if cause is None:
        return
    before = scope.condition(ClaimConditionType.BOUND)
    scope.update(phase=ClaimPhase.PENDING)
    bound = scope.set_condition(ClaimConditionType.BOUND, False, cause.reason, cause.message)
    if before is None or before.status != ConditionStatus.FALSE or before.reason != cause.reason:
        scope.event(EventType.WARNING, cause.reason, cause.message)
        scope.logger.info(
            "MicroVMClaim is pending",
            extra=scope.log_extra(reason=str(cause.reason), detail=cause.message),
        )
    scope.outcome.requeue(backoff_since(bound, scope.now))  # retry with backoff
    deadline = scope.capacity_deadline
    if deadline is not None:  # CL-110: fail on time, whatever the backoff
        scope.outcome.requeue(max(0.0, (deadline - scope.now).total_seconds()))
    scope.stop()

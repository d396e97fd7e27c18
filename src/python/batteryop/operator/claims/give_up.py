"""give up: a claim not Bound within `spec.waitForCapacity` of its creation fails (CL-110).

Runs for a claim whose spec sets `waitForCapacity`, with no Lease recorded, neither Expired nor
Failed, and not being deleted (`ClaimScope.capacity_deadline`). Once its creationTimestamp plus
waitForCapacity has passed, it writes phase `Failed`, Bound False with reason
`CapacityTimeout` and a message that keeps why the claim was waiting (the Bound condition's
last message), posts a Warning Event, gives up the claim's place among the ClaimVM waiters
and stops the chain: `bind` never calls ClaimVM for a Failed claim. The claim stays, Failed,
until its owner deletes it (the client deletes it at once). Before the deadline, `pending`
queues the next retry no later than it, so the claim fails on time even at a 30 s backoff.

The deadline is the API server's creationTimestamp plus the duration, read against the
operator's clock: the two machines' clock skew shifts it. A ClaimVM whose answer was lost
before the claim failed leaves a Lease no claim records; battery lets it expire (CL-031).
"""

from __future__ import annotations

from batteryop.api.conditions import ClaimConditionType, ClaimPhase, ClaimReason, EventType
from batteryop.api.times import format_duration
from batteryop.operator.claims.scope import ClaimScope


async def give_up(scope: ClaimScope) -> None:
    """Fail the claim once its capacity deadline has passed; see the module docstring."""
    deadline = scope.capacity_deadline
    if deadline is None or scope.now < deadline:
        return
    waited = scope.claim.spec.wait_for_capacity
    assert waited is not None  # a deadline needs it
    before = scope.condition(ClaimConditionType.BOUND)
    why = f": {before.message}" if before is not None and before.message else ""
    message = f"not Bound within spec.waitForCapacity ({format_duration(waited)}){why}"
    scope.update(phase=ClaimPhase.FAILED)
    scope.set_condition(ClaimConditionType.BOUND, False, ClaimReason.CAPACITY_TIMEOUT, message)
    scope.event(EventType.WARNING, ClaimReason.CAPACITY_TIMEOUT, message)
    scope.logger.info("MicroVMClaim failed", extra=scope.log_extra(reason=message))
    scope.deps.claim_slots.forget((scope.claim.namespace, scope.claim.name))
    scope.stop()

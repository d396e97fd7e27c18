"""bind: ClaimVM for a claim with no Lease, guarded, and the Lease recorded at once.

Runs for a claim (not being deleted, finalizer stored) whose status records no lease id.

ClaimVM hands out a MicroVM. Since battery v0.4.0 it is idempotent per request id, and the
request id is the claim's `metadata.uid` (CL-060): a retry after a lost answer, or after an
Operator restart before the status was written, gets the same Lease and MicroVM back, never a
second one (CL-061). The guard:

1. The claim as read from the cache, with no GET: its status records no lease id and it
   carries the stored finalizer (CL-001; `finalizer` adds it first otherwise, and a claim
   being deleted never gets here, `release` ends its chain). The decision rests on that
   version, so the status write that records the Lease is locked to its resourceVersion
   (as every status write is, `Outcome`): it lands only if the API server still holds
   exactly what was read. Whatever the cache missed (a deletion, a claim deleted and made
   again under the name, a binding written by an earlier Operator process that landed after this one
   listed) refuses the write with a conflict instead of being overwritten, and the next
   reconcile decides again on the newer body (ClaimVM for the same uid answers the same
   Lease, CL-061). What the lock cannot undo is a ClaimVM made on a stale read of a claim
   being deleted: that Lease stays unrecorded and battery lets it expire (CL-031). The
   fresh GET this replaces left the same window open between its read and ClaimVM, and
   its unlocked write could land on a claim deleted and made again meanwhile (a uid in a
   status merge-patch guards nothing: `kube/client_test.py`).
2. The Pools, from the cache (`deps.pool`): `spec.poolRef`'s, then `spec.fallbackPoolRefs`' in
   order (CL-106). Each absent one is `PoolNotFound`, each being deleted `PoolDeleting`, and
   ClaimVM is not called on it (CL-063; a Bound claim is not affected, it never gets here).
   When that leaves none, the claim is Pending with the reason of the first (`_none_served`).
   Known race, accepted: a Pool deleted between this read and ClaimVM can still lease a
   MicroVM, which then holds the Pool's deletion like any Bound claim.
3. Take a ClaimVM slot (`deps.claim_slots`); if none is free, queue again after the slot wait
   and end, so the worker serves renewals meanwhile (CL-018). One slot serves the whole list.
4. For each Pool in that order, ClaimVM(Pool, request_id = uid), through
   `cordoned.claim_off_cordoned`, until one leases a MicroVM. The walk goes on to the next Pool
   only on an answer that says this Pool leased the claim nothing: RESOURCE_EXHAUSTED,
   NOT_FOUND, and (with a list) INVALID_ARGUMENT, which battery answers when the request id
   already holds a Lease on another Pool (BA-102, CL-107). So one MicroVM per claim holds
   across the list too: after a lost answer or a restart the walk starts again at the first
   Pool, and the Pool that leased the claim earlier is the only one that answers it, with
   the same Lease; no status write is needed before moving on. The Lease's Pool is written as
   `status.poolRef` (RS-104); when it is not the first, the Bound message and a
   `BoundFromFallback` Event name it and why each Pool before it did not serve (CL-108).
   Each call goes through `cordoned.claim_off_cordoned`: an answer on a Host
   whose cached Node is cordoned is given back with ReleaseVM and claimed again, a few times
   at most (CL-103; the one battery call before the status write that CL-002 allows). On
   success write the lease id, MicroVM uid, Host name as node name, bind time,
   observedRenewTime = spec.renewTime (so the bind itself is not taken for a renewal) and no
   expiry, phase Bound, Bound=True (CL-002), and only an id from this
   answer (CL-008), in the locked write; then stop the chain: no other battery call comes
   before the status write (only the cache-only agent-address and HostReady steps add to it, see `reconcile`). Until
   it lands, the Lease exists only in battery: that window is what CL-061 closes, and
   stopping keeps it as short as a reconcile can. The claim comes back as soon as the write
   landed (`EXPIRY_READ_DELAY_SECONDS`, zero) to read its expiry (CL-016): a client and the
   Exec Agent count the claim usable from the bind's write only for a short grace
   (`ClaimStatus.lease_good_until`), and after it only with the expiry recorded.
5. No Pool of the list leased a MicroVM (each exhausted, missing or answering for another):
   handed to `pending` (CL-003, CL-004), with `_none_served`'s reason. In transit, ABORTED,
   only cordoned Hosts or a failed give-back end the walk on that Pool and are handed to
   `pending` as well (CL-007, CL-062, CL-103, CL-104): none of them says the Pool is out of
   MicroVMs, and an in-transit ClaimVM may have leased one. Any other error: the phase stays,
   `synced` reports BatteryError and backs off.
"""

from __future__ import annotations

from batteryop.api import names
from batteryop.api.conditions import (
    ClaimConditionType,
    ClaimPhase,
    ClaimReason,
    EventReason,
    EventType,
)
from batteryop.api.meta import ObjectMeta
from batteryop.battery.errors import (
    BatteryError,
    BatteryNotFoundError,
    BatteryPoolExhaustedError,
    BatteryUnavailableError,
    ClaimAbortedError,
    InvalidArgumentError,
)
from batteryop.battery.models import ClaimedVM
from batteryop.operator.claims.cordoned import (
    CordonedHostsError,
    GiveBackFailedError,
    claim_off_cordoned,
)
from batteryop.operator.claims.scope import FINAL_PHASES, ClaimScope, PendingCause
from batteryop.operator.keys import PoolKey

EXPIRY_READ_DELAY_SECONDS = 0.0
"""How long after the bind's write a claim's Lease expiry is read from battery (CL-016).

Zero: at once. Claims that bind together still share ListLeases calls without waiting: the
work queue serves the binds already due first, and `LeaseReads` lets one call serve every
claim that asked while the call before it ran. (It was one second, which every client paid on
every claim while a claim counted usable only once its expiry was recorded; it must stay well
inside `UNREAD_EXPIRY_GRACE`, after which the Exec Agent waits for the expiry again.)"""


def _refusal(scope: ClaimScope) -> str | None:
    """Why the claim as read forbids ClaimVM, or None if it allows it."""
    if scope.claim.metadata.deleting:
        return "the claim is being deleted"
    if not scope.claim.metadata.has_finalizer(names.CLAIM_FINALIZER):
        return "the claim's finalizer is not stored yet"  # CL-001
    return None


def _pool_blocks_bind(scope: ClaimScope, pool: PoolKey) -> PendingCause | None:
    """PoolNotFound or PoolDeleting from the cached Pool (CL-004, CL-063), else None."""
    body = scope.deps.pool(pool.namespace, pool.name)
    if body is None:
        return PendingCause(ClaimReason.POOL_NOT_FOUND, f"Pool {pool.name} does not exist")
    if ObjectMeta.from_dict(body.get("metadata")).deleting:
        return PendingCause(  # CL-063: no ClaimVM on a Pool being deleted
            ClaimReason.POOL_DELETING,
            f"Pool {pool.name} is being deleted; no MicroVM is claimed from it",
        )
    return None


def _none_served(passed: list[PendingCause]) -> PendingCause:
    """Why no Pool of the list served (CL-106): PoolExhausted if any was only out of
    MicroVMs (capacity may come), else the first Pool's reason; the message names each."""
    if len(passed) == 1:
        return passed[0]
    reasons = [p.reason for p in passed]
    first = ClaimReason.POOL_EXHAUSTED if ClaimReason.POOL_EXHAUSTED in reasons else reasons[0]
    return PendingCause(first, "; ".join(p.message for p in passed))


def _wait_for_slot(scope: ClaimScope) -> None:
    """CL-018: every ClaimVM slot is busy; leave the worker to renewals, come back later
    (at once when a slot frees: the slots wake their first waiter)."""
    scope.outcome.requeue(scope.deps.claim_slots.retry_after)
    scope.stop()


async def bind(scope: ClaimScope) -> None:
    """Claim a MicroVM for an unbound claim; see the module docstring for the guard."""
    if scope.status.lease_id is not None or scope.status.phase in FINAL_PHASES:
        return
    waiter = (scope.claim.namespace, scope.claim.name)
    refusal = _refusal(scope)
    if refusal is not None:
        scope.logger.debug("Skipped ClaimVM", extra=scope.log_extra(reason=refusal))
        scope.deps.claim_slots.forget(waiter)  # its place or reserved slot goes to the next
        scope.stop()
        return
    if scope.deps.claim_slots.queue_if_full(waiter):  # CL-018
        _wait_for_slot(scope)
        return

    blocked = {pool: _pool_blocks_bind(scope, pool) for pool in scope.pools}
    if all(blocked.values()):  # no Pool to call ClaimVM on
        scope.deps.claim_slots.forget(waiter)
        scope.pending = _none_served([cause for cause in blocked.values() if cause])
        return

    more = len(blocked) > 1
    passed: list[PendingCause] = []  # why each Pool before the one that serves did not
    with scope.deps.claim_slots.try_acquire(waiter) as acquired:
        if not acquired:  # taken during the read
            _wait_for_slot(scope)
            return
        for pool, cause in blocked.items():  # CL-106: in the claim's order
            if cause is None:
                answer = await _claim_from(scope, pool, more)
                if answer is None:  # the chain ends on this Pool's answer
                    return
                if isinstance(answer, ClaimedVM):
                    _bound(scope, pool, answer, passed)
                    return
                cause = answer
            passed.append(cause)
    scope.pending = _none_served(passed)


async def _claim_from(
    scope: ClaimScope, pool: PoolKey, more: bool
) -> ClaimedVM | PendingCause | None:
    """ClaimVM on `pool` (through `claim_off_cordoned`): the MicroVM; or, when battery said
    for sure that this Pool leases the claim nothing, why (the next Pool may serve); or None
    when the chain ends on this answer (`scope.pending` or the failure set). `more`: the
    claim names more than one Pool, so battery may hold its Lease on another (CL-107)."""
    given_back: list[ClaimedVM] = []
    try:
        claimed = await claim_off_cordoned(  # CL-060, CL-103
            scope.deps.battery,
            pool.ref,
            request_id=scope.claim.metadata.uid,
            node=scope.deps.node,
            given_back=given_back,
        )
    except CordonedHostsError as err:
        scope.answered("ReleaseVM")
        scope.pending = PendingCause(ClaimReason.HOST_CORDONED, str(err))  # CL-103
        return None
    except GiveBackFailedError as err:
        scope.failed(err.error)
        scope.pending = PendingCause(ClaimReason.HOST_CORDONED, str(err))  # CL-104
        return None
    except BatteryPoolExhaustedError as err:
        scope.answered(err.rpc, err)  # CL-003
        return PendingCause(
            ClaimReason.POOL_EXHAUSTED, f"Pool {pool.name} has no available MicroVM"
        )
    except BatteryNotFoundError as err:
        scope.answered(err.rpc, err)  # CL-004
        return PendingCause(ClaimReason.POOL_NOT_FOUND, f"battery does not hold Pool {pool.name}")
    except InvalidArgumentError as err:
        if not more:
            _failed(scope, err)
            return None
        # CL-107: battery holds a Lease for this request id on another Pool (BA-102), one
        # whose answer was lost; that Pool, later in the list, answers it again.
        scope.answered(err.rpc)
        return PendingCause(
            ClaimReason.LEASED_FROM_ANOTHER_POOL,
            f"Pool {pool.name} is not the Pool battery leased this claim from ({err.message})",
        )
    except ClaimAbortedError as err:
        scope.answered(err.rpc, err)
        scope.pending = PendingCause(  # CL-062
            ClaimReason.CLAIM_ABORTED,
            "battery is still releasing the MicroVM an earlier ClaimVM for this claim "
            f"leased; retrying: {err.message}",
        )
        return None
    except BatteryUnavailableError as err:
        scope.failed(err)
        scope.pending = PendingCause(ClaimReason.BATTERY_UNAVAILABLE, str(err))  # CL-007
        return None
    except BatteryError as err:
        _failed(scope, err)
        return None
    finally:
        for back in given_back:
            scope.logger.info(
                "Gave back a MicroVM on a cordoned Host",
                extra=scope.log_extra(microvm=back.vm_uid, node=back.host.name),
            )
    return claimed


def _failed(scope: ClaimScope, err: BatteryError) -> None:
    """CL-041: any other ClaimVM error leaves the phase; `synced` backs off."""
    scope.failed(err)
    scope.logger.warning("ClaimVM failed", extra=scope.log_extra(error=str(err)))
    scope.stop()


def _bound(
    scope: ClaimScope, pool: PoolKey, claimed: ClaimedVM, passed: list[PendingCause]
) -> None:
    """Record the Lease `pool` answered, in the one locked write, and stop the chain."""
    scope.answered("ClaimVM")
    node = claimed.host.name
    message = f"MicroVM {claimed.vm_uid} on Node {node} is leased to this claim"
    if passed:  # CL-108: which Pool served, and why the ones before it did not
        message = (
            f"MicroVM {claimed.vm_uid} on Node {node} of fallback Pool {pool.name} is leased "
            f"to this claim: {'; '.join(p.message for p in passed)}"
        )
    scope.update(  # CL-002, CL-008: only what this claim's own ClaimVM answered
        phase=ClaimPhase.BOUND,
        pool_name=pool.name,  # RS-104
        lease_id=claimed.lease_id,
        microvm_uid=claimed.vm_uid,
        node_name=node,
        bound_time=scope.now,
        lease_expires_at=None,
        observed_renew_time=scope.claim.spec.renew_time,
    )
    scope.set_condition(ClaimConditionType.BOUND, True, ClaimReason.BOUND, message)
    if passed:
        scope.event(EventType.NORMAL, EventReason.BOUND_FROM_FALLBACK, message)
    elif scope.deps.bind_events:
        scope.event(EventType.NORMAL, ClaimReason.BOUND, message)
    scope.logger.info(
        "Bound MicroVMClaim",
        extra=scope.log_extra(
            lease=claimed.lease_id, microvm=claimed.vm_uid, node=node, pool=pool.name
        ),
    )
    scope.just_bound = True
    # CL-016: the expiry is read from battery next, once this write landed; claims binding
    # at once share the ListLeases calls (`LeaseReads`).
    scope.outcome.requeue(EXPIRY_READ_DELAY_SECONDS)
    # No other battery call before the status write (CL-002); only the cache-only steps
    # (agent address, HostReady) may still add to that one write.
    scope.stop()

"""check expiry: a Bound claim's Lease read back from battery when its expiry is due
(CL-012, CL-014, CL-016, CL-017, CL-032).

For a Bound claim, not being deleted, with no renewal pending (a pending renewal is `renew`'s
and would extend the Lease):

- `leaseExpiresAt` in the future: nothing to ask; queue the claim for when it passes (CL-032).
  Unless the claim is marked in `deps.lease_checks` (battery connected again, CL-030): then
  the Lease is read now, as below, and the mark goes once battery answered. A marked claim
  takes the answer of a ListLeases of its Pool that started after it was marked, when one
  came already (`LeaseChecks.shared`): one call per Pool checks a whole restart's claims.
- Absent (just bound) or passed: ListLeases for the claim's Pool (shared with the other
  checks of that Pool, `lease_reads`), and look for the recorded lease id (CL-016); only that
  Lease is ever read, never one the claim did not record (CL-008). When the Pool's newest
  answer, at most `lease_reads.RECENT_SECONDS` old, lists the Lease with an expiry ahead, that
  answer serves (`LeaseReads.recent`); not listed, or listed as expired, always asks anew.
  - Not listed: battery released or expired it: Expired, `LeaseExpired` (CL-012).
  - Listed with an expiry that has passed: Expired too, even if battery's sweeper has not yet
    removed it (CL-014).
  - Listed with a future expiry: write it as `leaseExpiresAt` and queue the claim for then
    (CL-016, CL-032). The requeue uses battery's exact time, not the status field, which
    Kubernetes keeps to the second.
- In transit: stay Bound with the expiry as it is; `synced` queues a retry (CL-017). Another
  error: the same, as BatteryError (CL-041).

So a Holder that stops renewing sees its claim Expired once battery's expiry passes, by
battery's word only (CL-011).
"""

from __future__ import annotations

from datetime import datetime

from batteryop.battery.errors import BatteryError, BatteryUnavailableError
from batteryop.battery.models import find_lease
from batteryop.operator.claims.expiry import expire
from batteryop.operator.claims.scope import ClaimScope


def _until(scope: ClaimScope, when: datetime) -> float:
    return max(0.0, (when - scope.now).total_seconds())


async def check_expiry(scope: ClaimScope) -> None:
    """Requeue at the recorded expiry, or read the Lease from battery once it is due."""
    lease_id = scope.status.lease_id
    checks = scope.deps.lease_checks
    key = (scope.claim.namespace, scope.claim.name)
    if not scope.bound or lease_id is None:
        if checks is not None:
            checks.done(key)  # nothing of battery's to check any more
        return
    if scope.renewal_pending:
        return
    recorded = scope.status.lease_expires_at
    forced = checks is not None and checks.due(key)  # CL-030: battery (re)connected
    if recorded is not None and recorded > scope.now and not forced:
        scope.outcome.requeue(_until(scope, recorded))  # CL-032
        return
    shared = checks.shared(key, scope.pool.ref) if forced and checks is not None else None
    recent = None if forced else scope.deps.recently_listed(scope.pool.ref, lease_id)
    if shared is not None:
        # CL-030: a ListLeases that started after this claim was marked already answered.
        lease = find_lease(shared, lease_id)
        scope.answered("ListLeases")
    elif recent is not None and recent.expires_at > scope.now:
        # A moment-old answer lists this Lease, expiry ahead: CL-016 from it (`LeaseReads`).
        lease = recent
        scope.answered("ListLeases")
    else:
        marks = checks.asking() if checks is not None else 0
        try:
            leases = await scope.deps.list_leases(scope.pool.ref)  # CL-016
        except BatteryUnavailableError as err:
            scope.failed(err)  # CL-017: keep Bound; retry with backoff
            return
        except BatteryError as err:
            scope.failed(err)  # CL-041
            scope.stop()
            return
        scope.answered("ListLeases")
        if checks is not None:
            checks.keep(scope.pool.ref, marks, leases)
        lease = find_lease(leases, lease_id)
    if checks is not None:
        checks.done(key)
    if lease is None:
        expire(scope, f"battery no longer holds Lease {lease_id}")  # CL-012
        return
    if lease.expires_at <= scope.now:
        expire(scope, f"Lease {lease_id} expired at {lease.expires_at.isoformat()}")  # CL-014
        return
    scope.update(lease_expires_at=lease.expires_at)  # CL-016: battery's expiry
    scope.outcome.requeue(_until(scope, lease.expires_at))  # CL-032

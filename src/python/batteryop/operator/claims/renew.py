"""renew: the Holder's renewal relayed to battery as a Heartbeat (CL-010, CL-011,
CL-015, CL-019).

The Holder renews by writing `spec.renewTime`; `status.observedRenewTime` is the last value
relayed. While they differ (a renewal is pending) and the claim is Bound, not being deleted:

- Heartbeat, for the lease id this claim's status records and no other (CL-019).
- Success: battery's new expiry as `leaseExpiresAt` and the relayed `renewTime` as
  `observedRenewTime`, in the same status write (CL-010); the expiry is battery's answer,
  never computed (CL-011). `check_expiry` then queues the claim for when it passes.
- NOT_FOUND: battery no longer holds the Lease: Expired, `LeaseExpired` (CL-012).
- In transit: the claim stays Bound with the expiry it had, the renewal stays pending, and
  `synced` queues a retry after the time since Synced changed, 1-30 s (CL-015).
- Another error: the same, reported as BatteryError (CL-041); the chain stops.

A renewal is relayed, so the controller's latency eats into the Lease: the Holder renews well
inside the Pool's expiry threshold (the Pool's heartbeat interval says how often).
"""

from __future__ import annotations

from batteryop.battery.errors import BatteryError, BatteryNotFoundError, BatteryUnavailableError
from batteryop.operator.claims.expiry import expire
from batteryop.operator.claims.scope import ClaimScope


async def renew(scope: ClaimScope) -> None:
    """Relay a pending renewal of a Bound claim to battery."""
    lease_id = scope.status.lease_id
    if not scope.bound or lease_id is None or not scope.renewal_pending:
        return
    try:
        expires_at = await scope.deps.battery.heartbeat(lease_id)  # CL-019: the recorded Lease
    except BatteryNotFoundError as err:
        scope.answered(err.rpc, err)
        expire(scope, f"battery no longer holds Lease {lease_id}")  # CL-012
        return
    except BatteryUnavailableError as err:
        scope.failed(err)  # CL-015: keep Bound and the expiry; retry with backoff
        scope.logger.warning(
            "Heartbeat failed in transit", extra=scope.log_extra(lease=lease_id, error=str(err))
        )
        return
    except BatteryError as err:
        scope.failed(err)  # CL-041
        scope.logger.warning(
            "Heartbeat failed", extra=scope.log_extra(lease=lease_id, error=str(err))
        )
        scope.stop()
        return
    scope.answered("Heartbeat")
    scope.update(  # CL-010, CL-011: battery's expiry and the relayed renewal, one write
        lease_expires_at=expires_at,
        observed_renew_time=scope.claim.spec.renew_time,
    )

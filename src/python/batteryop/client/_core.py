"""Every IO-free step of the client: the bodies it writes and how it reads what comes back.

`_async.py` does the IO and calls these; nothing here touches the network, a clock or a loop
(times are passed in), so each rule is tested with plain dicts (`_core_test.py`).

Requirements: CC-001 (claim and Secret bodies), CC-002 (the TokenRequest body), CC-003 (when a
claim counts as Bound, and what it returns), CC-004 (the pending reason), CC-010 (the renewal
patch and the heartbeat interval), CC-011 (when a token is due for refresh), CC-012 (when the
lease counts as lost), CC-013 (when the Host counts as not ready).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from batteryop.api import names
from batteryop.api.claim import MicroVMClaim
from batteryop.api.conditions import ClaimConditionType, ClaimPhase, ConditionStatus
from batteryop.api.errors import MalformedObjectError
from batteryop.api.lease import DEFAULT_HEARTBEAT_INTERVAL, pool_lease
from batteryop.api.times import format_duration, format_micro_time, parse_time
from batteryop.client._models import ClaimInfo, Pending

TOKEN_REQUEST_API_VERSION: Final = "authentication.k8s.io/v1"
MIN_REFRESH_DELAY: Final = timedelta(seconds=1)
"""A token is never refreshed sooner than this after it was issued."""
REFRESH_FRACTION: Final = 2 / 3
"""A token is refreshed once this share of its lifetime has passed (CC-011)."""


def claim_body(
    namespace: str,
    pool: str,
    holder: str,
    *,
    name: str | None = None,
    generate_name: str | None = None,
    labels: Mapping[str, str] | None = None,
    fallback_pools: Sequence[str] = (),
    wait_for_capacity: timedelta | None = None,
) -> dict[str, Any]:
    """A new MicroVMClaim on `pool` for the Holder ServiceAccount `holder` (CC-001), falling
    back to `fallback_pools` in order (CC-116), failing if not Bound within
    `wait_for_capacity` (CC-117).

    Without `name`, the server picks one from `generate_name` (default `<pool>-`).
    """
    if not pool:
        raise ValueError("a claim needs a Pool")
    if not holder:
        raise ValueError("a claim needs a Holder ServiceAccount")
    metadata: dict[str, Any] = {"namespace": namespace}
    if name:
        metadata["name"] = name
    else:
        metadata["generateName"] = generate_name or f"{pool}-"
    if labels:
        metadata["labels"] = dict(labels)
    spec: dict[str, Any] = {"poolRef": {"name": pool}, "serviceAccountName": holder}
    if fallback_pools:
        spec["fallbackPoolRefs"] = [{"name": p} for p in fallback_pools]
    if wait_for_capacity is not None:
        spec["waitForCapacity"] = format_duration(wait_for_capacity)
    return {
        "apiVersion": names.API_VERSION,
        "kind": names.CLAIM_KIND,
        "metadata": metadata,
        "spec": spec,
    }


def exec_secret_body(claim_name: str, claim_uid: str, namespace: str) -> dict[str, Any]:
    """The empty Secret `<claim>-exec`, owned by the claim, that tokens are bound to (CC-001).

    The owner reference carries the claim's uid, so the Secret goes with this claim and
    cannot be adopted by a later claim of the same name.
    """
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": names.exec_secret_name(claim_name),
            "namespace": namespace,
            "ownerReferences": [
                {
                    "apiVersion": names.API_VERSION,
                    "kind": names.CLAIM_KIND,
                    "name": claim_name,
                    "uid": claim_uid,
                }
            ],
        },
    }


def token_request_body(secret_name: str, secret_uid: str, seconds: int) -> dict[str, Any]:
    """A TokenRequest for the Exec Agent's audience, bound to the Secret by name and uid
    (CC-002): the token dies with the Secret, hence with the claim."""
    return {
        "apiVersion": TOKEN_REQUEST_API_VERSION,
        "kind": "TokenRequest",
        "spec": {
            "audiences": [names.EXEC_AGENT_AUDIENCE],
            "expirationSeconds": seconds,
            "boundObjectRef": {
                "apiVersion": "v1",
                "kind": "Secret",
                "name": secret_name,
                "uid": secret_uid,
            },
        },
    }


@dataclass(frozen=True)
class Token:
    """A bound token and when it is due for refresh (CC-011). `value` is never printed."""

    value: str
    issued_at: datetime
    expires_at: datetime

    def __repr__(self) -> str:
        return f"Token(issued_at={self.issued_at}, expires_at={self.expires_at})"

    @property
    def refresh_at(self) -> datetime:
        """Two thirds into its life (never sooner than a second after issue)."""
        lifetime = self.expires_at - self.issued_at
        return self.issued_at + max(lifetime * REFRESH_FRACTION, MIN_REFRESH_DELAY)

    def due(self, now: datetime) -> bool:
        return now >= self.refresh_at


def read_token(answer: Mapping[str, Any], issued_at: datetime) -> Token:
    """The token of a TokenRequest answer."""
    status = answer.get("status") or {}
    value = status.get("token")
    expires = status.get("expirationTimestamp")
    if not isinstance(value, str) or not value or not isinstance(expires, str):
        raise MalformedObjectError("status.token", "the TokenRequest answer carries no token")
    return Token(value=value, issued_at=issued_at, expires_at=parse_time(expires))


def renew_patch(claim_uid: str, now: datetime) -> dict[str, Any]:
    """The merge patch that renews (CC-010): `spec.renewTime` now. The uid makes the patch
    fail on a claim re-created under the same name instead of renewing someone else's."""
    return {"metadata": {"uid": claim_uid}, "spec": {"renewTime": format_micro_time(now)}}


def heartbeat_interval(pool_body: Mapping[str, Any] | None) -> timedelta:
    """The Pool's `spec.lease.heartbeatInterval` (the CRD's default when unreadable)."""
    if not pool_body:
        return DEFAULT_HEARTBEAT_INTERVAL
    try:
        interval = pool_lease(pool_body).heartbeat_interval
    except MalformedObjectError:
        return DEFAULT_HEARTBEAT_INTERVAL
    return interval if interval > timedelta(0) else DEFAULT_HEARTBEAT_INTERVAL


def parse_claim(body: Mapping[str, Any]) -> MicroVMClaim:
    return MicroVMClaim.from_dict(body)


def pending(claim: MicroVMClaim) -> Pending | None:
    """Why a claim that is not Bound waits: its Bound condition's reason and message (CC-004)."""
    cond = claim.status.condition(ClaimConditionType.BOUND)
    if cond is None or cond.status == ConditionStatus.TRUE:
        return None
    return Pending(reason=cond.reason, message=cond.message)


def is_bound(claim: MicroVMClaim, now: datetime) -> bool:
    """Bound, with the MicroVM and Node a caller needs (CC-003), and a Lease the Exec Agent
    counts as unexpired at `now` (EA-013, `ClaimStatus.lease_good_until`): from the bind's own
    status write, so a caller does not wait for the expiry the operator reads back from battery
    after it (CL-016); once that grace passed, only with the expiry recorded (a claim handed
    over then would fail its first exec)."""
    s = claim.status
    good_until = s.lease_good_until()
    return (
        s.phase == ClaimPhase.BOUND
        and bool(s.microvm_uid)
        and bool(s.node_name)
        and good_until is not None
        and good_until > now
    )


def lost_reason(claim: MicroVMClaim | None, uid: str) -> str | None:
    """Why the claim `uid` no longer holds its lease ("claim NAME <reason>"), or None while it
    does (CC-012).

    `claim` is the latest body read under the claim's name (None: not found).
    """
    if claim is None:
        return "was deleted"
    if claim.metadata.uid != uid:
        return "was deleted and re-created by someone else"
    if claim.metadata.deleting:
        return "is being deleted"
    if claim.status.phase == ClaimPhase.EXPIRED:
        cond = claim.status.condition(ClaimConditionType.BOUND)
        detail = f": {cond.message}" if cond is not None and cond.message else ""
        return f"lost its lease (Expired){detail}"
    return None


def failed(claim: MicroVMClaim) -> str | None:
    """Why the claim failed (phase Failed: not Bound within spec.waitForCapacity, CC-117),
    or None while it has not."""
    if claim.status.phase != ClaimPhase.FAILED:
        return None
    cond = claim.status.condition(ClaimConditionType.BOUND)
    return cond.message if cond is not None else "not Bound within spec.waitForCapacity"


def host_not_ready(claim: MicroVMClaim) -> tuple[str, str] | None:
    """(reason, message) when the claim's HostReady condition is False, else None (CC-013)."""
    cond = claim.status.condition(ClaimConditionType.HOST_READY)
    if cond is None or cond.status != ConditionStatus.FALSE:
        return None
    return cond.reason, cond.message


def claim_info(claim: MicroVMClaim) -> ClaimInfo:
    s = claim.status
    return ClaimInfo(
        name=claim.metadata.name,
        namespace=claim.metadata.namespace,
        uid=claim.metadata.uid,
        pool=claim.serving_pool,
        holder=claim.spec.service_account_name,
        phase=str(s.phase) if s.phase is not None else ClaimPhase.PENDING.value,
        microvm_uid=s.microvm_uid,
        node_name=s.node_name,
        agent_address=s.agent_address,
        lease_expires_at=s.lease_expires_at,
        deleting=claim.metadata.deleting,
    )

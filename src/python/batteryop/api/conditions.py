"""Condition types, reasons, phases and event reasons, and the pure helpers that set conditions.

Every value is a `StrEnum` member, so it is the string Kubernetes stores and compares equal to
it. `set_condition` and `find_condition` work on tuples of `Condition` and never mutate.

Requirements: RS-013 (Pool conditions Ready and Exhausted), RS-024 (claim phases and Bound),
PO-004, PO-012, PO-021, PO-022, PO-043 (Pool reasons), PO-041 (HookFailed), CL-003, CL-004,
CL-007, CL-012, CL-062, CL-063 (Bound reasons), CL-040..CL-042 (Synced), CL-005, CL-006
(AgentAvailable), CL-050..CL-053 (HostReady). The Node report and CSR reasons are spelled
here for the Exec Agent and the CSR approver, which cite their own requirements.

Not defined, on purpose: the Pool reasons `Draining` (PO-034, withdrawn in v0.4.1: battery
drains a deleted Pool itself) and `NotFilling` (a workaround for battery v0.3.3 never
re-seeding a Pool; battery v0.4.0 fills every strategy at start and retries every tick). The
whole reseed workaround is therefore not built; the waivers below say why, one per requirement.
"""

# waive(PO-035): battery v0.4.0 refills every strategy itself (BA-075), so no Pool stalls
# waive(PO-036): no reseed is needed: battery v0.4.0 seeds each Pool when its reconciler starts
# waive(PO-037): with no reseed (PO-036 waived) there is no reseed wait to grow or reset
# waive(PO-038): battery v0.4.0 tops up after claims and deletions (BA-076); no reseed deadline
# waive(PO-039): `NotFilling` only reported battery v0.3.3 failing to reseed; v0.4.0 reseeds
# waive(PO-040): no `NotFilling` reason (PO-039 waived), so there is no message to compose

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Final

from batteryop.api._compat import StrEnum
from batteryop.api._fields import Fields
from batteryop.api.times import format_time, truncate_to_seconds

MAX_MESSAGE_LENGTH: Final = 32768
"""Longest condition message the CRDs accept (metav1.Condition's limit)."""

MAX_REASON_LENGTH: Final = 1024
"""Longest condition reason the CRDs accept."""

_REASON = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


# --- Pool ------------------------------------------------------------------------------------


class PoolConditionType(StrEnum):
    READY = "Ready"
    """Whether battery holds the Pool at its size on eligible Hosts (PO-022)."""
    EXHAUSTED = "Exhausted"
    """Whether a claim would find no available MicroVM right now (PO-021)."""
    AUTOSCALING = "Autoscaling"
    """A Pool with spec.autoscaling: True, and why the policy chose status.size (RS-108)."""


class PoolReason(StrEnum):
    # Ready
    AT_SIZE = "AtSize"
    """Ready=True: available + leased + provisioning reach the size."""
    BELOW_SIZE = "BelowSize"
    """Ready=False: battery holds fewer MicroVMs than the size."""
    NOT_IN_BATTERY = "NotInBattery"
    """Ready=False: battery does not hold the Pool (yet)."""
    NO_ELIGIBLE_HOST = "NoEligibleHost"
    """Ready=False: the node selector matches no Host (PO-012)."""
    REJECTED = "Rejected"
    """Ready=False: battery refused the spec; the message is battery's (PO-004)."""
    DELETION_BLOCKED = "DeletionBlocked"
    """Ready=False: deleting, and battery refuses while MicroVMs are leased (PO-043)."""
    # Exhausted
    NONE_AVAILABLE = "NoneAvailable"
    """Exhausted=True: size > 0 and battery reports none available."""
    AVAILABLE = "Available"
    """Exhausted=False: at least one MicroVM is available."""
    SIZE_ZERO = "SizeZero"
    """Exhausted=False: the Pool's size is 0."""
    # Autoscaling (RS-108): the term of the policy that decided the size.
    MIN_IDLE = "MinIdle"
    """The warm buffer, spec.autoscaling.minIdle, decided the size."""
    CLAIM_RATE = "ClaimRate"
    """The claims made in the last window, more than minIdle, decided the size."""
    CLAIMS_WAITING = "ClaimsWaiting"
    """Claims waiting for a MicroVM (Pending, none available) added to the size."""
    MAX_SIZE = "MaxSize"
    """The wanted size was above spec.autoscaling.maxSize: the size is the ceiling."""
    IDLE = "Idle"
    """No claim made or waiting for spec.autoscaling.scaleToZeroAfter: the size is 0."""
    HELD = "Held"
    """The policy wants a smaller size, but the last change is younger than the window."""


# --- MicroVMClaim ----------------------------------------------------------------------------


class ClaimPhase(StrEnum):
    """Where a claim is in its life. There is no Released phase: a released claim is gone."""

    PENDING = "Pending"
    BOUND = "Bound"
    EXPIRED = "Expired"
    FAILED = "Failed"
    """No Pool of its list leased it a MicroVM within `spec.waitForCapacity` (CL-110); final."""


class ClaimConditionType(StrEnum):
    BOUND = "Bound"
    """Whether the claim holds a Lease on a MicroVM."""
    SYNCED = "Synced"
    """Whether the last battery call of the last reconcile got an answer (CL-040..042)."""
    AGENT_AVAILABLE = "AgentAvailable"
    """Whether the Exec Agent address of the claim's Host is known (CL-005, CL-006)."""
    HOST_READY = "HostReady"
    """The Exec Agent's report on the claim's Host; never changes the phase."""


class ClaimReason(StrEnum):
    # Bound
    BOUND = "Bound"
    """Bound=True: battery leased a MicroVM to this claim (CL-002)."""
    POOL_EXHAUSTED = "PoolExhausted"
    """Bound=False while Pending: no warm MicroVM (CL-003)."""
    POOL_NOT_FOUND = "PoolNotFound"
    """Bound=False while Pending: the Pool does not exist (CL-004, CL-063)."""
    POOL_DELETING = "PoolDeleting"
    """Bound=False while Pending: the Pool is being deleted, so no ClaimVM (CL-063)."""
    CLAIM_ABORTED = "ClaimAborted"
    """Bound=False while Pending: battery answered ABORTED (CL-062)."""
    HOST_CORDONED = "HostCordoned"
    """Bound=False while Pending: ClaimVM answered only on cordoned Hosts (CL-103, CL-104)."""
    BATTERY_UNAVAILABLE = "BatteryUnavailable"
    """Bound=False while Pending, or Synced=False: a call failed in transit (CL-007, CL-040)."""
    LEASED_FROM_ANOTHER_POOL = "LeasedFromAnotherPool"
    """Bound=False while Pending: ClaimVM on the first Pool of the claim's list answered that
    battery leased the claim from another of them (BA-102), which could not be asked (CL-107)."""
    CAPACITY_TIMEOUT = "CapacityTimeout"
    """Bound=False in phase Failed: not bound within spec.waitForCapacity (CL-110)."""
    LEASE_EXPIRED = "LeaseExpired"
    """Bound=False in phase Expired: battery no longer holds the Lease (CL-012..CL-014)."""
    # Synced
    SYNCED = "Synced"
    """Synced=True: battery answered (CL-042)."""
    BATTERY_ERROR = "BatteryError"
    """Synced=False: battery answered with an error no other reason names (CL-041)."""
    # AgentAvailable
    AGENT_ADDRESS_PUBLISHED = "AgentAddressPublished"
    """AgentAvailable=True: the Host's Node report carries the Exec Agent's address."""
    NO_AGENT_ADDRESS = "NoAgentAddress"
    """AgentAvailable=False: the Node report has no address (CL-006)."""
    # HostReady (otherwise the Node report's own reason, see HostReportReason)
    NODE_NOT_FOUND = "NodeNotFound"
    """HostReady=False: the claim's Host has no Node."""
    NO_NODE_REPORT = "NoNodeReport"
    """HostReady=False: the Node carries no Exec Agent report."""
    NODE_NOT_READY = "NodeNotReady"
    """HostReady=False: the Node's own Ready condition is not True, whatever the Exec Agent's
    report says (its kubelet stopped reporting, or reports the Node not ready; CL-105)."""
    HOST_NOT_READY = "HostNotReady"
    """HostReady=False: the report said not ready with an empty or invalid reason."""
    READY = "Ready"
    """HostReady=True: the report said ready with an empty or invalid reason."""


class HostReportReason(StrEnum):
    """The Exec Agent's Node report reasons, in the order it checks them (first failing wins)."""

    HOST_IMAGE_NOT_READY = "HostImageNotReady"
    KVM_UNAVAILABLE = "KVMUnavailable"
    THIN_POOL_MISSING = "ThinPoolMissing"
    FLINTLOCKD_NOT_READY = "FlintlockdNotReady"
    EXEC_DISABLED = "ExecDisabled"
    READY = "Ready"


# --- Events and CSRs -------------------------------------------------------------------------


class EventType(StrEnum):
    """Kubernetes Event types."""

    NORMAL = "Normal"
    WARNING = "Warning"


class EventReason(StrEnum):
    HOOK_FAILED = "HookFailed"
    """Warning on a Pool: battery reported VM_HOOK_FAILED for one of its MicroVMs (PO-041)."""
    RELEASED = "Released"
    """Normal, on a deleted claim: battery released its Lease and the finalizer goes (CL-020).
    One of two claim Events with no condition behind it; the others reuse `ClaimReason`."""
    RESIZED = "Resized"
    """Normal, on a Pool with spec.autoscaling: the policy changed the size battery holds, and
    why (RS-108)."""
    BOUND_FROM_FALLBACK = "BoundFromFallback"
    """Normal, on a claim: a Pool of spec.fallbackPoolRefs served it, and why the Pools before
    it did not (CL-108). Posted whether or not Bound Events are."""


class CSRCondition(StrEnum):
    """Condition types of a CertificateSigningRequest (Kubernetes' own)."""

    APPROVED = "Approved"
    DENIED = "Denied"
    FAILED = "Failed"


class CSRReason(StrEnum):
    """Reasons of the CSR approver's Approved, Denied and Failed conditions."""

    EXEC_AGENT_OWN_NODE = "ExecAgentOwnNode"
    """Approved: the Exec Agent asked for a certificate for its own Node."""
    REQUESTER_NOT_EXEC_AGENT = "RequesterNotExecAgent"
    REQUESTER_NODE_MISSING = "RequesterNodeMissing"
    NODE_NOT_FOUND = "NodeNotFound"
    INVALID_REQUEST = "InvalidRequest"
    KEY_USAGES_MISMATCH = "KeyUsagesMismatch"
    SUBJECT_ALT_NAMES_MISMATCH = "SubjectAltNamesMismatch"
    UNKNOWN_SIGNER_NAME = "UnknownSignerName"
    ADDRESS_PINNED = "AddressPinned"
    CLIENT_SIGNED_ON_HOST = "ClientCertificatesSignedOnHost"
    """Denied (CT-102): a `flintlockd-client` request; each Host's Exec Agent signs its own
    flintlockd client certificate with its Host's CA (EA-126), the cluster signs none."""


# --- Conditions ------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeReadiness:
    """A Node's own `Ready` condition, as its kubelet (or the node lifecycle controller, when
    the kubelet stops reporting) writes it."""

    status: str
    """`True`, `False` or `Unknown`."""
    reason: str
    message: str

    @property
    def ready(self) -> bool:
        return self.status == "True"


def node_readiness(node: Mapping[str, Any] | None) -> NodeReadiness | None:
    """The Node's `Ready` condition; None for no Node, or a Node that has none (yet)."""
    status = (node or {}).get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    for condition in conditions if isinstance(conditions, list) else []:
        if isinstance(condition, Mapping) and condition.get("type") == "Ready":
            return NodeReadiness(
                str(condition.get("status") or "Unknown"),
                str(condition.get("reason") or ""),
                str(condition.get("message") or ""),
            )
    return None


def is_valid_reason(reason: str) -> bool:
    """Whether the CRDs accept `reason` (CamelCase identifier, at most 1024 characters)."""
    return len(reason) <= MAX_REASON_LENGTH and _REASON.match(reason) is not None


@dataclass(frozen=True)
class Condition:
    """One `metav1.Condition`. `last_transition_time` has whole seconds, as stored."""

    type: str
    status: ConditionStatus
    reason: str
    message: str
    last_transition_time: datetime
    observed_generation: int | None = None

    @property
    def is_true(self) -> bool:
        return self.status is ConditionStatus.TRUE

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], path: str = "conditions") -> Condition:
        f = Fields(data, path)
        return cls(
            type=f.string("type"),
            status=f.choice("status", ConditionStatus),
            reason=f.string("reason"),
            message=f.opt_string("message") or "",
            last_transition_time=f.time("lastTransitionTime"),
            observed_generation=f.opt_integer("observedGeneration"),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": self.type,
            "status": str(self.status),
            "reason": self.reason,
            "message": self.message,
            "lastTransitionTime": format_time(self.last_transition_time),
        }
        if self.observed_generation is not None:
            out["observedGeneration"] = self.observed_generation
        return out


def parse_conditions(items: Sequence[Fields]) -> tuple[Condition, ...]:
    return tuple(Condition.from_dict(f.data, f.path) for f in items)


def find_condition(conditions: Sequence[Condition], type: str) -> Condition | None:
    """The condition of `type`, or None."""
    for condition in conditions:
        if condition.type == type:
            return condition
    return None


def set_condition(
    conditions: Sequence[Condition],
    type: str,
    status: ConditionStatus | bool,
    reason: str,
    message: str,
    now: datetime,
    observed_generation: int | None = None,
) -> tuple[Condition, ...]:
    """`conditions` with the condition of `type` set; the others keep their order.

    The transition time is `now` (to the second) when the status changes or the condition is
    new, and stays as it was when only the reason, message or generation change. A message
    longer than the CRDs allow is cut to fit.
    """
    if isinstance(status, bool):
        status = ConditionStatus.TRUE if status else ConditionStatus.FALSE
    if not is_valid_reason(reason):
        raise ValueError(f"condition {type}: invalid reason {reason!r}")
    new = Condition(
        type=type,
        status=ConditionStatus(status),
        reason=reason,
        message=message[:MAX_MESSAGE_LENGTH],
        last_transition_time=truncate_to_seconds(now),
        observed_generation=observed_generation,
    )
    out: list[Condition] = []
    found = False
    for existing in conditions:
        if existing.type != type:
            out.append(existing)
            continue
        found = True
        if existing.status == new.status:
            new = replace(new, last_transition_time=existing.last_transition_time)
        out.append(new)
    if not found:
        out.append(new)
    return tuple(out)

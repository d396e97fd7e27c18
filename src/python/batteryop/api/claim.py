"""A MicroVMClaim as frozen dataclasses, parsed from and rendered to its Kubernetes body.

The Consumer writes the spec (the Pool, the Holder, and `renewTime` to renew); only the Claim
controller writes the status. `MicroVMClaim.from_dict(c.to_dict()) == c` for every claim.

Requirements: RS-020 (poolRef), RS-021 (serviceAccountName), RS-023 (renewTime), RS-024 (the
status), CL-010 (a renewal is pending while spec.renewTime differs from the one last relayed),
RS-103 (fallbackPoolRefs), RS-104 (status.poolRef: the Pool that serves the claim), EA-013
(`ClaimStatus.lease_good_until`: how long a Bound claim counts as unexpired).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

from batteryop.api import names
from batteryop.api._fields import Fields
from batteryop.api.conditions import (
    ClaimConditionType,
    ClaimPhase,
    Condition,
    find_condition,
    parse_conditions,
)
from batteryop.api.lease import MIN_EXPIRY_THRESHOLD
from batteryop.api.meta import Named, ObjectMeta, read_object, write_object
from batteryop.api.times import format_duration, format_micro_time, format_time


@dataclass(frozen=True)
class ClaimSpec:
    pool_name: str
    """spec.poolRef.name: a Pool in the claim's namespace. Immutable."""
    service_account_name: str
    """The Holder: the ServiceAccount, in the claim's namespace, that may use the MicroVM."""
    renew_time: datetime | None = None
    """Set by the Holder to renew the Lease (a MicroTime)."""
    fallback_pool_names: tuple[str, ...] = ()
    """spec.fallbackPoolRefs[].name: Pools to lease from, in order, when `pool_name` cannot
    serve (RS-103, CL-106). Immutable."""
    wait_for_capacity: timedelta | None = None
    """spec.waitForCapacity: how long after its creation the claim may wait to be Bound before
    it fails (RS-105, CL-110); None: it waits until deleted."""

    @property
    def pool_names(self) -> tuple[str, ...]:
        """Every Pool the claim may lease from, in the order they are tried."""
        return (self.pool_name, *self.fallback_pool_names)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, path: str = "spec") -> ClaimSpec:
        f = Fields(data, path)
        return cls(
            pool_name=f.obj("poolRef").string("name"),
            service_account_name=f.string("serviceAccountName"),
            renew_time=f.opt_time("renewTime"),
            fallback_pool_names=tuple(r.string("name") for r in f.obj_list("fallbackPoolRefs")),
            wait_for_capacity=f.opt_duration("waitForCapacity"),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "poolRef": {"name": self.pool_name},
            "serviceAccountName": self.service_account_name,
        }
        if self.fallback_pool_names:
            out["fallbackPoolRefs"] = [{"name": name} for name in self.fallback_pool_names]
        if self.wait_for_capacity is not None:
            out["waitForCapacity"] = format_duration(self.wait_for_capacity)
        if self.renew_time is not None:
            out["renewTime"] = format_micro_time(self.renew_time)
        return out


CLOCK_MARGIN: Final = timedelta(milliseconds=500)
"""How far the clock of a Host judging a claim may differ from the operator's."""
UNREAD_EXPIRY_GRACE: Final = MIN_EXPIRY_THRESHOLD - CLOCK_MARGIN
"""How long after `status.boundTime` a Bound claim whose Lease expiry is not recorded yet
counts as unexpired (EA-013; `ClaimStatus.lease_good_until`)."""


@dataclass(frozen=True)
class ClaimStatus:
    """battery's answer to the claim. Times are battery's or the controller's, never computed."""

    phase: ClaimPhase | None = None
    pool_name: str | None = None
    """status.poolRef.name: the Pool the Lease is from, written with it (RS-104, CL-108)."""
    lease_id: str | None = None
    microvm_uid: str | None = None
    """status.microVM.uid."""
    node_name: str | None = None
    """status.host.nodeName: the Host's Node, which is battery's Host name."""
    agent_address: str | None = None
    """status.host.agentAddress: `host:port` of the Host's Exec Agent."""
    bound_time: datetime | None = None
    lease_expires_at: datetime | None = None
    observed_renew_time: datetime | None = None
    """The spec.renewTime last relayed to battery (a MicroTime)."""
    conditions: tuple[Condition, ...] = ()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, path: str = "status") -> ClaimStatus:
        f = Fields(data or {}, path)
        vm = f.opt_obj("microVM")
        host = f.obj_or_empty("host")
        phase = f.opt_string("phase")
        return cls(
            phase=None if phase is None else f.choice("phase", ClaimPhase),
            pool_name=pool.string("name") if (pool := f.opt_obj("poolRef")) else None,
            lease_id=f.opt_string("leaseID"),
            microvm_uid=vm.string("uid") if vm else None,
            node_name=host.opt_string("nodeName"),
            agent_address=host.opt_string("agentAddress"),
            bound_time=f.opt_time("boundTime"),
            lease_expires_at=f.opt_time("leaseExpiresAt"),
            observed_renew_time=f.opt_time("observedRenewTime"),
            conditions=parse_conditions(f.obj_list("conditions")),
        )

    def to_dict(self) -> dict[str, Any]:
        """The set fields, and `conditions` always (a status write sends the whole list)."""
        out: dict[str, Any] = {}
        if self.phase is not None:
            out["phase"] = str(self.phase)
        if self.pool_name is not None:
            out["poolRef"] = {"name": self.pool_name}
        if self.lease_id is not None:
            out["leaseID"] = self.lease_id
        if self.microvm_uid is not None:
            out["microVM"] = {"uid": self.microvm_uid}
        host: dict[str, Any] = {}
        if self.node_name is not None:
            host["nodeName"] = self.node_name
        if self.agent_address is not None:
            host["agentAddress"] = self.agent_address
        if host:
            out["host"] = host
        if self.bound_time is not None:
            out["boundTime"] = format_time(self.bound_time)
        if self.lease_expires_at is not None:
            out["leaseExpiresAt"] = format_time(self.lease_expires_at)
        if self.observed_renew_time is not None:
            out["observedRenewTime"] = format_micro_time(self.observed_renew_time)
        out["conditions"] = [c.to_dict() for c in self.conditions]
        return out

    def condition(self, type: ClaimConditionType) -> Condition | None:
        return find_condition(self.conditions, type)

    def lease_good_until(self) -> datetime | None:
        """Until when the claim's Lease is known to be unexpired (EA-013): battery's expiry once
        the operator recorded it (CL-016); before that, `UNREAD_EXPIRY_GRACE` after the bind;
        None when neither is recorded (nothing says the Lease lives).

        Why the bind time bounds the expiry: `status.boundTime` is the start of the reconcile
        that called ClaimVM, written in whole seconds (rounded down), so no later than the
        moment battery made the Lease. battery, the operator's sidecar and so on its clock, set
        the Lease's expiry to that moment plus the Pool's expiryThreshold, at least
        `MIN_EXPIRY_THRESHOLD` (PO-104, BA-003). So the Lease lives until boundTime + 2 s at
        least, and the grace leaves `CLOCK_MARGIN` of that for the judging Host's clock. The
        one case it does not cover: ClaimVM replaying a Lease made by an earlier reconcile
        whose answer was lost (CL-061) made it before this boundTime; the operator reads the
        expiry right after the bind (CL-016), so that window is one ListLeases and one write.
        """
        if self.lease_expires_at is not None:
            return self.lease_expires_at
        if self.bound_time is not None:
            return self.bound_time + UNREAD_EXPIRY_GRACE
        return None


@dataclass(frozen=True)
class MicroVMClaim(Named):
    metadata: ObjectMeta
    spec: ClaimSpec
    status: ClaimStatus = field(default_factory=ClaimStatus)

    @property
    def exec_secret_name(self) -> str:
        """The Secret the Holder's tokens are bound to."""
        return names.exec_secret_name(self.metadata.name)

    @property
    def serving_pool(self) -> str:
        """The Pool the claim's Lease is from once Bound (`status.poolRef`), else the Pool it
        names first; a claim bound before status.poolRef existed reads `spec.poolRef`."""
        return self.status.pool_name or self.spec.pool_name

    @property
    def holder(self) -> str:
        """The Holder's Kubernetes user name, as TokenReview reports it."""
        return f"system:serviceaccount:{self.metadata.namespace}:{self.spec.service_account_name}"

    @property
    def renewal_pending(self) -> bool:
        """Whether the Holder renewed since the controller last relayed a renewal (CL-010)."""
        return self.spec.renew_time != self.status.observed_renew_time

    @classmethod
    def from_dict(cls, body: Mapping[str, Any]) -> MicroVMClaim:
        return cls(*read_object(body, names.CLAIM_KIND, ClaimSpec.from_dict, ClaimStatus.from_dict))

    def to_dict(self) -> dict[str, Any]:
        """The whole body; `status` only when it is not the empty status."""
        status = None if self.status == ClaimStatus() else self.status.to_dict()
        return write_object(names.CLAIM_KIND, self.metadata, self.spec.to_dict(), status)

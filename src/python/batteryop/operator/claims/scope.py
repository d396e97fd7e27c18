"""`ClaimScope`: the working state of one claim reconcile, shared by the steps of the chain.

A scope holds the claim as read (`claim`, the base the status patch is computed from), the
working status the steps replace (`status`), the `Outcome` being built (events, finalizer,
requeue), the one battery call this reconcile made (`call`, which `synced` reports), and
whether the chain has stopped. Steps never write to the API server and never raise for a
battery failure: they record it here and the chain goes on to `synced`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from batteryop.api.claim import ClaimStatus, MicroVMClaim
from batteryop.api.conditions import (
    ClaimConditionType,
    ClaimPhase,
    ClaimReason,
    Condition,
    find_condition,
    set_condition,
)
from batteryop.battery.errors import BatteryError
from batteryop.kube.chain import Scope
from batteryop.operator.claims.deps import ClaimDeps
from batteryop.operator.keys import PoolKey


@dataclass(frozen=True)
class BatteryCall:
    """The battery call a reconcile made: its RPC name and, if it failed, the error."""

    rpc: str
    error: BatteryError | None = None


FINAL_PHASES = frozenset({ClaimPhase.EXPIRED, ClaimPhase.FAILED})
"""Phases a claim never leaves but by its deletion."""


@dataclass(frozen=True)
class PendingCause:
    """Why a claim is not bound yet: the Bound condition's reason and message."""

    reason: ClaimReason
    message: str


@dataclass
class ClaimScope(Scope):
    claim: MicroVMClaim
    deps: ClaimDeps
    now: datetime
    status: ClaimStatus = field(init=False)
    call: BatteryCall | None = None
    pending: PendingCause | None = None
    just_bound: bool = False

    def __post_init__(self) -> None:
        self.status = self.claim.status

    # --- reading -------------------------------------------------------------------------------

    @property
    def logger(self) -> logging.Logger | logging.LoggerAdapter[Any]:
        return self.deps.logger

    @property
    def pool(self) -> PoolKey:
        """The Pool the claim's Lease is from (`status.poolRef`, RS-104), else the first it
        names (`spec.poolRef`), in the claim's namespace (`.ref` in battery)."""
        return PoolKey(self.claim.namespace, self.status.pool_name or self.claim.spec.pool_name)

    @property
    def capacity_deadline(self) -> datetime | None:
        """When a claim that sets `spec.waitForCapacity` and is not Bound fails (CL-110):
        creationTimestamp plus that duration; None for any other claim (one with a Lease, an
        Expired or Failed one, one being deleted)."""
        wait = self.claim.spec.wait_for_capacity
        created = self.claim.metadata.creation_timestamp
        if wait is None or created is None or self.claim.metadata.deleting:
            return None
        if self.status.lease_id is not None or self.status.phase in FINAL_PHASES:
            return None
        return created + wait

    @property
    def pools(self) -> tuple[PoolKey, ...]:
        """Every Pool the claim may lease from, in the order `bind` tries them (CL-106)."""
        return tuple(PoolKey(self.claim.namespace, n) for n in self.claim.spec.pool_names)

    @property
    def bound(self) -> bool:
        """Bound to a recorded Lease and not being deleted: the renewal and expiry steps' case."""
        return (
            self.status.phase is ClaimPhase.BOUND
            and self.status.lease_id is not None
            and not self.claim.metadata.deleting
        )

    @property
    def renewal_pending(self) -> bool:
        """The Holder renewed since the last renewal relayed to battery (CL-010)."""
        return self.claim.spec.renew_time != self.status.observed_renew_time

    def condition(self, type: ClaimConditionType) -> Condition | None:
        return find_condition(self.status.conditions, type)

    def log_extra(self, **extra: Any) -> dict[str, Any]:
        return {"claim": f"{self.claim.namespace}/{self.claim.name}", **extra}

    # --- writing -------------------------------------------------------------------------------

    def update(self, **changes: Any) -> None:
        """Replace fields of the working status."""
        self.status = replace(self.status, **changes)

    def set_condition(
        self, type: ClaimConditionType, status: bool, reason: str, message: str
    ) -> Condition:
        """Set a condition on the working status (transition time kept while status holds)."""
        generation = self.claim.metadata.generation or None
        conditions = set_condition(
            self.status.conditions, type, status, reason, message, self.now, generation
        )
        self.status = replace(self.status, conditions=conditions)
        found = find_condition(conditions, type)
        assert found is not None
        return found

    def answered(self, rpc: str, error: BatteryError | None = None) -> None:
        """battery answered `rpc` (with an error a step handled, or none)."""
        self.call = BatteryCall(rpc, error)

    def failed(self, error: BatteryError) -> None:
        """A battery call failed; `synced` tells in-transit failures from the others."""
        self.call = BatteryCall(error.rpc, error)

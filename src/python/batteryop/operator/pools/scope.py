"""`PoolScope`: the working state of one Pool reconcile, shared by the steps of the chain.

As `claims.scope.ClaimScope` for a claim: the Pool as read (`pool`, the base the status patch
is computed from), the working status the steps replace (`status`), the `Outcome` being
built, what battery holds after `declare` (`declared`), the size to give battery (`sizing`, from `autoscale`), the battery failure no step acted on
(`error`, which `answered` reports) and whether the chain has stopped. Steps never write to
the API server and never raise for a battery failure.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from batteryop.api.conditions import PoolReason
from batteryop.api.pool import Pool, PoolStatus
from batteryop.battery import models as battery
from batteryop.battery.errors import BatteryError
from batteryop.kube.chain import Scope
from batteryop.operator.keys import PoolKey
from batteryop.operator.pools.deps import PoolDeps


@dataclass(frozen=True)
class Declared:
    """What battery holds after `declare`, for `status` to report."""

    held: battery.Pool | None
    """battery's Pool (spec and counts) as last answered; None if battery does not hold it."""
    observed_generation: int | None
    """The generation battery has accepted: the Pool's own once battery took its spec."""
    selected: tuple[str, ...]
    """The Hosts the selector picks (PO-010); battery's `flintlock_hosts` if none published."""
    hosts_published: bool = True
    """False while the host registry has published no Host set (nothing was sent)."""
    rejected: str | None = None
    """battery's message when it refused the spec (PO-004)."""


@dataclass(frozen=True)
class Sizing:
    """The size `declare` gives battery (`autoscale`): spec.size, or the policy's with the term
    that decided it (RS-108, PO-107)."""

    size: int
    reason: PoolReason | None = None
    """The Autoscaling condition's reason; None for a Pool without a policy."""
    message: str = ""
    recheck: datetime | None = None
    """When the policy's answer could change with no event."""


@dataclass
class PoolScope(Scope):
    pool: Pool
    deps: PoolDeps
    now: datetime
    status: PoolStatus = field(init=False)
    sizing: Sizing | None = None
    declared: Declared | None = None
    error: BatteryError | None = None

    def __post_init__(self) -> None:
        self.status = self.pool.status

    @property
    def key(self) -> PoolKey:
        return PoolKey(self.pool.namespace, self.pool.name)

    @property
    def logger(self) -> logging.Logger | logging.LoggerAdapter[Any]:
        return self.deps.logger

    def failed(self, error: BatteryError) -> None:
        """battery did not answer, or answered with an error no step acts on: stop here;
        `answered` reports it."""
        self.error = error
        self.stop()

"""`ClaimDeps`: what a claim reconcile uses besides the claim body, shared by every reconcile.

Its own module so that the scope the steps share (`scope`) and the chain (`reconcile`) both
import it and neither imports the other.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from batteryop.api.clock import Clock
from batteryop.battery.models import Lease, PoolRef
from batteryop.battery.protocol import BatteryAPI
from batteryop.operator.claims.deleted_vms import DeletedVMs
from batteryop.operator.claims.lease_checks import LeaseChecks
from batteryop.operator.claims.lease_reads import LeaseReads
from batteryop.operator.claims.slots import ClaimSlots

_log = logging.getLogger("batteryop.operator.claims.reconcile")


@dataclass
class ClaimDeps:
    """What a claim reconcile uses besides the claim body.

    One is shared by every reconcile of the controller:

    - `battery`: battery's API (`BatteryClient` in production).
    - `pool`: the cached Pool body by namespace and name, or None (CL-004, CL-063).
    - `node`: the cached Node body by name, or None (CL-005, CL-006, CL-050..CL-053).
    - `claim_slots`: the bound on concurrent ClaimVM calls (CL-018).
    - `deleted_vms`: MicroVM uids battery's Events reported deleted (CL-013).
    - `clock`: now, timezone-aware; read once per reconcile.
    - `lease_reads`: ListLeases shared by the expiry checks of one Pool (`LeaseReads`);
      None calls `battery` directly.
    - `lease_checks`: Bound claims to check against battery's Leases at once, whatever
      their recorded expiry (CL-030, `LeaseChecks`); None checks only expired ones.
    - `bind_events`: record a Normal `Bound` Event as a claim binds (`--bind-events`); the
      `Bound` condition records the bind either way.
    """

    battery: BatteryAPI
    pool: Callable[[str, str], Mapping[str, Any] | None]
    node: Callable[[str], Mapping[str, Any] | None]
    claim_slots: ClaimSlots
    deleted_vms: DeletedVMs
    clock: Clock
    logger: logging.Logger | logging.LoggerAdapter[Any] = _log
    lease_reads: LeaseReads | None = None
    lease_checks: LeaseChecks | None = None
    bind_events: bool = False

    async def list_leases(self, pool: PoolRef) -> Sequence[Lease]:
        """battery's Leases of `pool` (CL-016), through `lease_reads` when there is one."""
        if self.lease_reads is not None:
            return await self.lease_reads.list_leases(pool)
        return await self.battery.list_leases(pool)

    def recently_listed(self, pool: PoolRef, lease_id: str) -> Lease | None:
        """The Lease as a ListLeases of `pool` listed it a moment ago (`LeaseReads.recent`),
        or None: no such answer, or it does not list the Lease."""
        return self.lease_reads.recent(pool, lease_id) if self.lease_reads is not None else None

"""autoscale: the size battery is given, spec.size or what the Pool's policy decides (PO-107).

A Pool without `spec.autoscaling` has the size its spec says. One with it is sized from
its claims (`Demand`), in this order (`decide`):

1. Idle: with `scaleToZeroAfter` set, no claim waiting, and no claim made since the later of
   the newest claim seen and the last change of size (`status.lastScaleTime`) for that long,
   the Pool keeps nothing warm; once at 0 it stays there until a claim is made or waits.
2. Otherwise the warm buffer is `minIdle`, or the number of claims made in the last `window`
   if that is more (the claim rate), plus one MicroVM per claim waiting for one (Pending
   `PoolExhausted`, no Lease).
3. The size battery is given counts what the replenishment strategy counts: the buffer for
   ImmediateOnLease and MinSizeThreshold (battery replaces what is leased), the leased
   MicroVMs too for ReplaceOnDelete.
4. It is at most `maxSize`.
5. It shrinks no sooner than `window` after the last change: a size the rate asked for
   stays while the rate might come back (and across a restart of the operator, which sees
   only the claims that still exist).

Nothing is written here: `declare` sends the size, `report` records the size battery took as
`status.size` (and `status.lastScaleTime` when the policy changed it) with the Autoscaling
condition saying which term decided, and `resized_event` posts an Event when the size moved.
The reconcile asks to run again when the answer could change with no event: when the oldest
claim of the window leaves it, when a held size may shrink, when the idle period ends.

A policy and `kubectl scale` or an HorizontalPodAutoscaler never both size a Pool: the CRD
refuses spec.size beside spec.autoscaling (RS-107), so a scale write to such a Pool fails
with that rule's message.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from batteryop.api.conditions import EventReason, EventType, PoolReason
from batteryop.api.pool import Autoscaling, ReplenishmentType
from batteryop.api.times import format_duration
from batteryop.operator.pools.scope import PoolScope, Sizing


@dataclass(frozen=True)
class Demanded:
    """What the claims ask of one Pool at `now`."""

    recent: int
    """Claims made in the last window."""
    oldest_recent: datetime | None
    """When the oldest of those was made."""
    waiting: int
    """Claims Pending `PoolExhausted` with no Lease."""
    last_arrival: datetime | None
    """When the newest claim seen was made."""
    leased: int
    """MicroVMs leased, as battery last counted them (`status.leased`)."""


def _claims(n: int) -> str:
    return f"{n} claim" if n == 1 else f"{n} claims"


def decide(
    policy: Autoscaling,
    replenishment: ReplenishmentType,
    demanded: Demanded,
    *,
    now: datetime,
    current: int | None,
    last_scale: datetime | None,
) -> Sizing:
    """The size for a Pool with `policy`, why, and when to look again (see the module)."""
    recheck: list[datetime] = []
    idle_since = max(
        (t for t in (demanded.last_arrival, last_scale) if t is not None), default=None
    )
    after = policy.scale_to_zero_after
    if after is not None and demanded.waiting == 0 and idle_since is not None:
        # At 0 with no claim made since it got there, it stays there: going to 0 is a change
        # of size, but starts no new idle period.
        stays = current == 0 and (demanded.last_arrival or idle_since) <= (last_scale or now)
        if stays or now - idle_since >= after:
            return Sizing(
                0, PoolReason.IDLE, f"no claim made or waiting for {format_duration(after)}"
            )
        recheck.append(idle_since + after)
    if demanded.recent > policy.min_idle:
        buffer, reason = demanded.recent, PoolReason.CLAIM_RATE
        window = format_duration(policy.window)
        why = f"{_claims(demanded.recent)} made in the last {window} (minIdle {policy.min_idle})"
        assert demanded.oldest_recent is not None
        recheck.append(demanded.oldest_recent + policy.window)
    else:
        buffer, reason = policy.min_idle, PoolReason.MIN_IDLE
        why = f"minIdle {policy.min_idle}"
    if demanded.waiting:
        reason = PoolReason.CLAIMS_WAITING
        why += f", {_claims(demanded.waiting)} waiting for a MicroVM"
    size = buffer + demanded.waiting
    if replenishment is ReplenishmentType.REPLACE_ON_DELETE:
        size += demanded.leased
        why += f", {demanded.leased} leased"
    if size > policy.max_size:
        why += f": {size} wanted, at most maxSize {policy.max_size}"
        size, reason = policy.max_size, PoolReason.MAX_SIZE
    if current is not None and size < current and last_scale is not None:
        until = last_scale + policy.window
        if now < until:
            return Sizing(
                current,
                PoolReason.HELD,
                f"{size} wanted ({why}); {current} is kept until a window after the last " "change",
                recheck=until,
            )
    return Sizing(size, reason, why, recheck=min(recheck, default=None))


async def autoscale(scope: PoolScope) -> None:
    """The step: `scope.sizing` for `declare` to send and `report` to record."""
    pool = scope.pool
    policy = pool.spec.autoscaling
    if policy is None:
        assert pool.spec.size is not None  # RS-107: the CRD requires one of the two
        scope.sizing = Sizing(pool.spec.size)
        return
    demand = scope.deps.demand
    recent, oldest = demand.arrivals_since(scope.key, scope.now - policy.window)
    demanded = Demanded(
        recent=recent,
        oldest_recent=oldest,
        waiting=demand.waiting(scope.key),
        last_arrival=demand.last_arrival(scope.key),
        leased=pool.status.leased,
    )
    scope.sizing = decide(
        policy,
        pool.spec.replenishment.type,
        demanded,
        now=scope.now,
        current=pool.status.size,
        last_scale=pool.status.last_scale_time,
    )
    recheck = scope.sizing.recheck
    after = policy.scale_to_zero_after
    if after is not None and scope.sizing.size not in (0, pool.status.size):
        # The size changes now, so the idle period starts again now (`decide` read the last
        # change as it was).
        recheck = min(recheck or scope.now + after, scope.now + after)
    if recheck is not None:
        wait = recheck - scope.now
        scope.outcome.requeue(max(wait, timedelta(seconds=1)).total_seconds())


async def resized_event(scope: PoolScope) -> None:
    """After the chain: an Event when the policy moved `status.size`, saying why (PO-108)."""
    before, after = scope.pool.status.size, scope.status.size
    sizing = scope.sizing
    if scope.pool.spec.autoscaling is None or sizing is None or after is None or before == after:
        return
    was = "" if before is None else f" from {before}"
    scope.event(EventType.NORMAL, EventReason.RESIZED, f"Resized{was} to {after}: {sizing.message}")


__all__ = ["Demanded", "autoscale", "decide", "resized_event"]

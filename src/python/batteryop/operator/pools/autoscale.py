"""autoscale: the size battery is given, spec.size or what the Pool's policy decides (PO-107).

A Pool without `spec.autoscaling` has the size its spec says. One with it is sized from
its claims (`Demand`), in this order (`decide`):

0. Until the operator has listed the claims once, the size stays (`status.size`).
1. Idle: with `scaleToZeroAfter` set, no claim waiting, and no claim made for that long since
   the latest of the newest claim seen, the last change of size (`status.lastScaleTime`) and
   the operator's start, the Pool keeps nothing warm; once at 0 it stays there until a claim
   is made or waits.
2. Otherwise the warm buffer is `minIdle`, or the number of claims made in the last `window`
   if that is more (the claim rate), plus one MicroVM per claim waiting for one (Pending
   `PoolExhausted`, no Lease).
3. The size battery is given counts what the replenishment strategy counts: the buffer for
   ImmediateOnLease (battery replaces what is leased), the leased MicroVMs too for
   MinSizeThreshold and ReplaceOnDelete.
4. It is at most `maxSize` (a lowered `maxSize` applies at once).
5. It shrinks no sooner than `window` after the later of the last change and the operator's
   start: a size the rate asked for stays while the rate might come back, and a restarted
   operator, which sees only the claims that still exist, does not shrink on what it missed.
6. While battery reports MicroVMs provisioning, the size changes only if the wanted size is
   at least twice the current one: an UpdatePool cancels what battery is booting (BA-074).

Nothing is written here: `declare` sends the size, `report` records the size battery took as
`status.size` (and `status.lastScaleTime` when the policy changed it) with the Autoscaling
condition saying which term decided, and `resized_event` posts an Event when the size moved.
The reconcile asks to run again when the answer could change with no event: when the oldest
claim of the window leaves it, when a held size may shrink, when the idle period ends.

A policy and `kubectl scale` or a HorizontalPodAutoscaler never both size a Pool: the CRD
refuses spec.size beside spec.autoscaling (RS-107), so a scale write to such a Pool fails
with that rule's message, and an HPA cannot read such a Pool's scale (it has no replicas).
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
    """What the claims ask of one Pool at `now`, and what battery last reported of it."""

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
    provisioning: int = 0
    """MicroVMs battery is booting (`status.provisioning`): a resize cancels them (BA-074)."""


@dataclass(frozen=True)
class Known:
    """What the policy knows of the Pool's past: its size and when it last changed (the
    status), and since when the operator has seen the claims (its start)."""

    current: int | None
    last_scale: datetime | None
    since: datetime | None = None
    """When the operator first had the list of claims; None in a test that starts there."""

    def quiet_since(self, last_arrival: datetime | None) -> datetime | None:
        """The start of the idle period: the newest of the last claim, the last change, and
        the operator's start (a restarted operator knows nothing of the claims before it)."""
        known = (t for t in (last_arrival, self.last_scale, self.since) if t is not None)
        return max(known, default=None)

    def held_until(self, window: timedelta) -> datetime | None:
        """When a size may shrink: a window after the last change or the operator's start."""
        base = max((t for t in (self.last_scale, self.since) if t is not None), default=None)
        return None if base is None else base + window


def _claims(n: int) -> str:
    return f"{n} claim" if n == 1 else f"{n} claims"


def _microvms(n: int) -> str:
    return f"{n} MicroVM" if n == 1 else f"{n} MicroVMs"


def decide(
    policy: Autoscaling,
    replenishment: ReplenishmentType,
    demanded: Demanded,
    known: Known,
    *,
    now: datetime,
) -> Sizing:
    """The size for a Pool with `policy`, why, and when to look again (see the module)."""
    recheck: list[datetime] = []
    current = known.current
    after = policy.scale_to_zero_after
    idle_since = known.quiet_since(demanded.last_arrival)
    if after is not None and demanded.waiting == 0 and idle_since is not None:
        # At 0 with no claim made since it got there, it stays there: going to 0 is a change
        # of size, but starts no new idle period.
        stays = (
            current == 0
            and known.last_scale is not None
            and (demanded.last_arrival is None or demanded.last_arrival < known.last_scale)
        )
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
    if replenishment is not ReplenishmentType.IMMEDIATE_ON_LEASE:
        size += demanded.leased  # battery counts them toward the size
        why += f", {demanded.leased} leased"
    if size > policy.max_size:
        why += f": {size} wanted, at most maxSize {policy.max_size}"
        size, reason = policy.max_size, PoolReason.MAX_SIZE
    if current is None or size == current:
        return Sizing(size, reason, why, recheck=min(recheck, default=None))
    kept = min(current, policy.max_size)  # a lowered maxSize applies at once
    until = known.held_until(policy.window)
    if size < kept and until is not None and now < until:
        return Sizing(
            kept,
            PoolReason.HELD,
            f"{size} wanted ({why}); {kept} is kept until a window after the last change",
            recheck=min([until, *recheck]),
        )
    if demanded.provisioning and size < 2 * kept:
        # BA-074: an UpdatePool cancels what battery is booting; wait for it, unless the
        # demand doubled. Its VM_AVAILABLE Events reconcile the Pool again.
        return Sizing(
            kept,
            PoolReason.HELD,
            f"{size} wanted ({why}); {kept} is kept while battery provisions "
            f"{_microvms(demanded.provisioning)} (a resize would cancel them)",
            recheck=min(recheck, default=None),
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
    if demand.since is None and pool.status.size is not None:
        # Before the claims are listed the policy knows nothing of them: the size stays.
        scope.sizing = Sizing(
            pool.status.size, PoolReason.HELD, "the operator has not listed the claims yet"
        )
        return
    recent, oldest = demand.arrivals_since(scope.key, scope.now - policy.window)
    demanded = Demanded(
        recent=recent,
        oldest_recent=oldest,
        waiting=demand.waiting(scope.key),
        last_arrival=demand.last_arrival(scope.key),
        leased=pool.status.leased,
        provisioning=pool.status.provisioning,
    )
    known = Known(pool.status.size, pool.status.last_scale_time, demand.since)
    scope.sizing = decide(policy, pool.spec.replenishment.type, demanded, known, now=scope.now)
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


__all__ = ["Demanded", "Known", "autoscale", "decide", "resized_event"]

"""`decide` and `Demand` on their own: the policy's rules at their edges (PO-107).

The reconciles that send the sizes to battery are in `reconcile_test.py`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from batteryop.api.conditions import PoolReason
from batteryop.api.pool import Autoscaling, ReplenishmentType
from batteryop.operator.keys import PoolKey
from batteryop.operator.pools.autoscale import Demanded, Known, decide
from batteryop.operator.pools.demand import KEPT, PRUNE_EVERY, Demand

T0 = datetime(2026, 12, 7, 3, 0, tzinfo=UTC)
POLICY = Autoscaling(max_size=10, min_idle=2, window=timedelta(minutes=1))
IMMEDIATE = ReplenishmentType.IMMEDIATE_ON_LEASE


def demanded(recent: int = 0, waiting: int = 0, leased: int = 0, provisioning: int = 0) -> Demanded:
    return Demanded(
        recent=recent,
        oldest_recent=T0 - timedelta(seconds=10) if recent else None,
        waiting=waiting,
        last_arrival=T0 - timedelta(seconds=10) if recent else None,
        leased=leased,
        provisioning=provisioning,
    )


pytestmark = pytest.mark.req("PO-107")


def test_a_lowered_max_size_applies_at_once_though_the_size_is_held() -> None:
    # The last change was 10 s ago (held for a window), and maxSize went from 10 to 4.
    policy = Autoscaling(max_size=4, min_idle=2, window=timedelta(minutes=1))
    known = Known(current=8, last_scale=T0 - timedelta(seconds=10))
    sizing = decide(policy, IMMEDIATE, demanded(), known, now=T0)
    assert (sizing.size, sizing.reason) == (4, PoolReason.HELD)


@pytest.mark.parametrize(
    ("replenishment", "size"),
    [
        (ReplenishmentType.IMMEDIATE_ON_LEASE, 2),  # battery replaces what is leased
        (ReplenishmentType.MIN_SIZE_THRESHOLD, 5),  # leased count toward the size
        (ReplenishmentType.REPLACE_ON_DELETE, 5),
    ],
)
def test_the_leased_count_toward_the_size_where_battery_counts_them(
    replenishment: ReplenishmentType, size: int
) -> None:
    sizing = decide(POLICY, replenishment, demanded(leased=3), Known(None, None), now=T0)
    assert sizing.size == size


def test_a_held_size_is_looked_at_again_when_the_rate_falls_too() -> None:
    # Held until T0 + 50 s; the claims of the window leave it at T0 + 50 s too, the earlier.
    known = Known(current=9, last_scale=T0 - timedelta(seconds=10))
    sizing = decide(POLICY, IMMEDIATE, demanded(recent=5), known, now=T0)
    assert (sizing.size, sizing.reason) == (9, PoolReason.HELD)
    assert sizing.recheck == T0 + timedelta(seconds=50)


def test_while_battery_boots_the_size_grows_only_if_the_demand_doubled() -> None:
    known = Known(current=4, last_scale=T0 - timedelta(minutes=5))
    held = decide(POLICY, IMMEDIATE, demanded(recent=6, provisioning=2), known, now=T0)
    assert (held.size, held.reason) == (4, PoolReason.HELD)
    assert held.message.endswith(
        "4 is kept while battery provisions 2 MicroVMs (a resize would cancel them)"
    )
    grown = decide(POLICY, IMMEDIATE, demanded(recent=8, provisioning=2), known, now=T0)
    assert (grown.size, grown.reason) == (8, PoolReason.CLAIM_RATE)
    # Shrinking waits for them too, past its window.
    shrink = decide(POLICY, IMMEDIATE, demanded(provisioning=1), known, now=T0)
    assert (shrink.size, shrink.reason) == (4, PoolReason.HELD)
    assert decide(POLICY, IMMEDIATE, demanded(), known, now=T0).size == 2


def test_a_pool_at_zero_with_no_change_recorded_is_sized_by_its_claims() -> None:
    # From `spec.size: 0` to a policy: no lastScaleTime, so "stays at 0" does not hold.
    policy = Autoscaling(max_size=10, min_idle=1, scale_to_zero_after=timedelta(minutes=5))
    sizing = decide(policy, IMMEDIATE, demanded(recent=3), Known(0, None), now=T0)
    assert (sizing.size, sizing.reason) == (3, PoolReason.CLAIM_RATE)


def test_a_restart_counts_the_idle_period_and_the_hold_from_its_start() -> None:
    policy = Autoscaling(max_size=10, min_idle=1, scale_to_zero_after=timedelta(minutes=2))
    # Sized to 6 an hour ago; the operator started 30 s ago and has seen no claim.
    known = Known(6, T0 - timedelta(hours=1), since=T0 - timedelta(seconds=30))
    sizing = decide(policy, IMMEDIATE, demanded(), known, now=T0)
    assert (sizing.size, sizing.reason) == (6, PoolReason.HELD)
    assert sizing.recheck == T0 + timedelta(seconds=30)
    later = decide(policy, IMMEDIATE, demanded(), known, now=T0 + timedelta(seconds=30))
    assert (later.size, later.reason) == (1, PoolReason.MIN_IDLE)
    idle = decide(policy, IMMEDIATE, demanded(), known, now=T0 + timedelta(seconds=90))
    assert (idle.size, idle.reason) == (0, PoolReason.IDLE)


def test_demand_counts_each_claim_once_and_keeps_an_hour() -> None:
    key = PoolKey("ns", "p")
    demand = Demand()
    assert demand.record(key, "a", T0)
    assert not demand.record(key, "a", T0), "listed again: counted once"
    assert demand.arrivals_since(key, T0 - timedelta(seconds=1)) == (1, T0)
    assert demand.arrivals_since(key, T0) == (0, None), "a claim made at `since` is out"
    for i in range(1, PRUNE_EVERY):
        demand.record(key, f"c{i}", T0 + KEPT + timedelta(seconds=i))
    assert demand.last_arrival(key) == T0 + KEPT + timedelta(seconds=PRUNE_EVERY - 1)
    # The pruning at the PRUNE_EVERY-th arrival dropped the one older than KEPT before it.
    assert demand.arrivals_since(key, T0 - timedelta(days=1))[0] == PRUNE_EVERY - 1
    demand.forget(key)
    assert demand.last_arrival(key) is None
    demand.listed(T0)
    demand.listed(T0 + timedelta(hours=1))
    assert demand.since == T0, "the first list only"

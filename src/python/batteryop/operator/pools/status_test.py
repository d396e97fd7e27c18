from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from batteryop.api import samples
from batteryop.api.conditions import ConditionStatus, PoolConditionType, PoolReason
from batteryop.api.pool import Pool, Replenishment, ReplenishmentType
from batteryop.battery import models as battery
from batteryop.battery.errors import BatteryUnavailableError
from batteryop.operator.pools.battery_spec import to_battery_spec
from batteryop.operator.pools.scope import Declared
from batteryop.operator.pools.status import (
    declared_status,
    exhausted,
    ready,
    replicas,
    status_patch,
    unanswered_status,
)

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def pool(size: int = 4, status: dict[str, Any] | None = None) -> Pool:
    body = samples.sample_pool(namespace="ns")
    body["spec"]["size"] = size
    body["metadata"]["generation"] = 3
    if status is not None:
        body["status"] = status
    return Pool.from_dict(body)


def held(p: Pool, **counts: int) -> battery.Pool:
    return battery.Pool(to_battery_spec(p, ["host-a"]), battery.PoolStatus(**counts))


@pytest.mark.req("PO-021")
def test_exhausted_is_true_only_for_a_sized_pool_with_none_available() -> None:
    assert exhausted(0, battery.PoolStatus()) == (
        False,
        PoolReason.SIZE_ZERO,
        "The Pool's size is 0",
    )
    assert exhausted(2, battery.PoolStatus(leased=2))[:2] == (True, PoolReason.NONE_AVAILABLE)
    assert exhausted(2, battery.PoolStatus(available=1)) == (
        False,
        PoolReason.AVAILABLE,
        "1 MicroVM is available",
    )
    assert exhausted(2, battery.PoolStatus(available=3))[2] == "3 MicroVMs are available"


@pytest.mark.req("PO-004", "PO-012", "PO-022")
def test_ready_reasons_apply_in_priority_order() -> None:
    p = pool(size=4)
    full = held(p, available=2, leased=1, provisioning=1, quarantined=5)
    short = held(p, available=1, quarantined=5)
    cases = [
        (Declared(None, None, (), rejected="bad spec"), (False, PoolReason.REJECTED, "bad spec")),
        (
            Declared(full, 3, ()),
            (False, PoolReason.NO_ELIGIBLE_HOST, "No Host matches kubernetes.io/arch=amd64"),
        ),
        (
            Declared(None, None, ("host-a",)),
            (False, PoolReason.NOT_IN_BATTERY, "battery does not hold the Pool"),
        ),
        (
            Declared(short, 3, ("host-a",)),
            (False, PoolReason.BELOW_SIZE, "1 of 4 MicroVMs are available, leased or provisioning"),
        ),
        (
            Declared(full, 3, ("host-a",)),
            (True, PoolReason.AT_SIZE, "4 of 4 MicroVMs are available, leased or provisioning"),
        ),
    ]
    for declared, expected in cases:
        assert ready(p, declared) == expected


@pytest.mark.req("PO-012")
def test_an_empty_selector_with_no_host_says_none_is_published() -> None:
    body = samples.sample_pool(namespace="ns")
    body["spec"]["placement"] = {}
    assert ready(Pool.from_dict(body), Declared(None, None, ())) == (
        False,
        PoolReason.NO_ELIGIBLE_HOST,
        "No Host is published",
    )


def test_without_a_published_host_set_the_pool_waits_or_shows_batterys_hosts() -> None:
    p = pool(size=1)
    waiting = ready(p, Declared(None, None, (), hosts_published=False))
    assert waiting[:2] == (False, PoolReason.NOT_IN_BATTERY)
    assert "host registry" in waiting[2]
    known = Declared(held(p, available=1), None, ("host-a",), hosts_published=False)
    assert ready(p, known)[:2] == (True, PoolReason.AT_SIZE)


@pytest.mark.req("PO-020")
def test_counts_are_batterys_and_transition_times_move_only_with_the_status() -> None:
    p = pool(size=2)
    first = declared_status(
        p, Declared(held(p, available=1, leased=1, quarantined=2), 3, ("host-a",)), T0
    )
    assert (first.available, first.leased, first.provisioning, first.quarantined) == (1, 1, 0, 2)
    assert first.observed_generation == 3
    ready_c = first.condition(PoolConditionType.READY)
    assert ready_c is not None and ready_c.observed_generation == 3
    assert ready_c.last_transition_time == T0

    p = pool(size=2, status=first.to_dict())
    later = T0 + timedelta(minutes=1)
    again = declared_status(
        p, Declared(held(p, available=1, leased=1, quarantined=2), 3, ("host-a",)), later
    )
    assert again == p.status
    assert status_patch(p, again) is None, "nothing to write"

    below = declared_status(p, Declared(held(p, available=1), 3, ("host-a",)), later)
    ready_c = below.condition(PoolConditionType.READY)
    assert ready_c is not None and ready_c.status is ConditionStatus.FALSE
    assert ready_c.last_transition_time == later
    exhausted_c = below.condition(PoolConditionType.EXHAUSTED)
    assert exhausted_c is not None and exhausted_c.last_transition_time == T0, "still False"
    patch = status_patch(p, below)
    assert patch is not None and [c["type"] for c in patch["conditions"]] == ["Ready", "Exhausted"]
    assert "available" not in patch, "only what changed: available stayed 1"
    assert patch["leased"] == 0
    fresh = pool(size=2)
    patched = status_patch(fresh, declared_status(fresh, Declared(None, 3, ("host-a",)), T0))
    assert patched is not None and patched["available"] == 0, "the first patch writes every count"


@pytest.mark.req("RS-106")
def test_replicas_count_what_the_replenishment_strategy_counts_toward_size() -> None:
    counts = {"available": 2, "provisioning": 1, "leased": 4, "quarantined": 1}
    immediate = pool(size=3)
    assert immediate.spec.replenishment.type is ReplenishmentType.IMMEDIATE_ON_LEASE
    got = declared_status(immediate, Declared(held(immediate, **counts), 3, ("host-a",)), T0)
    assert (got.replicas, got.selector) == (3, "battery.liquidmetal-x.dev/pool=pool-sample")
    for kind in (ReplenishmentType.MIN_SIZE_THRESHOLD, ReplenishmentType.REPLACE_ON_DELETE):
        other = replace(immediate, spec=replace(immediate.spec, replenishment=Replenishment(kind)))
        assert replicas(other, battery.PoolStatus(**counts)) == 7  # leased count too


def test_an_unanswered_reconcile_changes_only_readys_message() -> None:
    p = pool(size=2)
    before = declared_status(p, Declared(held(p, available=2), 3, ("host-a",)), T0)
    p = pool(size=2, status=before.to_dict())
    err = BatteryUnavailableError("GetPool", "UNAVAILABLE", "connection refused")
    after = unanswered_status(p, err, T0 + timedelta(minutes=5))
    old, new = before.condition(PoolConditionType.READY), after.condition(PoolConditionType.READY)
    assert old is not None and new is not None
    assert (new.status, new.reason, new.last_transition_time) == (old.status, old.reason, T0)
    assert "connection refused" in new.message
    assert after.condition(PoolConditionType.EXHAUSTED) == before.condition(
        PoolConditionType.EXHAUSTED
    )
    assert (after.available, after.observed_generation) == (2, 3)

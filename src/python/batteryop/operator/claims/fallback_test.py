"""`reconcile_claim` for claims that would find their Pool empty, against the fake battery, on
`reconcile_test`'s fixtures and its clock.

- `spec.fallbackPoolRefs` (CL-106..CL-108, RS-104): the Pools of a claim's list are tried in
  order, only a sure "nothing leased here" moves on, and battery's request-id rule (BA-102)
  keeps one MicroVM per claim across the list after lost answers and restarts.
- `spec.waitForCapacity` (CL-110, the `give up` step): the claim waits, retries no later than
  its deadline, then fails for good.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from batteryop.api import names
from batteryop.api.conditions import (
    ClaimConditionType,
    ClaimPhase,
    ClaimReason,
    EventReason,
    EventType,
)
from batteryop.api.times import format_time
from batteryop.battery import PoolRef
from batteryop.operator.claims.reconcile_test import (
    Env,
    add_pool,
    assert_pending,
    claim_body,
    condition,
    deleting,
    env,
    events,
    filled,
    hosts,
    status,
)

__all__ = ["env", "hosts"]  # the fixtures, used by name

pytestmark = pytest.mark.asyncio(loop_scope="module")


def fallback_claim(env: Env, *fallback: str, pool: str = "a") -> dict[str, Any]:
    body = claim_body(env, pool=pool)
    body["spec"]["fallbackPoolRefs"] = [{"name": name} for name in fallback]
    return body


async def leased(env: Env, ref: PoolRef) -> int:
    return (await env.ctl.get_pool(ref)).status.leased


async def grow(env: Env, ref: PoolRef, size: int) -> None:
    held = await env.ctl.get_pool(ref)
    await env.ctl.update_pool(replace(held.spec, size=size))
    await filled(env, ref, size)


@pytest.mark.req("CL-106", "CL-108", "RS-104")
async def test_an_exhausted_pool_falls_back_to_the_next_and_says_which_served_and_why(
    env: Env,
) -> None:
    a = await add_pool(env, name="a", size=0)
    b = await add_pool(env, name="b", size=0)
    c = await add_pool(env, name="c", size=1)
    env.bind_events = False  # the fallback's Event is posted all the same
    outcome, body = await env.step(fallback_claim(env, "b", "c"))
    assert env.calls.take() == ["ClaimVM", "ClaimVM", "ClaimVM"]  # a, b, then c served
    got = status(body)
    assert (got.phase, got.pool_name) == (ClaimPhase.BOUND, "c")
    bound = condition(body, ClaimConditionType.BOUND)
    assert bound.message == (
        f"MicroVM {got.microvm_uid} on Node host-a of fallback Pool c is leased to this claim: "
        "Pool a has no available MicroVM; Pool b has no available MicroVM"
    )
    assert [(e.type, e.reason, e.message) for e in outcome.events] == [
        (EventType.NORMAL, EventReason.BOUND_FROM_FALLBACK, bound.message)
    ]
    assert [await leased(env, ref) for ref in (a, b, c)] == [0, 0, 1]
    # The Lease is c's: its expiry is read from c (CL-016), and the claim keeps to c.
    _, body = await env.step(body)
    assert env.calls.take() == ["ListLeases"]
    assert status(body).lease_expires_at is not None


@pytest.mark.req("CL-106", "RS-104")
async def test_a_claim_whose_first_pool_serves_records_it_and_calls_once(env: Env) -> None:
    await add_pool(env, name="a", size=1)
    await add_pool(env, name="b", size=1)
    outcome, body = await env.step(fallback_claim(env, "b"))
    assert env.calls.take() == ["ClaimVM"]
    assert status(body).pool_name == "a"
    assert events(outcome) == [(EventType.NORMAL, ClaimReason.BOUND)]
    assert "fallback" not in condition(body, ClaimConditionType.BOUND).message


@pytest.mark.req("CL-106", "CL-063", "CL-004")
async def test_missing_and_deleting_pools_are_passed_without_claimvm(env: Env) -> None:
    await add_pool(env, name="a", size=1)
    env.pools[(env.namespace, "a")] = deleting(env.pools[(env.namespace, "a")])
    c = await add_pool(env, name="c", size=1)
    outcome, body = await env.step(fallback_claim(env, "b", "c"))  # b: no such Pool
    assert env.calls.take() == ["ClaimVM"]  # on c alone
    assert status(body).pool_name == "c"
    assert await leased(env, c) == 1
    message = condition(body, ClaimConditionType.BOUND).message
    assert message.endswith(
        ": Pool a is being deleted; no MicroVM is claimed from it; Pool b does not exist"
    )


@pytest.mark.req("CL-106", "CL-003")
async def test_when_no_pool_serves_the_claim_is_pool_exhausted_naming_each(env: Env) -> None:
    await add_pool(env, name="a", size=0)
    b = await add_pool(env, name="b", size=0)
    outcome, body = await env.step(fallback_claim(env, "missing", "b"))
    assert env.calls.take() == ["ClaimVM", "ClaimVM"]
    assert_pending(body, ClaimReason.POOL_EXHAUSTED)
    assert condition(body, ClaimConditionType.BOUND).message == (
        "Pool a has no available MicroVM; Pool missing does not exist; "
        "Pool b has no available MicroVM"
    )
    assert events(outcome) == [(EventType.WARNING, ClaimReason.POOL_EXHAUSTED)]
    # Capacity in a later Pool of the list is taken at the next retry.
    await grow(env, b, 1)
    _, body = await env.step(body)
    assert status(body).pool_name == "b"


@pytest.mark.req("CL-106", "CL-004")
async def test_when_every_pool_is_missing_the_claim_is_pool_not_found_without_a_call(
    env: Env,
) -> None:
    outcome, body = await env.step(fallback_claim(env, "b"))
    assert env.calls.take() == []
    assert status(body).phase is ClaimPhase.PENDING
    assert condition(body, ClaimConditionType.BOUND).reason == ClaimReason.POOL_NOT_FOUND
    assert condition(body, ClaimConditionType.BOUND).message == (
        "Pool a does not exist; Pool b does not exist"
    )


@pytest.mark.req("CL-107", "CL-061")
async def test_a_restart_after_a_fallback_bind_gets_the_same_lease_never_a_second_microvm(
    env: Env,
) -> None:
    """The fallback's answer is lost (the Operator restarts before its write lands), then the
    first Pool gets capacity: the retry starts again at the first Pool, which battery refuses
    (the request id holds a Lease on another Pool, BA-102), and the fallback Pool answers the
    same Lease again."""
    a = await add_pool(env, name="a", size=0)
    b = await add_pool(env, name="b", size=1)
    body = fallback_claim(env, "b")
    first = await env.reconcile(body)  # never applied: the write was lost
    lost = first.status
    assert lost is not None and lost["poolRef"] == {"name": "b"}
    await grow(env, a, 1)

    after = await env.restarted()
    outcome, body = await after.step(body)
    assert after.calls.take() == ["ClaimVM", "ClaimVM"]  # a refused it, b answered again
    got = status(body)
    assert (got.pool_name, got.lease_id, got.microvm_uid) == (
        "b",
        lost["leaseID"],
        lost["microVM"]["uid"],
    )
    assert [await leased(env, ref) for ref in (a, b)] == [0, 1]
    assert (await env.ctl.get_pool(a)).status.available == 1
    assert events(outcome) == [(EventType.NORMAL, EventReason.BOUND_FROM_FALLBACK)]
    assert "Pool a is not the Pool battery leased this claim from" in (
        condition(body, ClaimConditionType.BOUND).message
    )


@pytest.mark.req("CL-107")
async def test_a_lease_on_a_pool_that_cannot_be_asked_keeps_the_claim_pending(env: Env) -> None:
    """The Pool holding the claim's unrecorded Lease is being deleted: no ClaimVM goes to it,
    and the next Pool refuses (BA-102), so the claim waits instead of taking a second MicroVM."""
    await add_pool(env, name="a", size=1)
    b = await add_pool(env, name="b", size=1)
    body = fallback_claim(env, "b")
    lost = (await env.reconcile(body)).status  # a leased it; the write was lost
    assert lost is not None and lost["poolRef"] == {"name": "a"}
    env.calls.take()
    env.pools[(env.namespace, "a")] = deleting(env.pools[(env.namespace, "a")])
    _, body = await env.step(body)
    assert env.calls.take() == ["ClaimVM"]  # b only
    assert_pending(body, ClaimReason.POOL_DELETING)
    assert condition(body, ClaimConditionType.BOUND).message.startswith(
        "Pool a is being deleted; no MicroVM is claimed from it; "
        "Pool b is not the Pool battery leased this claim from"
    )
    assert await leased(env, b) == 0


@pytest.mark.req("CL-106", "CL-007")
async def test_an_answer_lost_in_transit_never_moves_on(env: Env) -> None:
    """ClaimVM on the first Pool failing in transit may have leased a MicroVM there: the claim
    stays on that Pool, Pending BatteryUnavailable, and the fallback Pool is not asked."""
    await add_pool(env, name="a", size=1)
    b = await add_pool(env, name="b", size=1)
    env.fake.set_unavailable()
    _, body = await env.step(fallback_claim(env, "b"))
    env.fake.set_unavailable(False)
    assert_pending(body, ClaimReason.BATTERY_UNAVAILABLE, ClaimReason.BATTERY_UNAVAILABLE)
    assert await leased(env, b) == 0


# --- spec.waitForCapacity (CL-110) ---------------------------------------------------------


def waiting(env: Env, body: dict[str, Any], wait: str = "30s") -> dict[str, Any]:
    body["spec"]["waitForCapacity"] = wait
    body["metadata"]["creationTimestamp"] = format_time(env.clock.now())
    return body


@pytest.mark.req("CL-110", "CL-003")
async def test_a_claim_not_bound_within_its_wait_fails_for_good(env: Env) -> None:
    ref = await add_pool(env, size=0)
    body = waiting(env, claim_body(env))
    outcome, body = await env.step(body)
    assert status(body).phase is ClaimPhase.PENDING
    env.clock.advance(25)  # the backoff would wait 25 s more; the deadline is 5 s away
    outcome, body = await env.step(body)
    assert outcome.requeue_after == 5.0
    env.calls.take()

    env.clock.advance(5)
    outcome, body = await env.step(body)
    assert env.calls.take() == []  # no ClaimVM once the wait is over
    got = condition(body, ClaimConditionType.BOUND)
    assert (status(body).phase, got.reason) == (ClaimPhase.FAILED, ClaimReason.CAPACITY_TIMEOUT)
    assert got.message == (
        "not Bound within spec.waitForCapacity (30s): Pool pool has no available MicroVM"
    )
    assert events(outcome) == [(EventType.WARNING, ClaimReason.CAPACITY_TIMEOUT)]

    await grow(env, ref, 1)  # capacity that comes too late is not taken
    outcome, body = await env.step(body)
    assert env.calls.take() == []
    assert status(body).phase is ClaimPhase.FAILED
    assert outcome.status is None and outcome.events == []


@pytest.mark.req("CL-110", "CL-106")
async def test_a_claim_bound_in_time_is_not_failed_later(env: Env) -> None:
    await add_pool(env, name="a", size=0)
    await add_pool(env, name="b", size=1)
    body = waiting(env, fallback_claim(env, "b"), "2s")
    _, body = await env.step(body)
    assert status(body).phase is ClaimPhase.BOUND
    env.clock.advance(10)  # past the wait, within the Lease's 30 s expiry threshold
    _, body = await env.step(body)
    assert status(body).phase is ClaimPhase.BOUND


@pytest.mark.req("CL-110", "CL-020")
async def test_a_deleted_waiting_claim_is_released_not_failed(env: Env) -> None:
    await add_pool(env, size=0)
    body = waiting(env, claim_body(env), "1s")
    _, body = await env.step(body)
    env.clock.advance(5)
    outcome = await env.reconcile(deleting(body))
    assert outcome.remove_finalizer == names.CLAIM_FINALIZER
    assert outcome.status is None  # released as it was, not marked Failed on the way out

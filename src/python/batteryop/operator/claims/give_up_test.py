"""`reconcile_claim` for claims with `spec.waitForCapacity` (CL-110), against the fake battery on
`reconcile_test`'s fixtures and its clock: the claim waits, retries no later than its deadline,
then fails for good."""

from __future__ import annotations

from typing import Any

import pytest

from batteryop.api import names
from batteryop.api.conditions import ClaimConditionType, ClaimPhase, ClaimReason, EventType
from batteryop.api.times import format_time
from batteryop.operator.claims.fallback_test import fallback_claim, grow
from batteryop.operator.claims.reconcile_test import (
    Env,
    add_pool,
    claim_body,
    condition,
    deleting,
    env,
    events,
    hosts,
    status,
)

__all__ = ["env", "hosts"]  # the fixtures, used by name

pytestmark = pytest.mark.asyncio(loop_scope="module")


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

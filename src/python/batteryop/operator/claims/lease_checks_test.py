"""LeaseChecks: an answer serves only the marks made before its call was asked for, and
nothing is kept once no claim is marked."""

from datetime import UTC, datetime, timedelta

import pytest

from batteryop.battery.models import Lease, PoolRef
from batteryop.operator.claims.lease_checks import LeaseChecks

POOL = PoolRef("ns", "warm")
OTHER = PoolRef("ns", "cold")


def lease(lease_id: str) -> Lease:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    return Lease(
        lease_id=lease_id,
        vm_uid=f"vm-{lease_id}",
        pool=POOL,
        claimed_at=at,
        last_heartbeat_at=at,
        expires_at=at + timedelta(minutes=5),
    )


@pytest.mark.req("CL-030")
def test_an_answer_serves_marks_made_before_it_was_asked_for() -> None:
    checks = LeaseChecks()
    checks.require(("ns", "a"))
    checks.require(("ns", "b"))
    asked = checks.asking()
    checks.require(("ns", "c"))  # marked while the call is out: too late for its answer
    checks.keep(POOL, asked, [lease("l1")])
    assert checks.shared(("ns", "a"), POOL) == [lease("l1")]
    assert checks.shared(("ns", "b"), POOL) == [lease("l1")]
    assert checks.shared(("ns", "c"), POOL) is None
    assert checks.shared(("ns", "a"), OTHER) is None, "another Pool's answer is its own"
    assert checks.shared(("ns", "unmarked"), POOL) is None


@pytest.mark.req("CL-030")
def test_a_newer_answer_replaces_an_older_one_and_not_the_reverse() -> None:
    checks = LeaseChecks()
    checks.require(("ns", "a"))
    old = checks.asking()
    checks.require(("ns", "b"))
    new = checks.asking()
    checks.keep(POOL, new, [lease("new")])
    checks.keep(POOL, old, [lease("old")])  # an older call that answered late
    assert checks.shared(("ns", "b"), POOL) == [lease("new")]


def test_nothing_is_kept_without_a_mark() -> None:
    checks = LeaseChecks()
    checks.keep(POOL, checks.asking(), [lease("l1")])
    assert checks.sizes() == {"claims:lease_checks": 0, "claims:lease_answers": 0}
    checks.require(("ns", "a"))
    checks.keep(POOL, checks.asking(), [lease("l1")])
    assert checks.sizes() == {"claims:lease_checks": 1, "claims:lease_answers": 1}
    checks.done(("ns", "a"))
    assert checks.sizes() == {"claims:lease_checks": 0, "claims:lease_answers": 0}

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from batteryop.api.claim import ClaimStatus
from batteryop.api.conditions import ClaimConditionType, ClaimPhase, ClaimReason, set_condition
from batteryop.kube.outcome import backoff_since
from batteryop.operator.claims.status import status_patch

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
BOUND = ClaimStatus(
    phase=ClaimPhase.BOUND,
    lease_id="lease-1",
    microvm_uid="vm-1",
    node_name="host-a",
    agent_address="10.0.0.7:10270",
    bound_time=T0,
    lease_expires_at=T0 + timedelta(seconds=30),
    conditions=set_condition((), ClaimConditionType.BOUND, True, ClaimReason.BOUND, "ok", T0),
)


def test_an_unchanged_status_is_not_written() -> None:
    assert status_patch(BOUND, BOUND) is None
    finer = ClaimStatus(**{**BOUND.__dict__, "bound_time": T0 + timedelta(microseconds=5)})
    assert status_patch(BOUND, finer) is None, "Kubernetes keeps whole seconds"


@pytest.mark.req("CL-006")
def test_a_removed_field_is_sent_as_null_and_only_changes_are_sent() -> None:
    after = ClaimStatus(**{**BOUND.__dict__, "agent_address": None})
    assert status_patch(BOUND, after) == {"host": {"agentAddress": None}}
    expired = ClaimStatus(**{**BOUND.__dict__, "phase": ClaimPhase.EXPIRED})
    assert status_patch(BOUND, expired) == {"phase": "Expired"}


@pytest.mark.req("CL-002")
def test_a_first_binding_sends_every_field() -> None:
    patch = status_patch(ClaimStatus(), BOUND)
    assert patch == BOUND.to_dict()


@pytest.mark.req("CL-003", "CL-022")
def test_the_backoff_is_the_time_since_the_condition_changed_within_1_to_30_seconds() -> None:
    (bound,) = BOUND.conditions
    assert backoff_since(bound, T0) == 1.0
    assert backoff_since(bound, T0 + timedelta(seconds=7.5)) == 7.5
    assert backoff_since(bound, T0 + timedelta(minutes=5)) == 30.0

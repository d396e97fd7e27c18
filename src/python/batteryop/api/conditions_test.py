from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from batteryop.api.conditions import (
    MAX_MESSAGE_LENGTH,
    ClaimConditionType,
    ClaimReason,
    Condition,
    ConditionStatus,
    PoolConditionType,
    PoolReason,
    find_condition,
    is_valid_reason,
    set_condition,
)

T0 = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)
T1 = T0 + timedelta(minutes=5, microseconds=250)


def test_a_new_condition_is_appended_with_now_to_the_second() -> None:
    out = set_condition((), ClaimConditionType.BOUND, False, ClaimReason.POOL_EXHAUSTED, "m", T1)
    assert out == (
        Condition(
            type="Bound",
            status=ConditionStatus.FALSE,
            reason="PoolExhausted",
            message="m",
            last_transition_time=T1.replace(microsecond=0),
        ),
    )


def test_same_status_keeps_the_transition_time_and_takes_the_new_reason() -> None:
    first = set_condition((), PoolConditionType.READY, False, PoolReason.NOT_IN_BATTERY, "a", T0)
    second = set_condition(first, PoolConditionType.READY, False, PoolReason.BELOW_SIZE, "b", T1, 3)
    (cond,) = second
    assert cond.last_transition_time == T0
    assert (cond.reason, cond.message, cond.observed_generation) == ("BelowSize", "b", 3)


def test_a_status_change_moves_the_transition_time() -> None:
    first = set_condition((), PoolConditionType.READY, False, PoolReason.BELOW_SIZE, "", T0)
    (cond,) = set_condition(first, PoolConditionType.READY, True, PoolReason.AT_SIZE, "", T1)
    assert cond.status is ConditionStatus.TRUE
    assert cond.last_transition_time == T1.replace(microsecond=0)


def test_other_conditions_keep_their_place_and_values() -> None:
    conds = set_condition((), ClaimConditionType.BOUND, True, ClaimReason.BOUND, "", T0)
    conds = set_condition(conds, ClaimConditionType.SYNCED, True, ClaimReason.SYNCED, "", T0)
    conds = set_condition(conds, ClaimConditionType.BOUND, False, ClaimReason.LEASE_EXPIRED, "", T1)
    assert [c.type for c in conds] == ["Bound", "Synced"]
    assert conds[1].last_transition_time == T0
    assert conds[0].reason == "LeaseExpired"


def test_the_input_is_not_changed() -> None:
    before = set_condition((), ClaimConditionType.BOUND, True, ClaimReason.BOUND, "", T0)
    snapshot = tuple(before)
    set_condition(before, ClaimConditionType.BOUND, False, ClaimReason.LEASE_EXPIRED, "", T1)
    assert before == snapshot


def test_a_long_message_is_cut_to_the_crd_limit() -> None:
    (cond,) = set_condition(
        (), ClaimConditionType.HOST_READY, False, "KVMUnavailable", "x" * 40000, T0
    )
    assert len(cond.message) == MAX_MESSAGE_LENGTH


@pytest.mark.parametrize("reason", ["", "has space", "1Leading", "trailing:", "x" * 1025])
def test_an_invalid_reason_is_refused(reason: str) -> None:
    assert not is_valid_reason(reason)
    with pytest.raises(ValueError, match="invalid reason"):
        set_condition((), ClaimConditionType.HOST_READY, False, reason, "", T0)


def test_unknown_status_can_be_set() -> None:
    (cond,) = set_condition(
        (), PoolConditionType.READY, ConditionStatus.UNKNOWN, PoolReason.NOT_IN_BATTERY, "", T0
    )
    assert cond.status is ConditionStatus.UNKNOWN
    assert not cond.is_true


def test_find_condition() -> None:
    conds = set_condition((), ClaimConditionType.BOUND, True, ClaimReason.BOUND, "", T0)
    assert find_condition(conds, ClaimConditionType.BOUND) is conds[0]
    assert find_condition(conds, "Bound") is conds[0]
    assert find_condition(conds, ClaimConditionType.SYNCED) is None


def test_every_reason_is_one_the_crds_accept() -> None:
    from batteryop.api import conditions

    for enum_type in (
        conditions.PoolReason,
        conditions.ClaimReason,
        conditions.HostReportReason,
        conditions.EventReason,
        conditions.CSRReason,
    ):
        for member in enum_type:
            assert is_valid_reason(member), member


def test_withdrawn_pool_reasons_are_not_defined() -> None:
    # PO-034 (Draining) is withdrawn; NotFilling worked around battery v0.3.3.
    values = {str(r) for r in PoolReason}
    assert "Draining" not in values
    assert "NotFilling" not in values


conditions_strategy = st.builds(
    Condition,
    type=st.sampled_from([*PoolConditionType, *ClaimConditionType]).map(str),
    status=st.sampled_from(ConditionStatus),
    reason=st.sampled_from([*PoolReason, *ClaimReason]).map(str),
    message=st.text(max_size=50),
    last_transition_time=st.datetimes(
        min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
    ).map(lambda t: t.replace(microsecond=0)),
    observed_generation=st.none() | st.integers(min_value=0, max_value=2**62),
)


@given(conditions_strategy)
def test_a_condition_round_trips_through_its_dict(cond: Condition) -> None:
    assert Condition.from_dict(cond.to_dict()) == cond


@given(
    st.lists(conditions_strategy, max_size=4, unique_by=lambda c: c.type),
    st.sampled_from([*ClaimConditionType]),
    st.booleans(),
)
def test_set_then_find_gives_what_was_set(
    conds: list[Condition], type: ClaimConditionType, status: bool
) -> None:
    out = set_condition(conds, type, status, ClaimReason.SYNCED, "msg", T1)
    found = find_condition(out, type)
    assert found is not None
    assert found.is_true is status
    old = find_condition(conds, type)
    if old is not None and old.status == found.status:
        assert found.last_transition_time == old.last_transition_time
    else:
        assert found.last_transition_time == T1.replace(microsecond=0)
    assert len(out) == len(conds) + (old is None)

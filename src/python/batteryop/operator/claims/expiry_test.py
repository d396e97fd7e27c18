from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from batteryop.api.clock import FakeClock
from batteryop.battery.models import Event, EventType, PoolRef
from batteryop.operator.claims.expiry import DELETION_EVENTS, DeletedVMs

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
POOL = PoolRef("ns", "pool")


def event(type: EventType, vm: str, id: int = 1) -> Event:
    return Event(id=id, type=type, pool=POOL, vm_uid=vm, created_at=T0)


@pytest.mark.req("CL-013")
def test_every_kind_of_deletion_event_is_remembered_and_nothing_else() -> None:
    deleted = DeletedVMs(FakeClock(T0))
    for i, type in enumerate(EventType):
        uid = f"vm-{type}"
        assert deleted.observe(event(type, uid, i)) == (uid if type in DELETION_EVENTS else None)
        assert (uid in deleted) is (type in DELETION_EVENTS)
    assert len(deleted) == 3
    assert deleted.observe(event(EventType.VM_DELETED_ON_RELEASE, "")) is None


@pytest.mark.req("CL-013")
def test_a_deletion_is_remembered_for_one_hour_on_the_injected_clock() -> None:
    clock = FakeClock(T0)
    deleted = DeletedVMs(clock)
    deleted.record("vm-1")
    clock.advance(timedelta(minutes=30))
    deleted.record("vm-2")
    clock.advance(timedelta(minutes=29, seconds=59))
    assert "vm-1" in deleted and "vm-2" in deleted
    clock.advance(timedelta(seconds=1))
    assert "vm-1" not in deleted, "forgotten after an hour"
    assert "vm-2" in deleted
    deleted.record("vm-2")  # reported again (a replay): remembered from now
    clock.advance(timedelta(minutes=59))
    assert "vm-2" in deleted
    assert len(deleted) == 1


def test_the_memory_needs_a_positive_span() -> None:
    with pytest.raises(ValueError):
        DeletedVMs(FakeClock(T0), remember_for=timedelta(0))

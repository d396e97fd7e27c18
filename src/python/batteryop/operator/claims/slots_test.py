from __future__ import annotations

import pytest

from batteryop.api.clock import FakeClock
from batteryop.operator.claims.slots import ClaimSlots


@pytest.mark.req("CL-018")
def test_slots_are_taken_up_to_the_limit_and_never_waited_for() -> None:
    slots = ClaimSlots(2)
    with slots.try_acquire() as first, slots.try_acquire() as second:
        assert (first, second) == (True, True)
        with slots.try_acquire() as third:
            assert third is False
            assert slots.in_use == 2, "a refused acquire holds nothing"
    assert slots.in_use == 0
    with slots.try_acquire() as again:
        assert again


@pytest.mark.req("CL-018")
def test_a_slot_is_freed_when_the_claim_vm_raises() -> None:
    slots = ClaimSlots(1)

    def claim_vm() -> None:
        with slots.try_acquire() as held:
            assert held
            raise RuntimeError("ClaimVM failed")

    with pytest.raises(RuntimeError):
        claim_vm()
    assert slots.in_use == 0


@pytest.mark.req("CL-018")
def test_one_worker_is_always_kept_for_renewals() -> None:
    assert ClaimSlots.for_workers(4).limit == 3
    assert ClaimSlots.for_workers(2).limit == 1
    with pytest.raises(ValueError, match="at least 2 workers"):
        ClaimSlots.for_workers(1)
    with pytest.raises(ValueError):
        ClaimSlots(0)
    with pytest.raises(ValueError):
        ClaimSlots(1, retry_after=0)


@pytest.mark.req("CL-018", "CL-102")
def test_a_freed_slot_wakes_the_first_waiter_in_order() -> None:
    slots = ClaimSlots(1)
    woken: list[object] = []
    slots.on_free = woken.append
    with slots.try_acquire("a") as first:
        assert first
        for key in ("b", "c", "b"):
            with slots.try_acquire(key) as acquired:
                assert not acquired
        assert slots.waiting == ("b", "c")
    assert woken == ["b"]
    with slots.try_acquire("b") as again:
        assert again
    assert woken == ["b", "c"]
    assert not slots.waiting


@pytest.mark.req("CL-018")
def test_queue_if_full_queues_the_waiter_only_when_every_slot_is_taken() -> None:
    slots = ClaimSlots(1)
    woken: list[object] = []
    slots.on_free = woken.append
    assert not slots.queue_if_full("a")
    assert list(slots.waiting) == []
    with slots.try_acquire("b") as held:
        assert held
        assert slots.queue_if_full("a")
        assert list(slots.waiting) == ["a"]
    assert woken == ["a"]


def one_slot(clock: FakeClock) -> tuple[ClaimSlots, list[object]]:
    """One slot, and the list of waiters it wakes."""
    slots = ClaimSlots(1, retry_after=1.0, clock=clock)
    woken: list[object] = []
    slots.on_free = woken.append
    return slots, woken


@pytest.mark.req("CL-018", "CL-102")
def test_a_woken_waiter_keeps_its_slot_against_newcomers() -> None:
    slots, woken = one_slot(FakeClock())
    with slots.try_acquire("a"):
        assert slots.queue_if_full("b")
    assert woken == ["b"]
    assert list(slots.reserved) == ["b"]
    assert slots.queue_if_full("c"), "the freed slot is b's"
    with slots.try_acquire("c") as newcomer:
        assert not newcomer
    with slots.try_acquire() as anonymous:
        assert not anonymous
    with slots.try_acquire("b") as waiter:
        assert waiter
        assert not slots.reserved
    assert woken == ["b", "c"], "then c, in order"


@pytest.mark.req("CL-018", "CL-102")
def test_a_reservation_not_taken_in_time_passes_to_the_next_waiter() -> None:
    clock = FakeClock()
    slots, woken = one_slot(clock)
    with slots.try_acquire("a"):
        assert slots.queue_if_full("b") and slots.queue_if_full("c")
    assert woken == ["b"]
    clock.advance(1.5)  # b's claim was deleted meanwhile: it never comes back
    assert slots.queue_if_full("d")
    assert woken == ["b", "c"] and slots.reserved == ("c",)
    assert slots.waiting == ("d",)


@pytest.mark.req("CL-018")
def test_forget_gives_up_a_place_and_a_reservation_at_once() -> None:
    slots, woken = one_slot(FakeClock())
    with slots.try_acquire("a"):
        assert slots.queue_if_full("b") and slots.queue_if_full("c")
        slots.forget("c")
        assert slots.waiting == ("b",)
        assert slots.queue_if_full("c")
    assert woken == ["b"]
    slots.forget("b")  # bound elsewhere, say
    assert woken == ["b", "c"] and slots.reserved == ("c",)

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from batteryop.api.clock import FakeClock
from batteryop.battery.errors import BatteryUnavailableError
from batteryop.battery.models import Lease, PoolRef
from batteryop.operator.claims.lease_reads import LeaseReads

POOL = PoolRef("ns", "warm")
OTHER = PoolRef("ns", "cold")


def lease(lease_id: str) -> Lease:
    return Lease(
        lease_id=lease_id,
        vm_uid=f"vm-{lease_id}",
        pool=POOL,
        claimed_at=datetime(2026, 1, 1, tzinfo=UTC),
        last_heartbeat_at=datetime(2026, 1, 1, tzinfo=UTC),
        expires_at=datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=5),
    )


class SlowBattery:
    """ListLeases that answers when the test says, with the Leases held at that moment."""

    def __init__(self) -> None:
        self.leases: list[Lease] = []
        self.started: list[PoolRef] = []
        self.release = asyncio.Event()
        self.fail: Exception | None = None

    async def list_leases(self, pool: PoolRef | None = None) -> list[Lease]:
        assert pool is not None
        self.started.append(pool)
        snapshot = list(self.leases)  # what battery holds when the call starts
        await self.release.wait()
        if self.fail is not None:
            raise self.fail
        return snapshot


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


@pytest.mark.req("CL-016")
async def test_callers_that_ask_together_share_one_call() -> None:
    battery = SlowBattery()
    battery.leases = [lease("l1")]
    reads = LeaseReads(battery)  # type: ignore[arg-type]
    callers = [asyncio.create_task(reads.list_leases(POOL)) for _ in range(20)]
    await settle()
    battery.release.set()
    answers = await asyncio.gather(*callers)
    assert battery.started == [POOL]
    assert all(a == [lease("l1")] for a in answers)


@pytest.mark.req("CL-012", "CL-016")
async def test_a_caller_never_gets_the_answer_of_a_call_that_started_before_it_asked() -> None:
    battery = SlowBattery()
    reads = LeaseReads(battery)  # type: ignore[arg-type]
    early = asyncio.create_task(reads.list_leases(POOL))
    await settle()
    assert battery.started == [POOL]  # the first call is in flight, holding no Lease
    battery.leases = [lease("l2")]  # a claim binds now, then checks its Lease
    late = [asyncio.create_task(reads.list_leases(POOL)) for _ in range(3)]
    await settle()
    assert battery.started == [POOL]  # they wait for the call in flight to end
    battery.release.set()
    assert await early == []
    answers = await asyncio.gather(*late)
    assert battery.started == [POOL, POOL]  # one more call, shared by the three
    assert all(a == [lease("l2")] for a in answers)  # CL-012: l2 is seen, not "missing"
    assert reads.calls == 2


async def test_pools_do_not_share_calls() -> None:
    battery = SlowBattery()
    reads = LeaseReads(battery)  # type: ignore[arg-type]
    battery.release.set()
    await asyncio.gather(reads.list_leases(POOL), reads.list_leases(OTHER))
    assert sorted(p.name for p in battery.started) == ["cold", "warm"]


@pytest.mark.req("CL-017")
async def test_an_error_answers_every_caller_of_that_call_and_the_next_call_is_fresh() -> None:
    battery = SlowBattery()
    battery.fail = BatteryUnavailableError("ListLeases", "UNAVAILABLE", "connection refused")
    reads = LeaseReads(battery)  # type: ignore[arg-type]
    callers = [asyncio.create_task(reads.list_leases(POOL)) for _ in range(3)]
    await settle()
    battery.release.set()
    results = await asyncio.gather(*callers, return_exceptions=True)
    assert all(isinstance(r, BatteryUnavailableError) for r in results)
    battery.fail = None
    battery.leases = [lease("l3")]
    assert await reads.list_leases(POOL) == [lease("l3")]
    assert len(battery.started) == 2


async def test_one_caller_giving_up_does_not_cancel_the_others() -> None:
    battery = SlowBattery()
    reads = LeaseReads(battery)  # type: ignore[arg-type]
    quitter = asyncio.create_task(reads.list_leases(POOL))
    stayer = asyncio.create_task(reads.list_leases(POOL))
    await settle()
    quitter.cancel()
    await settle()
    battery.leases = [lease("l4")]
    battery.release.set()
    assert await stayer == []  # the call started before l4; the stayer asked before it too
    assert quitter.cancelled()


@pytest.mark.req("CL-016")
async def test_a_lease_the_newest_answer_lists_is_served_from_it_for_a_moment() -> None:
    battery = SlowBattery()
    battery.leases = [lease("l1"), lease("l2")]
    clock = FakeClock()
    reads = LeaseReads(battery, recent_seconds=2.0, clock=clock)  # type: ignore[arg-type]
    assert reads.recent(POOL, "l1") is None  # nothing listed yet
    battery.release.set()
    await reads.list_leases(POOL)
    # l2's check came after the call: the answer lists l2, so it serves without a call.
    assert reads.recent(POOL, "l2") == lease("l2")
    assert reads.recent(OTHER, "l2") is None  # another Pool's answer never serves
    assert reads.recent(POOL, "l9") is None  # not listed: proves nothing, ask anew (CL-012)
    clock.advance(2.5)
    assert reads.recent(POOL, "l2") is None  # too old
    assert battery.started == [POOL]


async def test_the_kept_answer_is_the_newest_and_goes_after_its_time() -> None:
    battery = SlowBattery()
    clock = FakeClock()  # the age on a clock that only the test moves: a slow machine cannot age it
    reads = LeaseReads(battery, recent_seconds=0.05, clock=clock)  # type: ignore[arg-type]
    battery.release.set()
    await reads.list_leases(POOL)
    battery.leases = [lease("l3")]
    await reads.list_leases(POOL)
    assert reads.recent(POOL, "l3") == lease("l3")
    assert reads.recent_answers() == 1
    clock.advance(0.06)
    await asyncio.sleep(0.1)  # the loop's timer drops it: nothing stays per Pool
    assert reads.recent_answers() == 0
    assert reads.recent(POOL, "l3") is None


async def test_with_an_injected_clock_only_that_clock_ages_the_kept_answer() -> None:
    """What `recent` serves depends on the injected clock alone, never on the loop's time: the
    claim property test runs on a FakeClock and must replay each example the same way however
    slowly the machine runs it."""
    battery = SlowBattery()
    clock = FakeClock()
    reads = LeaseReads(battery, recent_seconds=0.05, clock=clock)  # type: ignore[arg-type]
    battery.release.set()
    battery.leases = [lease("l3")]
    await reads.list_leases(POOL)
    await asyncio.sleep(0.12)  # the loop's timer fired (twice): the clock has not moved
    assert reads.recent(POOL, "l3") == lease("l3")
    assert reads.recent_answers() == 1
    clock.advance(0.06)
    assert reads.recent(POOL, "l3") is None  # too old by the clock, timer or not
    await asyncio.sleep(0.08)  # a whole window: the next timer drops it, nothing stays
    assert reads.recent_answers() == 0


async def test_a_failed_call_keeps_no_answer() -> None:
    battery = SlowBattery()
    battery.fail = BatteryUnavailableError("ListLeases", "UNAVAILABLE", "connection refused")
    battery.leases = [lease("l1")]
    reads = LeaseReads(battery)  # type: ignore[arg-type]
    battery.release.set()
    with pytest.raises(BatteryUnavailableError):
        await reads.list_leases(POOL)
    assert reads.recent(POOL, "l1") is None
    assert reads.recent_answers() == 0

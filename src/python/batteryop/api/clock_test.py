"""Tests of the shared clock (TD-004: the fake battery reads time from it)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from batteryop.api.clock import FakeClock, SystemClock

START = datetime(2030, 1, 1, tzinfo=UTC)


@pytest.mark.req("TD-004")
async def test_fake_clock_wakes_sleepers_in_order_only_when_advanced() -> None:
    clock = FakeClock(START)
    woke: list[str] = []

    async def sleeper(name: str, seconds: float) -> None:
        await clock.sleep_until(START + timedelta(seconds=seconds))
        woke.append(name)

    tasks = [asyncio.create_task(sleeper(n, s)) for n, s in (("b", 2), ("a", 1), ("c", 5))]
    await asyncio.sleep(0)
    assert clock.next_deadline() == START + timedelta(seconds=1)
    clock.advance(0.5)
    await asyncio.sleep(0)
    assert woke == []
    assert clock.advance(1.5) == START + timedelta(seconds=2)
    await asyncio.gather(*tasks[:2])
    assert woke == ["a", "b"]
    assert not tasks[2].done()
    clock.set(START + timedelta(seconds=5))
    await tasks[2]
    assert woke == ["a", "b", "c"]
    assert clock.next_deadline() is None


@pytest.mark.req("TD-004")
async def test_fake_clock_refuses_to_go_back_or_be_naive() -> None:
    clock = FakeClock(START)
    with pytest.raises(ValueError):
        clock.advance(-1)
    with pytest.raises(ValueError):
        clock.set(START - timedelta(seconds=1))
    with pytest.raises(ValueError):
        FakeClock(datetime(2030, 1, 1))
    await clock.sleep_until(START)  # already due: returns at once


@pytest.mark.req("TD-004")
async def test_cancelled_sleepers_are_forgotten() -> None:
    clock = FakeClock(START)
    task = asyncio.create_task(clock.sleep_until(START + timedelta(seconds=1)))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert clock.next_deadline() is None


@pytest.mark.req("TD-004")
async def test_system_clock_is_aware_and_sleeps_until() -> None:
    clock = SystemClock()
    now = clock.now()
    assert now.tzinfo is not None
    await asyncio.wait_for(clock.sleep_until(now + timedelta(milliseconds=20)), 2)
    assert clock.now() >= now + timedelta(milliseconds=20)


@pytest.mark.req("TD-004")
async def test_fake_clock_moves_wall_and_monotonic_together_and_counts_sleepers() -> None:
    clock = FakeClock(START, monotonic_start=5.0)
    assert clock.monotonic() == 5.0
    task = asyncio.create_task(clock.sleep_until(START + timedelta(seconds=3)))
    await asyncio.sleep(0)
    assert clock.sleepers == 1
    clock.advance(timedelta(seconds=2.5))
    assert clock.monotonic() == 7.5
    assert clock.sleepers == 1
    clock.advance(0.5)
    await task
    assert clock.sleepers == 0
    assert clock.now() == START + timedelta(seconds=3)


def test_system_clock_monotonic_never_goes_back() -> None:
    clock = SystemClock()
    first = clock.monotonic()
    assert clock.monotonic() >= first

"""`within`: a bound in time that never loses the caller's cancellation (`_compat`)."""

from __future__ import annotations

import asyncio

import pytest

from batteryop.api._compat import TIMEOUT_ERRORS, within


async def test_the_result_comes_back_within_the_bound() -> None:
    assert await within(asyncio.sleep(0, "done"), 5) == "done"
    assert await within(asyncio.sleep(0, "unbounded"), None) == "unbounded"


async def test_past_the_bound_it_raises_a_timeout_and_stops_the_awaitable() -> None:
    never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    with pytest.raises(TIMEOUT_ERRORS):
        await within(never, 0.01)
    assert never.cancelled()


async def test_a_cancellation_in_the_step_the_awaitable_ends_is_kept() -> None:
    """The awaitable finishes and the caller is cancelled in one loop step: Python 3.11's
    `asyncio.wait_for` returns the result here and the cancellation is lost (a watch asked to
    stop as its next chunk arrived ran on, CI 2026-12-06); `within` raises it."""
    loop = asyncio.get_running_loop()
    arrived: asyncio.Future[str] = loop.create_future()
    entered = asyncio.Event()

    async def reader() -> str:
        entered.set()
        return await within(arrived, 30)

    task = asyncio.create_task(reader())
    await entered.wait()
    await asyncio.sleep(0)  # the reader is now waiting on `arrived`
    arrived.set_result("chunk")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

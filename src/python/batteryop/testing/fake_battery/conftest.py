"""Fixtures for the fake battery's own tests: fake flintlockd Hosts, a FakeBattery, stubs.

Test modules here run on one event loop per module (`loop_scope="module"`), so the two fake
flintlockd processes start once per module.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator

import grpc
import pytest
import pytest_asyncio

from batteryop.testing.fake_battery import FakeBattery, FakeClock, Timings
from batteryop.testing.fake_battery.testkit import BatteryStubs
from batteryop.testing.fake_flintlock import FakeFlintlockd

SWEEP = 1.0
WINDOW = 3.0
TICK = 10.0


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def flintlock_hosts() -> AsyncIterator[dict[str, FakeFlintlockd]]:
    async with contextlib.AsyncExitStack() as stack:
        yield {
            name: await stack.enter_async_context(FakeFlintlockd.start(address="127.0.0.1"))
            for name in ("host-a", "host-b")
        }


@pytest.fixture
def host_targets(flintlock_hosts: dict[str, FakeFlintlockd]) -> dict[str, str]:
    return {name: host.target for name, host in flintlock_hosts.items()}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def timings() -> Timings:
    return Timings(sweep_interval=SWEEP, warning_window=WINDOW, reconcile_interval=TICK)


@pytest_asyncio.fixture(loop_scope="module")
async def battery(
    host_targets: dict[str, str], clock: FakeClock, timings: Timings
) -> AsyncIterator[FakeBattery]:
    async with FakeBattery.start(hosts=host_targets, clock=clock, timings=timings) as fake:
        yield fake


@pytest_asyncio.fixture(loop_scope="module")
async def stubs(battery: FakeBattery) -> AsyncIterator[BatteryStubs]:
    async with grpc.aio.insecure_channel(battery.target) as channel:
        yield BatteryStubs.on(channel)


@pytest.fixture
def ns() -> str:
    return f"fb-{uuid.uuid4().hex[:8]}"

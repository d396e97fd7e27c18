import asyncio
import logging

import pytest

from batteryop.obs.health import HealthServer
from batteryop.obs.supervisor import Supervisor, TaskDownError


class Sleeps:
    """The supervisor's backoff waits: each one lasts until the test ends it."""

    def __init__(self) -> None:
        self.delays: list[float] = []
        self._started: asyncio.Queue[asyncio.Event] = asyncio.Queue()

    async def __call__(self, seconds: float) -> None:
        end = asyncio.Event()
        self.delays.append(seconds)
        self._started.put_nowait(end)
        await end.wait()

    async def next(self) -> asyncio.Event:
        """The next wait, once it started; set the event to end it."""
        return await asyncio.wait_for(self._started.get(), timeout=5)


@pytest.mark.req("DP-100", "DP-101", "DP-107")
async def test_a_failing_task_is_logged_reported_down_and_started_again_with_backoff(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sleeps = Sleeps()
    supervisor = Supervisor(sleep=sleeps)
    runs = 0
    third = asyncio.Event()

    async def flaky() -> None:
        nonlocal runs
        runs += 1
        if runs < 3:
            raise RuntimeError(f"boom {runs}")
        third.set()
        await asyncio.Event().wait()  # then runs for good

    supervisor.start("watch-nodes", flaky)
    health = HealthServer("127.0.0.1", 0, checks=supervisor.checks())
    try:
        first = await sleeps.next()
        assert supervisor.down() == {"watch-nodes": "RuntimeError: boom 1"}
        [result] = await health.readiness()
        assert not result.ok
        assert result.line().startswith("[-]watch-nodes failed: TaskDownError")
        assert "boom 1" in result.line()
        failure = next(r for r in caplog.records if "watch-nodes" in r.getMessage())
        assert failure.levelno == logging.ERROR
        assert failure.exc_info is not None and "boom 1" in str(failure.exc_info[1])

        first.set()
        second = await sleeps.next()
        assert supervisor.down() == {"watch-nodes": "RuntimeError: boom 2"}
        assert sleeps.delays == [1.0, 2.0]  # doubling
        second.set()
        await asyncio.wait_for(third.wait(), timeout=5)
        assert supervisor.down() == {}
        assert [r.ok for r in await health.readiness()] == [True]
    finally:
        await supervisor.stop()


async def test_a_task_that_returns_is_not_started_again() -> None:
    supervisor = Supervisor()
    done = asyncio.Event()
    runs = 0

    async def once() -> None:
        nonlocal runs
        runs += 1
        done.set()

    supervisor.start("once", once)
    await done.wait()
    await supervisor.stop()
    assert runs == 1
    assert supervisor.checks()["once"]()


def test_a_task_down_error_names_the_task() -> None:
    err = TaskDownError("follow-battery-events", "ValueError: x")
    assert err.task == "follow-battery-events"
    assert "follow-battery-events" in str(err)

import asyncio
import logging
from collections.abc import Awaitable, Callable

import pytest

from batteryop.obs.health import HealthServer
from batteryop.obs.supervisor import Supervisor, TaskDownError
from batteryop.testing.sleeps import Sleeps


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


@pytest.mark.req("DP-107")
async def test_a_task_stopped_while_down_is_up_once_started_again() -> None:
    sleeps = Sleeps()
    supervisor = Supervisor(sleep=sleeps)
    running = asyncio.Event()

    async def fails() -> None:
        raise RuntimeError("boom")

    async def runs() -> None:
        running.set()
        await asyncio.Event().wait()

    supervisor.start("watch", fails)
    await sleeps.next()
    assert supervisor.down() == {"watch": "RuntimeError: boom"}
    await supervisor.stop()  # while it waits to be started again
    supervisor.start("watch", runs)
    try:
        await asyncio.wait_for(running.wait(), timeout=5)
        assert supervisor.down() == {}
    finally:
        await supervisor.stop()


@pytest.mark.req("DP-107")
async def test_a_cancelled_task_is_forgotten_and_its_name_can_run_again() -> None:
    supervisor = Supervisor()
    started: asyncio.Queue[int] = asyncio.Queue()

    def forever(n: int) -> Callable[[], Awaitable[None]]:
        async def run() -> None:
            started.put_nowait(n)
            await asyncio.Event().wait()

        return run

    first = supervisor.start("reconciler pool-a", forever(1))
    assert await asyncio.wait_for(started.get(), 5) == 1
    assert supervisor.cancel("reconciler pool-a") is first
    with pytest.raises(asyncio.CancelledError):
        await first
    assert "reconciler pool-a" not in supervisor.checks()
    assert supervisor.cancel("reconciler pool-a") is None
    supervisor.start("reconciler pool-a", forever(2))  # the same name, a new Pool spec
    try:
        assert await asyncio.wait_for(started.get(), 5) == 2
        assert list(supervisor.checks()) == ["reconciler pool-a"]
    finally:
        await supervisor.stop()

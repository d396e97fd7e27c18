import asyncio
import logging

from batteryop.obs.tasks import cancel_all


async def test_every_task_is_cancelled_and_ended_whatever_it_raises() -> None:
    started = asyncio.Event()

    async def forever() -> None:
        started.set()
        await asyncio.Event().wait()

    async def fails_when_stopped() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            raise RuntimeError("cleanup failed")  # dropped: it is being stopped

    done = asyncio.ensure_future(asyncio.sleep(0, result="early"))
    await done
    tasks = [asyncio.create_task(forever()), asyncio.create_task(fails_when_stopped()), done]
    await started.wait()
    await cancel_all(tasks)
    assert all(t.done() for t in tasks)
    assert tasks[0].cancelled()
    assert isinstance(tasks[1].exception(), RuntimeError)
    assert done.result() == "early"


async def test_no_tasks_is_fine() -> None:
    await cancel_all([])


class _Warned(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []
        self.seen = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())
        self.seen.set()


async def test_a_task_that_keeps_running_when_cancelled_is_named_and_waited_for() -> None:
    started, release = asyncio.Event(), asyncio.Event()

    async def swallows_its_cancellation() -> str:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await release.wait()  # runs on, as a lost cancellation would
        return "ended late"

    task = asyncio.create_task(swallows_its_cancellation(), name="stuck-watch")
    quick = asyncio.create_task(asyncio.Event().wait(), name="quick")
    await started.wait()
    warned = _Warned()
    logger = logging.getLogger("batteryop.obs.tasks")
    logger.addHandler(warned)
    try:
        stopping = asyncio.create_task(cancel_all([task, quick], warn_after=0.01))
        await warned.seen.wait()
        assert not stopping.done()  # still waited for
        release.set()
        await stopping
    finally:
        logger.removeHandler(warned)
    [message] = warned.messages
    assert "stuck-watch" in message
    assert "quick" not in message
    assert task.result() == "ended late"

import asyncio

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

import asyncio
from collections import Counter

import pytest

from batteryop.api.clock import FakeClock
from batteryop.kube.workqueue import Answer, Retry, WorkQueue


async def test_a_key_added_many_times_is_reconciled_once() -> None:
    seen: Counter[str] = Counter()
    done = asyncio.Event()

    async def handle(key: str) -> None:
        seen[key] += 1
        done.set()

    q: WorkQueue[str] = WorkQueue(handle, name="t", workers=2)
    for _ in range(10):
        q.add("a")
    await q.start()
    await asyncio.wait_for(done.wait(), 5)
    await asyncio.sleep(0.05)
    await q.stop()
    assert seen == Counter({"a": 1})


async def test_a_key_is_never_processed_twice_at_once_and_reruns_when_dirty() -> None:
    running: set[str] = set()
    overlaps = 0
    runs = 0
    second = asyncio.Event()
    release_first = asyncio.Event()

    async def handle(key: str) -> None:
        nonlocal overlaps, runs
        if key in running:
            overlaps += 1
        running.add(key)
        runs += 1
        if runs == 1:
            await release_first.wait()
        else:
            second.set()
        running.discard(key)

    q: WorkQueue[str] = WorkQueue(handle, name="t", workers=4)
    await q.start()
    q.add("a")
    await asyncio.sleep(0.05)
    q.add("a")  # while the first run is in progress: marked dirty
    q.add("a")
    release_first.set()
    await asyncio.wait_for(second.wait(), 5)
    await q.stop()
    assert (overlaps, runs) == (0, 2)


async def test_an_earlier_add_wins_over_a_later_requeue() -> None:
    times: list[float] = []
    loop = asyncio.get_running_loop()
    got = asyncio.Event()

    async def handle(key: str) -> None:
        times.append(loop.time())
        got.set()

    q: WorkQueue[str] = WorkQueue(handle, name="t")
    await q.start()
    start = loop.time()
    q.add_after("a", 30)
    q.add_after("a", 0.05)
    await asyncio.wait_for(got.wait(), 5)
    await q.stop()
    assert times[0] - start < 1


async def test_requeue_after_returned_by_the_handler_runs_again() -> None:
    runs = 0
    twice = asyncio.Event()

    async def handle(key: str) -> float | None:
        nonlocal runs
        runs += 1
        if runs == 2:
            twice.set()
            return None
        return 0.05

    q: WorkQueue[str] = WorkQueue(handle, name="t")
    await q.start()
    q.add("a")
    await asyncio.wait_for(twice.wait(), 5)
    await q.stop()
    assert runs == 2


def test_failures_back_off_exponentially_within_bounds() -> None:
    q: WorkQueue[str] = WorkQueue(_boom, name="t", backoff_min=1, backoff_max=30)
    assert [q.retry_delay(n) for n in range(1, 8)] == [1, 2, 4, 8, 16, 30, 30]


async def test_a_failing_reconcile_is_retried_and_success_resets_the_count() -> None:
    calls = 0
    ok = asyncio.Event()

    async def flaky(key: str) -> None:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise RuntimeError("transient")
        ok.set()

    q: WorkQueue[str] = WorkQueue(flaky, name="t", backoff_min=0.02, backoff_max=0.05)
    await q.start()
    q.add("a")
    await asyncio.wait_for(ok.wait(), 5)
    await q.stop()
    assert (calls, q.failed, q.processed) == (3, 2, 1)
    assert "a" not in q._failures


async def test_a_backoff_answer_waits_like_a_failure_and_another_answer_resets_it() -> None:
    """`Retry.BACKOFF` (a Pool battery did not answer) is retried after the same growing delay
    as a raise, without an error counted; any other answer starts the delay over."""
    clock = FakeClock()
    answers = [Retry.BACKOFF, Retry.BACKOFF, Retry.BACKOFF, None, Retry.BACKOFF]
    ran: asyncio.Queue[Retry | None] = asyncio.Queue()

    async def handler(key: str) -> Retry | None:
        runs = ran.qsize() + len(delays)
        answer = answers[runs] if runs < len(answers) else None
        await ran.put(answer)
        return answer

    delays: list[float | None] = []
    q: WorkQueue[str] = WorkQueue(handler, name="t", clock=clock)
    await q.start()
    q.add("a")
    while len(delays) < len(answers):
        await ran.get()
        while "a" in q._active:  # the worker finishes the run and queues the retry
            await asyncio.sleep(0)
        due = q._due.get("a")
        delays.append(None if due is None else due - clock.monotonic())
        if due is None:
            q.add("a")  # a new event after the completed reconcile
        else:
            clock.advance(due - clock.monotonic())
            q._wake()
    await q.stop()
    assert delays == [1.0, 2.0, 4.0, None, 1.0]
    assert (q.failed, q.processed) == (0, 5)


async def test_stop_ends_a_worker_a_new_key_just_woke() -> None:
    ran: list[str] = []

    async def handler(key: str) -> None:
        ran.append(key)

    q: WorkQueue[str] = WorkQueue(handler, name="t", workers=1)
    await q.start()
    q.add_after("later", 60)
    for _ in range(3):
        await asyncio.sleep(0)  # the worker now waits for "later", with a timeout
    q.add("now")  # wakes it, and stop cancels it in the same step of the loop
    async with asyncio.timeout(5):  # not wait_for: that would run stop a step later
        await q.stop()
    assert ran == []


async def _boom(key: str) -> None:
    raise RuntimeError("boom")


def test_workers_must_be_positive() -> None:
    with pytest.raises(ValueError, match="workers must be at least 1"):
        WorkQueue(_boom, name="q", workers=0)


async def test_a_discarded_key_is_not_run_and_leaves_no_entry_behind() -> None:
    ran: list[str] = []
    done = asyncio.Event()

    async def handle(key: str) -> None:
        ran.append(key)
        done.set()

    queue: WorkQueue[str] = WorkQueue(handle, name="t", workers=1)
    for i in range(500):  # keys requeued far ahead, then their objects deleted
        queue.add_after(f"gone-{i}", 3600)
        queue.discard(f"gone-{i}")
    queue.add("kept")
    sizes = queue.sizes()
    assert sizes["queued"] == 1 and sizes["heap"] <= 2 * 1 + 64
    await queue.start()
    try:
        await asyncio.wait_for(done.wait(), timeout=10)
    finally:
        await queue.stop()
    assert ran == ["kept"]


async def test_run_works_the_queue_and_a_failing_worker_ends_it_for_its_supervisor() -> None:
    handled = asyncio.Event()

    async def handle(key: str) -> Answer:
        if key == "bug":
            return "soon"  # type: ignore[return-value]  # a handler bug the worker trips on
        handled.set()
        return None

    q: WorkQueue[str] = WorkQueue(handle, name="t", workers=3)
    q.add("a")
    running = asyncio.create_task(q.run())
    await asyncio.wait_for(handled.wait(), 5)
    workers = {t for t in asyncio.all_tasks() if t.get_name().startswith("t-worker-")}
    assert len(workers) == 3
    q.add("bug")
    with pytest.raises(TypeError):  # raised to whoever runs it: a Supervisor logs and restarts
        await asyncio.wait_for(running, 5)
    assert all(t.done() for t in workers)  # the other workers were cancelled with it

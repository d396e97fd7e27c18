"""A keyed work queue for level-triggered reconcilers, on asyncio.

An informer delivers watch events; the controllers want "reconcile this object, now or later, never
twice at once". `WorkQueue` gives exactly that:

- `add(key)` makes the key due now; `add_after(key, seconds)` makes it due later, and the
  earliest due time wins, so a watch event never waits behind a long requeue.
- A key is processed by at most one worker at a time. A key added while it is being
  processed is marked dirty and runs once more right after, with the newest state.
- Workers are bounded (`workers`); a reconcile that raises, or that answers `Retry.BACKOFF`
  (it ended waiting on something else, and said so in its object's status), is retried with a
  per-key exponential backoff clamped to [`backoff_min`, `backoff_max`] (1-30 s by default),
  reset by the next reconcile that answers anything else. The two differ only in the log: a
  raise is logged with its traceback, a `BACKOFF` answer was explained by its handler.
- Nothing polls: idle workers sleep until the earliest due time or a new key.

Two ways to run the workers: `start()`/`stop()` keep them as tasks of the queue; `run()` runs
them until cancelled and raises if one ends with an error (after cancelling the others), so an
`obs.supervisor.Supervisor` can run a queue as one task: logged, restarted, named in `/readyz`.
"""

from __future__ import annotations

import asyncio
import enum
import heapq
import itertools
import logging
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from batteryop.api.backoff import Backoff
from batteryop.api.clock import SYSTEM_CLOCK, Clock
from batteryop.obs.tasks import cancel_all

K = TypeVar("K", bound=Hashable)

log = logging.getLogger(__name__)


class Retry(enum.Enum):
    """What a handler may answer besides a delay in seconds or None."""

    BACKOFF = "backoff"
    """Not done: retry after this key's backoff, as if the handler had raised."""


Answer = float | Retry | None
"""A handler's answer: run again after that many seconds, after the key's backoff, or only
when added again."""


@dataclass(order=True)
class _Entry(Generic[K]):
    due: float
    seq: int
    key: K = field(compare=False)


class WorkQueue(Generic[K]):
    """Keyed, deduplicating, delayed work queue with bounded workers and error backoff."""

    def __init__(
        self,
        handler: Callable[[K], Awaitable[Answer]],
        *,
        name: str,
        workers: int = 4,
        backoff_min: float = 1.0,
        backoff_max: float = 30.0,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        if workers < 1:
            raise ValueError(f"{name}: workers must be at least 1")
        self.name = name
        self._handler = handler
        self._workers = workers
        self._backoff = Backoff(backoff_min, backoff_max)
        self._clock = clock
        self._heap: list[_Entry[K]] = []
        self._due: dict[K, float] = {}
        self._active: set[K] = set()
        self._dirty: dict[K, float] = {}
        self._failures: dict[K, int] = {}
        self._seq = itertools.count()
        self._changed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.processed = 0
        self.failed = 0

    # -- producer side -----------------------------------------------------------------

    def add(self, key: K) -> None:
        """Reconcile `key` as soon as a worker is free."""
        self.add_after(key, 0.0)

    def add_after(self, key: K, seconds: float) -> None:
        """Reconcile `key` after `seconds`, unless it is already due sooner."""
        due = self._clock.monotonic() + max(0.0, seconds)
        if key in self._active:
            self._dirty[key] = min(due, self._dirty.get(key, due))
            return
        current = self._due.get(key)
        if current is not None and current <= due:
            return
        self._due[key] = due
        heapq.heappush(self._heap, _Entry(due, next(self._seq), key))
        self._wake()

    def discard(self, key: K) -> None:
        """Forget `key` (its object is gone): no pending run, no retry count. A run in
        progress finishes; it is not repeated."""
        self._due.pop(key, None)
        self._dirty.pop(key, None)
        self._failures.pop(key, None)
        # Heap entries of forgotten keys are skipped when they come up; rebuild the heap when
        # they outnumber the live ones, so forgotten keys cannot pile up in it.
        if len(self._heap) > 2 * len(self._due) + 64:
            self._heap = [e for e in self._heap if self._due.get(e.key) == e.due]
            heapq.heapify(self._heap)

    def _wake(self) -> None:
        # Single-threaded asyncio: the queue's state changes only between awaits, so an
        # event that wakes every idle worker to re-check is enough (no lock needed).
        self._changed.set()

    def __len__(self) -> int:
        return len(self._due) + len(self._dirty)

    def sizes(self) -> dict[str, int]:
        """How many keys each of the queue's maps holds (for leak checks)."""
        return {
            "queued": len(self._due),
            "heap": len(self._heap),
            "active": len(self._active),
            "dirty": len(self._dirty),
            "failures": len(self._failures),
        }

    def pending(self, key: K) -> bool:
        return key in self._due or key in self._dirty or key in self._active

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        if self._tasks:
            return
        self._tasks = [
            asyncio.create_task(self._work(i), name=f"{self.name}-worker-{i}")
            for i in range(self._workers)
        ]
        self._wake()

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        await cancel_all(tasks)

    async def run(self) -> None:
        """Run the workers until cancelled; if one fails, cancel the others and raise."""
        workers = [
            asyncio.create_task(self._work(i), name=f"{self.name}-worker-{i}")
            for i in range(self._workers)
        ]
        self._wake()
        try:
            await asyncio.gather(*workers)
        finally:
            await cancel_all(workers)

    def retry_delay(self, failures: int) -> float:
        """Backoff after the `failures`-th failure in a row: doubling, clamped to the bounds."""
        return self._backoff.delay(failures - 1)

    def _failed(self, key: K) -> float:
        """One more failure in a row for `key`; the delay it earns."""
        failures = self._failures.get(key, 0) + 1
        self._failures[key] = failures
        return self.retry_delay(failures)

    # -- consumer side -----------------------------------------------------------------

    async def _next(self) -> K:
        while True:
            while self._heap and self._due.get(self._heap[0].key) != self._heap[0].due:
                heapq.heappop(self._heap)  # superseded by an earlier add
            wait: float | None = None
            if self._heap:
                wait = self._heap[0].due - self._clock.monotonic()
                if wait <= 0:
                    entry = heapq.heappop(self._heap)
                    del self._due[entry.key]
                    self._active.add(entry.key)
                    return entry.key
            self._changed.clear()
            # Not `asyncio.wait_for`: on Python 3.11 it returns normally when the wait ended
            # in the same loop step as the task's cancellation, so `stop` never ended a worker
            # that a new key had just woken (test_stop_ends_a_worker_a_new_key_just_woke).
            try:
                async with asyncio.timeout(wait):
                    await self._changed.wait()
            except TimeoutError:
                pass

    async def _work(self, index: int) -> None:
        while True:
            key = await self._next()
            requeue: float | None = None
            try:
                answer = await self._handler(key)
            except asyncio.CancelledError:
                self._active.discard(key)
                raise
            except Exception:
                self.failed += 1
                requeue = self._failed(key)
                log.exception(
                    "%s: reconcile of %s failed; retrying in %.1fs", self.name, key, requeue
                )
            else:
                self.processed += 1
                if answer is Retry.BACKOFF:
                    requeue = self._failed(key)
                    log.debug("%s: %s waits; retrying in %.1fs", self.name, key, requeue)
                else:
                    self._failures.pop(key, None)
                    requeue = answer
            finally:
                self._active.discard(key)
            dirty = self._dirty.pop(key, None)
            if dirty is not None:
                self.add_after(key, max(0.0, dirty - self._clock.monotonic()))
            if requeue is not None:
                self.add_after(key, requeue)

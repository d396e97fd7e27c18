"""`Supervisor`: a deployable's long-lived tasks, kept running and reported in `/readyz`.

A long-lived task (the operator's watch of Nodes, the Exec Agent's certificate renewal, the CSR
approver's watch of CSRs) is a coroutine meant to run as long as its process does. Started bare
with `create_task`, one that raises is gone without a word. Under a `Supervisor`, a task that
raises is logged with its traceback, reported down, and started again after a backoff (1 s
doubling to 30 s, back to 1 s once a run lasted longer than the longest wait), until `stop()`.
A task that returns has finished: it is not started again and not reported down.

DP-101: restarted with backoff. DP-100: `checks()` gives one readiness check per task, named
after it, for `HealthServer`: it fails
while the task is down (from its failure until it runs again), with the error in the line,
so `/readyz` says which task is down: ``[-]watch-nodes failed: TaskDownError: ...``.
Every deployable runs its long-lived tasks under one (DP-107).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from batteryop.api.backoff import Backoff
from batteryop.api.clock import SYSTEM_CLOCK, Clock
from batteryop.obs.tasks import cancel_all

log = logging.getLogger(__name__)

TaskFactory = Callable[[], Awaitable[None]]
Sleep = Callable[[float], Awaitable[None]]


class TaskDownError(RuntimeError):
    """A supervised background task failed and waits to be started again."""

    def __init__(self, task: str, error: str) -> None:
        super().__init__(f"task {task} is down after {error}")
        self.task = task
        self.error = error


@dataclass
class _State:
    failures: int = 0
    down: str | None = None
    """The last failure, while the task waits to be started again."""


class Supervisor:
    """Named background tasks, started again after a failure with backoff."""

    def __init__(
        self,
        *,
        backoff_min: float = 1.0,
        backoff_max: float = 30.0,
        sleep: Sleep = asyncio.sleep,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._backoff = Backoff(backoff_min, backoff_max)
        self._sleep = sleep
        self._clock = clock
        self._states: dict[str, _State] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def add(self, name: str) -> None:
        """Declare a task (so `checks()` names it before it starts)."""
        self._states.setdefault(name, _State())

    def start(self, name: str, run: TaskFactory) -> asyncio.Task[None]:
        """Run `run()` as the task `name`, and again each time it raises; the supervising task
        (cancelling it ends `run` too)."""
        self.add(name)
        if name in self._tasks:
            raise RuntimeError(f"task {name} is already running")
        task = asyncio.create_task(self._supervise(name, run), name=name)
        self._tasks[name] = task
        return task

    def cancel(self, name: str) -> asyncio.Task[None] | None:
        """Cancel the task `name` and forget it (no check names it any more), for a task that
        lives less long than its process (one per object); the task, to await if need be."""
        self._states.pop(name, None)
        task = self._tasks.pop(name, None)
        if task is not None:
            task.cancel()
        return task

    def down(self) -> dict[str, str]:
        """The tasks that are down now, with their last error."""
        return {name: s.down for name, s in self._states.items() if s.down is not None}

    def retry_delay(self, failures: int) -> float:
        """The wait after the `failures`-th failure in a row."""
        return self._backoff.delay(failures - 1)

    def checks(self) -> dict[str, Callable[[], bool]]:
        """One readiness check per task, failing with `TaskDownError` while it is down."""

        def check(name: str) -> Callable[[], bool]:
            def task_up() -> bool:
                state = self._states[name]
                if state.down is not None:
                    raise TaskDownError(name, state.down)
                return True

            return task_up

        return {name: check(name) for name in self._states}

    async def _supervise(self, name: str, run: TaskFactory) -> None:
        state = self._states[name]
        while True:
            state.down = None  # running (again), also after a stop() that caught it down
            started = self._clock.monotonic()
            try:
                await run()
            except asyncio.CancelledError:
                raise
            except Exception as err:
                if self._clock.monotonic() - started >= self._backoff.maximum:
                    state.failures = 0  # it ran well for a while: start the backoff over
                state.failures += 1
                state.down = f"{type(err).__name__}: {err}"
                delay = self.retry_delay(state.failures)
                log.exception("Task %s failed; starting it again in %.1fs", name, delay)
                await self._sleep(delay)
                continue
            log.info("Task %s finished", name)
            return

    async def stop(self) -> None:
        """Cancel every task and wait for them to end."""
        tasks, self._tasks = list(self._tasks.values()), {}
        await cancel_all(tasks)

"""What a long step is doing, said while it runs: the harnesses' builds never go quiet.

A cold build of the pinned kube-apiserver and etcd takes minutes on two cores; a person who ran
the README's first command saw one line and then nothing for 224 s (issue 49). `Heartbeat`
says, for one step, what it is doing, how long it has taken and what is left, each time there
is news and at least every `every` seconds while there is none: a line each time (the output
is often a pipe or a CI log, where a redrawn line would be noise).

`run_reporting` runs a command under a `Heartbeat`, counting the lines its standard error
gives as progress (`go build -v` prints each package as it compiles it) and keeping the last
ones for an error message. `Heartbeat.watch` awaits work under one (the local stack's steps,
a wait for a Pool), sleeping on the heartbeat's clock between lines.
"""

from __future__ import annotations

import asyncio
import collections
import datetime
import logging
import os
import selectors
import subprocess
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TypeVar

from batteryop.api.clock import SYSTEM_CLOCK, Clock

log = logging.getLogger(__name__)
T = TypeVar("T")

EVERY_SECONDS: Final = 15.0
"""How long a step may go without a line: long enough not to flood a CI log, short enough
that a person never wonders whether it hangs."""


def format_elapsed(seconds: float) -> str:
    """`42 s`, `3 min 05 s`."""
    whole = int(seconds)
    if whole < 60:
        return f"{whole} s"
    return f"{whole // 60} min {whole % 60:02d} s"


class Heartbeat:
    """Lines about one step: `what` (elapsed, `detail`; then `left`)."""

    def __init__(
        self,
        what: str,
        *,
        left: str = "",
        every: float = EVERY_SECONDS,
        say: Callable[[str], None] | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.what = what
        self.left = left
        self.every = every
        self._say = say or log.warning
        self._clock = clock
        self.started = clock.monotonic()
        self._last = self.started

    def elapsed(self) -> float:
        return self._clock.monotonic() - self.started

    def due_in(self) -> float:
        """Seconds until the next line is due if nothing happens."""
        return max(0.0, self._last + self.every - self._clock.monotonic())

    def beat(self, detail: str = "", *, force: bool = False) -> bool:
        """Say where the step is, if a line is due (or `force`); whether it said it."""
        if not force and self.due_in() > 0:
            return False
        self._last = self._clock.monotonic()
        parts = [format_elapsed(self.elapsed())]
        if detail:
            parts.append(detail)
        then = f"; then {self.left}" if self.left else ""
        self._say(f"{self.what}: {', '.join(parts)}{then}")
        return True

    async def watch(self, work: Awaitable[T]) -> T:
        """`work`'s result, with a line each time one is due while it runs; cancelling the
        watch cancels the work."""
        task = asyncio.ensure_future(work)
        try:
            while True:
                due = self._clock.now() + datetime.timedelta(seconds=self.due_in())
                tick = asyncio.ensure_future(self._clock.sleep_until(due))
                try:
                    await asyncio.wait({task, tick}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    tick.cancel()
                if task.done():
                    return task.result()
                self.beat()
        finally:
            task.cancel()


@dataclass(frozen=True)
class Reported:
    """How a command run by `run_reporting` ended."""

    returncode: int
    progress_lines: int
    tail: str


def run_reporting(
    cmd: Sequence[str],
    heartbeat: Heartbeat,
    *,
    unit: str = "",
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    is_progress: Callable[[str], bool] = lambda line: True,
    keep: int = 20,
    timeout: float | None = None,
) -> Reported:
    """Run `cmd`, beating `heartbeat` with the count of its stderr lines that are progress
    (`N <unit>`; with no `unit`, only the time); the other lines' last `keep` are the tail an
    error shows. Past `timeout` seconds the command is killed and `subprocess.TimeoutExpired`
    raised."""
    proc = subprocess.Popen(
        list(cmd),
        cwd=cwd,
        env=dict(env) if env is not None else None,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert proc.stderr is not None
    fd = proc.stderr.fileno()
    count = 0
    tail: collections.deque[str] = collections.deque(maxlen=keep)
    pending = b""
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while True:
            if timeout is not None and heartbeat.elapsed() > timeout:
                proc.kill()
                proc.wait()
                proc.stderr.close()
                raise subprocess.TimeoutExpired(list(cmd), timeout)
            wait = heartbeat.due_in()
            if timeout is not None:
                wait = min(wait, max(0.0, timeout - heartbeat.elapsed()))
            if selector.select(timeout=wait):
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                *lines, pending = (pending + chunk).split(b"\n")
                for raw in lines:
                    line = raw.decode(errors="replace").rstrip()
                    if not line:
                        continue
                    if is_progress(line):
                        count += 1
                    else:
                        tail.append(line)
            heartbeat.beat(f"{count} {unit}" if unit else "")
    if pending.strip():
        tail.append(pending.decode(errors="replace").rstrip())
    proc.stderr.close()
    return Reported(proc.wait(), count, "\n".join(tail))


__all__ = ["EVERY_SECONDS", "Heartbeat", "Reported", "format_elapsed", "run_reporting"]

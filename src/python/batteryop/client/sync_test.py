"""The blocking client's private event loop thread (`_sync._Portal`) and its other threads."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from batteryop.client._sync import _iterate_in_thread, _Portal
from batteryop.client._threads import STOP_SIGNALS


@pytest.mark.req("CC-100")
def test_closing_ends_every_task_still_on_the_loop() -> None:
    """gRPC leaves a task per call on the loop; one still pending when the loop closed was
    reported on the `battery` command's stderr as "Task was destroyed but it is pending!"."""
    portal = _Portal(grace=5)

    async def leave_a_task() -> asyncio.Task[bool]:
        return asyncio.get_running_loop().create_task(asyncio.Event().wait())

    task = portal.call(leave_a_task())
    assert not task.done()
    portal.close()
    assert task.cancelled()
    assert portal.loop.is_closed()
    portal.close()  # a second close does nothing


@pytest.mark.req("CC-100")
def test_a_call_returns_the_coroutines_answer_and_raises_its_error() -> None:
    portal = _Portal(grace=5)

    async def answer() -> int:
        return 42

    async def fail() -> None:
        raise ValueError("nope")

    try:
        assert portal.call(answer()) == 42
        with pytest.raises(ValueError, match="nope"):
            portal.call(fail())
    finally:
        portal.close()


STDIN_NEVER_ENDS = """
import asyncio, os, threading
from batteryop.client._sync import _Portal, _iterate_in_thread
r, w = os.pipe()  # nothing is ever written: a read blocks as on a quiet terminal
started = threading.Event()
def chunks():
    started.set()
    yield os.read(r, 10)
async def start():
    return asyncio.ensure_future(_iterate_in_thread(chunks()).__anext__())
portal = _Portal(grace=5)
portal.call(start())
assert started.wait(10)
portal.close()  # the remote command exited: the read is still waiting
print("closed", flush=True)
"""


@pytest.mark.req("CC-103")
def test_a_stdin_read_still_waiting_does_not_hold_up_the_exit() -> None:
    """`battery exec -i` hung after the remote command exited: stdin was read on the default
    executor, whose threads the interpreter joins at exit."""
    done = subprocess.run(
        [sys.executable, "-c", STDIN_NEVER_ENDS],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert (done.returncode, done.stdout) == (0, "closed\n"), done.stderr


def _blocked() -> set[int]:
    """The signals the calling thread blocks."""
    return set(signal.pthread_sigmask(signal.SIG_BLOCK, []))


@pytest.mark.req("CC-108")
def test_ctrl_c_is_left_to_the_main_thread() -> None:
    """A SIGINT the kernel handed to one of the client's threads never woke the main thread,
    blocked in `Future.result()` while a command ran, so `battery run` ignored Ctrl-C (seen in
    CI under load). The loop's thread, the threads it starts (asyncio's executor; gRPC's core
    threads are started there too) and the stdin reader must all block it."""
    before = _blocked()
    assert not STOP_SIGNALS & before
    portal = _Portal(grace=5)

    async def masks() -> list[set[int]]:
        seen = [_blocked(), await asyncio.to_thread(_blocked)]

        def chunks() -> Iterator[bytes]:
            seen.append(_blocked())
            yield b"x"

        assert [chunk async for chunk in _iterate_in_thread(chunks())] == [b"x"]
        return seen

    try:
        seen = portal.call(masks())
    finally:
        portal.close()
    assert len(seen) == 3
    for mask in seen:
        assert mask >= STOP_SIGNALS
    assert _blocked() == before  # the main thread's own mask is as it was

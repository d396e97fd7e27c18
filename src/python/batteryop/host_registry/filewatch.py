"""Wake on changes in a directory, through Linux inotify, without polling.

The kubelet updates a ConfigMap or Secret volume by writing a new timestamped directory and
swapping the `..data` symlink, so a watch on the mount directory for creations, moves,
deletions, writes and attribute changes sees every update. `DirectoryWatch` counts the changes
it has seen (`generation`) and lets a caller wait for the next one; what changed is read from
the files themselves afterwards.

inotify is reached through libc with ctypes (no extra requirement); the descriptor is
non-blocking and read from the event loop (`loop.add_reader`).
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import errno
import logging
import os
from collections.abc import Callable, Iterable
from pathlib import Path

log = logging.getLogger(__name__)

IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000

MASK = (
    IN_MODIFY
    | IN_ATTRIB
    | IN_CLOSE_WRITE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_CREATE
    | IN_DELETE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
)


class WatchError(OSError):
    """inotify could not be set up on a directory."""


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


class DirectoryWatch:
    """Changes under some directories; `on_change` is called once per batch of events."""

    def __init__(
        self, directories: Iterable[Path], on_change: Callable[[], None] | None = None
    ) -> None:
        self.directories = [Path(d) for d in directories]
        self._on_change = on_change
        self._fd = -1
        self.generation = 0
        self._changed = asyncio.Event()

    def start(self) -> None:
        libc = _libc()
        fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            raise WatchError(ctypes.get_errno(), "inotify_init1 failed")
        self._fd = fd
        for directory in self.directories:
            wd = libc.inotify_add_watch(fd, os.fsencode(directory), MASK)
            if wd < 0:
                err = ctypes.get_errno()
                self.close()
                raise WatchError(err, f"cannot watch {directory}: {os.strerror(err)}")
        asyncio.get_running_loop().add_reader(fd, self._readable)

    def _readable(self) -> None:
        try:
            while os.read(self._fd, 65536):
                pass
        except BlockingIOError:
            pass
        except OSError as e:
            if e.errno != errno.EAGAIN:
                log.warning("Failed to read inotify events: %s", e)
        self.generation += 1
        self._changed.set()
        if self._on_change is not None:
            self._on_change()

    async def changed_after(self, generation: int, timeout: float | None) -> bool:
        """Wait until something changed after `generation` was read; False on timeout."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while self.generation <= generation:
            self._changed.clear()
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                return False
            try:  # not wait_for, which can swallow a cancellation (kube/workqueue.py)
                async with asyncio.timeout(remaining):
                    await self._changed.wait()
            except TimeoutError:
                return self.generation > generation
        return True

    def close(self) -> None:
        if self._fd >= 0:
            try:
                asyncio.get_running_loop().remove_reader(self._fd)
            except RuntimeError:
                pass
            os.close(self._fd)
            self._fd = -1

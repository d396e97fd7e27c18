"""A command on a pseudo-terminal, as a shell runs a foreground job: what tests that type into
a terminal (Ctrl-C as the byte 0x03, window changes) drive (`Terminal`)."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import signal
import struct
import subprocess
import termios
from pathlib import Path

from batteryop.api._compat import within


class Terminal:
    """A command on a pseudo-terminal, as its foreground job; what it prints is kept."""

    def __init__(
        self,
        command: str,
        env: dict[str, str],
        cwd: Path | None = None,
        *,
        rows: int = 50,
        columns: int = 160,
    ) -> None:
        self.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        # util-linux's setsid gives bash a session of its own with the terminal (its stdin)
        # as the controlling one, then execs it: no Python runs between fork and exec
        # (testing.processes.die_with_parent says why that matters).
        self.popen = subprocess.Popen(
            ["setsid", "--ctty", "bash", "-c", command],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            cwd=cwd,
        )
        os.close(slave)
        self.output = bytearray()
        self.changed = asyncio.Event()
        self.closed = False
        asyncio.get_running_loop().add_reader(self.master, self._read)

    def _read(self) -> None:
        try:
            data = os.read(self.master, 65536)
        except OSError:  # EIO: every process holding the terminal has closed it
            data = b""
        if not data:
            self.closed = True
            asyncio.get_running_loop().remove_reader(self.master)
        self.output += data
        self.changed.set()

    @property
    def text(self) -> str:
        return self.output.decode(errors="replace")

    async def wait_for(self, marker: str, timeout: float) -> None:
        async def seen() -> None:
            while marker not in self.text:
                assert not self.closed, f"the terminal closed before {marker!r}:\n{self.text}"
                self.changed.clear()
                await self.changed.wait()

        try:
            await within(seen(), timeout)
        except TimeoutError:
            raise AssertionError(f"no {marker!r} in {timeout:.0f}s:\n{self.text[-4000:]}") from None

    def type(self, data: bytes) -> None:
        os.write(self.master, data)

    def resize(self, rows: int, columns: int) -> None:
        """Change the terminal's size as a terminal window does: the kernel sends SIGWINCH to
        its foreground process group."""
        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))

    async def exited(self, timeout: float) -> int:
        code = await within(asyncio.to_thread(self.popen.wait), timeout)
        with contextlib.suppress(TimeoutError):  # let the last output in
            await within(self.drained(), 5)
        return code

    async def drained(self) -> None:
        while not self.closed:
            self.changed.clear()
            await self.changed.wait()

    def close(self) -> None:
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait()
        with contextlib.suppress(ValueError, OSError):
            asyncio.get_running_loop().remove_reader(self.master)
        os.close(self.master)

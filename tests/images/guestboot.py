"""Boot a guest root filesystem under QEMU/KVM (GI-100) with its serial console on a pipe read
line by line. The kit (kernel, initramfs, disk) and QEMU's command line are
`batteryop.testing.guest_image`'s, which the fake flintlockd's QEMU guests boot too."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from batteryop.testing.guest_image import BootError

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


# --- the boot ------------------------------------------------------------------------------


@dataclass
class Guest:
    """A running QEMU and its serial console, every line kept (ANSI colours removed)."""

    proc: asyncio.subprocess.Process
    started: float
    console: list[str] = field(default_factory=list)
    _partial: str = ""

    @classmethod
    async def start(cls, argv: Sequence[str]) -> Guest:
        started = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        return cls(proc, started)

    async def _read(self) -> str | None:
        """The next complete line, or the trailing partial line (a shell prompt) when the
        console goes quiet for a moment; None at end of output."""
        assert self.proc.stdout is not None
        while "\n" not in self._partial:
            try:
                chunk = await asyncio.wait_for(self.proc.stdout.read(4096), 0.5)
            except TimeoutError:
                if self._partial:
                    line, self._partial = self._partial, ""
                    return line
                continue
            if not chunk:
                line, self._partial = self._partial, ""
                return line or None
            self._partial += chunk.decode(errors="replace")
        line, self._partial = self._partial.split("\n", 1)
        return line

    async def wait_for(self, pattern: str, timeout: float) -> tuple[str, float]:
        """The first console line matching `pattern` and the seconds since QEMU started."""
        wanted = re.compile(pattern)

        async def scan() -> tuple[str, float]:
            while (raw := await self._read()) is not None:
                line = ANSI.sub("", raw).replace("\r", "")
                self.console.append(line)
                if wanted.search(line):
                    return line, time.monotonic() - self.started
            raise BootError(f"QEMU exited before /{pattern}/:\n" + self.tail())

        try:
            return await asyncio.wait_for(scan(), timeout)
        except TimeoutError:
            raise BootError(
                f"no /{pattern}/ on the console in {timeout} s:\n" + self.tail()
            ) from None

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")

    async def run(self, script: Sequence[str], timeout: float = 60) -> dict[str, str]:
        """Run shell commands on the logged-in serial console; each command's output between
        markers the typed text cannot match (`@@""` is echoed, `@@` is printed)."""
        results: dict[str, str] = {}
        for i, command in enumerate(script):
            self.send(f'echo "@@""begin {i}"; {command}; echo "@@""end {i}"')
            await self.wait_for(rf"^@@begin {i}$", timeout)
            start = len(self.console)
            await self.wait_for(rf"^@@end {i}$", timeout)
            results[command] = "\n".join(self.console[start:-1])
        return results

    async def stop(self, timeout: float = 30) -> int:
        """Wait for QEMU to exit (the guest powered off), keeping the console; killed if not."""

        async def drain() -> int:
            while (raw := await self._read()) is not None:
                self.console.append(ANSI.sub("", raw).replace("\r", ""))
            return await self.proc.wait()

        try:
            return await asyncio.wait_for(drain(), timeout)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()
            raise BootError("the guest did not power off:\n" + self.tail()) from None

    def kill(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.console[-lines:])

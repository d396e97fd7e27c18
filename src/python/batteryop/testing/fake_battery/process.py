"""`FakeBatteryProcess`: run the standalone fake battery for a test and steer it (TD-006).

    async with FakeBatteryProcess.start(hosts={"host-a": host.target}) as battery:
        channel = grpc.aio.insecure_channel(battery.target)
        await battery.set_faults(unavailable=True)

The process is `sys.executable -m batteryop.testing.fake_battery` with this process's `sys.path`
as its PYTHONPATH; it exits when the block ends, or by itself when this process dies (its stdin
closes).
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import aiohttp

from batteryop.testing.processes import run_module

READY_TIMEOUT_SECONDS = 30.0


class FakeBatteryProcessError(RuntimeError):
    """The fake battery process did not start, or refused a control request."""

    def __init__(self, what: str, detail: str) -> None:
        super().__init__(f"fake battery process: {what}: {detail}")
        self.what = what


class FakeBatteryProcess:
    """A running standalone fake battery: its gRPC target and its control API."""

    def __init__(
        self,
        process: asyncio.subprocess.Process,
        ready: dict[str, Any],
        session: aiohttp.ClientSession,
    ) -> None:
        self._process = process
        self._session = session
        self.target: str = ready["target"]
        self.control_url: str = ready["control"]

    @property
    def pid(self) -> int:
        return self._process.pid

    @classmethod
    @contextlib.asynccontextmanager
    async def start(
        cls,
        *,
        hosts: Mapping[str, str] = {},
        listen: str = "127.0.0.1:0",
        fake_clock: bool = False,
        args: Sequence[str] = (),
        ready_timeout: float = READY_TIMEOUT_SECONDS,
    ) -> AsyncIterator[FakeBatteryProcess]:
        """Run the fake battery (extra CLI args in args) until the block ends."""
        argv = [
            f"--listen={listen}",
            "--exit-on-stdin-eof",
            *(f"--host={name}={target}" for name, target in hosts.items()),
            *args,
        ]
        if fake_clock:
            argv.append("--fake-clock")
        with tempfile.TemporaryDirectory(prefix="fake-battery-") as workdir:
            async with (
                run_module(
                    "batteryop.testing.fake_battery",
                    argv,
                    log_path=Path(workdir) / "fake-battery.log",
                    ready_timeout=ready_timeout,
                    error=lambda detail: FakeBatteryProcessError("start", detail),
                ) as (process, ready),
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session,
            ):
                yield cls(process, ready, session)

    async def control(
        self, method: str, path: str, body: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Call the control API (see control.py); raise FakeBatteryProcessError if refused."""
        async with self._session.request(method, self.control_url + path, json=body) as reply:
            answer: dict[str, Any] = await reply.json()
            if reply.status != 200:
                raise FakeBatteryProcessError(f"{method} {path}", str(answer.get("error")))
            return answer

    async def set_faults(self, **faults: Any) -> dict[str, Any]:
        return await self.control("POST", "/faults", faults)

    async def clear_faults(self) -> dict[str, Any]:
        return await self.control("DELETE", "/faults")

    async def advance(self, seconds: float) -> None:
        await self.control("POST", "/advance", {"seconds": seconds})

    async def state(self) -> dict[str, Any]:
        return await self.control("GET", "/state")

    async def kill(self) -> int:
        """SIGKILL, as a crash: the process dies wherever it is; its exit code."""
        self._process.kill()
        return await self._process.wait()

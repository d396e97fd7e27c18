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
import json
import tempfile
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import aiohttp

from batteryop.testing.processes import module_command

READY_TIMEOUT_SECONDS = 30.0
STOP_TIMEOUT_SECONDS = 5.0


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
        command, env = module_command("batteryop.testing.fake_battery")
        argv = [
            *command,
            f"--listen={listen}",
            "--exit-on-stdin-eof",
            *(f"--host={name}={target}" for name, target in hosts.items()),
            *args,
        ]
        if fake_clock:
            argv.append("--fake-clock")
        with tempfile.TemporaryDirectory(prefix="fake-battery-") as workdir:
            log_path = Path(workdir) / "fake-battery.log"
            process: asyncio.subprocess.Process | None = None
            session: aiohttp.ClientSession | None = None
            try:
                with log_path.open("wb") as log_file:
                    process = await asyncio.create_subprocess_exec(
                        *argv,
                        stdin=asyncio.subprocess.PIPE,
                        stdout=asyncio.subprocess.PIPE,
                        stderr=log_file,
                        env=env,
                        start_new_session=True,
                    )
                ready = await _wait_ready(process, log_path, ready_timeout)
                session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
                yield cls(process, ready, session)
            finally:
                if session is not None:
                    await session.close()
                if process is not None:
                    await _stop(process)

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


async def _wait_ready(
    process: asyncio.subprocess.Process, log_path: Path, within: float
) -> dict[str, Any]:
    assert process.stdout is not None
    try:
        line = await asyncio.wait_for(process.stdout.readline(), within)
    except TimeoutError:
        line = b""
    if not line:
        detail = _tail(log_path)
        raise FakeBatteryProcessError("start", f"no readiness line; log:\n{detail}")
    ready: dict[str, Any] = json.loads(line)
    return ready


def _tail(path: Path) -> str:
    return path.read_text(errors="replace")[-2000:]


async def _stop(process: asyncio.subprocess.Process) -> None:
    if process.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        process.terminate()
    try:
        await asyncio.wait_for(process.wait(), STOP_TIMEOUT_SECONDS)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()

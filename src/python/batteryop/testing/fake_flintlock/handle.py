"""`FakeFlintlockd`: start a fake flintlockd process for a test and drive its faults (TD-011).

    async with FakeFlintlockd.start(address="127.0.0.2", tls=tls) as host:
        channel = grpc.aio.secure_channel(host.target, credentials)
        await host.fail_creates(grpc.StatusCode.UNAVAILABLE, "containerd is down", times=2)

The process is `sys.executable -m batteryop.testing.fake_flintlock` with this process's
`sys.path` as its PYTHONPATH. `start` returns once the process printed its readiness line, and
on exit (also when the test fails) stops the process, killing it if it does not stop within a
few seconds, and removes its directory (state, log). The process also exits by itself when this
process dies, as its stdin closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import signal
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import grpc
from google.protobuf import json_format

from battery_protos.flintlock.services.microvmexec.v1alpha1 import microvmexec_pb2
from battery_protos.flintlock.types import microvm_pb2
from batteryop.testing.fake_flintlock.faults import DEFAULT_CUT_CODE, DEFAULT_CUT_MESSAGE
from batteryop.testing.fake_flintlock.server import TLSFiles
from batteryop.testing.processes import module_command

READY_TIMEOUT_SECONDS = 30.0
STOP_TIMEOUT_SECONDS = 5.0

__all__ = ["FakeFlintlockd", "FakeFlintlockdError", "TLSFiles"]


class FakeFlintlockdError(RuntimeError):
    """The fake flintlockd did not start, or refused a control request."""

    def __init__(self, what: str, detail: str) -> None:
        super().__init__(f"fake flintlockd: {what}: {detail}")
        self.what = what


@dataclass(frozen=True)
class _Ready:
    target: str
    control_url: str
    pid: int


class FakeFlintlockd:
    """A running fake flintlockd process: its gRPC target and its control API."""

    def __init__(
        self, process: asyncio.subprocess.Process, ready: _Ready, session: aiohttp.ClientSession
    ) -> None:
        self._process = process
        self._session = session
        self.target = ready.target
        self.control_url = ready.control_url

    @property
    def pid(self) -> int:
        return self._process.pid

    @classmethod
    @contextlib.asynccontextmanager
    async def start(
        cls,
        address: str = "127.0.0.1",
        *,
        port: int = 0,
        tls: TLSFiles | None = None,
        version: str = "v0.16.0",
        exec_enabled: bool = True,
        server_info: bool = True,
        boot_delay: float = 0.0,
        delete_delay: float = 0.0,
        agent_delay: float = 0.0,
        ready_timeout: float = READY_TIMEOUT_SECONDS,
    ) -> AsyncIterator[FakeFlintlockd]:
        """Run a fake flintlockd on address (port 0: any free port) until the block ends."""
        workdir = Path(tempfile.mkdtemp(prefix="fake-flintlockd-"))
        command, env = module_command("batteryop.testing.fake_flintlock")
        argv = [
            *command,
            f"--address={address}",
            f"--port={port}",
            f"--state-dir={workdir / 'state'}",
            f"--version={version}",
            f"--boot-delay={boot_delay}",
            f"--delete-delay={delete_delay}",
            f"--agent-delay={agent_delay}",
            "--exit-on-stdin-eof",
        ]
        if tls is not None:
            argv += [f"--tls-cert={tls.cert}", f"--tls-key={tls.key}"]
            if tls.client_ca is not None:
                argv.append(f"--tls-client-ca={tls.client_ca}")
        if not exec_enabled:
            argv.append("--disable-exec")
        if not server_info:
            argv.append("--no-server-info")
        log_path = workdir / "fake-flintlockd.log"
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
            session = aiohttp.ClientSession(
                base_url=ready.control_url, timeout=aiohttp.ClientTimeout(total=30)
            )
            yield cls(process, ready, session)
        finally:
            if session is not None:
                await session.close()
            if process is not None:
                await _stop(process)
            shutil.rmtree(workdir, ignore_errors=True)

    # -- faults -----------------------------------------------------------------------------

    async def go_down(self) -> None:
        """Stop listening on the target; in-flight RPCs fail, MicroVMs are kept."""
        await self._control("POST", "/down")

    async def come_up(self) -> None:
        """Listen again on the same address and port.

        A channel that saw the Host down reconnects after its backoff (about 1 s); pass
        wait_for_ready, or use a channel with option `grpc.use_local_subchannel_pool`.
        """
        await self._control("POST", "/up")

    async def is_up(self) -> bool:
        return bool((await self._control("GET", "/status"))["up"])

    async def slow_creates(self, seconds: float, *, store_first: bool = True) -> None:
        """Delay every CreateMicroVM answer by seconds (0 stops it).

        store_first: the MicroVM is stored before the delay, so a client that gives up meanwhile
        leaves it behind (a lost answer); False delays before anything is stored.
        """
        await self._control(
            "POST", "/slow-creates", {"seconds": seconds, "store_first": store_first}
        )

    async def fail_creates(self, code: grpc.StatusCode | str, message: str, times: int = 1) -> None:
        """Fail the next `times` CreateMicroVM calls with code and message (0 stops it)."""
        name = code.name if isinstance(code, grpc.StatusCode) else code
        await self._control(
            "POST", "/fail-creates", {"code": name, "message": message, "times": times}
        )

    async def cut_next_exec_stream(
        self,
        *,
        after_chunks: int | None = None,
        code: grpc.StatusCode | str = DEFAULT_CUT_CODE,
        message: str = DEFAULT_CUT_MESSAGE,
    ) -> None:
        """End the next ExecCommand stream with code and message instead of its exit code.

        after_chunks None relays all the command's output first; a number cuts (killing the
        command) once that many stdout/stderr messages were sent.
        """
        name = code.name if isinstance(code, grpc.StatusCode) else code
        await self._control(
            "POST",
            "/cut-next-exec-stream",
            {"code": name, "message": message, "after_chunks": after_chunks},
        )

    async def set_vm_state(
        self, uid: str, state: microvm_pb2.MicroVMStatus.MicroVMState.ValueType
    ) -> microvm_pb2.MicroVM:
        """Force a MicroVM's state, e.g. FAILED, or PENDING for "not running"."""
        name = microvm_pb2.MicroVMStatus.MicroVMState.Name(state)
        answer = await self._control("POST", "/vm-state", {"uid": uid, "state": name})
        return json_format.ParseDict(answer["vm"], microvm_pb2.MicroVM())

    # -- inspection -------------------------------------------------------------------------

    async def list_vms(self) -> list[microvm_pb2.MicroVM]:
        """Every MicroVM the Host holds, in creation order (works while down)."""
        answer = await self._control("GET", "/vms")
        return [json_format.ParseDict(vm, microvm_pb2.MicroVM()) for vm in answer["vms"]]

    async def exec_history(self) -> list[microvmexec_pb2.ExecStart]:
        """The ExecStart of every exec that passed the checks, in order."""
        answer = await self._control("GET", "/execs")
        return [json_format.ParseDict(s, microvmexec_pb2.ExecStart()) for s in answer["execs"]]

    async def _control(
        self, method: str, path: str, body: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        async with self._session.request(method, path, json=body) as response:
            answer: dict[str, Any] = await response.json()
            if response.status != 200:
                raise FakeFlintlockdError(f"{method} {path}", str(answer.get("error", answer)))
            return answer


async def _wait_ready(process: asyncio.subprocess.Process, log_path: Path, within: float) -> _Ready:
    assert process.stdout is not None

    def failure(why: str) -> FakeFlintlockdError:
        log = log_path.read_text(errors="replace")[-4000:] if log_path.exists() else ""
        return FakeFlintlockdError("start", f"{why}; its log:\n{log}")

    try:
        line = await asyncio.wait_for(process.stdout.readline(), within)
    except TimeoutError:
        raise failure(f"no readiness line within {within:.0f}s") from None
    if not line:
        code = await process.wait()
        raise failure(f"exited with {code} before it was ready")
    try:
        data = json.loads(line)
        return _Ready(data["target"], data["control_url"], int(data["pid"]))
    except (ValueError, KeyError) as err:
        raise failure(f"unexpected readiness line {line!r}: {err}") from None


async def _stop(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        if process.stdin is not None:
            process.stdin.close()
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), STOP_TIMEOUT_SECONDS)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()

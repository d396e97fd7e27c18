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
import base64
import contextlib
import shutil
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
from batteryop.testing.processes import file_tail, run_module

READY_TIMEOUT_SECONDS = 30.0

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


@dataclass(frozen=True)
class ExecSessionView:
    """One exec stream as the fake saw it (`FakeFlintlockd.exec_session`)."""

    ended: bool
    stdin_bytes: int
    """Every stdin byte the fake took from the stream."""
    stdin: bytes
    """The first MiB of them."""


class FakeFlintlockd:
    """A running fake flintlockd process: its gRPC target and its control API."""

    def __init__(
        self,
        process: asyncio.subprocess.Process,
        ready: _Ready,
        session: aiohttp.ClientSession,
        log_path: Path,
    ) -> None:
        self._process = process
        self._log_path = log_path
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
        ssh_proxy: bool = False,
        server_info: bool = True,
        boot_delay: float = 0.0,
        delete_delay: float = 0.0,
        agent_delay: float = 0.0,
        guests: str = "sandbox",
        ready_timeout: float = READY_TIMEOUT_SECONDS,
    ) -> AsyncIterator[FakeFlintlockd]:
        """Run a fake flintlockd on address (port 0: any free port) until the block ends;
        guests "qemu" makes every MicroVM a QEMU guest (`fake_flintlock.qemu`); ssh_proxy
        serves MicroVMSSHProxy (`--enable-ssh-proxy-api`; a sandbox's sshd: `fake_flintlock.sshd`).
        """
        workdir = Path(tempfile.mkdtemp(prefix="fake-flintlockd-"))
        argv = [
            f"--address={address}",
            f"--port={port}",
            f"--state-dir={workdir / 'state'}",
            f"--version={version}",
            f"--boot-delay={boot_delay}",
            f"--delete-delay={delete_delay}",
            f"--agent-delay={agent_delay}",
            f"--guests={guests}",
            "--exit-on-stdin-eof",
        ]
        if tls is not None:
            argv += [f"--tls-cert={tls.cert}", f"--tls-key={tls.key}"]
            if tls.client_ca is not None:
                argv.append(f"--tls-client-ca={tls.client_ca}")
        if not exec_enabled:
            argv.append("--disable-exec")
        if ssh_proxy:
            argv.append("--enable-ssh-proxy-api")
        if not server_info:
            argv.append("--no-server-info")
        try:
            async with run_module(
                "batteryop.testing.fake_flintlock",
                argv,
                log_path=workdir / "fake-flintlockd.log",
                ready_timeout=ready_timeout,
                error=lambda detail: FakeFlintlockdError("start", detail),
            ) as (process, line):
                try:
                    ready = _Ready(line["target"], line["control_url"], int(line["pid"]))
                except (KeyError, ValueError) as err:
                    raise FakeFlintlockdError(
                        "start", f"unexpected readiness line: {err}"
                    ) from None
                async with aiohttp.ClientSession(
                    base_url=ready.control_url, timeout=aiohttp.ClientTimeout(total=30)
                ) as session:
                    yield cls(process, ready, session, workdir / "fake-flintlockd.log")
        finally:
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

    def log_tail(self, lines: int = 20) -> str:
        """The last `lines` lines of the fake's own log (why a guest could not start, say)."""
        return file_tail(self._log_path, lines)

    async def list_vms(self) -> list[microvm_pb2.MicroVM]:
        """Every MicroVM the Host holds, in creation order (works while down)."""
        answer = await self._control("GET", "/vms")
        return [json_format.ParseDict(vm, microvm_pb2.MicroVM()) for vm in answer["vms"]]

    async def exec_history(self) -> list[microvmexec_pb2.ExecStart]:
        """The ExecStart of every exec that passed the checks, in order."""
        answer = await self._control("GET", "/execs")
        return [json_format.ParseDict(s, microvmexec_pb2.ExecStart()) for s in answer["execs"]]

    async def exec_session(self, index: int, *, wait_ended: float = 0.0) -> ExecSessionView:
        """The `index`-th exec (as in `exec_history`, -1 the last): whether its RPC ended and
        the stdin the fake took from it. With `wait_ended`, once it ended or that many seconds
        passed (then `ended` is False)."""
        if index < 0:
            index += len(await self.exec_history())
        query = f"?wait_ended={wait_ended:g}" if wait_ended > 0 else ""
        answer = await self._control("GET", f"/execs/{index}/session{query}")
        return ExecSessionView(
            ended=bool(answer["ended"]),
            stdin_bytes=int(answer["stdin_bytes"]),
            stdin=base64.b64decode(answer["stdin"]),
        )

    async def exec_timings(self) -> list[tuple[float, float]]:
        """(spawn, run) seconds of every command that ran, as they exited: the fake's own
        process start (fork and exec) and the command's run until its exit was reaped."""
        answer = await self._control("GET", "/exec-timings")
        return [(t["spawn_ms"] / 1000, t["run_ms"] / 1000) for t in answer["timings"]]

    async def guests(self) -> list[dict[str, Any]]:
        """Each running QEMU guest: uid, pid (QEMU's), agent_port, ssh_port (forwarded to the
        agent's SSH port), boot_seconds (QEMU's start to the agent's first ping), rss_kib,
        accelerator. Empty with sandboxes."""
        answer = await self._control("GET", "/guests")
        guests: list[dict[str, Any]] = answer["guests"]
        return guests

    async def _control(
        self, method: str, path: str, body: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        async with self._session.request(method, path, json=body) as response:
            answer: dict[str, Any] = await response.json()
            if response.status != 200:
                raise FakeFlintlockdError(f"{method} {path}", str(answer.get("error", answer)))
            return answer

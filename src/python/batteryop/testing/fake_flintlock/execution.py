"""The fake flintlockd's `MicroVMExec.ExecCommand` (TD-010, TD-011; flintlock-api.md §8.5).

Stream semantics follow flintlockd with a guest agent behind it:
- the first message must be `start` with a uid, and a cmd unless `shell`
  (else INVALID_ARGUMENT "first message must be a start message with uid and cmd set");
- an unknown uid is UNKNOWN (flintlockd wraps the lookup error, it does not say NOT_FOUND);
  a MicroVM without `allow_guest_agent` or not CREATED is FAILED_PRECONDITION;
- stdin messages are read only when `has_stdin`; `stdin_eof`, the client half-closing or a
  receive error closes the command's stdin; other messages after `start` are ignored;
- every read of stdout or stderr (at most 32 KiB) is one response, in the order read; output
  is read only as the stream sends it (at most `OUTPUT_WINDOW` responses wait to be sent), so a
  command whose output nobody reads blocks on its pipe, as it does in a guest, rather than the
  fake holding its output in memory;
- a start failure is an `error` message then exit code 127; a signal gives 128+signo;
  `timeout_seconds` sends SIGTERM to the process group, SIGKILL 5 s later;
- `exit_code` is the last message and the RPC then ends OK; a cancelled RPC kills the command.

The checks and the cut-stream fault are here; what runs the command is the Host's `Guests`
backend (`guests.py`). In the sandbox backend (`run_command`) it runs for real on this machine,
in the MicroVM's sandbox: the working directory is `cwd` taken inside the sandbox's `rootfs/`
(which stands in for the guest's `/`), and the environment is the sandbox's own (HOME and
TMPDIR inside it, the MicroVM's identity in FAKE_FLINTLOCK_VM_*) with `env` merged over it.
In the QEMU backend it runs in the guest, through flintlock's guest agent (`qemu.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import grpc

from battery_protos.flintlock.services.microvmexec.v1alpha1 import (
    microvmexec_pb2,
    microvmexec_pb2_grpc,
)
from batteryop.testing.fake_flintlock.faults import ExecSession, ExecTiming, Faults, StreamCut
from batteryop.testing.fake_flintlock.vms import State, VmNotFoundError, VmRecord, VmStore

if TYPE_CHECKING:
    from batteryop.testing.fake_flintlock.guests import Guests

CHUNK_BYTES = 32 * 1024
OUTPUT_WINDOW = 4
"""Responses of one stream read from the command and not yet sent: flintlockd sends each read
before it reads again, and its guest agent's buffers are as small (a few pipe-sized reads)."""
KILL_GRACE_SECONDS = 5.0
EXIT_START_FAILURE = 127
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

MSG_BAD_FIRST = "first message must be a start message with uid and cmd set"
MSG_NO_AGENT = "microvm was not created with guest agent access enabled"

Response = microvmexec_pb2.ExecCommandResponse
ExecTimings = list[ExecTiming]
MSG_AGENT_UNREACHABLE = "starting guest-agent exec session: dialing guest agent"


def _exit_status(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def _signal_group(process: asyncio.subprocess.Process, sig: int, *, always: bool = False) -> None:
    """Signal the command's process group (while its leader runs, unless always)."""
    if process.returncode is not None and not always:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


def guest_cwd(rootfs: Path, cwd: str) -> Path | None:
    """The host directory for guest path cwd inside rootfs; None if it would leave rootfs."""
    root = rootfs.resolve()
    path = (root / cwd.lstrip("/")).resolve()
    if path != root and root not in path.parents:
        return None
    return path


def sandbox_env(record: VmRecord, start: microvmexec_pb2.ExecStart) -> dict[str, str]:
    spec = record.vm.spec
    env = {
        "PATH": os.environ.get("PATH", DEFAULT_PATH),
        "HOME": str(record.rootfs / "root"),
        "TMPDIR": str(record.rootfs / "tmp"),
        "LANG": "C.UTF-8",
        "HOSTNAME": spec.id,
        "FAKE_FLINTLOCK_VM_UID": spec.uid,
        "FAKE_FLINTLOCK_VM_NAME": spec.id,
        "FAKE_FLINTLOCK_VM_NAMESPACE": spec.namespace,
    }
    if start.user:
        env["USER"] = env["LOGNAME"] = start.user
    env.update(start.env)
    return env


Abort = Callable[[grpc.StatusCode, str], Awaitable[NoReturn]]


async def ready_record(store: VmStore, uid: str, fail: Abort) -> VmRecord:
    """The MicroVM uid, or `fail` as flintlockd does before it dials the guest agent, for
    exec and the SSH proxy alike (flintlock-api.md §8.5 item 2): an unknown uid is UNKNOWN
    (flintlockd wraps the lookup error), no guest agent access or not CREATED is
    FAILED_PRECONDITION."""
    try:
        record = store.record(uid)
    except VmNotFoundError as err:
        await fail(grpc.StatusCode.UNKNOWN, f"getting microvm: {err}")
    if not record.vm.spec.allow_guest_agent or not record.vm.status.vsock_path:
        await fail(grpc.StatusCode.FAILED_PRECONDITION, MSG_NO_AGENT)
    if record.state != State.CREATED:
        state = State.Name(record.state)
        await fail(grpc.StatusCode.FAILED_PRECONDITION, f"microvm is not ready (state: {state})")
    return record


class ExecService(microvmexec_pb2_grpc.MicroVMExecServicer):
    """MicroVMExec over a VmStore and its Guests, with the stream cut fault."""

    def __init__(
        self, store: VmStore, guests: Guests, faults: Faults, *, agent_delay: float = 0.0
    ) -> None:
        self._store = store
        self._guests = guests
        self._faults = faults
        self._agent_delay = agent_delay
        self._finishers: set[asyncio.Future[None]] = set()

    async def ExecCommand(
        self,
        request_iterator: AsyncIterator[microvmexec_pb2.ExecCommandRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[Response]:
        async def fail(code: grpc.StatusCode, message: str) -> NoReturn:
            await context.abort(code, message)
            raise AssertionError("context.abort returned")

        requests = aiter(request_iterator)
        first = await anext(requests, None)
        if first is None or first.WhichOneof("payload") != "start":
            await fail(grpc.StatusCode.INVALID_ARGUMENT, MSG_BAD_FIRST)
        start = first.start
        if not start.uid or not (start.cmd or start.shell):
            await fail(grpc.StatusCode.INVALID_ARGUMENT, MSG_BAD_FIRST)
        record = await ready_record(self._store, start.uid, fail)
        if self._store.agent_up_for(record) < self._agent_delay:
            await fail(grpc.StatusCode.UNKNOWN, f"{MSG_AGENT_UNREACHABLE}: connection refused")
        self._faults.exec_history.append(start)
        session = ExecSession(start)
        self._faults.exec_sessions.append(session)
        cut = self._faults.take_stream_cut()
        responses = self._guests.exec(record, start, recorded(requests, session))
        # A cancelled RPC ends the command at once, as flintlockd's cancelled context does:
        # gRPC may leave this generator suspended at its `yield` (a send the peer stopped
        # taking) until it is collected, so its `finally` is not relied on for that.
        context.add_done_callback(lambda _: self._finishing(responses, session))
        try:
            async for response in with_cut(responses, cut, fail):
                yield response
        except ConnectionError as err:  # guests.GuestUnreachableError, a lost agent
            await fail(grpc.StatusCode.UNKNOWN, str(err))
        finally:
            await _finish(responses, session)

    def _finishing(self, responses: AsyncIterator[Response], session: ExecSession) -> None:
        if not session.ended.is_set():
            task = asyncio.ensure_future(_finish(responses, session))
            self._finishers.add(task)
            task.add_done_callback(self._finishers.discard)


async def _finish(responses: AsyncIterator[Response], session: ExecSession) -> None:
    """Close the command's responses (which ends the command) and note the session ended."""
    try:
        with contextlib.suppress(RuntimeError):  # already being closed by the other path
            await aclose(responses)
    finally:
        session.ended.set()


async def recorded(
    requests: AsyncIterator[microvmexec_pb2.ExecCommandRequest], session: ExecSession
) -> AsyncIterator[microvmexec_pb2.ExecCommandRequest]:
    """`requests`, each stdin message's bytes noted in `session` as the fake takes it."""
    async for request in requests:
        if request.WhichOneof("payload") == "stdin":
            session.took(request.stdin)
        yield request


async def aclose(responses: AsyncIterator[Response]) -> None:
    closer = getattr(responses, "aclose", None)
    if closer is not None:
        await closer()


async def with_cut(
    responses: AsyncIterator[Response],
    cut: StreamCut | None,
    abort: Callable[[grpc.StatusCode, str], Awaitable[NoReturn]],
) -> AsyncIterator[Response]:
    """responses, or, with a cut, the cut's status instead of the exit code, or as soon as
    `after_chunks` output messages went out (the caller then closes `responses`, which stops
    the command)."""
    sent = 0

    def due() -> bool:
        return cut is not None and cut.after_chunks is not None and sent >= cut.after_chunks

    if due():
        assert cut is not None
        await abort(cut.code, cut.message)
    async for response in responses:
        kind = response.WhichOneof("payload")
        if cut is not None and kind == "exit_code":
            await abort(cut.code, cut.message)
        yield response
        if kind in ("stdout", "stderr"):
            sent += 1
            if due():
                assert cut is not None
                await abort(cut.code, cut.message)


async def run_command(
    record: VmRecord,
    start: microvmexec_pb2.ExecStart,
    requests: AsyncIterator[microvmexec_pb2.ExecCommandRequest],
    *,
    timings: ExecTimings | None = None,
) -> AsyncIterator[Response]:
    """Run start's command in record's sandbox and yield the stream's responses; the time
    spent starting the process and running it goes to `timings` once it exited."""
    if start.shell:
        argv = ["sh", "-c", " ".join([start.cmd, *start.args])]
    else:
        argv = [start.cmd, *start.args]
    cwd = guest_cwd(record.rootfs, start.cwd)
    if cwd is None:
        yield Response(error=f"starting command: chdir {start.cwd}: no such file or directory")
        yield Response(exit_code=EXIT_START_FAILURE)
        return
    spawning = time.perf_counter()
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            cwd=cwd,
            env=sandbox_env(record, start),
            stdin=asyncio.subprocess.PIPE if start.has_stdin else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as err:
        yield Response(error=f"starting command: {err}")
        yield Response(exit_code=EXIT_START_FAILURE)
        return
    spawned = time.perf_counter()

    output: asyncio.Queue[Response | None] = asyncio.Queue()
    window = asyncio.Semaphore(OUTPUT_WINDOW)  # a place in it is given back once a read is sent
    tasks = [
        asyncio.create_task(_pump(process.stdout, "stdout", output, window)),
        asyncio.create_task(_pump(process.stderr, "stderr", output, window)),
    ]
    if start.has_stdin:
        tasks.append(asyncio.create_task(_feed(process, requests)))
    if start.timeout_seconds > 0:
        tasks.append(asyncio.create_task(_enforce_timeout(process, start.timeout_seconds)))
    try:
        open_pipes = 2
        while open_pipes:
            item = await output.get()
            if item is None:
                open_pipes -= 1
                continue
            yield item
            window.release()
        returncode = await process.wait()
        if timings is not None:
            timings.append(ExecTiming(spawned - spawning, time.perf_counter() - spawned))
        yield Response(exit_code=_exit_status(returncode))
    finally:
        for task in tasks:
            task.cancel()
        _signal_group(process, signal.SIGKILL, always=True)
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*tasks, return_exceptions=True)
            await process.wait()


async def _pump(
    stream: asyncio.StreamReader | None,
    kind: str,
    output: asyncio.Queue[Response | None],
    window: asyncio.Semaphore,
) -> None:
    """`stream`'s reads to `output`, each once `window` has room; None at its end."""
    assert stream is not None
    try:
        while True:
            await window.acquire()
            chunk = await stream.read(CHUNK_BYTES)
            if not chunk:
                window.release()
                break
            output.put_nowait(
                Response(stdout=chunk) if kind == "stdout" else Response(stderr=chunk)
            )
    finally:
        output.put_nowait(None)


async def _feed(
    process: asyncio.subprocess.Process,
    requests: AsyncIterator[microvmexec_pb2.ExecCommandRequest],
) -> None:
    stdin = process.stdin
    assert stdin is not None
    try:
        async for request in requests:
            kind = request.WhichOneof("payload")
            if kind == "stdin":
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    stdin.write(request.stdin)
                    await stdin.drain()
            elif kind == "stdin_eof" and request.stdin_eof:
                break
    except (grpc.RpcError, grpc.aio.AioRpcError, asyncio.InvalidStateError):
        pass  # a receive error counts as the end of stdin
    finally:
        stdin.close()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            await stdin.wait_closed()


async def _enforce_timeout(process: asyncio.subprocess.Process, seconds: int) -> None:
    await asyncio.sleep(seconds)
    _signal_group(process, signal.SIGTERM)
    await asyncio.sleep(KILL_GRACE_SECONDS)
    _signal_group(process, signal.SIGKILL)

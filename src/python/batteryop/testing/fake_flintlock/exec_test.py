"""The fake's MicroVMExec stream: stdin, chunked output, env/cwd sandboxes, exit code last,
errors as flintlockd gives them, and a cut stream (TD-010, TD-011).

The stream's semantics are checked against both `Guests` backends (`guest` fixture): the
sandbox, with a fresh MicroVM per test, and QEMU (`--guests qemu`), where the commands run in
one real guest booted once for this module through flintlock's guest agent (GI-101). What
only the sandbox has (its folder layout, `--agent-delay`, the process timings) is checked on
the sandbox alone."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass

import grpc
import pytest
import pytest_asyncio

from battery_protos.flintlock.services.microvm.v1alpha1.microvms_pb2_grpc import MicroVMStub
from battery_protos.flintlock.services.microvmexec.v1alpha1 import microvmexec_pb2
from battery_protos.flintlock.services.microvmexec.v1alpha1.microvmexec_pb2_grpc import (
    MicroVMExecStub,
)
from battery_protos.flintlock.types import microvm_pb2
from batteryop.testing.fake_flintlock import FakeFlintlockd
from batteryop.testing.fake_flintlock.testkit import (
    ADDRESS,
    Client,
    assert_exit_last,
    joined,
    make_spec,
    published_guest,
    requests_for,
    run,
)
from batteryop.testing.polling import wait_until

Request = microvmexec_pb2.ExecCommandRequest
Response = microvmexec_pb2.ExecCommandResponse
State = microvm_pb2.MicroVMStatus.MicroVMState
BACKENDS = ("sandbox", "qemu")
on_both = pytest.mark.asyncio(loop_scope="module")


@dataclass
class Guest:
    """A client of a fake Host of one backend, and the uid of a ready MicroVM on it."""

    backend: str
    client: Client
    uid: str


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=BACKENDS)
async def backend_client(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Client]:
    backend: str = request.param
    async with contextlib.AsyncExitStack() as stack:
        guest = None
        if backend == "qemu":
            guest = await stack.enter_async_context(
                published_guest(tmp_path_factory.mktemp("registry"))
            )
        host = await stack.enter_async_context(
            FakeFlintlockd.start(address=ADDRESS, guests=backend)
        )
        channel = await stack.enter_async_context(grpc.aio.insecure_channel(host.target))
        client = Client(host, channel, MicroVMStub(channel), MicroVMExecStub(channel), guest=guest)
        if guest is not None:
            spec = make_spec("guest", guest=guest)
            spec.vcpu = 1  # TCG: one host thread per vCPU, on a shared 2-core machine
            client.shared_uid = await client.create_ready(spec)
        yield client


@pytest_asyncio.fixture(loop_scope="module")
async def guest(backend_client: Client) -> Guest:
    """The sandbox: a fresh MicroVM per test; QEMU: the module's one booted guest."""
    if backend_client.shared_uid is not None:
        return Guest("qemu", backend_client, backend_client.shared_uid)
    return Guest("sandbox", backend_client, await backend_client.create())


async def collect(call: AsyncIterable[Response], into: list[Response]) -> None:
    """Append every response of call to into, until it ends or fails."""
    async for response in call:
        into.append(response)


@pytest.mark.req("TD-010")
@on_both
async def test_stdin_is_relayed_and_exit_code_comes_last(guest: Guest) -> None:
    client, uid = guest.client, guest.uid
    start = microvmexec_pb2.ExecStart(uid=uid, cmd="cat", has_stdin=True)
    responses = await run(client, start, stdin=[b"hello ", b"from ", b"stdin"])
    assert joined(responses, "stdout") == b"hello from stdin"
    assert_exit_last(responses, 0)


@pytest.mark.req("TD-010")
@on_both
async def test_stdout_and_stderr_in_chunks_of_at_most_32k(guest: Guest) -> None:
    client, uid = guest.client, guest.uid
    script = "head -c 100000 /dev/zero; printf oops >&2; exit 3"
    responses = await run(client, microvmexec_pb2.ExecStart(uid=uid, cmd=script, shell=True))
    stdout = [r.stdout for r in responses if r.WhichOneof("payload") == "stdout"]
    assert len(stdout) >= 4
    assert all(len(chunk) <= 32 * 1024 for chunk in stdout)
    assert b"".join(stdout) == bytes(100000)
    assert joined(responses, "stderr") == b"oops"
    assert_exit_last(responses, 3)


@pytest.mark.req("TD-010")
@on_both
async def test_shell_joins_args_and_argv_does_not_interpret(guest: Guest) -> None:
    client, uid = guest.client, guest.uid
    shell = microvmexec_pb2.ExecStart(uid=uid, cmd="echo", args=["a", "$((1+2))"], shell=True)
    assert joined(await run(client, shell), "stdout") == b"a 3\n"
    argv = microvmexec_pb2.ExecStart(uid=uid, cmd="echo", args=["a", "$((1+2))"])
    assert joined(await run(client, argv), "stdout") == b"a $((1+2))\n"


@pytest.mark.req("TD-010")
@on_both
async def test_env_is_merged_and_cwd_is_a_guest_path(guest: Guest) -> None:
    client, uid = guest.client, guest.uid
    start = microvmexec_pb2.ExecStart(
        uid=uid, cmd='echo "$GREETING"; pwd', shell=True, env={"GREETING": "hi"}, cwd="/tmp"
    )
    responses = await run(client, start)
    greeting, cwd = joined(responses, "stdout").decode().splitlines()
    assert greeting == "hi"
    # The sandbox maps the guest path into its rootfs/; a QEMU guest has the path itself.
    assert cwd == "/tmp" if guest.backend == "qemu" else cwd.endswith(f"/{uid}/rootfs/tmp")
    assert_exit_last(responses, 0)
    missing = microvmexec_pb2.ExecStart(uid=uid, cmd="true", cwd="/no/such/folder")
    responses = await run(client, missing)
    assert responses[0].error  # the agent's words and the sandbox's differ
    assert_exit_last(responses, 127)


@pytest.mark.req("TD-010")
async def test_env_and_cwd_are_per_microvm(client: Client) -> None:
    first = await client.create(make_spec("a"))
    second = await client.create(make_spec("b"))
    write = microvmexec_pb2.ExecStart(
        uid=first, cmd='echo "$GREETING" > note; pwd', shell=True, env={"GREETING": "hi"}
    )
    responses = await run(client, write)
    assert_exit_last(responses, 0)
    first_root = joined(responses, "stdout").decode().strip()
    assert first_root.endswith(f"/vm/ns/a/{first}/rootfs")

    look = microvmexec_pb2.ExecStart(
        uid=second, cmd='pwd; ls; echo "$FAKE_FLINTLOCK_VM_UID ${GREETING:-unset}"', shell=True
    )
    out = joined(await run(client, look), "stdout").decode().splitlines()
    assert out[0].endswith(f"/vm/ns/b/{second}/rootfs")
    assert "note" not in out
    assert out[-1] == f"{second} unset"

    read = microvmexec_pb2.ExecStart(uid=first, cmd="cat", args=["../note"], cwd="/tmp")
    assert joined(await run(client, read), "stdout") == b"hi\n"
    escape = microvmexec_pb2.ExecStart(uid=first, cmd="true", cwd="/../../..")
    responses = await run(client, escape)
    assert "chdir" in responses[0].error
    assert_exit_last(responses, 127)


@pytest.mark.req("TD-010")
@on_both
async def test_start_failure_is_an_error_then_exit_127(guest: Guest) -> None:
    client, uid = guest.client, guest.uid
    responses = await run(client, microvmexec_pb2.ExecStart(uid=uid, cmd="/no/such/program"))
    assert responses[0].WhichOneof("payload") == "error"
    assert_exit_last(responses, 127)


@pytest.mark.req("TD-010")
@on_both
async def test_timeout_seconds_terminates_the_command(guest: Guest) -> None:
    client, uid = guest.client, guest.uid
    start = microvmexec_pb2.ExecStart(uid=uid, cmd="sleep", args=["30"], timeout_seconds=1)
    assert_exit_last(await run(client, start), 128 + 15)


async def _status(client: Client, first: Request) -> grpc.aio.AioRpcError:
    """The status of a stream that fails after its first message."""
    call = client.exec.ExecCommand(timeout=20)
    await call.write(first)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await read_to_end(call)
    return err.value


async def read_to_end(call: grpc.aio.StreamStreamCall) -> None:
    while await call.read() is not grpc.aio.EOF:
        pass


@pytest.mark.req("TD-010")
@on_both
async def test_errors_as_flintlockd_gives_them(guest: Guest) -> None:
    client, uid = guest.client, guest.uid
    execs_before = len(await client.host.exec_history())

    err = await _status(client, Request(stdin=b"x"))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.details() == "first message must be a start message with uid and cmd set"
    err = await _status(client, Request(start=microvmexec_pb2.ExecStart(uid=uid)))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT

    err = await _status(client, Request(start=microvmexec_pb2.ExecStart(uid="01NOPE", cmd="true")))
    assert err.code() == grpc.StatusCode.UNKNOWN  # flintlockd does not map it to NOT_FOUND

    no_agent = await client.create(make_spec("closed", allow_guest_agent=False, guest=client.guest))
    err = await _status(client, Request(start=microvmexec_pb2.ExecStart(uid=no_agent, cmd="true")))
    await client.delete(no_agent)  # a QEMU guest stops booting
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert err.details() == "microvm was not created with guest agent access enabled"

    await client.host.set_vm_state(uid, State.PENDING)
    try:
        err = await _status(client, Request(start=microvmexec_pb2.ExecStart(uid=uid, cmd="true")))
    finally:
        await client.host.set_vm_state(uid, State.CREATED)
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert err.details() == "microvm is not ready (state: PENDING)"
    assert len(await client.host.exec_history()) == execs_before


@pytest.mark.req("TD-011")
@on_both
async def test_cut_stream_relays_output_but_no_exit_code(guest: Guest) -> None:
    client, uid = guest.client, guest.uid
    await client.host.cut_next_exec_stream()
    call = client.exec.ExecCommand(
        requests_for(microvmexec_pb2.ExecStart(uid=uid, cmd="echo", args=["partial"])), timeout=20
    )
    seen: list[Response] = []
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await collect(call, seen)
    assert err.value.code() == grpc.StatusCode.UNKNOWN
    assert joined(seen, "stdout") == b"partial\n"
    assert all(r.WhichOneof("payload") != "exit_code" for r in seen)

    # Only the next stream is cut; the one after ends normally.
    assert_exit_last(await run(client, microvmexec_pb2.ExecStart(uid=uid, cmd="true")), 0)
    assert [s.cmd for s in await client.host.exec_history()][-2:] == ["echo", "true"]


@pytest.mark.req("TD-011")
@on_both
async def test_cut_stream_mid_command_with_a_chosen_status(guest: Guest) -> None:
    client, uid = guest.client, guest.uid
    await client.host.cut_next_exec_stream(
        after_chunks=1, code=grpc.StatusCode.UNAVAILABLE, message="agent went away"
    )
    start = microvmexec_pb2.ExecStart(uid=uid, cmd="echo one; sleep 30; echo two", shell=True)
    call = client.exec.ExecCommand(requests_for(start), timeout=20)
    seen: list[Response] = []
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await collect(call, seen)
    assert (err.value.code(), err.value.details()) == (
        grpc.StatusCode.UNAVAILABLE,
        "agent went away",
    )
    assert [r.stdout for r in seen] == [b"one\n"]


@pytest.mark.req("TD-010")
async def test_exec_fails_unknown_until_the_guest_agent_is_up() -> None:
    async with (
        FakeFlintlockd.start(address=ADDRESS, agent_delay=60) as host,
        grpc.aio.insecure_channel(host.target) as channel,
    ):
        client = Client(host, channel, MicroVMStub(channel), MicroVMExecStub(channel))
        uid = await client.create()
        err = await _status(client, Request(start=microvmexec_pb2.ExecStart(uid=uid, cmd="true")))
        assert err.code() == grpc.StatusCode.UNKNOWN
        assert (err.details() or "").startswith("starting guest-agent exec session")


@pytest.mark.req("TD-010")
async def test_each_command_reports_its_process_start_and_run_time(client: Client) -> None:
    """The fake's own cost (starting a process) is reported apart from the command's run, so
    a benchmark can tell the stand-in's share from the agent's."""
    uid = await client.create()
    await run(client, microvmexec_pb2.ExecStart(uid=uid, cmd="true"))
    await run(client, microvmexec_pb2.ExecStart(uid=uid, cmd="sleep 0.2", shell=True))
    await run(client, microvmexec_pb2.ExecStart(uid=uid, cmd="/no/such/program"))
    timings = await client.host.exec_timings()
    assert len(timings) == 2  # the program that could not start has no timing
    (true_spawn, true_run), (sleep_spawn, sleep_run) = timings
    assert true_spawn > 0 and sleep_spawn > 0
    # The child may start sleeping before the spawn returns, so only the two together are
    # sure to cover the sleep (CI once measured a run of 0.1995 s).
    assert sleep_spawn + sleep_run >= 0.2
    assert true_run < sleep_run


@pytest.mark.req("TD-010")
async def test_output_nobody_reads_blocks_the_command_rather_than_filling_the_fake(
    client: Client,
) -> None:
    """As in a guest, a command writes only as fast as its stream is read: the sandbox keeps a
    few reads waiting to be sent, not all of its output (an unread `yes` once grew the fake to
    20 GB). The command counts the 64 KiB blocks it wrote; read from another stream, the count
    stops while nobody reads the first, and runs to the end once it is read."""
    uid = await client.create()
    blocks, block = 1024, 64 * 1024
    script = (
        f"i=0; while [ $i -lt {blocks} ]; do head -c {block} /dev/zero || exit 1;"
        " i=$((i+1)); echo $i > written; done"
    )
    call = client.exec.ExecCommand(timeout=120)
    await call.write(Request(start=microvmexec_pb2.ExecStart(uid=uid, cmd=script, shell=True)))
    first = await call.read()
    assert first is not grpc.aio.EOF and first.WhichOneof("payload") == "stdout"
    readings: list[int] = []

    async def written() -> list[int]:
        out = joined(
            await run(client, microvmexec_pb2.ExecStart(uid=uid, cmd="cat", args=["written"])),
            "stdout",
        )
        readings.append(int(out or b"0"))
        return readings[-3:]

    held = await wait_until(
        written,
        lambda last: len(last) == 3 and len(set(last)) == 1 and last[0] > 0,
        what="the unread command to stop writing",
        within=60,
    )
    # Flow control's windows and the pipe hold a few MiB; the fake, at most OUTPUT_WINDOW reads.
    assert held[0] * block < 16 * 2**20, f"{held[0]} blocks written while nobody read"
    got = len(first.stdout)
    while (response := await call.read()) is not grpc.aio.EOF:
        got += len(response.stdout)
        last = response
    assert got == blocks * block
    assert last.WhichOneof("payload") == "exit_code" and last.exit_code == 0

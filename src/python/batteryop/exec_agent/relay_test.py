"""Exec semantics through the agent (EA-020, EA-021): stdin, large output, exit codes, a stream
that flintlockd cuts, a flintlockd that does not answer, and a caller who goes away. Every call
passes the full authorization first (real API server, real tokens and claims).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import grpc
import grpc.aio
import pytest

from battery_protos.flintlock.services.microvmexec.v1alpha1 import microvmexec_pb2
from battery_protos.flintlock.services.microvmexec.v1alpha1.microvmexec_pb2_grpc import (
    MicroVMExecStub,
)
from battery_protos.flintlock.types import microvm_pb2
from batteryop.exec_agent import relay
from batteryop.kube.config import KubeConfig
from batteryop.testing.exec_agent import (
    FLINTLOCKD_ADDRESS,
    Agent,
    Holders,
    Pki,
    drain,
    joined,
    run_exec,
    running_agent,
)
from batteryop.testing.fake_flintlock import FakeFlintlockd, TLSFiles

pytestmark = pytest.mark.controlplane

Start = microvmexec_pb2.ExecStart
Request = microvmexec_pb2.ExecCommandRequest
Response = microvmexec_pb2.ExecCommandResponse

TEN_MIB = 10 * 1024 * 1024
CHUNK = 32 * 1024
"""flintlockd's largest output message (flintlock-api.md §8.5)."""


def kinds(responses: list[Response]) -> list[str]:
    return [str(r.WhichOneof("payload")) for r in responses]


def assert_exit_last(responses: list[Response], code: int) -> None:
    assert kinds(responses).count("exit_code") == 1
    assert kinds(responses)[-1] == "exit_code"
    assert responses[-1].exit_code == code


@pytest.mark.req("EA-020")
async def test_stdin_reaches_the_command_and_its_output_comes_back(
    agent: Agent, holders: Holders
) -> None:
    holding = await holders.hold()
    start = Start(uid=holding.microvm_uid, cmd="cat", has_stdin=True)
    async with agent.channel() as channel:
        responses = await run_exec(channel, holding.metadata, start, [b"one ", b"two ", b"three"])
    assert joined(responses, "stdout") == b"one two three"
    assert_exit_last(responses, 0)


@pytest.mark.req("EA-020")
async def test_ten_mib_of_stdout_arrive_whole_and_in_order(agent: Agent, holders: Holders) -> None:
    holding = await holders.hold()
    # A counting pattern, so a lost, doubled or reordered chunk changes the bytes.
    script = f"seq 1 {TEN_MIB} | head -c {TEN_MIB}"
    async with agent.channel() as channel:
        responses = await run_exec(
            channel, holding.metadata, Start(uid=holding.microvm_uid, cmd=script, shell=True)
        )
    out = joined(responses, "stdout")
    assert len(out) == TEN_MIB
    expected = "".join(f"{i}\n" for i in range(1, 2_000_000)).encode()[:TEN_MIB]
    assert out == expected
    assert_exit_last(responses, 0)


@pytest.mark.req("EA-020")
async def test_bulk_stdout_is_joined_into_fewer_messages(agent: Agent, holders: Holders) -> None:
    """flintlockd sends messages of at most 32 KiB; the agent joins them while output streams
    (relay._coalesce), so the caller handles far fewer messages than flintlockd sent."""
    holding = await holders.hold()
    start = Start(uid=holding.microvm_uid, cmd=f"head -c {TEN_MIB} /dev/zero", shell=True)
    async with agent.channel() as channel:
        responses = await run_exec(channel, holding.metadata, start)
    assert joined(responses, "stdout") == bytes(TEN_MIB)
    assert kinds(responses).count("stdout") < TEN_MIB // CHUNK
    assert max(len(r.stdout) for r in responses) > CHUNK
    assert_exit_last(responses, 0)


@pytest.mark.req("EA-020")
async def test_streamed_output_then_silence_all_arrives_before_the_command_ends(
    agent: Agent, holders: Holders
) -> None:
    """Streaming output waits for more only for the linger: here the command writes a burst,
    then waits for its stdin to end, which the test ends only once the whole burst came."""
    holding = await holders.hold()
    burst = 4 * 1024 * 1024
    script = f"head -c {burst} /dev/zero; cat >/dev/null"
    start = Start(uid=holding.microvm_uid, cmd=script, shell=True, has_stdin=True)
    async with agent.channel() as channel:
        call = MicroVMExecStub(channel).ExecCommand(metadata=holding.metadata, timeout=30)
        await call.write(Request(start=start))
        got: list[Response] = []
        while sum(len(r.stdout) for r in got) < burst:
            got.append(await asyncio.wait_for(call.read(), 10))
        assert joined(got, "stdout") == bytes(burst)
        await call.write(Request(stdin_eof=True))
        await call.done_writing()
        while (response := await call.read()) is not grpc.aio.EOF:
            got.append(response)
    assert_exit_last(got, 0)


@pytest.mark.req("EA-020")
async def test_answers_to_stdin_are_never_held(
    agent: Agent, holders: Holders, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command driven line by line (a REPL): each answer follows the caller's stdin, so the
    agent sends it at once even while output streams. The linger here never ends: an answer
    it held would never come."""
    monkeypatch.setattr(relay, "LINGER_SECONDS", 3600.0)
    holding = await holders.hold()
    start = Start(uid=holding.microvm_uid, cmd="cat", has_stdin=True)
    async with agent.channel() as channel:
        call = MicroVMExecStub(channel).ExecCommand(metadata=holding.metadata, timeout=30)
        await call.write(Request(start=start))
        for turn in range(5):
            line = f"line {turn}\n".encode()
            await call.write(Request(stdin=line))
            answer = b""
            while len(answer) < len(line):
                answer += (await asyncio.wait_for(call.read(), 10)).stdout
            assert answer == line
        await call.write(Request(stdin_eof=True))
        await call.done_writing()
        rest = []
        while (response := await call.read()) is not grpc.aio.EOF:
            rest.append(response)
    assert_exit_last(rest, 0)


@pytest.mark.req("EA-020")
async def test_a_non_zero_exit_is_the_last_frame_after_stderr(
    agent: Agent, holders: Holders
) -> None:
    holding = await holders.hold()
    start = Start(uid=holding.microvm_uid, cmd="echo out; echo err >&2; exit 7", shell=True)
    async with agent.channel() as channel:
        responses = await run_exec(channel, holding.metadata, start)
    assert joined(responses, "stdout") == b"out\n"
    assert joined(responses, "stderr") == b"err\n"
    assert_exit_last(responses, 7)


@pytest.mark.req("EA-020")
async def test_a_command_ended_by_a_signal_exits_with_128_plus_its_number(
    agent: Agent, holders: Holders
) -> None:
    """flintlock reports a command killed by signal N as exit code 128+N (flintlock API §8);
    the agent passes that code on as it came, after the output written before the signal."""
    holding = await holders.hold()
    start = Start(uid=holding.microvm_uid, cmd="echo before; kill -TERM $$; echo after", shell=True)
    async with agent.channel() as channel:
        responses = await run_exec(channel, holding.metadata, start)
    assert joined(responses, "stdout") == b"before\n"
    assert_exit_last(responses, 128 + 15)


@pytest.mark.req("EA-020", "EA-101")
@pytest.mark.parametrize("after_chunks", [None, 2])
async def test_a_stream_cut_by_flintlockd_fails_and_never_ends_with_an_exit_code(
    agent: Agent, holders: Holders, flintlockd: FakeFlintlockd, after_chunks: int | None
) -> None:
    holding = await holders.hold()
    await flintlockd.cut_next_exec_stream(after_chunks=after_chunks)
    start = Start(uid=holding.microvm_uid, cmd="seq 1 100000", shell=True)
    received: list[Response] = []
    async with agent.channel() as channel:
        call = MicroVMExecStub(channel).ExecCommand(
            iter([Request(start=start)]), metadata=holding.metadata, timeout=20
        )
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await drain(call, into=received)
    # flintlockd said UNKNOWN; the caller sees UNAVAILABLE, and no exit code ever came.
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert caught.value.details() == (
        "flintlockd: the exec stream failed: reading guest-agent exec frame: unexpected EOF"
    )
    assert "exit_code" not in kinds(received)
    if after_chunks is not None:
        # The output sent before the cut arrives (perhaps joined into fewer messages).
        assert set(kinds(received)) == {"stdout"}
        assert joined(received, "stdout").startswith(b"1\n2\n3\n")


@pytest.mark.req("EA-020")
async def test_flintlockds_refusal_keeps_its_code(
    agent: Agent, holders: Holders, flintlockd: FakeFlintlockd
) -> None:
    holding = await holders.hold()
    await flintlockd.set_vm_state(holding.microvm_uid, microvm_pb2.MicroVMStatus.PENDING)
    async with agent.channel() as channel:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await run_exec(channel, holding.metadata, Start(uid=holding.microvm_uid, cmd="true"))
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert caught.value.details().startswith("flintlockd: ")
    assert await flintlockd.exec_history() == []


@pytest.mark.req("EA-021")
async def test_a_flintlockd_that_is_down_makes_the_call_unavailable(
    agent: Agent, holders: Holders, flintlockd: FakeFlintlockd
) -> None:
    holding = await holders.hold()
    await flintlockd.go_down()
    async with agent.channel() as channel:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await run_exec(channel, holding.metadata, Start(uid=holding.microvm_uid, cmd="true"))
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert caught.value.details().startswith("flintlockd: GetMicroVM: ")


@contextlib.asynccontextmanager
async def silent_listener(address: str) -> AsyncIterator[str]:
    """A TCP endpoint that accepts connections and never says a word (a hung flintlockd)."""
    held: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(hold, address, 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"{address}:{port}"
    finally:
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()


@pytest.mark.req("EA-021")
async def test_a_flintlockd_that_does_not_answer_in_time_ends_the_call_unavailable(
    pki: Pki, holders: Holders, agent_identity: KubeConfig, flintlockd: FakeFlintlockd
) -> None:
    holding = await holders.hold()
    async with (
        silent_listener("127.0.0.43") as hung,
        running_agent(
            pki, agent_identity, hung, exec_open_timeout=timedelta(milliseconds=500)
        ) as agent,
        agent.channel() as channel,
    ):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await run_exec(channel, holding.metadata, Start(uid=holding.microvm_uid, cmd="true"))
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert caught.value.details() == "flintlockd: flintlockd did not take the stream within 0.5s"


async def process_exit(pid: int) -> None:
    """Return when process `pid` has ended (a pidfd becomes readable then)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    ended = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_reader(fd, ended.set)
    try:
        await ended.wait()
    finally:
        loop.remove_reader(fd)
        os.close(fd)


@pytest.mark.req("EA-020", "EA-102")
async def test_a_caller_who_cancels_stops_the_command(agent: Agent, holders: Holders) -> None:
    holding = await holders.hold()
    start = Start(uid=holding.microvm_uid, cmd="echo $$; exec sleep 600", shell=True)
    async with agent.channel() as channel:
        call = MicroVMExecStub(channel).ExecCommand(
            iter([Request(start=start)]), metadata=holding.metadata
        )
        first = await call.read()
        assert isinstance(first, Response)
        pid = int(first.stdout.decode().strip())
        call.cancel()
        async with asyncio.timeout(10):
            await process_exit(pid)  # the command ended: nothing runs for a caller who left


@pytest.mark.req("EA-020")
async def test_a_stdin_message_above_the_size_limit_ends_the_call_and_the_command(
    agent: Agent, holders: Holders
) -> None:
    holding = await holders.hold()
    start = Start(uid=holding.microvm_uid, cmd="echo $$; exec cat", shell=True, has_stdin=True)
    pid_seen = asyncio.Event()

    async def requests() -> AsyncIterator[Request]:
        yield Request(start=start)
        await pid_seen.wait()
        yield Request(stdin=b"x" * (agent.config.max_message_bytes + 1))
        await asyncio.Event().wait()

    pids: list[int] = []

    def note_pid(response: Response) -> None:
        if not pids and response.stdout:
            pids.append(int(response.stdout.decode().split()[0]))
            pid_seen.set()

    async with agent.channel() as channel:
        call = MicroVMExecStub(channel).ExecCommand(
            requests(), metadata=holding.metadata, timeout=20
        )
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await drain(call, on=note_pid)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    async with asyncio.timeout(10):
        await process_exit(pids[0])  # the command did not outlive its call


@pytest.mark.req("EA-021")
async def test_a_caller_who_never_sends_a_start_is_cut_off_at_the_deadline(
    pki: Pki, holders: Holders, agent_identity: KubeConfig, flintlockd: FakeFlintlockd
) -> None:
    holding = await holders.hold()

    async def silence() -> AsyncIterator[Request]:
        await asyncio.Event().wait()
        yield Request()  # never reached

    async with (
        running_agent(
            pki, agent_identity, flintlockd.target, exec_open_timeout=timedelta(milliseconds=500)
        ) as agent,
        agent.channel() as channel,
    ):
        call = MicroVMExecStub(channel).ExecCommand(
            silence(), metadata=holding.metadata, timeout=20
        )
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await drain(call)
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert caught.value.details() == "request: no start message within 0.5s"
    assert await flintlockd.exec_history() == []


@pytest.mark.req("EA-001")
async def test_a_flintlockd_whose_certificate_names_another_address_is_not_trusted(
    pki: Pki, holders: Holders, agent_identity: KubeConfig, tmp_path: Path
) -> None:
    """The agent verifies flintlockd's serving certificate against the dialled address."""
    impostor = pki.serving_ca.issue("flintlockd", hosts=["127.0.0.99"], server=True)
    cert, key = impostor.write(tmp_path, "impostor")
    tls = TLSFiles(cert=cert, key=key, client_ca=pki.flintlockd_tls.client_ca)
    holding = await holders.hold()  # on the trusted fake flintlockd
    async with FakeFlintlockd.start(address=FLINTLOCKD_ADDRESS, tls=tls) as other:
        async with (
            running_agent(pki, agent_identity, other.target) as agent,
            agent.channel() as channel,
        ):
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await run_exec(
                    channel, holding.metadata, Start(uid=holding.microvm_uid, cmd="true")
                )
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        assert caught.value.details().startswith("flintlockd: GetMicroVM: ")
        assert await other.exec_history() == []

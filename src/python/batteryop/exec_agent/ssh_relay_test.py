"""The SSH proxy through the agent (EA-130): a real sshd answers through the agent and the fake
flintlockd's `MicroVMSSHProxy`, with the exec path's authorization (real API server, real
tokens and claims), refused as exec is refused, half-closed as flintlockd half-closes, and ended
within 2 s of the claim's release (EA-106, EA-115).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import grpc
import grpc.aio
import pytest

from battery_protos.flintlock.services.microvmsshproxy.v1alpha1 import microvmsshproxy_pb2
from battery_protos.flintlock.services.microvmsshproxy.v1alpha1.microvmsshproxy_pb2_grpc import (
    MicroVMSSHProxyStub,
)
from batteryop.exec_agent.streams_test import ENDED_WITHIN, delete_claim
from batteryop.testing.exec_agent import Agent, Holders, Holding

pytestmark = pytest.mark.controlplane

Request = microvmsshproxy_pb2.SSHProxyRequest
BANNER = b"SSH-2.0-battery_test\r\n"


class Upstream:
    """The caller's side of one SSHProxy call: messages put in as the test goes."""

    def __init__(self, first: Request) -> None:
        self._queue: asyncio.Queue[Request | None] = asyncio.Queue()
        self._queue.put_nowait(first)

    def send(self, data: bytes) -> None:
        self._queue.put_nowait(Request(data=data))

    def send_message(self, message: Request) -> None:
        self._queue.put_nowait(message)

    def close(self) -> None:
        """Half-close: the caller sends nothing more."""
        self._queue.put_nowait(None)

    async def __aiter__(self) -> AsyncIterator[Request]:
        while (item := await self._queue.get()) is not None:
            yield item


@contextlib.asynccontextmanager
async def ssh_call(
    agent: Agent, metadata: tuple[tuple[str, str], ...], first: Request
) -> AsyncIterator[tuple[grpc.aio.StreamStreamCall, Upstream]]:
    upstream = Upstream(first)
    async with agent.channel() as channel:
        call = MicroVMSSHProxyStub(channel).SSHProxy(upstream.__aiter__(), metadata=metadata)
        try:
            yield call, upstream
        finally:
            call.cancel()


async def read_until(call: grpc.aio.StreamStreamCall, marker: bytes) -> bytes:
    got = b""
    async with asyncio.timeout(20):
        while marker not in got:
            response = await call.read()
            assert response is not grpc.aio.EOF, f"the stream ended after {got!r}"
            got += response.data
    return got


async def code_of(call: grpc.aio.StreamStreamCall) -> tuple[grpc.StatusCode, str]:
    async with asyncio.timeout(20):
        with contextlib.suppress(grpc.aio.AioRpcError):
            while await call.read() is not grpc.aio.EOF:
                pass
        return await call.code(), await call.details()


@pytest.mark.req("EA-130")
async def test_the_guests_sshd_answers_through_the_agent_and_a_half_close_ends_the_call_ok(
    agent: Agent, holders: Holders
) -> None:
    holding = await holders.hold()
    async with ssh_call(agent, holding.metadata, Request(uid=holding.microvm_uid)) as (call, up):
        up.send(BANNER)
        banner = await read_until(call, b"\r\n")
        assert banner.startswith(b"SSH-2.0-OpenSSH"), banner
        # sshd sees the end of its input once the caller half-closes, and closes: OK.
        up.close()
        code, details = await code_of(call)
    assert code == grpc.StatusCode.OK, details


@pytest.mark.req("EA-130")
async def test_a_token_for_another_claim_cannot_reach_this_microvms_sshd(
    agent: Agent, holders: Holders
) -> None:
    mine, theirs = await holders.hold(), await holders.hold()
    async with ssh_call(agent, mine.metadata, Request(uid=theirs.microvm_uid)) as (call, up):
        up.send(BANNER)
        code, details = await code_of(call)
    assert (code, details) == (
        grpc.StatusCode.PERMISSION_DENIED,
        f"claim: claim {holders.namespace}/{mine.claim} "
        f"does not hold microvm '{theirs.microvm_uid}'",
    )


@pytest.mark.req("EA-130")
@pytest.mark.parametrize(
    ("first", "message"),
    [
        (Request(data=BANNER), "request: the first message must set uid"),
        (Request(), "request: the first message must set uid"),
    ],
    ids=["data-first", "empty-first"],
)
async def test_a_first_message_without_a_uid_is_invalid(
    agent: Agent, holders: Holders, first: Request, message: str
) -> None:
    holding = await holders.hold()
    async with ssh_call(agent, holding.metadata, first) as (call, _):
        code, details = await code_of(call)
    assert (code, details) == (grpc.StatusCode.INVALID_ARGUMENT, message)


@pytest.mark.req("EA-130")
async def test_a_second_uid_ends_the_stream_as_invalid(agent: Agent, holders: Holders) -> None:
    holding = await holders.hold()
    async with ssh_call(agent, holding.metadata, Request(uid=holding.microvm_uid)) as (call, up):
        up.send(BANNER)
        await read_until(call, b"\r\n")
        up.send_message(Request(uid=holding.microvm_uid))
        code, details = await code_of(call)
    assert (code, details) == (grpc.StatusCode.INVALID_ARGUMENT, "request: a second uid")


@pytest.mark.req("EA-130", "EA-106")
async def test_an_open_shell_ends_within_two_seconds_of_the_claims_release(
    agent: Agent, holders: Holders
) -> None:
    holding: Holding = await holders.hold()
    async with ssh_call(agent, holding.metadata, Request(uid=holding.microvm_uid)) as (call, up):
        up.send(BANNER)
        await read_until(call, b"\r\n")  # the session is open: sshd waits for our key exchange
        released = time.monotonic()
        delete_claim(holders, holding)
        code, details = await code_of(call)
        took = time.monotonic() - released
    print(f"release -> ssh stream ended in {took * 1000:.0f} ms")
    assert code == grpc.StatusCode.PERMISSION_DENIED, details
    assert took <= ENDED_WITHIN

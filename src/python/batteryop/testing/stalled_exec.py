"""A Holder's exec stream that stops being read, then loses its claim (issue 43, EA-106,
EA-115): what `tests/security/stalled_stream_test.py` checks and `tests/bench/exec_agent_bench.py`
times.

`stall_then_delete` opens a raw gRPC stream with stdin running `OUTPUT_HEAVY` (output without
end, stdin never read by the command but taken by flintlockd), never reads it, and once the
stdin it sent has reached the fake flintlockd, deletes the claim; then sends more stdin. It
reports how long flintlockd's RPC outlived the deletion (the fake's own record of the session,
awaited with a long poll) and the stdin that reached the command before and after.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from typing import Final

import grpc
import grpc.aio
from kubernetes import client as k8s

from battery_protos.flintlock.services.microvmexec.v1alpha1 import microvmexec_pb2
from battery_protos.flintlock.services.microvmexec.v1alpha1.microvmexec_pb2_grpc import (
    MicroVMExecStub,
)
from batteryop.api import names
from batteryop.testing.exec_agent import Agent, Holders, Holding
from batteryop.testing.fake_flintlock import FakeFlintlockd
from batteryop.testing.polling import wait_until

Start = microvmexec_pb2.ExecStart
Request = microvmexec_pb2.ExecCommandRequest

OUTPUT_HEAVY: Final = "yes stalled-stream-output-line"
"""Writes output as fast as it can, forever; never reads its stdin (flintlockd takes it)."""

WAIT_ENDED_SECONDS: Final = 10.0
"""How long the RPC's end on flintlockd is awaited at most."""


@dataclass(frozen=True)
class StalledEnd:
    """How an unread stream ended after its claim was deleted."""

    ended: bool
    """Whether flintlockd's RPC ended within `WAIT_ENDED_SECONDS`."""
    seconds: float
    """From the deletion to the RPC's end on flintlockd (or to giving up)."""
    stdin: bytes
    """The stdin flintlockd took for the command (the first MiB)."""
    after: bytes
    """What the Holder sent as stdin after the deletion."""
    deleted_at: float
    """When the claim was deleted (`time.monotonic`)."""


async def write_within(call: grpc.aio.StreamStreamCall, request: Request, seconds: float) -> bool:
    """Whether gRPC took `request` within `seconds` (False: flow control holds it, which
    cancels the call, or the call is over)."""
    try:
        async with asyncio.timeout(seconds):
            await call.write(request)
        return True
    except TimeoutError:
        return False
    except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
        return False


async def stall_then_delete(
    agent: Agent, holders: Holders, flintlockd: FakeFlintlockd, holding: Holding
) -> StalledEnd:
    """See the module docstring. The exec must be the first on `flintlockd` since
    `exec_session` index `first` (its count of execs before the call)."""
    first = len(await flintlockd.exec_history())
    before = f"before-{uuid.uuid4().hex}\n".encode()
    after = f"after-{uuid.uuid4().hex}\n".encode()
    start = Start(uid=holding.microvm_uid, cmd=OUTPUT_HEAVY, shell=True, has_stdin=True)
    # No BDP probing: the Holder's own process does not buffer megabytes of unread output.
    async with agent.channel(**{"grpc.http2.bdp_probe": 0}) as channel:
        call = MicroVMExecStub(channel).ExecCommand(metadata=holding.metadata)
        try:
            await call.write(Request(start=start))
            assert await write_within(call, Request(stdin=before), 10), "stdin was not taken"
            await wait_until(
                flintlockd.exec_history,
                lambda h: len(h) > first,
                what="the exec started on flintlockd",
                within=10,
            )
            await wait_until(
                lambda: flintlockd.exec_session(first),
                lambda s: before in s.stdin,
                what="the stdin sent before the deletion reached the command",
                within=10,
            )
            deleted = time.monotonic()
            k8s.CustomObjectsApi(holders.api).delete_namespaced_custom_object(
                names.GROUP, names.VERSION, holders.namespace, names.CLAIM_PLURAL, holding.claim
            )
            session = await flintlockd.exec_session(first, wait_ended=WAIT_ENDED_SECONDS)
            took = time.monotonic() - deleted
            # Stdin after the deletion: wherever gRPC takes it, it must not reach the command.
            await write_within(call, Request(stdin=after), 2)
            final = await flintlockd.exec_session(first)
            return StalledEnd(session.ended, took, final.stdin, after, deleted)
        finally:
            call.cancel()

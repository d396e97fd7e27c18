"""A Holder that stops reading its exec stream cannot keep its command past its claim (issue 43,
EA-106, EA-115).

The attack: a raw gRPC stream with stdin, running a command that writes output without end,
whose responses the Holder never reads. gRPC then holds the agent's handler at the message it
is sending. The claim is deleted; the command must still end on flintlockd within the bound,
and stdin the Holder sends after the deletion must not reach it. Real API server and tokens,
the agent as a real TLS server, the fake flintlockd process (which reports when the exec's RPC
ended, and the stdin it took).
"""

from __future__ import annotations

import asyncio

import grpc
import grpc.aio
import pytest
from kubernetes import client as k8s

from battery_protos.flintlock.services.microvmexec.v1alpha1 import microvmexec_pb2
from battery_protos.flintlock.services.microvmexec.v1alpha1.microvmexec_pb2_grpc import (
    MicroVMExecStub,
)
from batteryop.api import names
from batteryop.testing.exec_agent import (
    Agent,
    Holders,
)
from batteryop.testing.fake_flintlock import FakeFlintlockd
from batteryop.testing.polling import wait_until
from batteryop.testing.stalled_exec import stall_then_delete

pytestmark = pytest.mark.controlplane

ENDED_WITHIN = 3.0
"""Seconds from the deletion to the command's RPC ending on flintlockd, at most (EA-106 says 2;
the test allows for the shared machine)."""


@pytest.mark.req("EA-106", "EA-115")
async def test_an_unread_stream_ends_on_flintlockd_when_its_claim_is_deleted(
    agent: Agent, holders: Holders, flintlockd: FakeFlintlockd
) -> None:
    holding = await holders.hold()
    end = await stall_then_delete(agent, holders, flintlockd, holding)
    took = end.seconds
    assert end.ended, (
        f"the command's RPC on flintlockd still runs {took:.1f}s after its claim was deleted, "
        "its stream unread"
    )
    print(f"claim deleted -> unread stream's command ended on flintlockd in {took * 1000:.0f} ms")
    assert took <= ENDED_WITHIN, f"the command ended {took:.2f}s after its claim was deleted"
    assert end.after not in end.stdin, "stdin sent after the claim's deletion reached the command"
    # The slot is free again once the handler is gone (at most END_GRACE_SECONDS later).
    await wait_until(
        lambda: _now(agent.server.streams.running),
        lambda running: running == 0,
        what="the ended stream's slot is free",
        within=5,
    )


async def _now(value: int) -> int:
    return value


@pytest.mark.req("EA-106", "EA-115")
async def test_a_reading_caller_with_stdin_open_still_gets_the_claims_refusal(
    agent: Agent, holders: Holders, flintlockd: FakeFlintlockd
) -> None:
    """Ending the stream from outside its handler keeps the status a reading caller gets."""
    holding = await holders.hold()
    start = microvmexec_pb2.ExecStart(
        uid=holding.microvm_uid, cmd="echo up; cat >/dev/null", shell=True, has_stdin=True
    )
    async with agent.channel() as channel:
        call = MicroVMExecStub(channel).ExecCommand(metadata=holding.metadata)
        await call.write(microvmexec_pb2.ExecCommandRequest(start=start))
        first = await asyncio.wait_for(call.read(), 10)
        assert first.stdout == b"up\n"
        k8s.CustomObjectsApi(holders.api).delete_namespaced_custom_object(
            names.GROUP, names.VERSION, holders.namespace, names.CLAIM_PLURAL, holding.claim
        )
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async with asyncio.timeout(ENDED_WITHIN):
                await call.read()
    assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED, caught.value
    assert caught.value.details().endswith("; the running command was ended")
    assert (await flintlockd.exec_session(0, wait_ended=ENDED_WITHIN)).ended

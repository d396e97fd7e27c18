"""Issue 43, finding 5: one identity must not be able to cost the Exec Agent without bound.

Any ServiceAccount can mint a token for the agent's audience, and such a token passes the
TokenReview: before the per-identity limit, its ServerInfo calls and its refused calls were
never limited, each costing a TokenReview (made fresh, past the API server's cache) and a claim
read. Here one identity floods the agent with ServerInfo, GetMicroVM and ExecCommand calls (all
but ServerInfo refused), over several connections and with two tokens of its own: once its
bucket is spent its calls are RESOURCE_EXHAUSTED, naming the limit, and cost no more reviews,
while another identity's calls go on (EA-120, EA-121). And one identity holding many claims
cannot run more exec streams than its per-Holder cap, while another Holder still can (EA-123).

Real parts: the kube-apiserver and etcd, the agent as a TLS gRPC server on loopback acting as
its own ServiceAccount, TokenRequest tokens; the fake flintlockd runs the commands.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import AsyncIterator

import grpc
import grpc.aio
import pytest
import pytest_asyncio
from google.protobuf import empty_pb2

from battery_protos.flintlock.services.microvm.v1alpha1 import microvms_pb2, microvms_pb2_grpc
from battery_protos.flintlock.services.microvmexec.v1alpha1 import (
    microvmexec_pb2,
    microvmexec_pb2_grpc,
)
from batteryop.exec_agent.timing import Phase
from batteryop.testing.controlplane import ControlPlane
from batteryop.testing.exec_agent import (
    Agent,
    Holders,
    Holding,
    Pki,
    agent_kube_config,
    run_exec,
    running_agent,
)
from batteryop.testing.fake_flintlock import FakeFlintlockd
from batteryop.testing.polling import wait_until

pytestmark = pytest.mark.controlplane

BURST = 10
RATE = 0.5
PER_HOLDER = 3
FLOOD_CALLS = 60
CONNECTIONS = 6

Request = microvmexec_pb2.ExecCommandRequest
Response = microvmexec_pb2.ExecCommandResponse


@pytest_asyncio.fixture
async def agent(
    cluster: ControlPlane, pki: Pki, flintlockd: FakeFlintlockd
) -> AsyncIterator[Agent]:
    async with running_agent(
        pki,
        agent_kube_config(cluster),
        flintlockd.target,
        identity_call_burst=BURST,
        identity_call_rate=RATE,
        max_streams_per_holder=PER_HOLDER,
    ) as running:
        yield running


def metadata(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


async def server_info(channel: grpc.aio.Channel, token: str) -> grpc.StatusCode:
    try:
        await microvms_pb2_grpc.MicroVMStub(channel).ServerInfo(
            empty_pb2.Empty(), metadata=metadata(token), timeout=30
        )
    except grpc.aio.AioRpcError as e:
        return e.code()
    return grpc.StatusCode.OK


@pytest.mark.req("EA-120", "EA-121")
async def test_one_identitys_flood_is_refused_while_another_identity_goes_on(
    agent: Agent, holders: Holders
) -> None:
    alice = await holders.hold(service_account="alice")
    mallory = await holders.hold(service_account="mallory")
    # Two tokens of one identity: minting more does not buy more calls.
    tokens = [mallory.token, holders.token("mallory", None)]
    identity = f"system:serviceaccount:{holders.namespace}:mallory"
    reviews_before = sum(1 for p, _ in agent.phases if p == Phase.TOKEN_REVIEW)
    codes: collections.Counter[str] = collections.Counter()
    limited: list[str] = []
    calls = iter(range(FLOOD_CALLS))

    async def one(channel: grpc.aio.Channel, i: int) -> None:
        token = tokens[i % len(tokens)]
        try:
            if i % 3 == 0:  # answered OK while the bucket lasts
                await microvms_pb2_grpc.MicroVMStub(channel).ServerInfo(
                    empty_pb2.Empty(), metadata=metadata(token), timeout=30
                )
            elif i % 3 == 1:  # another Holder's MicroVM: refused by the claim check
                await microvms_pb2_grpc.MicroVMStub(channel).GetMicroVM(
                    microvms_pb2.GetMicroVMRequest(uid=alice.microvm_uid),
                    metadata=metadata(token),
                    timeout=30,
                )
            else:
                start = microvmexec_pb2.ExecStart(uid=alice.microvm_uid, cmd="true")
                await run_exec(channel, metadata(token), start)
            codes["OK"] += 1
        except grpc.aio.AioRpcError as e:
            codes[e.code().name] += 1
            if e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                limited.append(e.details() or "")

    async def worker(n: int) -> None:
        # Each its own connection (a channel option makes a distinct subchannel).
        async with agent.channel(**{"grpc.flood_connection": n}) as channel:
            for i in calls:
                await one(channel, i)

    began = time.monotonic()
    await asyncio.wait_for(asyncio.gather(*(worker(n) for n in range(CONNECTIONS))), 120)
    seconds = time.monotonic() - began
    reviews = sum(1 for p, _ in agent.phases if p == Phase.TOKEN_REVIEW) - reviews_before
    # What the bucket lets through: its size, its refill meanwhile, the calls under way when it
    # ran dry (one per connection), and each token's first review after that.
    allowed = BURST + RATE * seconds + CONNECTIONS + len(tokens)
    print(
        f"\nidentity flood: {FLOOD_CALLS} calls in {seconds:.1f}s, codes {dict(codes)}, "
        f"{reviews} TokenReviews (allowed <= {allowed:.0f})"
    )
    assert set(codes) <= {"OK", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED"}, codes
    assert codes["RESOURCE_EXHAUSTED"] >= FLOOD_CALLS - allowed, codes
    assert reviews <= allowed, f"{reviews} TokenReviews for {FLOOD_CALLS} calls"
    prefix = f"limit: calls per identity: too many calls by {identity}; try again in "
    assert all(d.startswith(prefix) for d in limited), limited[:3]

    async with agent.channel() as channel:
        # Still refused, without a review (a refill of the bucket meanwhile lets one through).
        for attempt in range(3):
            before = sum(1 for p, _ in agent.phases if p == Phase.TOKEN_REVIEW)
            code = await server_info(channel, tokens[attempt % len(tokens)])
            if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
                assert sum(1 for p, _ in agent.phases if p == Phase.TOKEN_REVIEW) == before
                break
        else:
            raise AssertionError("the flooding identity's calls are no longer limited")
        # ...while another identity's calls go on.
        assert await server_info(channel, alice.token) == grpc.StatusCode.OK
        start = microvmexec_pb2.ExecStart(uid=alice.microvm_uid, cmd="true")
        responses = await run_exec(channel, alice.metadata, start)
        assert responses[-1].exit_code == 0


@contextlib.asynccontextmanager
async def long_command(
    channel: grpc.aio.Channel, holding: Holding
) -> AsyncIterator[grpc.aio.StreamStreamCall[Request, Response]]:
    """A command that would run for 10 minutes, started through the agent (its first output
    read: the stream is admitted and running)."""
    start = microvmexec_pb2.ExecStart(
        uid=holding.microvm_uid, cmd="echo up; exec sleep 600", shell=True
    )
    call = microvmexec_pb2_grpc.MicroVMExecStub(channel).ExecCommand(
        iter([Request(start=start)]), metadata=holding.metadata
    )
    try:
        first = await asyncio.wait_for(call.read(), 30)
        assert isinstance(first, Response), first
        yield call
    finally:
        call.cancel()


@pytest.mark.req("EA-123")
async def test_one_identity_with_many_claims_gets_at_most_its_per_holder_streams(
    agent: Agent, holders: Holders
) -> None:
    greedy = [await holders.hold(service_account="greedy") for _ in range(PER_HOLDER + 1)]
    other = await holders.hold(service_account="other")
    identity = f"system:serviceaccount:{holders.namespace}:greedy"
    async with contextlib.AsyncExitStack() as stack, agent.channel() as channel:
        running = [
            await stack.enter_async_context(long_command(channel, h)) for h in greedy[:PER_HOLDER]
        ]
        # A claim of its own with no stream yet: refused all the same, by the Holder's cap.
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async with long_command(channel, greedy[PER_HOLDER]):
                pass
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert caught.value.details() == (
            f"limit: streams per Holder: {identity} runs {PER_HOLDER} streams already"
        )
        # Another Holder is not held back by it.
        await stack.enter_async_context(long_command(channel, other))
        # One of the greedy streams ends: its slot is free again.
        running[0].cancel()

        async def count() -> int:
            return agent.server.streams.running_for(identity)

        await wait_until(count, lambda n: n < PER_HOLDER, what="the ended stream's release")
        await stack.enter_async_context(long_command(channel, greedy[PER_HOLDER]))

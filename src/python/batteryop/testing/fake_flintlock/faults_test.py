"""Faults injected through the control API: down/up, slow and failing creates (TD-109)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import grpc
import pytest
from google.protobuf import empty_pb2

from battery_protos.flintlock.services.microvm.v1alpha1 import microvms_pb2, microvms_pb2_grpc
from battery_protos.flintlock.services.microvmexec.v1alpha1 import microvmexec_pb2
from battery_protos.flintlock.types import microvm_pb2
from batteryop.testing.fake_flintlock import FakeFlintlockdError
from batteryop.testing.fake_flintlock.testkit import Client, make_spec

State = microvm_pb2.MicroVMStatus.MicroVMState


@pytest.mark.req("TD-109")
async def test_down_and_up_on_the_same_address_keeps_the_microvms(client: Client) -> None:
    uid = await client.create()
    await client.host.go_down()
    assert not await client.host.is_up()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await client.microvm.GetMicroVM(microvms_pb2.GetMicroVMRequest(uid=uid), timeout=5)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert [vm.spec.uid for vm in await client.host.list_vms()] == [uid]

    await client.host.come_up()
    # The old channel reconnects after its backoff (about 1 s); a fresh channel with its own
    # subchannel pool (gRPC shares subchannels, and their backoff, between channels) at once.
    options = [("grpc.use_local_subchannel_pool", 1)]
    async with grpc.aio.insecure_channel(client.host.target, options=options) as channel:
        got = await microvms_pb2_grpc.MicroVMStub(channel).GetMicroVM(
            microvms_pb2.GetMicroVMRequest(uid=uid), timeout=5
        )
    assert got.microvm.spec.uid == uid


async def read_to_end(call: grpc.aio.StreamStreamCall) -> None:
    while await call.read() is not grpc.aio.EOF:
        pass


@pytest.mark.req("TD-011", "TD-109")
async def test_down_fails_an_exec_stream_in_flight(client: Client) -> None:
    uid = await client.create()
    start = microvmexec_pb2.ExecStart(uid=uid, cmd="echo started; sleep 30", shell=True)

    async def requests() -> AsyncIterator[microvmexec_pb2.ExecCommandRequest]:
        yield microvmexec_pb2.ExecCommandRequest(start=start)

    call = client.exec.ExecCommand(requests(), timeout=20)
    first = await call.read()
    assert first.stdout == b"started\n"
    await client.host.go_down()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await read_to_end(call)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE


@pytest.mark.req("TD-109")
async def test_slow_creates_store_first_leaves_the_microvm_when_the_client_gives_up(
    client: Client,
) -> None:
    await client.host.slow_creates(1.0)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await client.microvm.CreateMicroVM(
            microvms_pb2.CreateMicroVMRequest(microvm=make_spec("lost")), timeout=0.3
        )
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert [vm.spec.id for vm in await client.host.list_vms()] == ["lost"]

    began = time.monotonic()
    await client.create(make_spec("slow"))
    assert time.monotonic() - began >= 1.0


@pytest.mark.req("TD-109")
async def test_slow_creates_before_store_leave_nothing(client: Client) -> None:
    await client.host.slow_creates(2.0, store_first=False)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await client.microvm.CreateMicroVM(
            microvms_pb2.CreateMicroVMRequest(microvm=make_spec()), timeout=0.3
        )
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert await client.host.list_vms() == []
    await client.host.slow_creates(0)
    await client.create()
    assert len(await client.host.list_vms()) == 1


@pytest.mark.req("TD-109")
async def test_fail_creates_n_times_then_succeed(client: Client) -> None:
    await client.host.fail_creates(grpc.StatusCode.RESOURCE_EXHAUSTED, "thin pool full", times=2)
    for _ in range(2):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await client.create()
        assert (err.value.code(), err.value.details()) == (
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "thin pool full",
        )
    assert await client.host.list_vms() == []
    uid = await client.create()
    assert [vm.spec.uid for vm in await client.host.list_vms()] == [uid]
    # Other RPCs were never affected.
    await client.microvm.ServerInfo(empty_pb2.Empty(), timeout=5)


@pytest.mark.req("TD-109")
async def test_control_api_refuses_bad_requests(client: Client) -> None:
    with pytest.raises(FakeFlintlockdError, match="unknown gRPC status code"):
        await client.host.fail_creates("NOT_A_CODE", "x")
    with pytest.raises(FakeFlintlockdError, match="not found"):
        await client.host.set_vm_state("01NOPE", State.FAILED)

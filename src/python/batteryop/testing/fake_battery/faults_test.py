"""Tests of the fake battery's fault injection (TD-006) on real loopback gRPC channels."""

from __future__ import annotations

import asyncio
from base64 import b64encode
from collections.abc import Awaitable
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2

from battery_protos.poolmgr.v1alpha1 import events_pb2, lease_pb2, pooladmin_pb2, types_pb2
from batteryop.testing.fake_battery import FakeBattery
from batteryop.testing.fake_battery.testkit import BatteryStubs, pool_spec, ref_of

pytestmark = pytest.mark.asyncio(loop_scope="module")

Code = grpc.StatusCode


async def code_of(call: Awaitable[Any]) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    return info.value.code()


async def ready(
    battery: FakeBattery, stubs: BatteryStubs, ns: str, size: int = 1, **kwargs: Any
) -> types_pb2.PoolRef:
    spec = pool_spec("p", ns, ["host-a", "host-b"], size=size, **kwargs)
    await stubs.create_pool(spec)
    ref = ref_of(spec)
    await stubs.wait_status(ref, lambda s: s.available_count == size, what="a full Pool")
    return ref


@pytest.mark.req("TD-006", "BA-112")
async def test_unavailable_answers_every_rpc_with_unavailable(
    battery: FakeBattery, stubs: BatteryStubs, ns: str
) -> None:
    ref = await ready(battery, stubs, ns)
    battery.set_unavailable()
    assert await code_of(stubs.claim(ref)) == Code.UNAVAILABLE
    assert await code_of(stubs.health.Check(health_pb2.HealthCheckRequest())) == Code.UNAVAILABLE
    stream = stubs.events.Subscribe(events_pb2.SubscribeRequest())
    assert await code_of(stream.read()) == Code.UNAVAILABLE
    battery.set_unavailable(False)
    reply = await stubs.health.Check(health_pb2.HealthCheckRequest())
    assert reply.status == health_pb2.HealthCheckResponse.SERVING
    await stubs.claim(ref)


@pytest.mark.req("TD-006")
async def test_stop_listening_refuses_connections_and_resume_keeps_state(
    battery: FakeBattery, ns: str
) -> None:
    async with grpc.aio.insecure_channel(battery.target) as channel:
        stubs = BatteryStubs.on(channel)
        ref = await ready(battery, stubs, ns)
        target = battery.target
        await battery.stop_listening()
        assert not battery.listening
        assert await code_of(stubs.get_pool(ref)) == Code.UNAVAILABLE
        await battery.resume_listening()
        assert battery.target == target
        # The channel reconnects with backoff after the refusals; wait for it.
        pool = await stubs.pools.GetPool(
            pooladmin_pb2.GetPoolRequest(ref=ref), timeout=10, wait_for_ready=True
        )
        assert pool.status.available_count == 1


@pytest.mark.req("TD-006")
async def test_slow_claim_before_commit_leaves_no_lease(
    battery: FakeBattery, stubs: BatteryStubs, ns: str
) -> None:
    ref = await ready(battery, stubs, ns)
    battery.delay_claims(5)
    request = lease_pb2.ClaimVMRequest(pool=ref, request_id="slow-1")
    assert await code_of(stubs.leases.ClaimVM(request, timeout=0.2)) == Code.DEADLINE_EXCEEDED
    assert await stubs.list_leases(ref) == []
    battery.delay_claims(0)
    assert (await stubs.get_pool(ref)).status.available_count == 1


@pytest.mark.req("TD-006", "BA-004", "BA-100")
async def test_slow_claim_after_commit_keeps_the_lease_for_a_retry(
    battery: FakeBattery, stubs: BatteryStubs, ns: str
) -> None:
    ref = await ready(battery, stubs, ns, size=2)
    battery.delay_claims(5, after_commit=True)
    request = lease_pb2.ClaimVMRequest(pool=ref, request_id="slow-2")
    assert await code_of(stubs.leases.ClaimVM(request, timeout=0.2)) == Code.DEADLINE_EXCEEDED
    [lease] = await stubs.list_leases(ref)
    battery.delay_claims(0)
    retry = await stubs.claim(ref, request_id="slow-2")
    assert (retry.lease_id, retry.vm_uid) == (lease.lease_id, lease.vm_uid)


@pytest.mark.req("TD-006", "BA-100")
@pytest.mark.parametrize("code", [Code.UNAVAILABLE, Code.DEADLINE_EXCEEDED])
async def test_lost_answer_then_retry_gets_the_same_lease(
    battery: FakeBattery, stubs: BatteryStubs, ns: str, code: grpc.StatusCode
) -> None:
    ref = await ready(battery, stubs, ns, size=2)
    battery.lose_claim_answers(1, code)
    assert await code_of(stubs.claim(ref, request_id="uid-1")) == code
    [lease] = await stubs.list_leases(ref)
    retry = await stubs.claim(ref, request_id="uid-1")
    assert (retry.lease_id, retry.vm_uid) == (lease.lease_id, lease.vm_uid)
    status = (await stubs.get_pool(ref)).status
    assert (status.available_count, status.leased_count) == (1, 1)


@pytest.mark.req("TD-006")
async def test_refused_heartbeats_renew_nothing(
    battery: FakeBattery, stubs: BatteryStubs, ns: str
) -> None:
    ref = await ready(battery, stubs, ns)
    lease = await stubs.claim(ref)
    [before] = await stubs.list_leases(ref)
    await battery.advance(1)
    battery.refuse_heartbeats()
    assert await code_of(stubs.heartbeat(lease.lease_id)) == Code.UNAVAILABLE
    battery.refuse_heartbeats("FAILED_PRECONDITION")
    assert await code_of(stubs.heartbeat(lease.lease_id)) == Code.FAILED_PRECONDITION
    [after] = await stubs.list_leases(ref)
    assert after.expires_at == before.expires_at
    battery.refuse_heartbeats(None)
    beat = await stubs.heartbeat(lease.lease_id)
    assert beat.expires_at.ToDatetime() > before.expires_at.ToDatetime()
    with pytest.raises(ValueError):
        battery.refuse_heartbeats("OK")


@pytest.mark.req("TD-006")
async def test_failing_pre_lease_hook_once(
    battery: FakeBattery, stubs: BatteryStubs, ns: str
) -> None:
    ref = await ready(battery, stubs, ns, size=2)
    battery.fail_hooks("pre_lease", 1)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stubs.claim(ref)
    assert info.value.code() == Code.INTERNAL
    assert info.value.details() == "pre-lease hook: pre_lease hook failed (fault injection)"
    assert [e.type for e in battery.events()].count(types_pb2.VM_HOOK_FAILED) == 1
    await stubs.claim(ref)
    with pytest.raises(ValueError):
        battery.fail_hooks("post_lease")


@pytest.mark.req("TD-006")
async def test_failing_create_hooks_apply_the_policy(
    battery: FakeBattery, stubs: BatteryStubs, ns: str
) -> None:
    battery.fail_hooks("create")
    spec = pool_spec("p", ns, ["host-a"], policy=types_pb2.QUARANTINE)
    await stubs.create_pool(spec)
    await stubs.wait_status(ref_of(spec), lambda s: s.quarantined_count == 1, what="quarantine")
    battery.fail_hooks("create", 0)
    await battery.advance(10)
    await stubs.wait_status(ref_of(spec), lambda s: s.available_count == 1, what="a good VM")


@pytest.mark.req("TD-006")
async def test_dropped_event_streams(battery: FakeBattery, stubs: BatteryStubs, ns: str) -> None:
    await ready(battery, stubs, ns)
    stream = stubs.events.Subscribe(events_pb2.SubscribeRequest())
    first = await asyncio.wait_for(stream.read(), 5)
    assert first.id == 1
    battery.drop_event_streams(refuse_new=True)

    async def drain() -> None:
        while await stream.read() is not grpc.aio.EOF:
            pass

    with pytest.raises(grpc.aio.AioRpcError) as info:
        await asyncio.wait_for(drain(), 5)
    assert info.value.code() == Code.UNAVAILABLE
    refused = stubs.events.Subscribe(events_pb2.SubscribeRequest())
    assert await code_of(refused.read()) == Code.UNAVAILABLE
    battery.clear_faults()
    again = stubs.events.Subscribe(events_pb2.SubscribeRequest())
    assert (await asyncio.wait_for(again.read(), 5)).id == 1, "the outbox is replayed"
    again.cancel()


@pytest.mark.req("TD-001")
async def test_basic_auth_token(host_targets: dict[str, str]) -> None:
    async with (
        FakeBattery.start(hosts=host_targets, basic_auth_token="s3cret") as battery,
        grpc.aio.insecure_channel(battery.target) as channel,
    ):
        stubs = BatteryStubs.on(channel)
        check = health_pb2.HealthCheckRequest()
        assert await code_of(stubs.health.Check(check)) == Code.UNAUTHENTICATED
        bad = (("authorization", "basic " + b64encode(b"wrong").decode()),)
        assert await code_of(stubs.health.Check(check, metadata=bad)) == Code.UNAUTHENTICATED
        good = (("authorization", "basic " + b64encode(b"s3cret").decode()),)
        reply = await stubs.health.Check(check, metadata=good)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING

"""Tests of the standalone fake battery process and its control API (TD-006)."""

from __future__ import annotations

import grpc
import pytest
from grpc_health.v1 import health_pb2

from battery_protos.poolmgr.v1alpha1 import types_pb2
from batteryop.testing.fake_battery.process import FakeBatteryProcess, FakeBatteryProcessError
from batteryop.testing.fake_battery.testkit import BatteryStubs, pool_spec, ref_of

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.mark.req("TD-001", "TD-004", "TD-006", "TD-107", "TD-108")
async def test_standalone_serves_and_obeys_its_control_api(
    host_targets: dict[str, str], ns: str
) -> None:
    async with (
        FakeBatteryProcess.start(
            hosts=host_targets, fake_clock=True, args=["--sweep-interval=1s"]
        ) as process,
        grpc.aio.insecure_channel(process.target) as channel,
    ):
        stubs = BatteryStubs.on(channel)
        reply = await stubs.health.Check(health_pb2.HealthCheckRequest(), timeout=10)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        spec = pool_spec("p", ns, list(host_targets), expiry_threshold=2)
        await stubs.create_pool(spec)
        ref = ref_of(spec)
        await stubs.wait_status(ref, lambda s: s.available_count == 1, what="a VM")
        lease = await stubs.claim(ref, request_id="r")

        state = await process.state()
        assert [entry["lease_id"] for entry in state["leases"]] == [lease.lease_id]

        await process.set_faults(unavailable=True)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stubs.claim(ref)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        await process.clear_faults()

        await process.set_faults(lost_claim_answers=1, lost_claim_answer_code="DEADLINE_EXCEEDED")
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stubs.claim(ref, request_id="r")
        assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED

        await process.advance(3)
        await stubs.wait_status(
            ref,
            lambda s: s.leased_count == 0,
            what="the unrenewed Lease expired on the fake clock",
        )
        with pytest.raises(FakeBatteryProcessError):
            await process.set_faults(no_such_fault=True)
        with pytest.raises(FakeBatteryProcessError):
            await process.control("POST", "/listening", {})
        events = await process.control("GET", "/events")
        assert types_pb2.EventType.Name(types_pb2.VM_DELETED_DUE_TO_EXPIRY) in [
            e["type"] for e in events["events"]
        ]

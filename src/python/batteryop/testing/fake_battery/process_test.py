"""Tests of the standalone fake battery process and its control API (TD-006)."""

from __future__ import annotations

import signal
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2

from battery_protos.poolmgr.v1alpha1 import events_pb2, hostadmin_pb2, types_pb2
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


async def _outbox(stubs: BatteryStubs, count: int) -> list[types_pb2.Event]:
    """The first count events a new Subscribe stream sends (BA-050: the outbox first)."""
    call = stubs.events.Subscribe(events_pb2.SubscribeRequest())
    got: list[types_pb2.Event] = []
    try:
        async for event in call:
            got.append(event)
            if len(got) == count:
                break
    finally:
        call.cancel()
    return got


@pytest.mark.req("BA-060", "BA-050", "CL-061", "BA-100", "TD-005", "TD-006")
async def test_a_killed_process_comes_back_from_its_database(
    host_targets: dict[str, str], ns: str, tmp_path: Path
) -> None:
    args = [f"-db={tmp_path / 'poolmgr.db'}"]
    spec = pool_spec("p", ns, list(host_targets), size=3, expiry_threshold=600)
    ref = ref_of(spec)
    async with (
        FakeBatteryProcess.start(hosts=host_targets, fake_clock=True, args=args) as first,
        grpc.aio.insecure_channel(first.target) as channel,
    ):
        stubs = BatteryStubs.on(channel)
        created = await stubs.create_pool(spec)
        await stubs.wait_status(ref, lambda s: s.available_count == 3, what="three VMs")
        await stubs.hosts.CordonHost(hostadmin_pb2.CordonHostRequest(name="host-b", reason="r"))
        held = await stubs.claim(ref, request_id="claim-1")
        leases_before = await stubs.list_leases(ref)
        events_before = await _outbox(stubs, (await first.state())["events"])
        vms_before = sorted(vm["uid"] for vm in (await first.state())["vms"])
        last = await stubs.claim(ref, request_id="claim-2")
        # SIGKILL right after the answer: what was answered is already on disk (CL-061).
        assert await first.kill() == -signal.SIGKILL

    async with (
        FakeBatteryProcess.start(hosts=host_targets, fake_clock=True, args=args) as second,
        grpc.aio.insecure_channel(second.target) as channel,
    ):
        stubs = BatteryStubs.on(channel)
        pool = await stubs.get_pool(ref)
        assert pool.spec == created.spec
        assert (pool.status.available_count, pool.status.leased_count) == (1, 2)
        assert sorted(vm["uid"] for vm in (await second.state())["vms"]) == vms_before
        leases = {lease.request_id: lease for lease in await stubs.list_leases(ref)}
        assert leases["claim-1"] == leases_before[0]  # same id, VM, claim time and expiry
        assert (leases["claim-2"].lease_id, leases["claim-2"].vm_uid) == (
            last.lease_id,
            last.vm_uid,
        )
        # CL-061, BA-100: the same request_id answers the same Lease, not a second one.
        for request_id, answered in (("claim-1", held), ("claim-2", last)):
            again = await stubs.claim(ref, request_id=request_id)
            assert (again.lease_id, again.vm_uid) == (answered.lease_id, answered.vm_uid)
        assert len(await stubs.list_leases(ref)) == 2
        hosts = await stubs.hosts.ListHosts(hostadmin_pb2.ListHostsRequest())
        assert [(h.host.name, h.host.cordoned) for h in hosts.hosts] == [
            ("host-a", False),
            ("host-b", True),
        ]
        # BA-050: a new subscriber gets the whole outbox, the same events under the same ids.
        count = (await second.state())["events"]
        replayed = await _outbox(stubs, count)
        assert replayed[: len(events_before)] == events_before
        assert [e.id for e in replayed] == list(range(1, count + 1))
        assert [e.type for e in replayed].count(types_pb2.VM_CLAIMED) == 2
        await stubs.release(last.lease_id)
        after = await _outbox(stubs, count + 1)
        assert (after[-1].id, after[-1].type) == (count + 1, types_pb2.VM_DELETED_ON_RELEASE)

"""battery v0.4.0's contract, through its gRPC API only (BA-*, TD-001..003, TD-106).

Every case runs against each `BatteryUnderTest` (conftest.py): our fake today, the real poolmgrd
when a binary is available. Time passes through `battery.advance()`; Hosts are fake flintlockd
processes, which the cases inspect to see MicroVMs really created and deleted (TD-002).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc
import pytest
import pytest_asyncio
from grpc_health.v1 import health_pb2

from battery_protos.poolmgr.v1alpha1 import events_pb2, hostadmin_pb2, pooladmin_pb2, types_pb2
from batteryop.testing.fake_battery.testkit import POLL_SECONDS, RPC_TIMEOUT, pool_spec, ref_of
from batteryop.testing.polling import wait_until

if TYPE_CHECKING:
    from contract.conftest import BatteryUnderTest

# TD-106: every case runs against the fake battery, and against poolmgrd when one is named.
pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.req("TD-106")]

Code = grpc.StatusCode


async def rpc_error(call: Awaitable[Any]) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    return info.value


async def ready_pool(
    battery: BatteryUnderTest, ns: str, name: str = "p", *, size: int = 1, **kwargs: Any
) -> types_pb2.PoolRef:
    spec = pool_spec(name, ns, list(battery.hosts), size=size, **kwargs)
    await battery.stubs.create_pool(spec)
    ref = ref_of(spec)
    await battery.stubs.wait_status(
        ref, lambda s: s.available_count == size, what=f"{size} available VMs in {name}"
    )
    return ref


async def take_events(
    battery: BatteryUnderTest,
    request: events_pb2.SubscribeRequest,
    until: Callable[[list[types_pb2.Event]], bool],
    *,
    within: float = 10.0,
) -> list[types_pb2.Event]:
    """Subscribe and read until until(events) holds (bounded)."""
    call = battery.stubs.events.Subscribe(request)
    got: list[types_pb2.Event] = []

    async def read() -> None:
        async for event in call:
            got.append(event)
            if until(got):
                return

    try:
        await asyncio.wait_for(read(), within)
    except TimeoutError:
        raise AssertionError(f"events did not arrive in {within}s; got {got}") from None
    finally:
        call.cancel()
    return got


def types_for(events: list[types_pb2.Event], uid: str) -> list[int]:
    return [e.type for e in events if e.vm_uid == uid]


async def wait_gone_from_hosts(battery: BatteryUnderTest, ns: str, uids: set[str]) -> None:
    await wait_until(
        lambda: battery.vm_uids_on_hosts(ns),
        lambda present: not present & uids,
        what=f"MicroVMs {sorted(uids)} deleted on their Hosts",
        interval=POLL_SECONDS,
    )


async def sweep_until(
    battery: BatteryUnderTest,
    probe: Callable[[], Awaitable[Any]],
    predicate: Callable[[Any], bool],
    *,
    what: str,
    sweeps: int = 20,
) -> None:
    """Let sweep intervals pass, one at a time, until predicate(await probe()) holds.

    A Host that just came back may still refuse a call or two (the channel reconnects with
    backoff); battery retries on every sweep.
    """
    for _ in range(sweeps):
        await battery.advance(battery.sweep_interval)
        try:
            await wait_until(probe, predicate, what=what, within=0.5, interval=POLL_SECONDS)
            return
        except TimeoutError:
            continue
    raise AssertionError(f"{what}: not after {sweeps} sweeps")


@pytest_asyncio.fixture(loop_scope="module")
async def host_down(battery: BatteryUnderTest) -> AsyncIterator[Callable[[str], Awaitable[None]]]:
    """Take a Host's flintlockd down; it comes back up at the end of the test."""
    downed: list[str] = []

    async def down(name: str) -> None:
        await battery.hosts[name].go_down()
        downed.append(name)

    yield down
    for name in downed:
        await battery.hosts[name].come_up()


# -- health and PoolAdmin ------------------------------------------------------------------


@pytest.mark.req("TD-001", "BA-112")
async def test_health_is_serving(battery: BatteryUnderTest) -> None:
    reply = await battery.stubs.health.Check(health_pb2.HealthCheckRequest(), timeout=RPC_TIMEOUT)
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


@pytest.mark.req("TD-001", "TD-002", "TD-003")
async def test_create_get_and_list_pools(battery: BatteryUnderTest, ns: str) -> None:
    stubs = battery.stubs
    spec = pool_spec("p", ns, list(battery.hosts), size=2)
    created = await stubs.create_pool(spec)
    assert created.spec.name == "p"
    assert created.spec.microvm_template.allow_guest_agent, "battery forces allow_guest_agent"
    assert created.status == types_pb2.PoolStatus()
    status = await stubs.wait_status(
        ref_of(spec), lambda s: s.available_count == 2, what="the Pool filled"
    )
    assert (status.leased_count, status.provisioning_count, status.quarantined_count) == (0, 0, 0)
    assert len(await battery.vm_uids_on_hosts(ns)) == 2, "VMs exist on the Hosts"

    other_ns = ns + "-other"
    await stubs.create_pool(pool_spec("q", other_ns, list(battery.hosts), size=0))
    only = await stubs.pools.ListPools(pooladmin_pb2.ListPoolsRequest(namespace=ns))
    assert [(p.spec.namespace, p.spec.name) for p in only.pools] == [(ns, "p")]
    everything = await stubs.pools.ListPools(pooladmin_pb2.ListPoolsRequest())
    names = {(p.spec.namespace, p.spec.name) for p in everything.pools}
    assert {(ns, "p"), (other_ns, "q")} <= names


@pytest.mark.req("TD-001")
async def test_create_existing_pool_is_already_exists(battery: BatteryUnderTest, ns: str) -> None:
    spec = pool_spec("p", ns, list(battery.hosts), size=0)
    await battery.stubs.create_pool(spec)
    err = await rpc_error(battery.stubs.create_pool(spec))
    assert err.code() == Code.ALREADY_EXISTS


def _mutate(**changes: Any) -> Callable[[types_pb2.PoolSpec], None]:
    def apply(spec: types_pb2.PoolSpec) -> None:
        for name, value in changes.items():
            if value is None:
                spec.ClearField(name)  # type: ignore[arg-type]  # names come from the table
            elif hasattr(value, "CopyFrom"):
                getattr(spec, name).CopyFrom(value)
            else:
                setattr(spec, name, value)

    return apply


def _strategy(kind: int, min_size: int | None = None) -> Callable[[types_pb2.PoolSpec], None]:
    def apply(spec: types_pb2.PoolSpec) -> None:
        spec.replenishment_strategy.Clear()
        spec.replenishment_strategy.type = kind  # type: ignore[assignment]
        if min_size is not None:
            spec.replenishment_strategy.min_size = min_size

    return apply


def _static_mac(size: int, **changes: Any) -> Callable[[types_pb2.PoolSpec], None]:
    def apply(spec: types_pb2.PoolSpec) -> None:
        spec.size = size
        spec.microvm_template.interfaces[0].guest_mac = "aa:ff:00:00:00:01"
        _mutate(**changes)(spec)

    return apply


def _static_address(spec: types_pb2.PoolSpec) -> None:
    spec.size = 2
    spec.microvm_template.interfaces[0].address.address = "10.0.0.5/24"


INVALID_SPECS: dict[str, Callable[[types_pb2.PoolSpec], None]] = {
    "no name": _mutate(name=""),
    "no namespace": _mutate(namespace=""),
    "no strategy": _mutate(replenishment_strategy=None),
    "unspecified strategy": _strategy(types_pb2.REPLENISHMENT_STRATEGY_TYPE_UNSPECIFIED),
    "min size threshold without min_size": _strategy(types_pb2.MIN_SIZE_THRESHOLD),
    "min size threshold with min_size 0": _strategy(types_pb2.MIN_SIZE_THRESHOLD, 0),
    "unspecified hook policy": _mutate(hook_failure_policy=0),
    "no template": _mutate(microvm_template=None),
    "guest mac with size 2": _static_mac(2),
    "guest mac with immediate on lease": _static_mac(
        1, replenishment_strategy=types_pb2.ReplenishmentStrategy(type=types_pb2.IMMEDIATE_ON_LEASE)
    ),
    "guest mac with quarantine": _static_mac(1, hook_failure_policy=types_pb2.QUARANTINE),
    "static address with size 2": _static_address,
}


@pytest.mark.req("TD-001", "BA-111")
@pytest.mark.parametrize("case", sorted(INVALID_SPECS))
async def test_invalid_pool_specs_are_invalid_argument(
    battery: BatteryUnderTest, ns: str, case: str
) -> None:
    spec = pool_spec("p", ns, list(battery.hosts))
    INVALID_SPECS[case](spec)
    err = await rpc_error(battery.stubs.create_pool(spec))
    assert err.code() == Code.INVALID_ARGUMENT, err.details()
    valid = pool_spec("p", ns, list(battery.hosts), size=0)
    await battery.stubs.create_pool(valid)
    update = battery.stubs.pools.UpdatePool(pooladmin_pb2.UpdatePoolRequest(spec=spec))
    assert (await rpc_error(update)).code() == Code.INVALID_ARGUMENT


@pytest.mark.req("TD-001")
async def test_missing_heartbeat_durations_are_internal(battery: BatteryUnderTest, ns: str) -> None:
    spec = pool_spec("p", ns, list(battery.hosts))
    spec.ClearField("heartbeat_interval")
    err = await rpc_error(battery.stubs.create_pool(spec))
    assert err.code() == Code.INTERNAL
    assert "heartbeat_interval is required" in (err.details() or "")


@pytest.mark.req("TD-001")
async def test_single_vm_pool_may_use_a_static_mac(battery: BatteryUnderTest, ns: str) -> None:
    await ready_pool(battery, ns, guest_mac="aa:ff:00:00:00:02")
    await battery.advance(battery.reconcile_interval)
    assert len(await battery.vm_uids_on_hosts(ns)) == 1


@pytest.mark.req("TD-001")
async def test_update_and_get_of_unknown_pool_are_not_found(
    battery: BatteryUnderTest, ns: str
) -> None:
    spec = pool_spec("nope", ns, list(battery.hosts))
    update = battery.stubs.pools.UpdatePool(pooladmin_pb2.UpdatePoolRequest(spec=spec))
    assert (await rpc_error(update)).code() == Code.NOT_FOUND
    assert (await rpc_error(battery.stubs.get_pool(ref_of(spec)))).code() == Code.NOT_FOUND


@pytest.mark.req("TD-001")
async def test_update_replaces_the_spec_but_keeps_existing_vms(
    battery: BatteryUnderTest, ns: str
) -> None:
    ref = await ready_pool(battery, ns, size=2)
    spec = pool_spec("p", ns, list(battery.hosts), size=1, create_commands=["true"])
    updated = await battery.stubs.pools.UpdatePool(pooladmin_pb2.UpdatePoolRequest(spec=spec))
    assert updated.spec.size == 1
    assert list(updated.spec.create_commands) == ["true"]
    assert updated.status.available_count == 2, "a smaller size deletes nothing"
    await battery.advance(battery.reconcile_interval)
    assert (await battery.stubs.get_pool(ref)).status.available_count == 2


@pytest.mark.req("BA-071")
async def test_delete_of_unknown_pool_is_not_found(battery: BatteryUnderTest, ns: str) -> None:
    ref = types_pb2.PoolRef(name="nope", namespace=ns)
    err = await rpc_error(battery.stubs.pools.DeletePool(pooladmin_pb2.DeletePoolRequest(ref=ref)))
    assert err.code() == Code.NOT_FOUND


@pytest.mark.req("BA-103", "TD-002")
async def test_delete_drains_the_pool(battery: BatteryUnderTest, ns: str) -> None:
    ref = await ready_pool(battery, ns, size=2)
    uids = await battery.vm_uids_on_hosts(ns)
    await battery.stubs.pools.DeletePool(pooladmin_pb2.DeletePoolRequest(ref=ref))
    assert (await rpc_error(battery.stubs.get_pool(ref))).code() == Code.NOT_FOUND
    await wait_gone_from_hosts(battery, ns, uids)
    events = await take_events(
        battery,
        events_pb2.SubscribeRequest(pool=ref),
        lambda got: sum(e.type == types_pb2.VM_DELETED_ON_POOL_DELETE for e in got) == 2,
    )
    deleted = {e.vm_uid for e in events if e.type == types_pb2.VM_DELETED_ON_POOL_DELETE}
    assert deleted == uids
    again = battery.stubs.pools.DeletePool(pooladmin_pb2.DeletePoolRequest(ref=ref))
    assert (await rpc_error(again)).code() == Code.NOT_FOUND


@pytest.mark.req("BA-070")
async def test_delete_is_refused_while_leased_and_nothing_changes(
    battery: BatteryUnderTest, ns: str
) -> None:
    stubs = battery.stubs
    ref = await ready_pool(battery, ns, size=2)
    lease = await stubs.claim(ref, request_id=str(uuid.uuid4()))
    err = await rpc_error(stubs.pools.DeletePool(pooladmin_pb2.DeletePoolRequest(ref=ref)))
    assert err.code() == Code.FAILED_PRECONDITION
    assert f"pool {ns}/p has 1 leased VMs, release them or delete with force" in (
        err.details() or ""
    )
    status = (await stubs.get_pool(ref)).status
    assert (status.available_count, status.leased_count) == (1, 1)

    # The Operator puts the drained spec in place meanwhile (PO-042): no replacement follows.
    drained = pool_spec("p", ns, list(battery.hosts), size=0)
    await stubs.pools.UpdatePool(pooladmin_pb2.UpdatePoolRequest(spec=drained))
    await stubs.release(lease.lease_id)
    await battery.advance(battery.reconcile_interval)
    status = (await stubs.get_pool(ref)).status
    assert (status.available_count, status.leased_count, status.provisioning_count) == (1, 0, 0)
    await stubs.pools.DeletePool(pooladmin_pb2.DeletePoolRequest(ref=ref))
    await wait_gone_from_hosts(battery, ns, await battery.vm_uids_on_hosts(ns))
    assert await battery.vm_uids_on_hosts(ns) == set()


@pytest.mark.req("BA-104")
async def test_force_delete_ends_the_leases(battery: BatteryUnderTest, ns: str) -> None:
    stubs = battery.stubs
    ref = await ready_pool(battery, ns)
    lease = await stubs.claim(ref)
    await stubs.pools.DeletePool(pooladmin_pb2.DeletePoolRequest(ref=ref, force=True))
    assert (await rpc_error(stubs.heartbeat(lease.lease_id))).code() == Code.NOT_FOUND
    assert (await rpc_error(stubs.release(lease.lease_id))).code() == Code.NOT_FOUND
    await wait_gone_from_hosts(battery, ns, {lease.vm_uid})


# -- replenishment -------------------------------------------------------------------------


@pytest.mark.req("TD-003", "BA-006", "BA-076")
async def test_replace_on_delete_replaces_a_released_vm(battery: BatteryUnderTest, ns: str) -> None:
    stubs = battery.stubs
    ref = await ready_pool(battery, ns)
    lease = await stubs.claim(ref)
    status = (await stubs.get_pool(ref)).status
    assert (status.available_count, status.leased_count, status.provisioning_count) == (0, 1, 0)
    await stubs.release(lease.lease_id)
    await stubs.wait_status(ref, lambda s: s.available_count == 1, what="a replacement")
    assert lease.vm_uid not in await battery.vm_uids_on_hosts(ns), "a released VM is never reused"


@pytest.mark.req("TD-003", "BA-076")
async def test_immediate_on_lease_keeps_size_warm(battery: BatteryUnderTest, ns: str) -> None:
    stubs = battery.stubs
    ref = await ready_pool(battery, ns, strategy=types_pb2.IMMEDIATE_ON_LEASE)
    await stubs.claim(ref)
    status = await stubs.wait_status(
        ref, lambda s: s.available_count == 1, what="a warm VM again after the claim"
    )
    assert status.leased_count == 1


@pytest.mark.req("TD-003")
async def test_min_size_threshold_refills_on_the_tick(battery: BatteryUnderTest, ns: str) -> None:
    stubs = battery.stubs
    ref = await ready_pool(battery, ns, size=2, strategy=types_pb2.MIN_SIZE_THRESHOLD, min_size=2)
    lease = await stubs.claim(ref)
    await stubs.release(lease.lease_id)
    status = (await stubs.get_pool(ref)).status
    assert (status.available_count, status.provisioning_count) == (1, 0), "not on a delete"
    await battery.advance(battery.reconcile_interval)
    await stubs.wait_status(ref, lambda s: s.available_count == 2, what="the refill on the tick")


@pytest.mark.req("BA-072")
async def test_min_size_threshold_with_size_zero_provisions_nothing(
    battery: BatteryUnderTest, ns: str
) -> None:
    spec = pool_spec("p", ns, list(battery.hosts), size=0, strategy=types_pb2.MIN_SIZE_THRESHOLD)
    spec.replenishment_strategy.min_size = 1
    await battery.stubs.create_pool(spec)
    await battery.advance(battery.reconcile_interval)
    assert (await battery.stubs.get_pool(ref_of(spec))).status == types_pb2.PoolStatus()
    assert await battery.vm_uids_on_hosts(ns) == set()


# -- Lease ---------------------------------------------------------------------------------


@pytest.mark.req("BA-002")
async def test_claim_of_unknown_pool_is_not_found(battery: BatteryUnderTest, ns: str) -> None:
    ref = types_pb2.PoolRef(name="nope", namespace=ns)
    assert (await rpc_error(battery.stubs.claim(ref))).code() == Code.NOT_FOUND
    empty = types_pb2.PoolRef()
    assert (await rpc_error(battery.stubs.claim(empty))).code() == Code.NOT_FOUND


@pytest.mark.req("BA-001", "TD-003")
async def test_claim_of_empty_pool_is_resource_exhausted(
    battery: BatteryUnderTest, ns: str
) -> None:
    spec = pool_spec("p", ns, list(battery.hosts), size=0)
    await battery.stubs.create_pool(spec)
    err = await rpc_error(battery.stubs.claim(ref_of(spec), request_id="r1"))
    assert err.code() == Code.RESOURCE_EXHAUSTED
    assert await battery.stubs.list_leases(ref_of(spec)) == []


@pytest.mark.req("BA-003", "BA-040", "TD-002")
async def test_claim_answers_a_new_lease_with_host_and_interfaces(
    battery: BatteryUnderTest, ns: str
) -> None:
    stubs = battery.stubs
    ref = await ready_pool(battery, ns, expiry_threshold=30)
    answer = await stubs.claim(ref, request_id="claim-uid-1")
    assert uuid.UUID(answer.lease_id).version == 4
    assert answer.vm_uid in await battery.vm_uids_on_hosts(ns)
    assert answer.host.name in battery.hosts
    assert answer.host.address == battery.hosts[answer.host.name].target
    assert "eth1" in answer.network_interfaces
    [record] = await stubs.list_leases(ref)
    assert (record.lease_id, record.vm_uid) == (answer.lease_id, answer.vm_uid)
    assert (record.pool_name, record.pool_namespace, record.request_id) == ("p", ns, "claim-uid-1")
    assert record.last_heartbeat_at == record.claimed_at
    lifetime = record.expires_at.ToDatetime() - record.claimed_at.ToDatetime()
    assert lifetime.total_seconds() == 30
    status = (await stubs.get_pool(ref)).status
    assert (status.available_count, status.leased_count) == (0, 1)


@pytest.mark.req("BA-005")
async def test_concurrent_claims_get_different_vms(battery: BatteryUnderTest, ns: str) -> None:
    stubs = battery.stubs
    ref = await ready_pool(battery, ns, size=2)
    first, second = await asyncio.gather(stubs.claim(ref), stubs.claim(ref))
    assert first.vm_uid != second.vm_uid
    assert first.lease_id != second.lease_id
    assert (await rpc_error(stubs.claim(ref))).code() == Code.RESOURCE_EXHAUSTED


@pytest.mark.req("BA-100")
async def test_same_request_id_gets_the_same_lease(battery: BatteryUnderTest, ns: str) -> None:
    stubs = battery.stubs
    ref = await ready_pool(battery, ns, size=2)
    first = await stubs.claim(ref, request_id="uid-a")
    [before] = await stubs.list_leases(ref)
    await battery.advance(1)
    again = await stubs.claim(ref, request_id="uid-a")
    assert (again.lease_id, again.vm_uid, again.host.name) == (
        first.lease_id,
        first.vm_uid,
        first.host.name,
    )
    [after] = await stubs.list_leases(ref)
    assert after.expires_at == before.expires_at, "a replay is not a heartbeat"
    status = (await stubs.get_pool(ref)).status
    assert (status.available_count, status.leased_count) == (1, 1), "never a second VM"


@pytest.mark.req("BA-102")
async def test_request_id_of_another_pool_and_too_long_are_invalid(
    battery: BatteryUnderTest, ns: str
) -> None:
    stubs = battery.stubs
    ref = await ready_pool(battery, ns)
    other = await ready_pool(battery, ns, "q")
    await stubs.claim(ref, request_id="uid-b")
    assert (await rpc_error(stubs.claim(other, request_id="uid-b"))).code() == (
        Code.INVALID_ARGUMENT
    )
    assert (await rpc_error(stubs.claim(other, request_id="x" * 256))).code() == (
        Code.INVALID_ARGUMENT
    )
    await stubs.claim(other, request_id="x" * 255)


@pytest.mark.req("BA-031", "BA-101")
async def test_release_pending_on_a_down_host(
    battery: BatteryUnderTest, ns: str, host_down: Callable[[str], Awaitable[None]]
) -> None:
    stubs = battery.stubs
    ref = await ready_pool(battery, ns)
    lease = await stubs.claim(ref, request_id="uid-c")
    await host_down(lease.host.name)
    err = await rpc_error(stubs.release(lease.lease_id))
    assert err.code() == Code.UNAVAILABLE
    assert err.details() == "vm cleanup pending, retry later"
    assert [r.lease_id for r in await stubs.list_leases(ref)] == [lease.lease_id], "Lease kept"
    assert (await rpc_error(stubs.claim(ref, request_id="uid-c"))).code() == Code.ABORTED
    await stubs.heartbeat(lease.lease_id)  # still succeeds while the release is pending

    await battery.hosts[lease.host.name].come_up()
    await sweep_until(
        battery, lambda: stubs.list_leases(ref), lambda leases: not leases, what="the release"
    )
    await wait_gone_from_hosts(battery, ns, {lease.vm_uid})
    events = await take_events(
        battery,
        events_pb2.SubscribeRequest(pool=ref),
        lambda got: types_pb2.VM_DELETED_ON_RELEASE in types_for(got, lease.vm_uid),
    )
    assert types_pb2.VM_DELETED_ON_RELEASE in types_for(events, lease.vm_uid)
    await stubs.wait_status(ref, lambda s: s.available_count == 1, what="a replacement")
    fresh = await stubs.claim(ref, request_id="uid-c")
    assert fresh.lease_id != lease.lease_id, "once the Lease is gone the request_id is free"


@pytest.mark.req("BA-010")
async def test_heartbeat_extends_from_now(battery: BatteryUnderTest, ns: str) -> None:
    stubs = battery.stubs
    ref = await ready_pool(battery, ns, expiry_threshold=3)
    lease = await stubs.claim(ref)
    [before] = await stubs.list_leases(ref)
    await battery.advance(1)
    beat = await stubs.heartbeat(lease.lease_id)
    [after] = await stubs.list_leases(ref)
    assert after.expires_at == beat.expires_at
    assert after.last_heartbeat_at.ToDatetime() > before.last_heartbeat_at.ToDatetime()
    lifetime = beat.expires_at.ToDatetime() - after.last_heartbeat_at.ToDatetime()
    assert lifetime.total_seconds() == 3


@pytest.mark.req("BA-011", "BA-032")
async def test_heartbeat_and_release_of_unknown_lease_are_not_found(
    battery: BatteryUnderTest,
) -> None:
    missing = str(uuid.uuid4())
    assert (await rpc_error(battery.stubs.heartbeat(missing))).code() == Code.NOT_FOUND
    assert (await rpc_error(battery.stubs.release(missing))).code() == Code.NOT_FOUND


@pytest.mark.req("BA-020", "BA-023", "BA-051", "TD-003")
async def test_unrenewed_lease_expires_and_its_vm_is_deleted(
    battery: BatteryUnderTest, ns: str
) -> None:
    stubs = battery.stubs
    ref = await ready_pool(battery, ns, expiry_threshold=2)
    lease = await stubs.claim(ref)
    await battery.advance(2 + battery.sweep_interval)
    await wait_until(
        lambda: stubs.list_leases(ref),
        lambda got: not got,
        what="the Lease swept",
        interval=POLL_SECONDS,
    )
    await wait_gone_from_hosts(battery, ns, {lease.vm_uid})
    events = await take_events(
        battery,
        events_pb2.SubscribeRequest(pool=ref),
        lambda got: types_pb2.VM_DELETED_DUE_TO_EXPIRY in types_for(got, lease.vm_uid),
    )
    kinds = types_for(events, lease.vm_uid)
    assert kinds.index(types_pb2.VM_CLAIMED) < kinds.index(types_pb2.VM_DELETED_DUE_TO_EXPIRY)
    assert (await rpc_error(stubs.heartbeat(lease.lease_id))).code() == Code.NOT_FOUND


@pytest.mark.req("BA-030", "BA-032", "BA-051", "TD-002")
async def test_release_deletes_the_vm_before_answering(battery: BatteryUnderTest, ns: str) -> None:
    stubs = battery.stubs
    ref = await ready_pool(battery, ns)
    lease = await stubs.claim(ref)
    await stubs.release(lease.lease_id)
    assert lease.vm_uid not in await battery.vm_uids_on_hosts(ns)
    assert await stubs.list_leases(ref) == []
    events = await take_events(
        battery,
        events_pb2.SubscribeRequest(pool=ref),
        lambda got: types_pb2.VM_DELETED_ON_RELEASE in types_for(got, lease.vm_uid),
    )
    assert types_for(events, lease.vm_uid)[-1] == types_pb2.VM_DELETED_ON_RELEASE
    assert (await rpc_error(stubs.release(lease.lease_id))).code() == Code.NOT_FOUND


@pytest.mark.req("TD-003")
async def test_failing_pre_lease_hook_deletes_and_replaces(
    battery: BatteryUnderTest, ns: str
) -> None:
    stubs = battery.stubs
    ref = await ready_pool(battery, ns, pre_lease_commands=["exit 3"])
    [uid] = await battery.vm_uids_on_hosts(ns)
    err = await rpc_error(stubs.claim(ref, request_id="uid-d"))
    assert err.code() == Code.INTERNAL
    assert (err.details() or "").startswith("pre-lease hook: ")
    assert await stubs.list_leases(ref) == []
    await wait_gone_from_hosts(battery, ns, {uid})
    await stubs.wait_status(ref, lambda s: s.available_count == 1, what="a replacement")
    events = await take_events(
        battery,
        events_pb2.SubscribeRequest(pool=ref),
        lambda got: types_pb2.VM_HOOK_FAILED in types_for(got, uid),
    )
    assert types_pb2.VM_CLAIMED not in types_for(events, uid)


@pytest.mark.req("BA-073")
async def test_failing_pre_lease_hook_quarantines(battery: BatteryUnderTest, ns: str) -> None:
    stubs = battery.stubs
    ref = await ready_pool(battery, ns, pre_lease_commands=["exit 4"], policy=types_pb2.QUARANTINE)
    [uid] = await battery.vm_uids_on_hosts(ns)
    assert (await rpc_error(stubs.claim(ref))).code() == Code.INTERNAL
    await stubs.wait_status(ref, lambda s: s.quarantined_count == 1, what="a quarantined VM")
    await battery.advance(battery.reconcile_interval)
    status = await stubs.wait_status(
        ref,
        lambda s: s.quarantined_count == 1 and s.available_count == 1,
        what="a replacement on the tick",
    )
    assert status.leased_count == 0
    await battery.advance(battery.sweep_interval + battery.reconcile_interval)
    assert uid in await battery.vm_uids_on_hosts(ns), "battery keeps a quarantined VM"
    await stubs.pools.DeletePool(pooladmin_pb2.DeletePoolRequest(ref=ref))
    await wait_gone_from_hosts(battery, ns, {uid})


@pytest.mark.req("TD-003")
async def test_failing_create_hook_quarantines_and_provisions_past_it(
    battery: BatteryUnderTest, ns: str
) -> None:
    stubs = battery.stubs
    spec = pool_spec(
        "p", ns, list(battery.hosts), create_commands=["exit 1"], policy=types_pb2.QUARANTINE
    )
    await stubs.create_pool(spec)
    ref = ref_of(spec)
    await stubs.wait_status(ref, lambda s: s.quarantined_count == 1, what="a quarantined VM")
    await battery.advance(battery.reconcile_interval)
    status = await stubs.wait_status(
        ref, lambda s: s.quarantined_count == 2, what="a second try on the tick"
    )
    assert status.available_count == 0


# -- Events --------------------------------------------------------------------------------


@pytest.mark.req("BA-050")
async def test_subscribe_replays_the_outbox_then_streams_live(
    battery: BatteryUnderTest, ns: str
) -> None:
    stubs = battery.stubs
    ref = await ready_pool(battery, ns)
    [uid] = await battery.vm_uids_on_hosts(ns)
    request = events_pb2.SubscribeRequest(pool=ref)
    call = stubs.events.Subscribe(request)
    seen: list[types_pb2.Event] = []

    async def until(kind: int) -> None:
        async for event in call:
            seen.append(event)
            if event.type == kind:
                return

    try:
        await asyncio.wait_for(until(types_pb2.VM_AVAILABLE), 10)
        assert types_for(seen, uid) == [types_pb2.VM_PROVISIONED, types_pb2.VM_AVAILABLE]
        await stubs.claim(ref)
        await asyncio.wait_for(until(types_pb2.VM_CLAIMED), 10)
    finally:
        call.cancel()
    ids = [e.id for e in seen]
    assert ids == sorted(set(ids)), "ids increase"
    assert all((e.pool_namespace, e.pool_name) == (ns, "p") for e in seen)

    replay = await take_events(battery, request, lambda got: len(got) == len(seen))
    assert [e.id for e in replay] == ids, "a new subscriber gets the whole outbox again"
    everything = await take_events(
        battery, events_pb2.SubscribeRequest(), lambda got: got[-1].id >= ids[-1]
    )
    assert set(ids) <= {e.id for e in everything}


@pytest.mark.req("BA-050")
async def test_subscribe_to_unknown_pool_is_an_empty_stream(
    battery: BatteryUnderTest, ns: str
) -> None:
    await ready_pool(battery, ns)
    ref = types_pb2.PoolRef(name="nope", namespace=ns)
    call = battery.stubs.events.Subscribe(events_pb2.SubscribeRequest(pool=ref))
    try:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(call.read(), 0.3)
    finally:
        call.cancel()


# -- HostAdmin -----------------------------------------------------------------------------


@pytest.mark.req("TD-001", "BA-107")
async def test_list_hosts_reports_each_host(battery: BatteryUnderTest, ns: str) -> None:
    await ready_pool(battery, ns, size=2)
    reply = await battery.stubs.hosts.ListHosts(hostadmin_pb2.ListHostsRequest())
    assert [h.host.name for h in reply.hosts] == sorted(battery.hosts)
    for status in reply.hosts:
        assert status.host.address == battery.hosts[status.host.name].target
        assert not status.host.cordoned
        assert status.vm_count == 1, "two VMs spread over two Hosts"
        assert status.flintlock_version == "v0.16.0"


@pytest.mark.req("TD-001", "BA-105")
async def test_cordon_and_uncordon(battery: BatteryUnderTest, ns: str) -> None:
    hosts = battery.stubs.hosts
    host = await hosts.CordonHost(hostadmin_pb2.CordonHostRequest(name="host-a", reason="drain"))
    assert (host.cordoned, host.cordoned_reason) == (True, "drain")
    assert host.HasField("cordoned_at")
    host = await hosts.CordonHost(hostadmin_pb2.CordonHostRequest(name="host-a", reason="again"))
    assert host.cordoned_reason == "again"
    ref = await ready_pool(battery, ns, size=2)
    listed = await hosts.ListHosts(hostadmin_pb2.ListHostsRequest())
    counts = {h.host.name: h.vm_count for h in listed.hosts}
    assert counts == {"host-a": 0, "host-b": 2}, "no new placement on a cordoned Host"
    assert [h.host.cordoned for h in listed.hosts] == [True, False]
    for _ in range(2):
        host = await hosts.UncordonHost(hostadmin_pb2.UncordonHostRequest(name="host-a"))
        assert (host.cordoned, host.cordoned_reason, host.HasField("cordoned_at")) == (
            False,
            "",
            False,
        )
    assert (await battery.stubs.get_pool(ref)).status.available_count == 2


@pytest.mark.req("TD-001", "BA-105", "BA-114")
async def test_a_cordoned_hosts_available_vm_is_still_claimed_and_replaced_elsewhere(
    battery: BatteryUnderTest, ns: str
) -> None:
    stubs = battery.stubs
    hosts = stubs.hosts
    ref = await ready_pool(battery, ns, size=2)  # one MicroVM on each Host
    await hosts.CordonHost(hostadmin_pb2.CordonHostRequest(name="host-a", reason="drain"))
    first, second = await asyncio.gather(
        stubs.claim(ref, request_id="uid-a"), stubs.claim(ref, request_id="uid-b")
    )
    assert {first.host.name, second.host.name} == {
        "host-a",
        "host-b",
    }, "the cordon stops placements, not ClaimVM"
    on_a = first if first.host.name == "host-a" else second
    await stubs.release(on_a.lease_id)
    await stubs.wait_status(ref, lambda s: s.available_count == 1, what="a replacement")
    assert on_a.vm_uid not in await battery.vm_uids_on_hosts(ns)
    listed = await hosts.ListHosts(hostadmin_pb2.ListHostsRequest())
    assert {h.host.name: h.vm_count for h in listed.hosts} == {"host-a": 0, "host-b": 2}
    request_id = "uid-a" if on_a is first else "uid-b"
    again = await stubs.claim(ref, request_id=request_id)
    assert (again.host.name, again.lease_id != on_a.lease_id) == (
        "host-b",
        True,
    ), "a released request id claims afresh (BA-101), and only off the cordoned Host"


@pytest.mark.req("TD-001", "BA-106")
async def test_cordon_errors(battery: BatteryUnderTest) -> None:
    hosts = battery.stubs.hosts
    for call in (
        hosts.CordonHost(hostadmin_pb2.CordonHostRequest(name="")),
        hosts.UncordonHost(hostadmin_pb2.UncordonHostRequest(name="")),
    ):
        assert (await rpc_error(call)).code() == Code.INVALID_ARGUMENT
    for call in (
        hosts.CordonHost(hostadmin_pb2.CordonHostRequest(name="nope")),
        hosts.UncordonHost(hostadmin_pb2.UncordonHostRequest(name="nope")),
    ):
        assert (await rpc_error(call)).code() == Code.FAILED_PRECONDITION


@pytest.mark.req("TD-001", "BA-108")
async def test_host_api_of_battery_main_is_unimplemented_in_v040(
    battery: BatteryUnderTest,
) -> None:
    hosts = battery.stubs.hosts
    add = hosts.AddHost(
        hostadmin_pb2.AddHostRequest(host=types_pb2.Host(name="host-c", address="127.0.0.1:1"))
    )
    assert (await rpc_error(add)).code() == Code.UNIMPLEMENTED
    get = hosts.GetHost(hostadmin_pb2.GetHostRequest(name="host-a"))
    assert (await rpc_error(get)).code() == Code.UNIMPLEMENTED

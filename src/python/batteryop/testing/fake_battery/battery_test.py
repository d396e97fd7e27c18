"""Tests of the fake battery's timing on its FakeClock, restart, and battery main's host API.

The API semantics every battery shares are in tests/contract/battery_contract_test.py; these
cases need the fake's clock or its other fake-only controls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import grpc
import pytest

from battery_protos.poolmgr.v1alpha1 import hostadmin_pb2, pooladmin_pb2, types_pb2
from batteryop.testing.fake_battery import (
    BatteryStateError,
    FakeBattery,
    FakeClock,
    HostConfig,
    HostTLSConfig,
    Timings,
    WaitTimeoutError,
)
from batteryop.testing.fake_battery.conftest import SWEEP, TICK, WINDOW
from batteryop.testing.fake_battery.testkit import BatteryStubs, pool_spec, ref_of
from batteryop.testing.fake_flintlock import FakeFlintlockd, TLSFiles
from batteryop.tls import CertificateAuthority

pytestmark = pytest.mark.asyncio(loop_scope="module")

Code = grpc.StatusCode
Phase = types_pb2.VMPhase


async def code_of(call: Awaitable[Any]) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    return info.value.code()


async def ready(stubs: BatteryStubs, ns: str, size: int = 1, **kwargs: Any) -> types_pb2.PoolRef:
    spec = pool_spec("p", ns, ["host-a", "host-b"], size=size, **kwargs)
    await stubs.create_pool(spec)
    ref = ref_of(spec)
    await stubs.wait_status(ref, lambda s: s.available_count == size, what="a full Pool")
    return ref


def kinds(battery: FakeBattery, uid: str) -> list[int]:
    return [e.type for e in battery.events() if e.vm_uid == uid]


@pytest.mark.req("BA-022", "TD-004")
async def test_first_sweep_is_one_interval_after_start(battery: FakeBattery) -> None:
    await battery.advance(SWEEP - 0.1)
    assert battery.sweeps == 0
    await battery.advance(0.1)
    assert battery.sweeps == 1
    await battery.advance(3 * SWEEP)
    assert battery.sweeps == 4, "advance stops at every due sweep"


@pytest.mark.req("BA-010", "BA-041")
async def test_late_heartbeat_before_the_sweep_keeps_the_lease(
    battery: FakeBattery, stubs: BatteryStubs, ns: str
) -> None:
    ref = await ready(stubs, ns, expiry_threshold=2.5)
    lease = await stubs.claim(ref)
    await battery.advance(2.6)  # expired at 2.5; the next sweep is at 3
    [listed] = await stubs.list_leases(ref)
    assert listed.expires_at.ToDatetime() < battery.clock.now().replace(tzinfo=None)
    beat = await stubs.heartbeat(lease.lease_id)
    await battery.advance(1)
    [kept] = await stubs.list_leases(ref)
    assert kept.expires_at == beat.expires_at


@pytest.mark.req("BA-020")
async def test_lease_expires_at_the_first_sweep_after_its_expiry(
    battery: FakeBattery, stubs: BatteryStubs, ns: str
) -> None:
    ref = await ready(stubs, ns, expiry_threshold=2.5)
    lease = await stubs.claim(ref)
    await battery.advance(2.9)
    assert len(await stubs.list_leases(ref)) == 1
    await battery.advance(0.1)
    assert await stubs.list_leases(ref) == []
    await battery.wait_for(
        lambda: types_pb2.VM_DELETED_DUE_TO_EXPIRY in kinds(battery, lease.vm_uid),
        what="the expired VM deleted",
    )


async def test_expiring_soon_once_per_expiry(
    battery: FakeBattery, stubs: BatteryStubs, ns: str
) -> None:
    ref = await ready(stubs, ns, expiry_threshold=5)
    lease = await stubs.claim(ref)
    await battery.advance(2)  # sweep at 2: expiry 5 is within the 3 s window
    assert kinds(battery, lease.vm_uid).count(types_pb2.VM_EXPIRING_SOON) == 1
    await battery.advance(1)
    assert kinds(battery, lease.vm_uid).count(types_pb2.VM_EXPIRING_SOON) == 1
    await stubs.heartbeat(lease.lease_id)  # expiry 8
    await battery.advance(1)
    assert kinds(battery, lease.vm_uid).count(types_pb2.VM_EXPIRING_SOON) == 1
    await battery.advance(1)  # sweep at 5: 8 is within the window
    assert kinds(battery, lease.vm_uid).count(types_pb2.VM_EXPIRING_SOON) == 2
    assert WINDOW == 3


@pytest.mark.req("BA-074")
async def test_update_cancels_provisions_with_the_old_policy(
    battery: FakeBattery, stubs: BatteryStubs, ns: str
) -> None:
    spec = pool_spec("p", ns, ["host-a"], create_commands=["sleep 30"], policy=types_pb2.QUARANTINE)
    await stubs.create_pool(spec)
    await battery.wait_for(
        lambda: [vm.phase for vm in battery.vm_records(ns, "p")] == [Phase.CREATE_HOOK_RUNNING],
        what="the create hook running",
    )
    new = pool_spec("p", ns, ["host-a"], policy=types_pb2.DELETE_AND_REPLACE)
    await stubs.pools.UpdatePool(pooladmin_pb2.UpdatePoolRequest(spec=new))
    # The new reconciler's first pass may still count the VM being cancelled; the tick fixes it.
    await stubs.wait_status(ref_of(spec), lambda s: s.quarantined_count == 1, what="quarantine")
    await battery.advance(TICK)
    status = await stubs.wait_status(
        ref_of(spec),
        lambda s: s.quarantined_count == 1 and s.available_count == 1,
        what="the cancelled VM quarantined and a new one available",
    )
    assert status.provisioning_count == 0


@pytest.mark.req("BA-060", "TD-006")
async def test_restart_keeps_state_and_abandons_claims_in_flight(
    battery: FakeBattery, stubs: BatteryStubs, ns: str
) -> None:
    kept = await ready(stubs, ns)
    held = await stubs.claim(kept, request_id="held")
    spec = pool_spec("q", ns, ["host-b"], pre_lease_commands=["sleep 30"])
    await stubs.create_pool(spec)
    await stubs.wait_status(ref_of(spec), lambda s: s.available_count == 1, what="q filled")
    claim = asyncio.ensure_future(stubs.claim(ref_of(spec), request_id="in-flight"))
    await battery.wait_for(
        lambda: [vm.phase for vm in battery.vm_records(ns, "q")] == [Phase.PRE_LEASE_HOOK_RUNNING],
        what="the pre-lease hook running",
    )
    [uid] = [vm.uid for vm in battery.vm_records(ns, "q")]
    await battery.restart()
    assert await code_of(claim) in (Code.UNAVAILABLE, Code.CANCELLED)
    assert [vm.phase for vm in battery.vm_records(ns, "q") if vm.uid == uid] == [Phase.DELETING]
    await battery.wait_for(lambda: battery.listening, what="listening again")
    async with grpc.aio.insecure_channel(battery.target) as channel:
        again = BatteryStubs.on(channel)
        [lease] = await again.list_leases(kept)
        assert lease.lease_id == held.lease_id
        assert battery.sweeps == 0
        await battery.advance(SWEEP)
        await battery.wait_for(
            lambda: uid not in [vm.uid for vm in battery.vm_records(ns, "q")],
            what="the abandoned VM deleted by the sweep",
        )
        await again.wait_status(ref_of(spec), lambda s: s.available_count == 1, what="refill")
        quick = pool_spec("q", ns, ["host-b"])
        await again.pools.UpdatePool(pooladmin_pb2.UpdatePoolRequest(spec=quick))
        retry = await again.claim(ref_of(spec), request_id="in-flight")
        assert retry.vm_uid != uid


@pytest.mark.req("TD-004")
async def test_advance_needs_a_fake_clock_and_waits_are_bounded(
    host_targets: dict[str, str],
) -> None:
    async with FakeBattery.start(hosts=host_targets) as battery:
        with pytest.raises(BatteryStateError):
            await battery.advance(1)
        with pytest.raises(WaitTimeoutError):
            await battery.wait_for(lambda: False, within=0.05, what="nothing")


@pytest.mark.req("BA-110")
async def test_too_old_flintlockd_gets_no_microvm(ns: str) -> None:
    async with (
        FakeFlintlockd.start(address="127.0.0.1", version="v0.15.1") as old,
        FakeBattery.start(hosts={"old": old.target}, clock=FakeClock()) as battery,
        grpc.aio.insecure_channel(battery.target) as channel,
    ):
        stubs = BatteryStubs.on(channel)
        await stubs.create_pool(pool_spec("p", ns, ["old"]))
        await battery.wait_for(
            lambda: battery.store.hosts["old"].flintlock_version == "v0.15.1",
            what="the version check",
        )
        reply = await stubs.hosts.ListHosts(hostadmin_pb2.ListHostsRequest())
        assert [(h.flintlock_version, h.vm_count) for h in reply.hosts] == [("v0.15.1", 0)]
        assert [vm for vm in await old.list_vms() if vm.spec.namespace == ns] == []


@pytest.mark.req("TD-001")
async def test_host_api_of_battery_main(
    host_targets: dict[str, str], clock: FakeClock, timings: Timings, ns: str
) -> None:
    async with (
        FakeBattery.start(
            hosts={"host-a": host_targets["host-a"]}, clock=clock, timings=timings, host_api=True
        ) as battery,
        grpc.aio.insecure_channel(battery.target) as channel,
    ):
        hosts = BatteryStubs.on(channel).hosts
        stubs = BatteryStubs.on(channel)
        insecure = types_pb2.HostTLS(insecure=True)
        # AddHost ignores the cordon fields: a new Host always starts uncordoned.
        add_b = hostadmin_pb2.AddHostRequest(
            host=types_pb2.Host(
                name="host-b",
                address=host_targets["host-b"],
                tls=insecure,
                cordoned=True,
                cordoned_reason="ignored",
            )
        )
        unknown = stubs.create_pool(pool_spec("p", ns, ["host-b"]))
        assert await code_of(unknown) == Code.INVALID_ARGUMENT
        added = await hosts.AddHost(add_b)
        assert (added.name, added.cordoned, added.cordoned_reason, added.tls.insecure) == (
            "host-b",
            False,
            "",
            True,
        )
        assert await code_of(hosts.AddHost(add_b)) == Code.ALREADY_EXISTS
        status = await hosts.GetHost(hostadmin_pb2.GetHostRequest(name="host-b"))
        assert status.flintlock_version == "v0.16.0"

        no_ca = hostadmin_pb2.AddHostRequest(host=types_pb2.Host(name="c", address="127.0.0.1:1"))
        assert await code_of(hosts.AddHost(no_ca)) == Code.INVALID_ARGUMENT
        missing = types_pb2.HostTLS(ca_file="/nonexistent/ca.pem")
        files = hostadmin_pb2.AddHostRequest(
            host=types_pb2.Host(name="c", address="127.0.0.1:1", tls=missing)
        )
        assert await code_of(hosts.AddHost(files)) == Code.FAILED_PRECONDITION
        unreachable = hostadmin_pb2.AddHostRequest(
            host=types_pb2.Host(name="c", address="127.0.0.1:1", tls=insecure)
        )
        assert await code_of(hosts.AddHost(unreachable)) == Code.FAILED_PRECONDITION
        unreachable.skip_validation = True
        await hosts.AddHost(unreachable)

        await hosts.CordonHost(hostadmin_pb2.CordonHostRequest(name="c", reason="r"))
        updated = await hosts.UpdateHost(
            hostadmin_pb2.UpdateHostRequest(
                host=types_pb2.Host(name="c", address="127.0.0.1:2", tls=insecure),
                skip_validation=True,
            )
        )
        assert (updated.address, updated.cordoned, updated.cordoned_reason) == (
            "127.0.0.1:2",
            True,
            "r",
        )
        gone = hostadmin_pb2.UpdateHostRequest(host=types_pb2.Host(name="x", address="a:1"))
        assert await code_of(hosts.UpdateHost(gone)) == Code.NOT_FOUND

        ref = await ready(stubs, ns)
        remove_a = hostadmin_pb2.RemoveHostRequest(name="host-a")
        assert await code_of(hosts.RemoveHost(remove_a)) == Code.FAILED_PRECONDITION
        await stubs.pools.DeletePool(pooladmin_pb2.DeletePoolRequest(ref=ref))
        await battery.wait_for(
            lambda: battery.store.host_vm_count("host-a") == 0, what="host-a emptied"
        )
        await hosts.RemoveHost(remove_a)
        assert await code_of(hosts.RemoveHost(remove_a)) == Code.NOT_FOUND
        empty = hostadmin_pb2.RemoveHostRequest(name="")
        assert await code_of(hosts.RemoveHost(empty)) == Code.INVALID_ARGUMENT
        get_a = hostadmin_pb2.GetHostRequest(name="host-a")
        assert await code_of(hosts.GetHost(get_a)) == Code.NOT_FOUND
        listed = await hosts.ListHosts(hostadmin_pb2.ListHostsRequest())
        assert [h.host.name for h in listed.hosts] == ["c", "host-b"]


@pytest.mark.req("BA-061", "TD-002")
async def test_mtls_to_flintlockd_reads_the_files_once(tmp_path: Path, ns: str) -> None:
    serving_ca = CertificateAuthority.create("flintlockd-serving")
    client_ca = CertificateAuthority.create("flintlockd-client")
    cert, key = serving_ca.issue("flintlockd", hosts=["127.0.0.1"], server=True).write(
        tmp_path, "serving"
    )
    client_ca_file = tmp_path / "client-ca.crt"
    client_ca_file.write_bytes(client_ca.cert_pem)
    ca_file = tmp_path / "serving-ca.crt"
    ca_file.write_bytes(serving_ca.cert_pem)
    client_cert, client_key = client_ca.issue("battery", client=True).write(tmp_path, "client")
    tls = HostTLSConfig(
        insecure=False, ca_file=str(ca_file), cert_file=str(client_cert), key_file=str(client_key)
    )
    serving = TLSFiles(cert=cert, key=key, client_ca=client_ca_file)
    async with FakeFlintlockd.start(address="127.0.0.1", tls=serving) as host:
        config = HostConfig("secure", host.target, tls)
        async with (
            FakeBattery.start(hosts=[config], clock=FakeClock()) as battery,
            grpc.aio.insecure_channel(battery.target) as channel,
        ):
            for path in (ca_file, client_cert, client_key):
                path.unlink()  # read at start only: the channel keeps what it read
            stubs = BatteryStubs.on(channel)
            spec = pool_spec("p", ns, ["secure"])
            await stubs.create_pool(spec)
            await stubs.wait_status(ref_of(spec), lambda s: s.available_count == 1, what="a VM")
            assert len(await host.list_vms()) == 1


@pytest.mark.req("BA-060", "TD-006")
async def test_restart_with_a_database_reads_its_state_back_from_the_file(
    host_targets: dict[str, str], clock: FakeClock, timings: Timings, ns: str, tmp_path: Path
) -> None:
    db = tmp_path / "poolmgr.db"
    async with (
        FakeBattery.start(hosts=host_targets, clock=clock, timings=timings, db=db) as battery,
        grpc.aio.insecure_channel(battery.target) as channel,
    ):
        stubs = BatteryStubs.on(channel)
        ref = await ready(stubs, ns)
        held = await stubs.claim(ref, request_id="held")
        row = battery.store.leases[held.lease_id]
        records = battery.lease_records()
        await battery.restart()
        # The same code path as a new process: the rows are read back from the file.
        assert battery.store.leases[held.lease_id] is not row
        assert battery.lease_records() == records
    async with FakeBattery.start(hosts=host_targets, clock=clock, timings=timings, db=db) as again:
        assert again.lease_records() == records
        assert [vm.uid for vm in again.vm_records(ns, "p")] == [held.vm_uid]


@pytest.mark.req("BA-060", "BA-105")
async def test_hosts_added_and_cordoned_are_kept_in_the_database(
    host_targets: dict[str, str], clock: FakeClock, timings: Timings, tmp_path: Path
) -> None:
    db = tmp_path / "poolmgr.db"
    async with (
        FakeBattery.start(clock=clock, timings=timings, db=db, host_api=True) as battery,
        grpc.aio.insecure_channel(battery.target) as channel,
    ):
        stubs = BatteryStubs.on(channel)
        host = types_pb2.Host(
            name="host-a", address=host_targets["host-a"], tls=types_pb2.HostTLS(insecure=True)
        )
        await stubs.hosts.AddHost(hostadmin_pb2.AddHostRequest(host=host))
        await stubs.hosts.CordonHost(hostadmin_pb2.CordonHostRequest(name="host-a", reason="r"))
    async with FakeBattery.start(clock=clock, timings=timings, db=db, host_api=True) as again:
        [conn] = again.store.hosts.values()
        assert (conn.name, conn.address, conn.cordoned, conn.cordoned_reason) == (
            "host-a",
            host_targets["host-a"],
            True,
            "r",
        )
    # battery v0.4.0 takes its Hosts from the config: a stored Host not there is not kept.
    async with FakeBattery.start(clock=clock, timings=timings, db=db) as old:
        assert list(old.store.hosts) == []


async def test_a_reconciler_that_raises_is_logged_and_started_again(
    battery: FakeBattery,
    stubs: BatteryStubs,
    ns: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    counts = battery.store.counts
    broke = 0

    def breaks_once_in_the_reconciler(key: tuple[str, str]) -> Any:
        nonlocal broke
        task = asyncio.current_task()
        if key[0] == ns and task is not None and task.get_name().startswith("reconciler "):
            broke += 1
            if broke == 1:
                raise RuntimeError("counting broke")
        return counts(key)

    monkeypatch.setattr(battery.store, "counts", breaks_once_in_the_reconciler)
    await ready(stubs, ns)  # the Pool fills all the same, from the restarted reconciler
    assert broke >= 2
    failure = next(r for r in caplog.records if r.getMessage().startswith("Task reconciler "))
    assert failure.exc_info is not None and "counting broke" in str(failure.exc_info[1])
    assert f"{ns}/p" in failure.getMessage()
    assert battery.loops.down() == {}

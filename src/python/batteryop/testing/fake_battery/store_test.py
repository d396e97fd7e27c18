"""The fake battery's Store: MicroVMs and Leases found by Pool (and Leases by request and by
MicroVM) without a walk over every row."""

from __future__ import annotations

from datetime import UTC, datetime

from batteryop.testing.fake_battery.store import LeaseRow, Phase, Store, VmRow

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def row(uid: str, pool: tuple[str, str]) -> VmRow:
    return VmRow(uid, f"fl-{uid}", pool, "host-a", Phase.AVAILABLE, None, T0, T0)


async def test_pool_vms_follows_adds_removals_and_a_replaced_state() -> None:
    store = Store(lambda: T0)
    a, b = ("ns", "a"), ("ns", "b")
    for uid, pool in (("1", a), ("2", b), ("3", a), ("4", a)):
        store.add_vm(row(uid, pool))
    assert [vm.uid for vm in store.pool_vms(a)] == ["1", "3", "4"], "in the order added"
    assert store.remove_vm("3") is not None
    assert store.remove_vm("3") is None
    assert [vm.uid for vm in store.pool_vms(a)] == ["1", "4"]
    store.remove_vm("2")
    assert store.pool_vms(b) == []
    store.replace(pools={}, vms={"9": row("9", b)}, leases={}, events=[], next_event_id=1)
    assert store.pool_vms(a) == []
    assert [vm.uid for vm in store.pool_vms(b)] == ["9"]


def lease(lease_id: str, vm_uid: str, pool: tuple[str, str], request_id: str) -> LeaseRow:
    return LeaseRow(lease_id, vm_uid, pool, T0, T0, T0, request_id)


async def test_lease_lookups_follow_adds_removals_and_a_replaced_state() -> None:
    store = Store(lambda: T0)
    a, b = ("ns", "a"), ("ns", "b")
    for uid, pool in (("1", a), ("2", b), ("3", a)):
        store.add_vm(row(uid, pool))
    store.add_lease(lease("l-3", "3", a, "req-3"))
    store.add_lease(lease("l-1", "1", a, "req-1"))
    store.add_lease(lease("l-2", "2", b, ""))
    assert [x.lease_id for x in store.sorted_leases(a)] == ["l-1", "l-3"], "in lease id order"
    found = store.lease_for_request("req-3")
    assert found is not None and found.lease_id == "l-3"
    assert store.lease_for_request("") is None, "no request id, no idempotent answer"
    store.remove_vm("1")  # the sweeper removes the MicroVM's row before its Lease
    found = store.lease_for_vm("1")
    assert found is not None and found.lease_id == "l-1"
    assert store.remove_lease("l-1") is not None
    assert store.remove_lease("l-1") is None
    assert [x.lease_id for x in store.sorted_leases(a)] == ["l-3"]
    assert store.lease_for_request("req-1") is None and store.lease_for_vm("1") is None
    store.remove_lease("l-2")
    assert store.sorted_leases(b) == [] and set(store.leases) == {"l-3"}
    store.replace(
        pools={}, vms={}, leases={"l-9": lease("l-9", "9", b, "req-9")}, events=[], next_event_id=1
    )
    assert store.sorted_leases(a) == [] and store.lease_for_request("req-3") is None
    assert [x.lease_id for x in store.sorted_leases(b)] == ["l-9"]
    assert store.lease_for_vm("9") is store.lease_for_request("req-9") is store.leases["l-9"]


async def test_a_lease_record_is_built_once_and_again_after_a_renewal() -> None:
    store = Store(lambda: T0)
    store.add_vm(row("1", ("ns", "a")))
    held = lease("l-1", "1", ("ns", "a"), "req-1")
    store.add_lease(held)
    first = store.lease_record(held)
    assert store.lease_record(held) is first, "kept while the Lease is unchanged"
    later = datetime(2026, 12, 1, 0, 1, tzinfo=UTC)
    store.renew(held, later, later)
    renewed = store.lease_record(held)
    assert renewed.expires_at.ToDatetime(tzinfo=UTC) == later
    assert renewed.last_heartbeat_at.ToDatetime(tzinfo=UTC) == later
    store.remove_lease("l-1")
    store.add_vm(row("2", ("ns", "a")))
    again = lease("l-1", "2", ("ns", "a"), "req-2")  # a reused id gets its own record
    store.add_lease(again)
    assert store.lease_record(again).vm_uid == "2"


async def test_counts_sort_each_phase_as_poolmgrd_does() -> None:
    # VMCounts (battery-api.md §4): Claiming is PRE_LEASE_HOOK_RUNNING and LEASED without a
    # committed lease row; Provisioning is PROVISIONING and CREATE_HOOK_RUNNING; DELETING and
    # FAILED count nowhere; another Pool's VMs are not counted.
    store = Store(lambda: T0)
    a, b = ("ns", "a"), ("ns", "b")
    phases = {
        "avail-1": Phase.AVAILABLE,
        "avail-2": Phase.AVAILABLE,
        "hook": Phase.PRE_LEASE_HOOK_RUNNING,
        "leased": Phase.LEASED,
        "leased-no-row": Phase.LEASED,
        "prov": Phase.PROVISIONING,
        "create-hook": Phase.CREATE_HOOK_RUNNING,
        "quarantined": Phase.QUARANTINED,
        "deleting": Phase.DELETING,
        "failed": Phase.FAILED,
    }
    for uid in phases:
        store.add_vm(row(uid, a))
    store.add_vm(row("other-pool", b))
    store.add_lease(lease("l-1", "leased", a, "req-1"))
    for uid, phase in phases.items():
        if uid != "leased":
            store.vms[uid].phase = phase
    store.vms["leased-no-row"].lease_id = "l-gone"
    counts = store.counts(a)
    assert (
        counts.available,
        counts.claiming,
        counts.leased,
        counts.provisioning,
        counts.quarantined,
    ) == (2, 2, 1, 2, 1)
    assert store.counts(b).available == 1
    assert store.counts(("ns", "none")).available == 0

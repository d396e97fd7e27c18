"""The fake battery's Store: MicroVMs found by Pool without a walk over every MicroVM."""

from __future__ import annotations

from datetime import UTC, datetime

from batteryop.testing.fake_battery.store import Phase, Store, VmRow

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

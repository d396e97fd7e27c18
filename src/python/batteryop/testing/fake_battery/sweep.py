"""How the fake battery deletes MicroVMs and what one sweep does (BA-020..BA-023, BA-051).

`Deleter.delete_on_host` marks a MicroVM DELETING and asks its Host's flintlockd to delete it;
`Deleter.sweep` finishes pending deletions, expires Leases and warns of those about to expire.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import grpc

from battery_protos.poolmgr.v1alpha1 import types_pb2
from batteryop.testing.fake_battery.store import Phase, VmRow

if TYPE_CHECKING:
    from batteryop.testing.fake_battery.battery import FakeBattery

log = logging.getLogger(__name__)


class Deleter:
    """Deletions and the sweep for one FakeBattery."""

    def __init__(self, battery: FakeBattery) -> None:
        self._b = battery
        # (lease id, expiry) pairs already warned of with VM_EXPIRING_SOON; cleared at start.
        self.warned: set[tuple[str, datetime]] = set()

    async def delete_on_host(self, vm: VmRow) -> bool:
        """Mark vm DELETING and ask its Host to delete it; True once flintlockd confirmed."""
        self._b.store.set_phase(vm.uid, Phase.DELETING)
        host = self._b.store.hosts.get(vm.host)
        if host is None:
            log.warning("vm %s: host %s is not registered; deletion pending", vm.uid, vm.host)
            return False
        try:
            await host.delete(vm.uid, self._b.timings.delete_timeout)
        except grpc.aio.AioRpcError as err:
            log.warning("vm %s: DeleteMicroVM on %s: %s", vm.uid, vm.host, err.code().name)
            return False
        return True

    async def sweep(self) -> None:
        """One pass of the sweep (`FakeBattery.sweep` counts it)."""
        store = self._b.store
        # 1. Finish deletions still pending (skipped while the VM's Pool is gone).
        # BA-023, BA-031: deletions flintlockd has not confirmed are tried again at every sweep.
        deleting = [
            vm for vm in store.vms.values() if vm.phase == Phase.DELETING and vm.pool in store.pools
        ]
        done = await asyncio.gather(*(self.delete_on_host(vm) for vm in deleting))
        for vm, ok in zip(deleting, done, strict=True):
            if not ok or store.remove_vm(vm.uid) is None:
                continue
            lease = store.lease_for_vm(vm.uid)
            if lease is not None:
                store.remove_lease(lease.lease_id)
                store.emit(types_pb2.VM_DELETED_ON_RELEASE, vm.pool, vm.uid)
            else:
                store.emit(types_pb2.VM_DELETED_DUE_TO_EXPIRY, vm.pool, vm.uid)
            self._b.schedule.notify(vm.pool, "deleted")
        # 2. Expire Leases whose expiry has passed (TD-003); warn about those about to expire.
        now = self._b.clock.now()
        window = timedelta(seconds=self._b.timings.warning_window)
        expired: list[VmRow] = []
        for lease in sorted(store.leases.values(), key=lambda lease: lease.expires_at):
            # BA-020: only the sweep removes Leases, each whose expiry is at or before its time.
            if lease.expires_at <= now:
                store.remove_lease(lease.lease_id)
                row = store.vms.get(lease.vm_uid)
                if row is not None and row.phase == Phase.LEASED:
                    expired.append(row)
            elif lease.expires_at <= now + window:
                mark = (lease.lease_id, lease.expires_at)
                if mark not in self.warned:
                    self.warned.add(mark)
                    store.emit(types_pb2.VM_EXPIRING_SOON, lease.pool, lease.vm_uid)
        done = await asyncio.gather(*(self.delete_on_host(vm) for vm in expired))
        for vm, ok in zip(expired, done, strict=True):
            # BA-051: the expiry event only once flintlockd has confirmed the deletion.
            if ok and store.remove_vm(vm.uid) is not None:
                store.emit(types_pb2.VM_DELETED_DUE_TO_EXPIRY, vm.pool, vm.uid)
                self._b.schedule.notify(vm.pool, "deleted")

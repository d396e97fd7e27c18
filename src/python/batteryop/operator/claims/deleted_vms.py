"""`DeletedVMs`: the MicroVM uids battery's Events reported deleted, each remembered for an hour.

The runtime feeds it every battery Event; `expiry.expire_deleted` reads it (CL-013). Its own
module so that what a reconcile uses (`deps`) does not import the steps.
"""

from __future__ import annotations

from collections import OrderedDict
from datetime import datetime, timedelta
from typing import Final

from batteryop.api.clock import Clock
from batteryop.battery.models import Event
from batteryop.battery.models import EventType as BatteryEventType

REMEMBER_FOR: Final = timedelta(hours=1)
"""How long a reported MicroVM deletion is remembered."""

DELETION_EVENTS: Final = frozenset(
    {
        BatteryEventType.VM_DELETED_DUE_TO_EXPIRY,
        BatteryEventType.VM_DELETED_ON_RELEASE,
        BatteryEventType.VM_DELETED_ON_POOL_DELETE,
    }
)
"""battery's events that say a MicroVM is gone."""


class DeletedVMs:
    """MicroVM uids battery reported deleted, each remembered for `remember_for`."""

    def __init__(self, clock: Clock, *, remember_for: timedelta = REMEMBER_FOR) -> None:
        if remember_for <= timedelta(0):
            raise ValueError(f"DeletedVMs must remember for a positive time, got {remember_for}")
        self._clock = clock
        self._remember_for = remember_for
        self._since: OrderedDict[str, datetime] = OrderedDict()

    def observe(self, event: Event) -> str | None:
        """Remember the MicroVM of a deletion event; its uid, or None for any other event."""
        if event.type not in DELETION_EVENTS or not event.vm_uid:
            return None
        self.record(event.vm_uid)
        return event.vm_uid

    def record(self, vm_uid: str) -> None:
        """Remember that battery deleted MicroVM `vm_uid`, from now."""
        self._forget_old()
        self._since.pop(vm_uid, None)
        self._since[vm_uid] = self._clock.now()

    def __contains__(self, vm_uid: object) -> bool:
        self._forget_old()
        return vm_uid in self._since

    def __len__(self) -> int:
        self._forget_old()
        return len(self._since)

    def _forget_old(self) -> None:
        cutoff = self._clock.now() - self._remember_for
        while self._since:
            uid, since = next(iter(self._since.items()))
            if since > cutoff:
                return
            del self._since[uid]

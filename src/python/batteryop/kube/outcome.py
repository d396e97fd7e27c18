"""What one reconcile of one object decided, as data: the controller runtime applies it.

Controllers (claims, pools) never write to the API server themselves: a reconcile reads the
object and the world, calls battery, and returns an `Outcome`. The runtime then applies it in
a fixed order, which is what makes each step's guarantees hold:

1. `add_finalizer` — a metadata merge-patch carrying the object's resourceVersion (an
   optimistic lock): it fails on a conflict rather than resurrect an old finalizer list. A
   reconcile that adds a finalizer does nothing else (CL-001, PO-001: the finalizer is stored
   before battery is called).
2. `status` — a merge-patch of the status subresource carrying the resourceVersion the
   reconcile read: it lands only on exactly that version (CL-002, CL-008; see
   `claims.bind`). A status is decided from one version of the object and written to that
   version or not at all; a conflict ends the writes and the object is reconciled again from
   the newer version. This is also the only guard against writing a status decided about one
   object onto another of the same name (deleted and made again after someone removed the
   finalizer by force): a `metadata.uid` in a status merge-patch is ignored, because the
   status subresource keeps the stored metadata (`kube/client_test.py` shows both against
   the real API server).
3. `events` — Kubernetes Events, best effort.
4. `remove_finalizer` — a metadata merge-patch with the resourceVersion lock, last, so it only
   goes once everything before it is written (CL-020, PO-044).
5. `requeue_after` — reconcile again after that many seconds even with no watch event; None
   waits for the next event.
6. `backoff` — the reconcile ended waiting on something outside the object (battery did not
   answer, or refused a deletion while MicroVMs are leased): the work queue retries the object
   after its per-object backoff, 1 s doubling to 30 s, exactly as it retries a reconcile that
   raised, and a later reconcile that ends any other way starts that backoff over
   (`kube.workqueue.Retry`). `requeue_after` is then not read. Pools use this. Claims instead
   read their retry delay from a condition's age (`backoff_since`: it survives a restart,
   and a claim's conditions record exactly how long it has waited); both are clamped to the
   same 1-30 s (`clamp_backoff`).

`merge_patch_from` is how both controllers turn the status they read and the status they decided
into the `status` to write: the smallest RFC 7386 merge-patch, None when nothing changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from batteryop.api.conditions import Condition, EventType


@dataclass(frozen=True)
class EventRecord:
    """A Kubernetes Event about the reconciled object."""

    type: EventType
    reason: str
    message: str


@dataclass
class Outcome:
    status: dict[str, Any] | None = None
    add_finalizer: str | None = None
    remove_finalizer: str | None = None
    events: list[EventRecord] = field(default_factory=list)
    requeue_after: float | None = None
    backoff: bool = False

    def back_off(self) -> None:
        """Retry after this object's backoff in the work queue (6. in the module docstring)."""
        self.backoff = True

    def requeue(self, seconds: float) -> None:
        """Ask for another reconcile after `seconds`; the earliest request wins."""
        if self.requeue_after is None or seconds < self.requeue_after:
            self.requeue_after = seconds

    def event(self, type: EventType, reason: str, message: str) -> None:
        self.events.append(EventRecord(type, reason, message))


def clamp_backoff(seconds: float, low: float = 1.0, high: float = 30.0) -> float:
    """Backoff clamped to 1-30 s (CL-003, CL-007, CL-022: retries with backoff)."""
    return max(low, min(high, seconds))


def backoff_since(condition: Condition, now: datetime) -> float:
    """Seconds to wait before retrying: time since `condition` changed status, within 1-30 s.

    The wait so roughly doubles while the condition holds, and survives an Operator restart,
    since it is read from the object itself."""
    return clamp_backoff((now - condition.last_transition_time).total_seconds())


def merge_patch_from(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any] | None:
    """The smallest RFC 7386 merge-patch taking `before` to `after`, None if they are equal:
    changed fields, None for removed ones, lists (conditions) whole when they differ."""
    return _diff(before, after) or None


def _diff(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    patch: dict[str, Any] = {key: None for key in sorted(before.keys() - after.keys())}
    for key, value in after.items():
        old = before.get(key)
        if old == value:
            continue
        if isinstance(old, Mapping) and isinstance(value, Mapping):
            patch[key] = _diff(old, value)
        else:
            patch[key] = value
    return patch

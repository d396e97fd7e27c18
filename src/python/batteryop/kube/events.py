"""`EventRecorder`: Kubernetes Events (events.k8s.io/v1) about our objects, best effort.

An Event names the object it is about (`regarding`), the controller and instance that saw it
(`reportingController`, `reportingInstance`), what it did (`action`), why (`reason`, a CamelCase
constant from `batteryop.api`) and a human `note`, at `eventTime` (microseconds).

Repeats are folded as client-go's events recorder folds them: the same (object uid, reason,
note) seen again within 10 minutes of its last sighting patches the existing Event's `series`
(`count`, `lastObservedTime`) instead of creating another Event. If that Event has gone (the
server's event TTL), a new one is created. What was recorded lives in this recorder's memory
only, so a restarted operator starts new series.

Recording never fails its caller: events must never break a reconcile. Every API error is
logged at WARNING and swallowed; only the caller's own cancellation propagates. Notes longer
than the API's 1024-byte limit are cut (on a UTF-8 character boundary).

Requirements: PO-041 (the HookFailed Warning on a Pool is recorded through this).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from batteryop.api._compat import UTC
from batteryop.api.clock import SYSTEM_CLOCK, Clock
from batteryop.kube.client import KubeClient
from batteryop.kube.errors import NotFoundError
from batteryop.kube.resources import EVENTS

logger = logging.getLogger(__name__)

NORMAL: Final = "Normal"
"""Event type of expected happenings."""
WARNING: Final = "Warning"
"""Event type of something a user should look at."""

NOTE_LIMIT: Final = 1024
"""Bytes of `note` the API server accepts."""

SERIES_WINDOW: Final = datetime.timedelta(minutes=10)
"""A repeat within this time of the last sighting joins the series of the existing Event."""

DEFAULT_NAMESPACE: Final = "default"
"""Where Events about cluster-scoped objects (Nodes) go, as client-go puts them."""

_MAX_REMEMBERED: Final = 4096

QUEUE_LIMIT: Final = 1000
"""Events `post` holds before it drops new ones (client-go's broadcaster buffers 1000 too)."""

SENDERS: Final = 4
"""Posted Events sent at once. One sender fell behind a burst of binds (983 of 1,000 queued
in the churn benchmark, docs/dev/operator-performance.md); repeats of one (object, reason,
note) still go out in the order posted, since each waits for the one before it (`record`)."""

FORGET_EVERY: Final = datetime.timedelta(seconds=10)
"""How often the series memory is swept of sightings older than SERIES_WINDOW."""


@dataclass(frozen=True)
class _Posted:
    obj: dict[str, Any]
    type: str
    reason: str
    note: str
    action: str


def _regarding_only(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The part of `obj` an Event names (`EventRecorder._event`), and nothing else."""
    meta = obj.get("metadata") or {}
    return {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "metadata": {k: meta.get(k) for k in ("name", "namespace", "uid", "resourceVersion")},
    }


def micro_time(t: datetime.datetime) -> str:
    """`t` in the API's MicroTime form: RFC 3339 in UTC with microseconds."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def truncate_note(note: str, limit: int = NOTE_LIMIT) -> str:
    """`note` cut to at most `limit` UTF-8 bytes, never inside a character."""
    encoded = note.encode("utf-8")
    if len(encoded) <= limit:
        return note
    return encoded[:limit].decode("utf-8", errors="ignore")


@dataclass
class _Recorded:
    """An Event this recorder created and the series it has patched in since."""

    name: str
    namespace: str
    count: int
    last: datetime.datetime


class EventRecorder:
    """Records Events as `controller` (a qualified name, e.g. `battery.liquidmetal-x.dev/pool`)
    from `instance` (e.g. the Pod name). `clock` is for tests."""

    def __init__(
        self,
        client: KubeClient,
        *,
        controller: str,
        instance: str,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._client = client
        self.controller = controller
        self.instance = instance
        self._clock = clock
        self._recorded: OrderedDict[tuple[str, str, str], _Recorded] = OrderedDict()
        # One record at a time per (object, reason, note), so a repeat never races the create
        # of its series' Event. Posted Events go out in the order posted, up to SENDERS at
        # once (`_send`): a sender takes the lock of what it took before it first yields.
        self._locks: dict[tuple[str, str, str], asyncio.Lock] = {}
        self._queue: asyncio.Queue[_Posted] = asyncio.Queue(maxsize=QUEUE_LIMIT)
        self._senders: set[asyncio.Task[None]] = set()
        self._forgot_at: datetime.datetime | None = None
        self.dropped = 0

    def post(
        self, obj: Mapping[str, Any], type: str, reason: str, note: str, *, action: str
    ) -> None:
        """`record` later, without waiting: queued, and sent in order, SENDERS at a time.

        As client-go's event broadcaster does: a controller's own writes never wait for, or
        compete with, a burst of its Events. A full queue drops the Event with a warning. The
        queue keeps only what the Event names of `obj` (`regarding`), not its whole body.
        """
        try:
            self._queue.put_nowait(_Posted(_regarding_only(obj), type, reason, note, action))
        except asyncio.QueueFull:
            self.dropped += 1
            logger.warning("Dropped %s Event %s: %d Events wait already", type, reason, QUEUE_LIMIT)
            return
        if len(self._senders) < min(SENDERS, self._queue.qsize()):
            sender = asyncio.get_running_loop().create_task(self._send())
            self._senders.add(sender)
            sender.add_done_callback(self._senders.discard)

    async def _send(self) -> None:
        while not self._queue.empty():  # ends when drained; the next post starts it again
            posted = self._queue.get_nowait()
            await self.record(
                posted.obj, posted.type, posted.reason, posted.note, action=posted.action
            )

    async def drain(self, timeout: float) -> None:
        """Wait (at most `timeout` seconds) until every posted Event was sent or dropped."""
        if self._senders:
            await asyncio.wait(set(self._senders), timeout=timeout)

    async def record(
        self,
        obj: Mapping[str, Any],
        type: str,  # the API's word for it
        reason: str,
        note: str,
        *,
        action: str,
    ) -> None:
        """Record that `action` happened to `obj` for `reason`; never raises (see module)."""
        meta = obj.get("metadata") or {}
        name = str(meta.get("name") or "")
        note = truncate_note(note)
        key = (str(meta.get("uid") or f"{meta.get('namespace')}/{name}"), reason, note)
        lock = self._locks.setdefault(key, asyncio.Lock())
        try:
            async with lock:
                now = self._clock.now()
                if self._forgot_at is None or now - self._forgot_at > FORGET_EVERY:
                    self._forget_before(now - SERIES_WINDOW)
                    self._forgot_at = now
                seen = self._recorded.get(key)
                if seen is not None and await self._add_to_series(key, seen, now):
                    return
                namespace = str(meta.get("namespace") or DEFAULT_NAMESPACE)
                body = self._event(obj, type, reason, note, action, now, namespace)
                created = await self._client.create(EVENTS, body, namespace)
                self._recorded[key] = _Recorded(str(created["metadata"]["name"]), namespace, 1, now)
                if len(self._recorded) > _MAX_REMEMBERED:
                    # Kept in order of last sighting (`_add_to_series` moves a repeat to the
                    # end), so the first is the oldest: no walk over every series per Event.
                    del self._recorded[next(iter(self._recorded))]
        except Exception as e:
            logger.warning(
                "Failed to record %s Event %s for %s %s: %s",
                type,
                reason,
                obj.get("kind", "object"),
                f"{meta.get('namespace')}/{name}" if meta.get("namespace") else name,
                e,
                extra={"reason": reason, "action": action},
            )
        finally:
            if not lock.locked() and self._locks.get(key) is lock:
                del self._locks[key]

    def sizes(self) -> dict[str, int]:
        """What the recorder holds (for leak checks): series remembered, locks, queued Events."""
        return {
            "series": len(self._recorded),
            "locks": len(self._locks),
            "queued": self._queue.qsize(),
        }

    async def _add_to_series(
        self, key: tuple[str, str, str], seen: _Recorded, now: datetime.datetime
    ) -> bool:
        """Patch the series of an Event this recorder made; False if that Event is gone."""
        count = seen.count + 1
        patch = {"series": {"count": count, "lastObservedTime": micro_time(now)}}
        try:
            await self._client.patch(EVENTS, seen.name, patch, seen.namespace)
        except NotFoundError:
            return False
        seen.count, seen.last = count, now
        if self._recorded.get(key) is seen:
            self._recorded.move_to_end(key)
        return True

    def _forget_before(self, cutoff: datetime.datetime) -> None:
        while self._recorded:  # oldest sighting first
            key, recorded = next(iter(self._recorded.items()))
            if recorded.last >= cutoff:
                return
            del self._recorded[key]

    def _event(
        self,
        obj: Mapping[str, Any],
        type: str,
        reason: str,
        note: str,
        action: str,
        now: datetime.datetime,
        namespace: str,
    ) -> dict[str, Any]:
        meta = obj.get("metadata") or {}
        regarding = {
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        }
        # client-go's naming: the object's name and a nanosecond stamp, unique per recorder.
        stem = str(meta.get("name") or "event")[: 253 - 17].rstrip(".-")
        return {
            "apiVersion": EVENTS.api_version,
            "kind": "Event",
            "metadata": {"name": f"{stem}.{time.time_ns():x}", "namespace": namespace},
            "eventTime": micro_time(now),
            "reportingController": self.controller,
            "reportingInstance": self.instance,
            "action": action,
            "reason": reason,
            "note": note,
            "type": type,
            "regarding": {k: v for k, v in regarding.items() if v},
        }

"""The controller runtime: watch events in, reconciles out, Outcomes applied to the API server.

kopf watches (see `app`); each watch event lands here through `Controller.observe`, which
keeps the newest body of every object in a cache and queues its key. A worker of the
controller's `WorkQueue` runs the reconcile function on the cached body and applies the
`Outcome` it returns, in the order `outcome` documents:

1. finalizer added  — metadata merge-patch with the object's resourceVersion (optimistic lock);
2. status           — status merge-patch, no lock (a recorded lease is never lost, CL-002);
3. events           — best effort, through the `EventRecorder`, in the background;
4. finalizer removed — metadata merge-patch locked to the resourceVersion the status write
   returned, so it is the last write and only lands on the state it was decided on.

Every patch's answer replaces the cached body (unless the cache already holds something
newer), so the next reconcile never acts on a body older than its own writes. A conflict
means the object moved on: the watch brings the new body and queues the key again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any

from batteryop.kube.client import KubeClient
from batteryop.kube.errors import ConflictError, NotFoundError
from batteryop.kube.events import EventRecorder
from batteryop.kube.resources import Resource
from batteryop.operator.outcome import Outcome
from batteryop.operator.workqueue import WorkQueue

log = logging.getLogger(__name__)

Key = tuple[str, str]
"""(namespace, name); namespace is "" for cluster-scoped objects."""

Reconcile = Callable[[Mapping[str, Any]], Awaitable[Outcome]]


def key_of(body: Mapping[str, Any]) -> Key:
    meta = body.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def _rv(body: Mapping[str, Any]) -> int:
    try:
        return int((body.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


_NOT_CONTENT = ("resourceVersion", "managedFields")
"""Metadata a status write changes by itself."""


def changed_besides_status(before: Mapping[str, Any], after: Mapping[str, Any]) -> bool:
    """Whether `after` differs from `before` in anything but status and write bookkeeping."""

    def content(body: Mapping[str, Any]) -> dict[str, Any]:
        meta = {k: v for k, v in (body.get("metadata") or {}).items() if k not in _NOT_CONTENT}
        return {**{k: v for k, v in body.items() if k not in ("status", "metadata")}, "meta": meta}

    return content(before) != content(after)


class ObjectCache:
    """The newest body seen of each object, from watch events and from our own writes."""

    def __init__(self) -> None:
        self._bodies: dict[Key, dict[str, Any]] = {}

    def put(self, body: Mapping[str, Any]) -> bool:
        """Store body unless an equal or newer resourceVersion is cached; True if stored.

        So the watch event echoing one of our own writes (whose answer is cached already)
        queues nothing: the reconcile that wrote asked for its own follow-up (`apply`).
        """
        key = key_of(body)
        current = self._bodies.get(key)
        if current is not None and _rv(body) > 0 and _rv(current) >= _rv(body):
            return False
        self._bodies[key] = dict(body)
        return True

    def drop(self, key: Key) -> None:
        self._bodies.pop(key, None)

    def get(self, key: Key) -> dict[str, Any] | None:
        return self._bodies.get(key)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(list(self._bodies.values()))

    def __len__(self) -> int:
        return len(self._bodies)


class Controller:
    """One kind's cache, queue and reconcile, with the fixed order of writes."""

    def __init__(
        self,
        name: str,
        resource: Resource,
        reconcile: Reconcile,
        *,
        kube: KubeClient,
        recorder: EventRecorder,
        workers: int,
        on_reconciled: Callable[[str, str, float], None] | None = None,
    ) -> None:
        self.name = name
        self.resource = resource
        self.cache = ObjectCache()
        self._reconcile = reconcile
        self._kube = kube
        self._recorder = recorder
        self._on_reconciled = on_reconciled
        self.queue: WorkQueue[Key] = WorkQueue(self._handle, name=name, workers=workers)
        self._fresh: dict[Key, tuple[float, dict[str, Any]]] = {}

    # -- input -------------------------------------------------------------------------

    def observe(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        """A watch event: remember the body (or forget it) and queue the object."""
        key = key_of(body)
        if event_type == "DELETED":
            self.cache.drop(key)
            return
        if self.cache.put(body):
            self.queue.add(key)

    def enqueue(self, key: Key, after: float = 0.0) -> None:
        self.queue.add_after(key, after)

    def enqueue_all(self) -> None:
        for body in self.cache:
            self.queue.add(key_of(body))

    def take_fresh(self, key: Key, max_age: float = 1.0) -> dict[str, Any] | None:
        """The API server's own answer to our last metadata write of `key`, if just made.

        A write's answer is the stored object at that moment, as authoritative as a GET; the
        bind guard (which must not trust the watch cache) uses it once instead of a GET.
        """
        entry = self._fresh.pop(key, None)
        if entry is None or time.monotonic() - entry[0] > max_age:
            return None
        return entry[1]

    async def start(self) -> None:
        await self.queue.start()

    async def stop(self) -> None:
        await self.queue.stop()
        await self._recorder.drain(timeout=5)

    # -- one reconcile -------------------------------------------------------------------

    async def _handle(self, key: Key) -> float | None:
        body = self.cache.get(key)
        if body is None:
            return None  # deleted since it was queued
        started = time.perf_counter()
        result = "error"
        try:
            outcome = await self._reconcile(body)
            requeue = await self.apply(key, body, outcome)
            result = "requeue" if requeue is not None else "success"
            return requeue
        finally:
            if self._on_reconciled is not None:
                self._on_reconciled(self.name, result, time.perf_counter() - started)

    async def apply(self, key: Key, body: Mapping[str, Any], outcome: Outcome) -> float | None:
        namespace, name = key
        ns = namespace or None
        current: Mapping[str, Any] = body
        try:
            if outcome.add_finalizer:
                finalizers = list((body.get("metadata") or {}).get("finalizers") or [])
                if outcome.add_finalizer not in finalizers:
                    current = await self._patch_finalizers(
                        key, body, [*finalizers, outcome.add_finalizer]
                    )
                # Nothing else rides on a reconcile that adds the finalizer (CL-001, PO-001):
                # the next one sees it stored.
                return 0.0
            if outcome.status is not None:
                current = await self._kube.patch(
                    self.resource, name, {"status": outcome.status}, ns, subresource="status"
                )
                self.cache.put(current)
                if outcome.requeue_after is None or changed_besides_status(body, current):
                    # The echo of this write queues nothing (ObjectCache.put): reconcile again,
                    # as the echo would have, when the chain may have stopped at the write, or
                    # when the answer holds somebody else's change made meanwhile (the status
                    # write has no lock, and that change's own event is now older than the
                    # cache, so it queues nothing either).
                    outcome.requeue(0.0)
            for ev in outcome.events:
                # Events are best effort and never delay the object's own writes.
                self._recorder.post(current, ev.type, ev.reason, ev.message, action=ev.reason)
            if outcome.remove_finalizer:
                finalizers = list((current.get("metadata") or {}).get("finalizers") or [])
                if outcome.remove_finalizer in finalizers:
                    finalizers.remove(outcome.remove_finalizer)
                    current = await self._patch_finalizers(key, current, finalizers)
        except ConflictError:
            log.debug("%s %s/%s changed meanwhile; the watch brings it back", self.name, *key)
            return None
        except NotFoundError:
            self.cache.drop(key)
            return None
        return outcome.requeue_after

    async def _patch_finalizers(
        self, key: Key, body: Mapping[str, Any], finalizers: list[str]
    ) -> Mapping[str, Any]:
        namespace, name = key
        meta = body.get("metadata") or {}
        patch = {
            "metadata": {
                "finalizers": finalizers,
                # A merge-patch carrying resourceVersion is refused with 409 if the object
                # moved on: the finalizer list is never written from a stale read.
                "resourceVersion": meta.get("resourceVersion"),
            }
        }
        updated = await self._kube.patch(self.resource, name, patch, namespace or None)
        self.cache.put(updated)
        self._fresh[key] = (time.monotonic(), dict(updated))
        return updated

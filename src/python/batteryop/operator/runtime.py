"""The controller runtime: watch events in, reconciles out, Outcomes applied to the API server.

`app` lists and watches each kind; each watch event lands here through `Controller.observe`, which
keeps the newest body of every object in a cache and queues its key. A worker of the
controller's `WorkQueue` runs the reconcile function on the cached body and applies the
`Outcome` it returns, in the order `outcome` documents:

1. finalizer added  — metadata merge-patch with the object's resourceVersion (optimistic lock);
2. status           — status merge-patch, no lock; locked to the version read when the
   Outcome says so (the bind's write of a new Lease, CL-002);
3. events           — best effort, through the `EventRecorder`, in the background;
4. finalizer removed — metadata merge-patch locked to the resourceVersion the status write
   returned, so it is the last write and only lands on the state it was decided on.

Every patch's answer replaces the cached body, so the next reconcile never acts on a body
older than its own writes; the watch events older than that answer, and its echo, change
nothing (`ObjectCache`, which compares resourceVersions for equality only). An object the
API server deleted leaves the cache and every per-object map, whatever order the DELETED
event and a write's answer arrive in. A conflict means the object moved on: the watch brings
the new body and queues the key again.

Only `Controller.apply` implements the order of writes; tests run it against an in-memory
API server (`batteryop.testing.fake_kube`) rather than copy it.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, Protocol

from batteryop.api.clock import SYSTEM_CLOCK, Clock
from batteryop.kube.client import compact
from batteryop.kube.errors import ConflictError, NotFoundError
from batteryop.kube.outcome import Outcome
from batteryop.kube.resources import Resource
from batteryop.kube.workqueue import Answer, Retry, WorkQueue

log = logging.getLogger(__name__)

Key = tuple[str, str]
"""(namespace, name); namespace is "" for cluster-scoped objects."""

Reconcile = Callable[[Mapping[str, Any]], Awaitable[Outcome]]

Indexer = Callable[[Mapping[str, Any]], "str | tuple[str, ...] | None"]
"""An index's value for a body (e.g. the MicroVM uid a claim records), or its values (a
claim waits on each Pool of its list); None or (): not indexed."""


def _index_values(value: str | tuple[str, ...] | None) -> frozenset[str]:
    if value is None:
        return frozenset()
    return frozenset((value,)) if isinstance(value, str) else frozenset(value)


def key_of(body: Mapping[str, Any]) -> Key:
    meta = body.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def _rv(body: Mapping[str, Any]) -> str:
    """The resourceVersion: opaque, so only ever compared for equality."""
    return str((body.get("metadata") or {}).get("resourceVersion") or "")


def _uid(body: Mapping[str, Any]) -> str:
    return str((body.get("metadata") or {}).get("uid") or "")


def is_gone(body: Mapping[str, Any]) -> bool:
    """A body being deleted with no finalizer left: the API server no longer holds it."""
    meta = body.get("metadata") or {}
    return bool(meta.get("deletionTimestamp")) and not meta.get("finalizers")


LOCKED_STATUS_CONFLICT_RETRY_SECONDS = 1.0
"""A status write refused on a conflict is reconciled again this much later even if no watch
event comes (the event of the change that refused it queues it sooner)."""

ECHO_TIMEOUT_SECONDS = 60.0
"""How long the cache waits for the watch to echo one of our writes before it takes the
watch's word again (a safety net: a relisted watch, or a version the watch never showed)."""


class Write:
    """One write to an object in flight; its answer goes into the cache through `answered`."""

    def __init__(self, cache: ObjectCache, key: Key) -> None:
        self._cache = cache
        self.key = key
        self.deleted = False
        """The object was deleted (DELETED event, or 404) while this write was in flight."""
        self.seen: list[str] = []
        """The versions the watch delivered while this write was in flight, in order."""

    def answered(self, body: Mapping[str, Any]) -> bool:
        """Store the write's answer; False if it must not be (see `ObjectCache`)."""
        return self._cache._answered(self, body)


class ObjectCache:
    """The newest body of each object, from watch events and from the answers to our writes.

    resourceVersions are opaque strings: they are compared for equality, never for order.
    Order comes from the watch instead, which delivers the versions of one object in the
    order the API server made them. A write's answer (version X) is newer than every event
    the watch has not delivered before X's own event, its echo. So the cache remembers X as
    an expected echo: events before it are older than the cached answer and change nothing,
    the echo changes nothing (CL-101), and events after it are stored as usual. The echo of our own
    write therefore queues nothing; the reconcile that wrote asks for its own follow-up
    (`Controller.apply`). A listing (event type None) is taken as it is and forgets the
    expected echoes (a relisted watch may never show them); so is a watch event that comes
    `ECHO_TIMEOUT_SECONDS` after an echo was expected and is not it.

    The watch may also deliver a write's own version before its answer comes back, and more
    after it: the cache notes the versions delivered while a write is in flight, and an answer
    whose version is among them is not stored (the cache holds it, or something newer).

    Deleted objects leave no trace: a DELETED event forgets the body and the expected echoes,
    and marks the writes in flight (`writing`), so that an answer coming back after the
    DELETED event is not stored — whatever order the two arrive in, the object does not come
    back (a zombie), and no bookkeeping of it stays behind (a leak). An answer that shows the
    object gone (deleting, no finalizer left) forgets it too, and so does an answer about
    another object of the same name (uid differs) than the one cached.

    Bodies are kept `compact`: without `metadata.managedFields`, which nothing here reads, and
    with their keys and short strings shared.

    Indexes (`indexers`: name -> the value a body is filed under) are kept with the bodies:
    every body stored refiles its key, every key dropped leaves them, so `keys_by` answers
    "which objects record X" without a walk over every object (the runtime asks it for each
    battery Event and Node change).
    """

    def __init__(
        self,
        *,
        clock: Clock = SYSTEM_CLOCK,
        echo_timeout: float = ECHO_TIMEOUT_SECONDS,
        indexers: Mapping[str, Indexer] | None = None,
    ) -> None:
        self._bodies: dict[Key, dict[str, Any]] = {}
        self._indexers = dict(indexers or {})
        self._index: dict[str, dict[str, set[Key]]] = {name: {} for name in self._indexers}
        self._filed: dict[Key, dict[str, frozenset[str]]] = {}  # key -> index -> its values
        self._echoes: dict[Key, tuple[float, list[str]]] = {}
        self._writes: dict[Key, list[Write]] = {}
        self._clock = clock
        self._echo_timeout = echo_timeout

    # -- the watch ---------------------------------------------------------------------

    def observe(self, event_type: str | None, body: Mapping[str, Any]) -> bool:
        """A watch event (None: an item of a listing); True if the key should be queued."""
        key = key_of(body)
        if event_type == "DELETED":
            self.drop(key)
            return False
        for write in self._writes.get(key, ()):
            write.seen.append(_rv(body))
        expected = self._echoes.get(key)
        if event_type is None or expected is None:
            return self.put(body)
        since, versions = expected
        rv = _rv(body)
        if rv in versions:  # the echo of one of our writes, whose answer is cached already
            rest = versions[versions.index(rv) + 1 :]
            if rest:
                self._echoes[key] = (since, rest)
            else:
                del self._echoes[key]
            return False
        if self._clock.monotonic() - since < self._echo_timeout:
            return False  # older than the answer we cached: it comes before that answer's echo
        log.warning("No echo of our write to %s/%s came; took the watch's body", *key)
        return self.put(body)

    def put(self, body: Mapping[str, Any]) -> bool:
        """Take `body` as the newest (a listing, a watch without our writes); True if it
        differs from the cached version."""
        key = key_of(body)
        self._echoes.pop(key, None)
        current = self._bodies.get(key)
        self._store(key, body)
        return current is None or _rv(current) != _rv(body) or not _rv(body)

    def drop(self, key: Key) -> None:
        """The object is gone: forget it, and refuse the answers of writes in flight."""
        self._remove(key)
        self._echoes.pop(key, None)
        for write in self._writes.get(key, ()):
            write.deleted = True

    # -- our writes --------------------------------------------------------------------

    @contextlib.contextmanager
    def writing(self, key: Key) -> Iterator[Write]:
        """Around one write to `key`: a DELETED event meanwhile refuses its answer."""
        write = Write(self, key)
        self._writes.setdefault(key, []).append(write)
        try:
            yield write
        finally:
            writes = self._writes[key]
            writes.remove(write)
            if not writes:
                del self._writes[key]

    def _answered(self, write: Write, body: Mapping[str, Any]) -> bool:
        key = write.key
        if write.deleted:
            return False  # the DELETED event came first: the object must not come back
        current = self._bodies.get(key)
        if current is not None and _uid(current) and _uid(current) != _uid(body):
            return False  # another object of that name took its place meanwhile
        if is_gone(body):
            self.drop(key)  # its DELETED event, before or after this, changes nothing
            return False
        rv = _rv(body)
        if rv and rv in write.seen:
            # The watch delivered this version before its answer came back: the cache holds
            # it already, or a newer one (if the watch delivered more since).
            return write.seen[-1] == rv
        self._store(key, body)
        if current is not None and rv == _rv(current):
            return True  # the write changed nothing: no new version, no echo to wait for
        since, versions = self._echoes.get(key, (self._clock.monotonic(), []))
        self._echoes[key] = (since, [*versions, rv])
        return True

    # -- the bodies and their indexes -------------------------------------------------

    def _store(self, key: Key, body: Mapping[str, Any]) -> None:
        stored = compact(body)  # 10,000 claims are kept
        self._bodies[key] = stored
        if not self._indexers:
            return
        filed = self._filed.get(key, {})
        now: dict[str, frozenset[str]] = {}
        for name, indexer in self._indexers.items():
            values = _index_values(indexer(stored))
            before = filed.get(name, frozenset())
            if values == before:  # most stores: filed where it was
                if values:
                    now[name] = values
                continue
            for value in before - values:
                self._unfile(name, value, key)
            for value in values - before:
                self._index[name].setdefault(value, set()).add(key)
            if values:
                now[name] = values
        if now:
            self._filed[key] = now
        else:
            self._filed.pop(key, None)

    def _remove(self, key: Key) -> None:
        self._bodies.pop(key, None)
        for name, values in self._filed.pop(key, {}).items():
            for value in values:
                self._unfile(name, value, key)

    def _unfile(self, name: str, value: str, key: Key) -> None:
        keys = self._index[name][value]
        keys.discard(key)
        if not keys:
            del self._index[name][value]

    # -- reading -----------------------------------------------------------------------

    def get(self, key: Key) -> dict[str, Any] | None:
        return self._bodies.get(key)

    def keys_by(self, index: str, value: str) -> list[Key]:
        """The keys of the cached objects `index` files under `value`, sorted."""
        return sorted(self._index[index].get(value, ()))

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(list(self._bodies.values()))

    def __len__(self) -> int:
        return len(self._bodies)

    def sizes(self) -> dict[str, int]:
        """How many objects each of the cache's maps holds (for leak checks)."""
        sizes = {
            "bodies": len(self._bodies),
            "echoes": len(self._echoes),
            "writes": len(self._writes),
        }
        for name, values in self._index.items():
            sizes[f"index:{name}"] = sum(len(keys) for keys in values.values())
        return sizes


class Patcher(Protocol):
    """The one API call `Controller.apply` makes (`KubeClient.patch`, or a test's fake)."""

    async def patch(
        self,
        res: Resource,
        name: str,
        patch: Mapping[str, Any],
        namespace: str | None = None,
        *,
        subresource: str | None = None,
    ) -> dict[str, Any]: ...


class EventSink(Protocol):
    """Where `Controller.apply` posts Events (`EventRecorder`, or a test's fake)."""

    def post(
        self, obj: Mapping[str, Any], type: str, reason: str, note: str, *, action: str
    ) -> None: ...

    async def drain(self, timeout: float) -> None: ...


class Controller:
    """One kind's cache, queue and reconcile, with the fixed order of writes."""

    def __init__(
        self,
        name: str,
        resource: Resource,
        reconcile: Reconcile,
        *,
        kube: Patcher,
        recorder: EventSink,
        workers: int,
        on_reconciled: Callable[[str, str, float], None] | None = None,
        indexers: Mapping[str, Indexer] | None = None,
    ) -> None:
        self.name = name
        self.resource = resource
        self.cache = ObjectCache(indexers=indexers)
        self._reconcile = reconcile
        self._kube = kube
        self._recorder = recorder
        self._on_reconciled = on_reconciled
        self.queue: WorkQueue[Key] = WorkQueue(self._handle, name=name, workers=workers)

    # -- input -------------------------------------------------------------------------

    def observe(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        """A watch event: remember the body (or forget it) and queue the object."""
        if event_type == "DELETED":
            self.forget(key_of(body))
        elif self.cache.observe(event_type, body):
            self.queue.add(key_of(body))

    def forget(self, key: Key) -> None:
        """The object is gone: nothing of it stays in the cache, the queue or the bookkeeping."""
        self.cache.drop(key)
        self.queue.discard(key)

    def enqueue(self, key: Key, after: float = 0.0) -> None:
        self.queue.add_after(key, after)

    def enqueue_all(self) -> None:
        for body in self.cache:
            self.queue.add(key_of(body))

    def sizes(self) -> dict[str, int]:
        """How many objects each of the controller's maps holds (for leak checks)."""
        queue = {f"queue:{k}": v for k, v in self.queue.sizes().items()}
        return {**self.cache.sizes(), **queue}

    async def start(self) -> None:
        await self.queue.start()

    async def stop(self) -> None:
        await self.queue.stop()
        await self._recorder.drain(timeout=5)

    # -- one reconcile -------------------------------------------------------------------

    async def _handle(self, key: Key) -> Answer:
        body = self.cache.get(key)
        if body is None:
            return None  # deleted since it was queued
        started = time.perf_counter()
        result = "error"
        try:
            outcome = await self._reconcile(body)
            answer = await self.apply(key, body, outcome)
            result = (
                "backoff"
                if answer is Retry.BACKOFF
                else "requeue" if answer is not None else "success"
            )
            return answer
        finally:
            if self._on_reconciled is not None:
                self._on_reconciled(self.name, result, time.perf_counter() - started)

    async def apply(self, key: Key, body: Mapping[str, Any], outcome: Outcome) -> Answer:
        """Write `outcome` for the object `key`, read as `body`; the requeue it asks for
        (`Retry.BACKOFF` when it asks to back off: the work queue's per-object backoff).

        The order is `outcome`'s (the module docstring): the finalizer add alone, with the
        resourceVersion lock (CL-001, PO-001); else status, locked to the version read
        (CL-002), Events, and the finalizer removal last, locked to the version the status
        write answered (CL-020, PO-044). A conflict or a 404 ends the writes: the watch brings
        what changed.
        """
        current: Mapping[str, Any] = body
        locked = False
        try:
            if outcome.add_finalizer:
                finalizers = list((body.get("metadata") or {}).get("finalizers") or [])
                if outcome.add_finalizer not in finalizers:
                    await self._write_finalizers(key, body, [*finalizers, outcome.add_finalizer])
                # Nothing else rides on a reconcile that adds the finalizer (CL-001, PO-001):
                # the next one sees it stored.
                return 0.0
            if outcome.status is not None:
                # Locked: a merge-patch carrying resourceVersion is refused with 409 unless
                # the stored object is still the version this reconcile read (Outcome, 2).
                patch = {"status": outcome.status, "metadata": {"resourceVersion": _rv(body)}}
                locked = True
                current, _ = await self._write(key, patch, "status")
                locked = False
                if outcome.requeue_after is None and not outcome.backoff:
                    # The echo of this write queues nothing (ObjectCache): reconcile again,
                    # as the echo would have, when the chain may have stopped at the write.
                    outcome.requeue(0.0)
            for ev in outcome.events:
                # Events are best effort and never delay the object's own writes.
                self._recorder.post(current, ev.type, ev.reason, ev.message, action=ev.reason)
            if outcome.remove_finalizer:
                finalizers = list((current.get("metadata") or {}).get("finalizers") or [])
                if outcome.remove_finalizer in finalizers:
                    finalizers.remove(outcome.remove_finalizer)
                    current, _ = await self._write_finalizers(key, current, finalizers)
        except ConflictError:
            log.debug("%s %s/%s changed meanwhile; the watch brings it back", self.name, *key)
            return LOCKED_STATUS_CONFLICT_RETRY_SECONDS if locked else None
        except NotFoundError:
            self.forget(key)
            return None
        return Retry.BACKOFF if outcome.backoff else outcome.requeue_after

    async def _write_finalizers(
        self, key: Key, body: Mapping[str, Any], finalizers: list[str]
    ) -> tuple[Mapping[str, Any], bool]:
        meta = body.get("metadata") or {}
        patch = {
            "metadata": {
                "finalizers": finalizers,
                # A merge-patch carrying resourceVersion is refused with 409 if the object
                # moved on: the finalizer list is never written from a stale read.
                "resourceVersion": meta.get("resourceVersion"),
            }
        }
        return await self._write(key, patch)

    async def _write(
        self, key: Key, patch: Mapping[str, Any], subresource: str | None = None
    ) -> tuple[Mapping[str, Any], bool]:
        """One patch; its answer, and whether the cache took it (not if the object is gone)."""
        namespace, name = key
        with self.cache.writing(key) as write:
            answer = await self._kube.patch(
                self.resource, name, patch, namespace or None, subresource=subresource
            )
            return answer, write.answered(answer)

"""`FakeKube`: an in-memory API server for the writes `batteryop.operator.runtime` makes.

The controller runtime's IO boundary is `KubeClient.patch` (and `get` for the bind guard's
fresh read). `FakeKube` answers those as the API server does, so tests and the property test
run the real `Controller.apply` instead of a copy of its order of writes:

- `patch` is an RFC 7386 merge-patch. A `metadata.resourceVersion` in the patch is an
  optimistic lock: a different stored version raises `ConflictError`. `subresource="status"`
  changes only `status`; a patch of the object itself leaves `status` alone (CRDs with the
  status subresource behave so). A patch that changes nothing keeps the resourceVersion and
  makes no watch event, as the API server does.
- A deleted object (`delete`) with finalizers gets a deletionTimestamp; it goes, with a
  DELETED event, once its finalizers are empty.
- resourceVersions are opaque strings that are *not* ordered as integers (a counter scrambled
  by a bijection of 32-bit integers), so code that orders them fails here.
- Every change appends a watch event (`events`, in order). A test delivers them to a
  controller when it chooses (`deliver`), which is how a watch that lags behind is modelled.
- `hold_answers()` makes the answers of the next patches wait for `release()` (the write is
  applied, and its watch event made, at once): a test can deliver the watch events while
  the answer is in flight, then let it come back (`held` says when one waits).

Deliberate differences from the API server: no admission, no validation, no defaulting, no
managedFields, no generation bumps; creationTimestamp/deletionTimestamp are fixed strings.
"""

from __future__ import annotations

import asyncio
import copy
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from batteryop.kube.errors import ConflictError, NotFoundError
from batteryop.kube.resources import Resource

ObjKey = tuple[str, str, str]
"""(plural, namespace, name)."""

DELETION_TIMESTAMP = "2026-01-01T00:00:00Z"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge, `None` deletes a key, anything else replaces."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def opaque_version(n: int) -> str:
    """The n-th resourceVersion: distinct for every n < 2**32, and not increasing with n."""
    return str((n * 2654435761) % 2**32)


@dataclass(frozen=True)
class WatchEvent:
    type: str
    object: dict[str, Any]


class FakeKube:
    """Objects by (plural, namespace, name), written as the API server writes them."""

    def __init__(self) -> None:
        self.objects: dict[ObjKey, dict[str, Any]] = {}
        self.gone: dict[ObjKey, dict[str, Any]] = {}
        """The last body of every object that went away."""
        self.events: list[WatchEvent] = []
        self.patches: list[tuple[str, str, dict[str, Any], str | None]] = []
        """Every patch asked for: (name, namespace, patch, subresource), refused ones too."""
        self._versions = 0
        self._held: asyncio.Event | None = None
        self.held = asyncio.Event()
        """Set when an answer waits for `release()`."""

    # -- test controls ------------------------------------------------------------------

    def hold_answers(self) -> None:
        """Answers of patches from now on wait (the writes are made) until `release()`."""
        self._held = asyncio.Event()
        self.held.clear()

    def release(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            held.set()

    def deliver(self, since: int, observe: Callable[[str, dict[str, Any]], None]) -> int:
        """Hand the watch events from index `since` to `observe`; the index to continue from."""
        for event in self.events[since:]:
            observe(event.type, copy.deepcopy(event.object))
        return len(self.events)

    def stored(self, res: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        """The stored body (a copy); KeyError if there is none."""
        return copy.deepcopy(self.objects[(res.plural, namespace or "", name)])

    # -- the API ------------------------------------------------------------------------

    def _bump(self, key: ObjKey, body: dict[str, Any], event: str) -> None:
        self._versions += 1
        body["metadata"]["resourceVersion"] = opaque_version(self._versions)
        self.events.append(WatchEvent(event, copy.deepcopy(body)))
        if event == "DELETED":
            del self.objects[key]
            self.gone[key] = body
        else:
            self.objects[key] = body

    def _find(self, res: Resource, name: str, namespace: str | None) -> tuple[ObjKey, dict]:
        key = (res.plural, namespace or "", name)
        body = self.objects.get(key)
        if body is None:
            raise NotFoundError(404, "NotFound", f"{res.plural} {name!r} not found", verb="patch")
        return key, body

    def create(
        self, res: Resource, body: Mapping[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        """Store `body` (a uid is added if it has none); ADDED."""
        stored = copy.deepcopy(dict(body))
        meta = stored.setdefault("metadata", {})
        meta.setdefault("uid", str(uuid.uuid4()))
        ns = namespace or meta.get("namespace") or ""
        key = (res.plural, ns, meta["name"])
        if key in self.objects:
            raise ConflictError(409, "AlreadyExists", f"{meta['name']} exists", verb="create")
        self._bump(key, stored, "ADDED")
        return copy.deepcopy(stored)

    def seed(self, res: Resource, body: Mapping[str, Any]) -> None:
        """Store `body` exactly as given, resourceVersion included; no event."""
        meta = body["metadata"]
        self.objects[(res.plural, meta.get("namespace") or "", meta["name"])] = copy.deepcopy(
            dict(body)
        )

    async def get(self, res: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        return copy.deepcopy(self._find(res, name, namespace)[1])

    async def patch(
        self,
        res: Resource,
        name: str,
        patch: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        namespace: str | None = None,
        *,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        if not isinstance(patch, Mapping):
            raise NotImplementedError("FakeKube speaks merge-patch only")
        self.patches.append((name, namespace or "", copy.deepcopy(dict(patch)), subresource))
        answer = self.patch_now(res, name, patch, namespace, subresource=subresource)
        held = self._held
        if held is not None:
            self.held.set()
            await held.wait()
        return answer

    def patch_now(
        self,
        res: Resource,
        name: str,
        patch: Mapping[str, Any],
        namespace: str | None = None,
        *,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        """`patch`, synchronously."""
        key, current = self._find(res, name, namespace)
        lock = (patch.get("metadata") or {}).get("resourceVersion")
        if lock is not None and lock != current["metadata"].get("resourceVersion"):
            raise ConflictError(
                409, "Conflict", f"{name}: the object has been modified", verb="patch"
            )
        if subresource == "status":
            changes = {"status": patch.get("status")}
        else:
            changes = {k: v for k, v in patch.items() if k != "status"}
        updated = merge_patch(current, changes)
        updated["metadata"]["resourceVersion"] = current["metadata"].get("resourceVersion")
        if updated == current:
            return copy.deepcopy(current)  # no change: same version, no event
        meta = updated["metadata"]
        gone = bool(meta.get("deletionTimestamp")) and not meta.get("finalizers")
        self._bump(key, updated, "DELETED" if gone else "MODIFIED")
        return copy.deepcopy(updated)

    def delete(
        self, res: Resource, name: str, namespace: str | None = None, *, when: str | None = None
    ) -> None:
        """Mark for deletion at `when` (finalizers stay) or remove at once (none)."""
        key, current = self._find(res, name, namespace)
        meta = current["metadata"]
        if meta.get("deletionTimestamp"):
            return
        body = copy.deepcopy(current)
        body["metadata"]["deletionTimestamp"] = when or DELETION_TIMESTAMP
        self._bump(key, body, "MODIFIED" if meta.get("finalizers") else "DELETED")


class RecordingRecorder:
    """An `EventRecorder` stand-in keeping what was posted: (object name, type, reason)."""

    def __init__(self) -> None:
        self.posted: list[tuple[str, str, str]] = []

    def post(
        self, obj: Mapping[str, Any], type: str, reason: str, note: str, *, action: str
    ) -> None:
        self.posted.append((str((obj.get("metadata") or {}).get("name")), type, reason))

    async def drain(self, timeout: float) -> None:
        return None

"""`Requests`: the approver's copy of the requests of its three signers, fed by kopf's events
and by the answers of its own writes.

It keeps the newest copy of each request of ours (CT-102: other signers' are never kept, never
touched), says which event should be reviewed (an open request's newest copy), and holds one
lock per request so that kopf's handler and the queue never review one request at once. A
write of ours replaces a request's copy with the answer, and the resourceVersion it replaced
is remembered as superseded: its watch event arrives after the answer and must not bring the
older copy back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from batteryop.api import names
from batteryop.csr_approver.request import Request
from batteryop.kube.client import Object


def finished(request: Request) -> bool:
    """Done already: a certificate, `Denied` or `Failed` (CT-003)."""
    return request.issued or request.denied or request.failed


class Requests:
    """The newest copy of each request of ours, by name."""

    def __init__(self) -> None:
        self._copies: dict[str, Object] = {}
        self._superseded: dict[str, set[str]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def get(self, name: str) -> Object | None:
        return self._copies.get(name)

    def lock(self, name: str) -> asyncio.Lock:
        """The request's review lock."""
        return self._locks.setdefault(name, asyncio.Lock())

    def on_event(self, kind: str, obj: Object) -> bool:
        """Keep the newest copy of a request; True if it is open and should be reviewed."""
        if (obj.get("spec") or {}).get("signerName") not in names.SIGNERS:
            return False  # CT-102: never touched
        name = str(obj["metadata"]["name"])
        if kind == "DELETED":
            self._copies.pop(name, None)
            self._superseded.pop(name, None)
            self._locks.pop(name, None)
            return False
        rv = str(obj["metadata"].get("resourceVersion") or "")
        stale = self._superseded.get(name)
        if stale and rv in stale:
            stale.discard(rv)
            return False
        self._copies[name] = obj
        return not finished(Request.from_object(obj))

    def remember(self, answer: Object) -> None:
        """A write's answer, or a fresh read: the newest copy of a request still known (a write's
        answer never brings back a deleted one)."""
        name = str(answer["metadata"]["name"])
        before = self._copies.get(name)
        if before is None:
            return
        old_rv = str(before["metadata"].get("resourceVersion") or "")
        new_rv = str(answer["metadata"].get("resourceVersion") or "")
        if old_rv != new_rv:
            self._superseded.setdefault(name, set()).add(old_rv)
        self._copies[name] = answer

    def forget(self, name: str) -> None:
        """The request is gone."""
        self._copies.pop(name, None)

    def open(self) -> Iterator[str]:
        """The names of the requests not finished yet."""
        for name, obj in list(self._copies.items()):
            if not finished(Request.from_object(obj)):
                yield name

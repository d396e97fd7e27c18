"""The address pins: ConfigMap `host-address-pins`, one entry per Node name.

The first serving certificate signed for a Node pins its address; a later serving request must
name that address, and an address pinned to one Node is refused for every other (CT-015, checked
in `checks`). An entry's value is `{"address": ..., "notAfter": ...}` (JSON): the address, never
changed, and the expiry of the newest certificate signed under the pin, moved forward before
each certificate is stored (CT-016). A value that is a bare address was written before expiries
were recorded: its expiry is unknown (`Pin.not_after` None).

Release (CT-100): a pin is removed once its Node no longer exists and every certificate signed
under it has expired (now past `notAfter`). Until then a replacement Machine that reuses the
address is refused; `docs/operations.md` says how an administrator removes a pin sooner.

Why released at review time rather than by watching Nodes: a pin matters at two moments only,
when a Node without a pin asks for a serving certificate (its address may be pinned to a gone
Node) and when a pin is added (the only time the ConfigMap grows). Both happen in a review of a
serving request from a Node that has no pin, so that review first calls `release_gone`. It reads
nothing but the pins it already holds: only a pin past its `notAfter` can be released, and for
each such pin one GET of its Node says whether the Node is gone (the approver may already `get`
Nodes; it may not list or watch them, and need not cache every Node of the cluster for this).
Every pin is added right after such a pass, so the ConfigMap never holds more than one pin per
Node that existed, or whose certificates were still valid, when the last pin was added. A watch would release a pin a little sooner, at the price of list and watch on
every Node and a timer per pin, for no request that would be decided differently.

A pin of unknown expiry whose Node is gone is given `now + certificate_max_duration`, the
latest any certificate signed under it can still be valid (while the maximum is not lowered),
and released after that like any other.

Every write is one JSON patch that first tests the resourceVersion the caller read, so two
writers never both act on the same read: the loser gets `ConflictError`, reads again and reviews
the request again against the new pins. All state is in the ConfigMap, so a restart resumes
where it stopped, and releasing a pin twice is impossible (the second read no longer has it).
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from batteryop.api import names
from batteryop.kube.client import KubeClient, Object
from batteryop.kube.errors import NotFoundError
from batteryop.kube.resources import CONFIGMAPS, NODES


def _rfc3339(t: datetime.datetime) -> str:
    return t.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Pin:
    """One Node's pin: its address and the expiry of the newest certificate signed under it."""

    address: str
    not_after: datetime.datetime | None = None
    """None: written before expiries were recorded (a bare address)."""

    def encode(self) -> str:
        value: dict[str, str] = {"address": self.address}
        if self.not_after is not None:
            value["notAfter"] = _rfc3339(self.not_after)
        return json.dumps(value, separators=(",", ":"))

    @classmethod
    def decode(cls, text: str) -> Pin:
        """A stored value; a bare address (or anything that is not our JSON) reads as one."""
        try:
            value = json.loads(text)
        except ValueError:
            return cls(text.strip())
        if not isinstance(value, dict) or not isinstance(value.get("address"), str):
            return cls(text.strip())
        not_after = None
        if isinstance(value.get("notAfter"), str):
            try:
                not_after = datetime.datetime.fromisoformat(value["notAfter"])
            except ValueError:
                not_after = None
        if not_after is not None and not_after.tzinfo is None:
            not_after = not_after.replace(tzinfo=datetime.UTC)
        return cls(value["address"], not_after)

    def expired(self, now: datetime.datetime) -> bool:
        """Every certificate signed under the pin has expired (unknown: not known to have)."""
        return self.not_after is not None and now > self.not_after


@dataclass(frozen=True)
class Pins:
    """The pins as read: Node name to `Pin`, and the resourceVersion ("" if none exists)."""

    entries: dict[str, Pin] = field(default_factory=dict)
    resource_version: str = ""

    @property
    def addresses(self) -> dict[str, str]:
        """Node name to pinned address, what the checks read (CT-015)."""
        return {node: pin.address for node, pin in self.entries.items()}

    @classmethod
    def from_object(cls, cm: Mapping[str, Any]) -> Pins:
        data = cm.get("data") or {}
        return cls(
            entries={str(k): Pin.decode(str(v)) for k, v in data.items()},
            resource_version=str((cm.get("metadata") or {}).get("resourceVersion") or ""),
        )


async def read_pins(kube: KubeClient, namespace: str, name: str) -> Pins:
    try:
        return Pins.from_object(await kube.get(CONFIGMAPS, name, namespace))
    except NotFoundError:
        return Pins()


def _pointer(key: str) -> str:
    return "/data/" + key.replace("~", "~0").replace("/", "~1")


async def _patch(
    kube: KubeClient, namespace: str, name: str, pins: Pins, ops: list[dict[str, object]]
) -> Pins:
    """Apply `ops` only if the ConfigMap is still as `pins` read it (else `ConflictError`)."""
    test: dict[str, object] = {
        "op": "test",
        "path": "/metadata/resourceVersion",
        "value": pins.resource_version,
    }
    answer: Object = await kube.patch(CONFIGMAPS, name, [test, *ops], namespace, type="json")
    return Pins.from_object(answer)


async def pin_certificate(
    kube: KubeClient,
    namespace: str,
    name: str,
    pins: Pins,
    node: str,
    address: str,
    not_after: datetime.datetime,
) -> Pins:
    """CT-016: pin `node` to `address`, or move its pin's expiry forward to `not_after`.

    Called before the certificate is stored, so a pin's expiry is never earlier than any
    certificate signed under it. Writes nothing when the pin already covers `not_after`.
    Raises `ConflictError` when the ConfigMap changed since `pins` was read (or another writer
    created it first), `ValueError` if `node` is pinned to another address (never changed).
    """
    before = pins.entries.get(node)
    if before is not None and before.address != address:
        raise ValueError(f"Node {node!r} is pinned to {before.address}; a pin is never changed")
    if before is not None and before.not_after is not None and before.not_after >= not_after:
        return pins
    value = Pin(address, not_after).encode()
    if not pins.resource_version:
        body = {
            "metadata": {"name": name, "labels": {names.MANAGED_BY_LABEL: names.MANAGED_BY}},
            "data": {node: value},
        }
        return Pins.from_object(await kube.create(CONFIGMAPS, body, namespace))
    ops: list[dict[str, object]] = []
    if not pins.entries:
        ops.append({"op": "add", "path": "/data", "value": {}})
    ops.append({"op": "add", "path": _pointer(node), "value": value})
    return await _patch(kube, namespace, name, pins, ops)


async def _node_exists(kube: KubeClient, node: str) -> bool:
    try:
        await kube.get(NODES, node)
    except NotFoundError:
        return False
    return True


async def release_gone(
    kube: KubeClient,
    namespace: str,
    name: str,
    pins: Pins,
    *,
    now: datetime.datetime,
    unknown_expiry: datetime.timedelta,
) -> tuple[Pins, dict[str, Pin]]:
    """CT-100: remove every pin whose Node is gone and whose certificates have all expired.

    Only pins past their expiry (or of unknown expiry) cost a GET of their Node. A pin of
    unknown expiry whose Node is gone is given `now + unknown_expiry` instead (module
    docstring). One write at most, none when nothing changes. Returns the pins after it and
    the pins released. Raises `ConflictError` when the ConfigMap changed since `pins` was read.
    """
    released: dict[str, Pin] = {}
    ops: list[dict[str, object]] = []
    for node, pin in sorted(pins.entries.items()):
        if pin.not_after is not None and not pin.expired(now):
            continue
        if await _node_exists(kube, node):
            continue
        if pin.not_after is None:
            stamped = Pin(pin.address, now + unknown_expiry).encode()
            ops.append({"op": "replace", "path": _pointer(node), "value": stamped})
        else:
            released[node] = pin
            ops.append({"op": "remove", "path": _pointer(node)})
    if not ops:
        return pins, {}
    return await _patch(kube, namespace, name, pins, ops), released

"""The address pins: ConfigMap `host-address-pins`, one `<Node name>: <address>` entry per Node.

The first serving certificate signed for a Node pins its address; a later serving request must
name that address, and an address pinned to one Node is refused for every other (CT-015, checked
in `checks`). Entries are only ever added: never changed, never removed, even after the Node is
gone (CT-016); an administrator clears a pin by hand.

`add_pin` writes one entry with a JSON patch that first tests the resourceVersion the caller
read, so two writers can never both pin: the loser gets `ConflictError`, reads again and reviews
the request again against the new pins.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from batteryop.api import names
from batteryop.kube.client import KubeClient
from batteryop.kube.errors import NotFoundError
from batteryop.kube.resources import CONFIGMAPS


@dataclass(frozen=True)
class Pins:
    """The pins as read: data (Node to address) and the resourceVersion ("" if none exists)."""

    data: dict[str, str] = field(default_factory=dict)
    resource_version: str = ""


async def read_pins(kube: KubeClient, namespace: str, name: str) -> Pins:
    try:
        cm = await kube.get(CONFIGMAPS, name, namespace)
    except NotFoundError:
        return Pins()
    data = cm.get("data") or {}
    return Pins(
        data={str(k): str(v) for k, v in data.items()},
        resource_version=str(cm["metadata"].get("resourceVersion") or ""),
    )


def _pointer(key: str) -> str:
    return "/data/" + key.replace("~", "~0").replace("/", "~1")


async def add_pin(
    kube: KubeClient, namespace: str, name: str, pins: Pins, node: str, address: str
) -> None:
    """CT-016: add `node: address`, only if the ConfigMap is still as `pins` read it.

    Raises `ConflictError` when it is not (or when another writer created it first).
    """
    if node in pins.data:
        raise ValueError(f"Node {node!r} is pinned already; a pin is never changed")
    if not pins.resource_version:
        body = {
            "metadata": {
                "name": name,
                "labels": {names.MANAGED_BY_LABEL: names.MANAGED_BY},
            },
            "data": {node: address},
        }
        await kube.create(CONFIGMAPS, body, namespace)
        return
    ops: list[dict[str, object]] = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": pins.resource_version}
    ]
    if not pins.data:
        ops.append({"op": "add", "path": "/data", "value": {}})
    ops.append({"op": "add", "path": _pointer(node), "value": address})
    await kube.patch(CONFIGMAPS, name, ops, namespace, type="json")

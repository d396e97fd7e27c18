"""The claim cache's indexes: which claims record a MicroVM, which claims sit on a Node.

The runtime keeps them with the cache (`runtime.ObjectCache`), so the inputs that must find
claims by what their status records never walk every claim: a battery Event reporting a
MicroVM deleted queues the claims holding it (CL-013), a Node whose report changed queues the
claims bound to it (CL-005, CL-050..CL-053). Both read the status as written: a claim
files under a value only once its status records it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

BY_MICROVM: Final = "microvm"
"""status.microVM.uid -> the claims recording that MicroVM (CL-013)."""

BY_NODE: Final = "node"
"""status.host.nodeName -> the claims bound to a Host on that Node (CL-005, CL-050)."""


def _status(body: Mapping[str, Any]) -> Mapping[str, Any]:
    return body.get("status") or {}


def microvm_of(body: Mapping[str, Any]) -> str | None:
    return (_status(body).get("microVM") or {}).get("uid") or None


def node_of(body: Mapping[str, Any]) -> str | None:
    return (_status(body).get("host") or {}).get("nodeName") or None


INDEXERS: Final[Mapping[str, Callable[[Mapping[str, Any]], str | None]]] = {
    BY_MICROVM: microvm_of,
    BY_NODE: node_of,
}
"""The claim controller's indexes, by name."""

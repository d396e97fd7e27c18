"""The claim cache's indexes: which claims record a MicroVM, which claims sit on a Node,
which claims wait for a Pool's MicroVMs.

The runtime keeps them with the cache (`runtime.ObjectCache`), so the inputs that must find
claims by what their status records never walk every claim: a battery Event reporting a
MicroVM deleted queues the claims holding it (CL-013), a Node whose report changed queues the
claims bound to it (CL-005, CL-050..CL-053). Both read the status as written: a claim
files under a value only once its status records it. A MicroVM becoming available queues a
claim waiting for its Pool (CL-109): a Pending claim files under each Pool of its list.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from batteryop.api.conditions import ClaimPhase

BY_MICROVM: Final = "microvm"
"""status.microVM.uid -> the claims recording that MicroVM (CL-013)."""

BY_NODE: Final = "node"
"""status.host.nodeName -> the claims bound to a Host on that Node (CL-005, CL-050)."""

BY_WAITING_POOL: Final = "waiting"
"""`namespace/pool` -> the unbound claims whose list names that Pool (CL-109)."""


def _status(body: Mapping[str, Any]) -> Mapping[str, Any]:
    return body.get("status") or {}


def microvm_of(body: Mapping[str, Any]) -> str | None:
    return (_status(body).get("microVM") or {}).get("uid") or None


def node_of(body: Mapping[str, Any]) -> str | None:
    return (_status(body).get("host") or {}).get("nodeName") or None


def waiting_on(body: Mapping[str, Any]) -> tuple[str, ...]:
    """`namespace/pool` for each Pool of the list (`spec.poolRef`, then
    `spec.fallbackPoolRefs`) of a claim `bind` left Pending with no Lease, not being deleted;
    () for any other claim. A claim not yet reconciled has no phase: it is not waiting, its
    first reconcile is under way."""
    meta = body.get("metadata") or {}
    status = _status(body)
    if meta.get("deletionTimestamp") or status.get("leaseID"):
        return ()
    if status.get("phase") != ClaimPhase.PENDING.value:
        return ()
    spec = body.get("spec") or {}
    refs = [spec.get("poolRef"), *(spec.get("fallbackPoolRefs") or [])]
    pools = [ref.get("name") for ref in refs if isinstance(ref, Mapping)]
    namespace = meta.get("namespace")
    return tuple(f"{namespace}/{pool}" for pool in pools if isinstance(pool, str) and pool)


INDEXERS: Final[Mapping[str, Callable[[Mapping[str, Any]], str | tuple[str, ...] | None]]] = {
    BY_MICROVM: microvm_of,
    BY_NODE: node_of,
    BY_WAITING_POOL: waiting_on,
}
"""The claim controller's indexes, by name."""

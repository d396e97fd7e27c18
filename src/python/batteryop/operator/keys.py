"""Which Pool a body is about: the key the runtime queues Pool reconciles under.

Shared by both controllers (a claim names its Pool by it), so neither imports the other.

`pool_key_for_claim` lets the runtime queue a Pool again when a claim on it goes away: a
Pool whose deletion battery refused while MicroVMs were leased (PO-043) can then be deleted
at once (PO-044) rather than at its next backoff.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from batteryop.battery.models import PoolRef


class PoolKey(NamedTuple):
    """A Pool's namespace and name."""

    namespace: str
    name: str

    @property
    def ref(self) -> PoolRef:
        """The same Pool in battery (battery names Pools by Kubernetes namespace and name)."""
        return PoolRef(namespace=self.namespace, name=self.name)

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _obj(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def pool_key(body: Mapping[str, Any]) -> PoolKey:
    """The key of a Pool body (empty strings where the body has no namespace or name)."""
    metadata = _obj(body.get("metadata"))
    return PoolKey(_str(metadata.get("namespace")), _str(metadata.get("name")))


def pool_key_for_claim(claim_body: Mapping[str, Any]) -> PoolKey | None:
    """The key of the Pool a MicroVMClaim body leases from: `status.poolRef.name` once a
    Lease is recorded (RS-104; a fallback Pool's, say), else `spec.poolRef.name`; in the
    claim's namespace.

    None when the body names no Pool or has no namespace. Pure: reads only the body.
    """
    namespace = _str(_obj(claim_body.get("metadata")).get("namespace"))
    pool = _str(_obj(_obj(claim_body.get("status")).get("poolRef")).get("name")) or _str(
        _obj(_obj(claim_body.get("spec")).get("poolRef")).get("name")
    )
    if not namespace or not pool:
        return None
    return PoolKey(namespace, pool)

"""The Host set the Pool controller places Pools on: published names, resolved against Nodes.

The host registry publishes the names of the Hosts battery knows on the battery config
ConfigMap, in the `names.HOSTS_ANNOTATION` annotation, as a JSON array of strings (objects
with a "name" key are read too, so the registry may add fields later). A published Host
counts only while its Node exists; its labels are the Node's labels, which is what
`spec.placement.nodeSelector` selects on (PO-010).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from batteryop.api import names
from batteryop.operator.pools.hosts import HostSet


class HostsAnnotationError(ValueError):
    """The published Host set annotation is not a JSON array of names."""


def published_hosts(configmap: Mapping[str, Any] | None) -> tuple[str, ...] | None:
    """The Host names the registry published; None when nothing is published yet."""
    if configmap is None:
        return None
    annotations = (configmap.get("metadata") or {}).get("annotations") or {}
    raw = annotations.get(names.HOSTS_ANNOTATION)
    if raw is None:
        return None
    try:
        items = json.loads(raw)
    except json.JSONDecodeError as e:
        raise HostsAnnotationError(f"{names.HOSTS_ANNOTATION}: not JSON: {e}") from None
    if not isinstance(items, list):
        raise HostsAnnotationError(f"{names.HOSTS_ANNOTATION}: must be a JSON array")
    out = []
    for item in items:
        name = item.get("name") if isinstance(item, dict) else item
        if not isinstance(name, str) or not name:
            raise HostsAnnotationError(f"{names.HOSTS_ANNOTATION}: {item!r} names no Host")
        out.append(name)
    return tuple(sorted(set(out)))


def host_set(
    published: Iterable[str] | None, nodes: Mapping[str, Mapping[str, Any]]
) -> HostSet | None:
    """Published Hosts whose Node exists, with that Node's labels; None if unpublished."""
    if published is None:
        return None
    return HostSet(
        {
            name: dict((nodes[name].get("metadata") or {}).get("labels") or {})
            for name in published
            if name in nodes
        }
    )

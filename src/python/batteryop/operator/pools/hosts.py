"""`HostSet`: the Hosts the host registry published, and their Nodes' labels.

The host registry publishes the Hosts battery knows (on the battery config ConfigMap, under
`batteryop.api.names.HOSTS_ANNOTATION`); the runtime reads that and hands the Pool controller
a `HostSet`, or None until one is published. A Pool's `spec.placement.nodeSelector` is
resolved against it: a Host is selected when its Node carries every label of the selector,
and an empty selector selects every Host.

Requirements: PO-010 (the selected Hosts become battery's `flintlock_hosts`), PO-012 (a
selector may select none).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


@dataclass(frozen=True)
class HostSet:
    """Host name -> the labels of its Node. Immutable; compares by value."""

    labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        frozen = {name: MappingProxyType(dict(labels)) for name, labels in self.labels.items()}
        object.__setattr__(self, "labels", MappingProxyType(frozen))

    def __hash__(self) -> int:
        return hash(frozenset((n, frozenset(ls.items())) for n, ls in self.labels.items()))

    def __len__(self) -> int:
        return len(self.labels)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __contains__(self, name: object) -> bool:
        return name in self.labels

    @property
    def names(self) -> tuple[str, ...]:
        """Every Host's name, sorted."""
        return tuple(sorted(self.labels))

    def matching(self, selector: Mapping[str, str]) -> tuple[str, ...]:
        """The names, sorted, of the Hosts whose Node labels include all of `selector`."""
        return tuple(
            name
            for name in self.names
            if all(self.labels[name].get(key) == value for key, value in selector.items())
        )
